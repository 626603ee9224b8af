package responder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/opaque"
	"github.com/leafmq/leafmq/region"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/wire"
)

// IDSource hands out ids; producer.Producer implements it.
type IDSource interface {
	// Segment fills dst with fresh ids of tag, all of it or an error. It
	// may wait (boundedly) for the store.
	Segment(ctx context.Context, tag wire.Tag, dst []int64) error
}

// TrySource is an IDSource that can also hand out ids without ever
// waiting: TrySegment fills a prefix of dst from memory and returns its
// length (0 when it has none ready). producer.Producer implements it.
type TrySource interface {
	TrySegment(tag wire.Tag, dst []int64) int
}

// Config configures a Responder. Zero values mean the defaults in comments.
type Config struct {
	Conn     *nats.Conn    // required
	IDs      IDSource      // required
	Store    segment.Store // answers leaf.admin.*; nil leaves admin out
	Node     string        // node name, in the service metadata
	Instance string        // this process among nodes of one name (wire.NodeStatus.Instance), in floor answers
	Version  string        // SemVer; default "0.1.0"
	MaxBatch int           // largest N; default wire.DefaultMaxBatch
	Workers  int           // workers for larger requests; default GOMAXPROCS
	Timeout  time.Duration // per-request bound on waiting for ids; default 2s
	Logger   *slog.Logger  // default slog.Default()

	// Snowflake answers leaf.snowflake once SetSnowflake(true) is called;
	// nil leaves the snowflake endpoints out.
	Snowflake SnowflakeSource
	// SnowflakeConn dials the connection that the snowflake endpoints
	// subscribe on: each SetSnowflake(true) dials one and each
	// SetSnowflake(false) closes it (see SetSnowflake). It should not fail
	// while NATS is away (nats.RetryOnFailedConnect). Required with
	// Snowflake.
	SnowflakeConn func() (*nats.Conn, error)
	// SegmentConn, if set, dials the connection that the segment endpoint
	// subscribes on, as SnowflakeConn for snowflake: the endpoint is then a
	// service of its own that can leave its queue group (SetSegment). Nil
	// keeps it in the main service, in the group for as long as the
	// Responder runs.
	SegmentConn func() (*nats.Conn, error)
	// Layout decodes ids on leaf.snowflake.decode; default Leaf's.
	Layout snowflake.Layout
	// Clock is answered on leaf.admin.time, times the requests reported to
	// Observe and paces Stop's wait for in-flight requests; default
	// clock.Real (clock.Or).
	Clock clock.Clock
	// Observe, if set, is called once per id request (segment, snowflake
	// and mono) when it is answered, for metrics; it must not block.
	// Without it no time is taken per request.
	Observe func(Observation)
	// Status, if set, answers leaf.admin.status (every node answers) and,
	// scoped, Scope.Status(), which its region's nodes ask.
	Status func() wire.NodeStatus
	// Scope is the node's region ("" without regions): the time, the
	// floors and the tag announcements are answered and sent on its
	// subjects only (wire.Scope), the status on its subject too.
	Scope wire.Scope
	// Floor, if set, answers leaf.admin.floor.<tag> (every node answers)
	// with the highest range end this node received for the tag; with it,
	// tag restart and create refuse to go below any live node's floor.
	Floor func(tag string) int64
	// PeerFloor, if set, is how a tag create or restart learns the live
	// nodes' highest floor of tag and the node that has it (a node waits
	// for every live node, peers.Set.HighestFloor); nil gathers
	// Scope.FloorPrefix()+<tag> for a window (ask.Floors).
	PeerFloor func(ctx context.Context, tag wire.Tag, window time.Duration) (int64, string, error)
	// Opaque, if set, is the node's key of opaque tags: leaf.admin.tag.create
	// records its id with a new opaque tag, and leaf.admin.tag.decode
	// inverts an opaque tag's ids with it. Without it both refuse opaque
	// tags.
	Opaque *opaque.Key
	// Regions places the node's region in a deployment of many regions
	// (segment.Config.Regions): an opaque tag's ids are permuted within
	// a region's share of the domain, so tag create refuses a width that
	// leaves a region too small a share, and tag decode inverts the
	// permutation of the region the id names. The zero value: one region.
	Regions segment.Regions
	// TagChanged, if set, is called with every tag a node announces as
	// created or restarted (Scope.TagChangedPrefix(); this Responder
	// announces those it creates or restarts), and the announcement is
	// answered once it returns.
	TagChanged func(tag string)
	// TellTag, if set, is how a create or restart announces its tag: it
	// asks on subject (Scope.TagChangedPrefix()+tag) and returns once every
	// live node answered (peers.Set.Tell), so that none answers 404 for a
	// tag whose create replied. Nil publishes the announcement and waits
	// for nobody.
	TellTag func(ctx context.Context, subject string) error
	// Homes, set with regions, answers what this region's store holds of a
	// tag (wire.RegionTagSubject) and checks a create or restart against
	// the other regions' answers: a monotonic tag lives in one region
	// (region.Homes). Nil checks nothing.
	Homes *region.Homes
}

// Observation is one answered id request.
type Observation struct {
	Engine string // "segment", "snowflake" or "mono"
	Tag    string // segment tag; "" for snowflake
	Code   string // "200", or the error's wire code
	IDs    int    // ids handed out
	Took   time.Duration
}

// SnowflakeSource hands out snowflake ids; producer.Snowflake implements it.
type SnowflakeSource interface {
	// Next fills all of dst or fails; it may wait for the clock.
	Next(ctx context.Context, dst []int64) error
	// Try fills a prefix of dst without waiting and returns its length.
	Try(dst []int64) int
}

// Responder is a running micro service.
type Responder struct {
	cfg         Config
	try         TrySource    // cfg.IDs, if it is one
	active      atomic.Int64 // handlers running now
	asyncErrors atomic.Uint64
	svc         micro.Service
	ctx         context.Context // ends at Stop
	cancel      context.CancelFunc
	jobs        chan job
	wg          sync.WaitGroup
	once        sync.Once
	bufs        sync.Pool // *[]int64 scratch for ids
	outs        sync.Pool // *[]byte scratch for replies

	errSubject string // this node's WorkerErrorsEndpoint
	probes     probes

	sf  membership // the snowflake endpoints (SetSnowflake)
	seg membership // the segment endpoint, with Config.SegmentConn (SetSegment)

	monoMu   sync.Mutex
	monoSubs map[*monoSub]struct{} // ServeMono's; nil once stopped
}

// Start validates cfg, adds the service and its endpoints, and starts workers.
func Start(cfg Config) (*Responder, error) {
	if cfg.Conn == nil || cfg.IDs == nil {
		return nil, errors.New("responder: Config.Conn and Config.IDs are required")
	}
	if cfg.Snowflake != nil && cfg.SnowflakeConn == nil {
		return nil, errors.New("responder: Config.SnowflakeConn is required with Config.Snowflake")
	}
	if cfg.Version == "" {
		cfg.Version = "0.1.0"
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = wire.DefaultMaxBatch
	}
	if cfg.Workers == 0 {
		cfg.Workers = 32
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if err := cfg.Layout.Validate(); err != nil {
		return nil, fmt.Errorf("responder: %w", err)
	}
	if cfg.MaxBatch < 1 || cfg.Workers < 1 || cfg.Timeout < 0 {
		return nil, fmt.Errorf("responder: invalid config: max batch %d, workers %d, timeout %v",
			cfg.MaxBatch, cfg.Workers, cfg.Timeout)
	}
	r := &Responder{cfg: cfg, jobs: make(chan job, 4*cfg.Workers), monoSubs: map[*monoSub]struct{}{}}
	r.seg.carry = true
	r.try, _ = cfg.IDs.(TrySource)
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.bufs.New = func() any { b := make([]int64, 0, 64); return &b }
	r.outs.New = func() any { b := make([]byte, 0, 1024); return &b }

	svc, err := micro.AddService(cfg.Conn, micro.Config{
		Name:        wire.SegmentService,
		Version:     cfg.Version,
		Description: "leafmq distributed unique ids",
		QueueGroup:  wire.QueueGroup,
		Metadata:    map[string]string{"node": cfg.Node},
	})
	if err != nil {
		r.cancel()
		return nil, fmt.Errorf("responder: add service: %w", err)
	}
	r.svc = svc
	leaf := svc.AddGroup("leaf") // endpoints name subjects of package wire, relative to it
	rel := func(subject string) string { return strings.TrimPrefix(subject, "leaf.") }
	add := func(name, subject string, h micro.HandlerFunc) error {
		return leaf.AddEndpoint(name, h, micro.WithEndpointSubject(subject))
	}
	if cfg.SegmentConn == nil {
		if err := add("segment", rel(wire.SegmentPrefix+"*"), r.handleSegment); err != nil {
			_ = svc.Stop()
			r.cancel()
			return nil, fmt.Errorf("responder: add segment endpoint: %w", err)
		}
	}
	// Errors of requests a worker finished come back through this node's
	// own endpoint, so that micro counts them (nats micro stats) like the
	// handler's own; see failAsync.
	r.errSubject = "leaf.internal.errors." + svc.Info().ID
	if err := leaf.AddEndpoint(WorkerErrorsEndpoint, micro.HandlerFunc(r.handleWorkerError),
		micro.WithEndpointSubject(rel(r.errSubject)), micro.WithEndpointQueueGroupDisabled()); err != nil {
		_ = svc.Stop()
		r.cancel()
		return nil, fmt.Errorf("responder: add %s endpoint: %w", WorkerErrorsEndpoint, err)
	}
	if err := leaf.AddEndpoint("admin-time", micro.HandlerFunc(r.handleTime), micro.WithEndpointSubject(rel(cfg.Scope.Time())),
		micro.WithEndpointQueueGroupDisabled()); err != nil {
		_ = svc.Stop()
		r.cancel()
		return nil, fmt.Errorf("responder: add admin-time endpoint: %w", err)
	}
	if cfg.Status != nil {
		if err := leaf.AddEndpoint("admin-status", micro.HandlerFunc(r.handleStatus), micro.WithEndpointSubject(rel(wire.StatusSubject)),
			micro.WithEndpointQueueGroupDisabled()); err != nil {
			_ = svc.Stop()
			r.cancel()
			return nil, fmt.Errorf("responder: add admin-status endpoint: %w", err)
		}
		if cfg.Scope != "" { // leafctl status asks leaf.admin.status, the region's nodes their own
			if err := leaf.AddEndpoint("admin-status-region", micro.HandlerFunc(r.handleStatus), micro.WithEndpointSubject(rel(cfg.Scope.Status())),
				micro.WithEndpointQueueGroupDisabled()); err != nil {
				_ = svc.Stop()
				r.cancel()
				return nil, fmt.Errorf("responder: add admin-status-region endpoint: %w", err)
			}
		}
	}
	if cfg.Floor != nil {
		if err := leaf.AddEndpoint("admin-floor", micro.HandlerFunc(r.handleFloor), micro.WithEndpointSubject(rel(cfg.Scope.FloorPrefix()+"*")),
			micro.WithEndpointQueueGroupDisabled()); err != nil {
			_ = svc.Stop()
			r.cancel()
			return nil, fmt.Errorf("responder: add admin-floor endpoint: %w", err)
		}
	}
	if cfg.TagChanged != nil {
		if err := leaf.AddEndpoint("admin-tag-changed", micro.HandlerFunc(func(req micro.Request) {
			cfg.TagChanged(strings.TrimPrefix(req.Subject(), cfg.Scope.TagChangedPrefix()))
			if req.Reply() != "" { // asked by TellTag: the answer says the tag was taken in
				_ = req.RespondJSON(tagTakenIn{Node: cfg.Node, Instance: cfg.Instance})
			}
		}), micro.WithEndpointSubject(rel(cfg.Scope.TagChangedPrefix()+"*")), micro.WithEndpointQueueGroupDisabled()); err != nil {
			_ = svc.Stop()
			r.cancel()
			return nil, fmt.Errorf("responder: add admin-tag-changed endpoint: %w", err)
		}
	}
	if cfg.Homes != nil {
		if err := leaf.AddEndpoint("region-tag", micro.HandlerFunc(func(req micro.Request) {
			ctx, cancel := r.adminCtx()
			defer cancel()
			_ = req.RespondJSON(cfg.Homes.Answer(ctx, req.Subject()))
		}), micro.WithEndpointSubject(rel(cfg.Homes.Subject())), micro.WithEndpointQueueGroupDisabled()); err != nil {
			_ = svc.Stop()
			r.cancel()
			return nil, fmt.Errorf("responder: add region-tag endpoint: %w", err)
		}
	}
	if cfg.Snowflake != nil {
		if err := add("snowflake-decode", rel(wire.DecodeSubject), r.handleDecode); err != nil {
			_ = svc.Stop()
			r.cancel()
			return nil, fmt.Errorf("responder: add snowflake-decode endpoint: %w", err)
		}
	}
	if cfg.Store != nil {
		admin := []struct {
			name, subject string
			h             micro.HandlerFunc
		}{
			{"admin-tags", rel(wire.TagsSubject), r.handleTags},
			{"admin-tag-create", rel(wire.TagCreateSubject), r.handleCreate},
			{"admin-tag-step", rel(wire.TagStepSubject), r.handleSetStep},
			{"admin-tag-max", rel(wire.TagMaxSubject), r.handleSetMax},
			{"admin-tag-restart", rel(wire.TagRestartSubject), r.handleRestart},
			{"admin-tag-decode", rel(wire.TagDecodeSubject), r.handleTagDecode},
		}
		for _, a := range admin {
			if err := add(a.name, a.subject, a.h); err != nil {
				_ = svc.Stop()
				r.cancel()
				return nil, fmt.Errorf("responder: add %s endpoint: %w", a.name, err)
			}
			// With regions, an operator names the region whose store a
			// command acts on (leafctl --region): the unscoped subject
			// reaches the caller's cluster first, and regions that share
			// a cluster share its queue group.
			if cfg.Scope == "" {
				continue
			}
			if err := add(a.name+"-region", rel(cfg.Scope.Subject("leaf."+a.subject)), a.h); err != nil {
				_ = svc.Stop()
				r.cancel()
				return nil, fmt.Errorf("responder: add %s-region endpoint: %w", a.name, err)
			}
		}
	}
	// The subscriptions are only queued on the connection so far: wait for
	// the server to have them, so that a request sent once Start returns
	// finds this node instead of "no responders".
	if err := cfg.Conn.FlushTimeout(startFlush); err != nil {
		_ = svc.Stop()
		r.cancel()
		return nil, fmt.Errorf("responder: subscribing: %w", err)
	}
	if cfg.SegmentConn != nil {
		if err := r.SetSegment(true); err != nil {
			_ = svc.Stop()
			r.cancel()
			return nil, err
		}
	}
	for i := 0; i < cfg.Workers; i++ {
		r.wg.Add(1)
		go r.worker()
	}
	return r, nil
}

// startFlush bounds how long Start waits for the server to confirm the
// subscriptions.
const startFlush = 5 * time.Second

// Service is the underlying micro service (for stats and info).
func (r *Responder) Service() micro.Service { return r.svc }

// Endpoints are the stats of the endpoints served now: the service's, the
// segment endpoint's (counted across its leaves and rejoins, SetSegment),
// and the snowflake service's while it is in the queue group. The
// snowflake service is recreated at each rejoin, so its counters then
// start again at 0.
func (r *Responder) Endpoints() []*micro.EndpointStats {
	eps := r.svc.Stats().Endpoints
	if r.cfg.SegmentConn != nil {
		eps = append(eps, r.seg.endpoints()...)
	}
	if sf := r.SnowflakeService(); sf != nil {
		eps = append(eps, sf.Stats().Endpoints...)
	}
	return eps
}

// Stop leaves the queue group, lets in-flight requests finish and stops the
// workers. Idempotent.
//
// micro drains the endpoint subscriptions asynchronously, so a handler may
// still run after svc.Stop returns: Stop waits until no handler is running
// and no job is queued for a few polls in a row (at most stopGrace), and a
// handler that comes later still gets an answer (503) instead of a hang.
func (r *Responder) Stop() error {
	var err error
	r.once.Do(func() {
		for _, m := range []*membership{&r.sf, &r.seg} {
			m.mu.Lock()
			m.stopped = true
			m.mu.Unlock()
		}
		r.stopMono()
		err = r.svc.Stop()
		for _, m := range []*membership{&r.seg, &r.sf} {
			m.mu.Lock()
			err = errors.Join(err, m.leaveLocked())
			m.mu.Unlock()
		}
		c := r.cfg.Clock
		deadline := c.Now().Add(stopGrace)
		for quiet := 0; quiet < 3 && c.Now().Before(deadline); {
			if r.active.Load() == 0 && len(r.jobs) == 0 {
				quiet++
			} else {
				quiet = 0
			}
			_ = clock.Sleep(context.Background(), c, stopPoll)
		}
		r.cancel()
		r.wg.Wait()
		for {
			select {
			case j := <-r.jobs:
				r.failAsync(j.req, fmt.Errorf("%w: node is stopping", segment.ErrClosed))
				r.bufs.Put(j.ids)
			default:
				return
			}
		}
	})
	return err
}

// stopGrace bounds how long Stop waits for in-flight requests; it polls
// them every stopPoll.
const (
	stopGrace = 2 * time.Second
	stopPoll  = 5 * time.Millisecond
)

func (r *Responder) worker() {
	defer r.wg.Done()
	for {
		select {
		case j := <-r.jobs:
			r.finish(j)
		case <-r.ctx.Done():
			return
		}
	}
}

// job is a segment request handed to a worker, with the ids that the
// subscription goroutine already took (ids[:have]).
type job struct {
	req   micro.Request
	start time.Time // zero without Config.Observe
	sf    bool      // a snowflake request (tag is empty)
	tag   wire.Tag
	ids   *[]int64
	n     int // ids asked for
	have  int
}

// handleSegment runs on the endpoint's subscription goroutine, one request
// at a time, so it never waits: it answers from the tag's ring when the ring
// has every id asked for, and hands anything else (a large batch, an empty
// ring, a tag not seen yet) to the workers, which may wait for the engine.
func (r *Responder) handleSegment(req micro.Request) {
	r.active.Add(1)
	defer r.active.Add(-1)
	var start time.Time
	if r.cfg.Observe != nil {
		start = r.cfg.Clock.Now()
	}
	n, err := wire.ParseCount(req.Data(), r.cfg.MaxBatch)
	if err != nil {
		r.observe(start, "segment", "", r.fail(req, fmt.Errorf("%w: %v", segment.ErrInvalid, err)), 0)
		return
	}
	tag, err := wire.ParseTag(req.Subject()[len(wire.SegmentPrefix):])
	if err != nil {
		if req.Subject()[len(wire.SegmentPrefix):] == wire.ProbeToken { // not a tag: costs the id path nothing
			r.answerProbe(req, wire.SubjectSegment)
			return
		}
		r.observe(start, "segment", "", r.fail(req, err), 0)
		return
	}
	bp := r.bufs.Get().(*[]int64)
	if cap(*bp) < n {
		*bp = make([]int64, n)
	}
	have := 0
	if r.try != nil {
		have = r.try.TrySegment(tag, (*bp)[:n])
	}
	j := job{req: req, start: start, tag: tag, ids: bp, n: n, have: have}
	if have == n {
		r.finish(j)
		return
	}
	if err := r.enqueue(j); err != nil {
		r.observe(start, "segment", tag.String(), r.fail(req, err), 0)
		r.bufs.Put(bp)
	}
}

// ErrBusy answers a request that needs a worker when every worker is busy
// and the queue is full: a 503, so the client asks again (NATS may route
// the retry to another node).
var ErrBusy = wire.NewCodedError(wire.CodeUnavailable, "node busy")

// enqueue hands j to the workers without waiting. The subscription
// goroutine that calls it serves every tag of its subject, ring hits
// included: blocking it on a full queue (all workers waiting on slow
// loads or new tags' checks) would leave every request of the subject
// unanswered until a worker frees up. The queue holds 4 jobs a worker,
// so a full one is an overload, answered at once with ErrBusy.
func (r *Responder) enqueue(j job) error {
	if r.ctx.Err() != nil {
		return fmt.Errorf("%w: node is stopping", segment.ErrClosed)
	}
	select {
	case r.jobs <- j:
		return nil
	default:
		return fmt.Errorf("%w: %d requests wait for %d workers", ErrBusy, len(r.jobs), r.cfg.Workers)
	}
}

// observe reports a request to Config.Observe, if set (start is zero
// without it).
func (r *Responder) observe(start time.Time, engine, tag, code string, ids int) {
	if r.cfg.Observe == nil {
		return
	}
	r.cfg.Observe(Observation{Engine: engine, Tag: tag, Code: code, IDs: ids, Took: r.cfg.Clock.Since(start)})
}

func (j *job) engine() string {
	if j.sf {
		return "snowflake"
	}
	return "segment"
}

// finish completes a job (the ids it lacks come from the IDSource, which
// may wait) and sends the reply.
func (r *Responder) finish(j job) {
	defer r.bufs.Put(j.ids)
	ids := (*j.ids)[:j.n]
	if j.have < j.n {
		// No per-request deadline (a timer per request costs more than
		// the rest of the path): the engine bounds every wait by its
		// ReadyWait, and r.ctx ends when the responder stops.
		var err error
		if j.sf {
			err = r.cfg.Snowflake.Next(r.ctx, ids[j.have:])
		} else {
			err = r.cfg.IDs.Segment(r.ctx, j.tag, ids[j.have:])
		}
		if err != nil {
			r.observe(j.start, j.engine(), j.tag.String(), r.failAsync(j.req, err), 0)
			return
		}
	}
	op := r.outs.Get().(*[]byte)
	defer r.outs.Put(op)
	if wire.WantsBinary(nats.Header(j.req.Headers())) {
		*op = wire.AppendBinary((*op)[:0], ids)
	} else {
		*op = wire.AppendDecimal((*op)[:0], ids)
	}
	// Publish straight to the reply subject: micro's Respond builds a
	// message (an allocation) per reply for header support a success
	// reply does not need. Errors still go through micro (its stats).
	reply := j.req.Reply()
	if reply == "" {
		return // a publish, not a request: nobody to answer
	}
	if err := r.cfg.Conn.Publish(reply, *op); err != nil {
		r.cfg.Logger.Debug("respond failed", "subject", j.req.Subject(), "err", err)
	}
	r.observe(j.start, j.engine(), j.tag.String(), "200", j.n)
}

// fail answers req with err's code and message through micro, which also
// counts it in the endpoint's stats. Only for the handler's own goroutine:
// micro reads the request's error state once the handler returns.
func (r *Responder) fail(req micro.Request, err error) string {
	code := r.logFailure(req, err)
	if rerr := req.Error(code, err.Error(), nil); rerr != nil {
		r.cfg.Logger.Debug("error reply failed", "subject", req.Subject(), "err", rerr)
	}
	return code
}

// failAsync is fail for a request whose handler has returned (a worker's):
// micro reads a request's error state only when its handler returns, so the
// error goes to this node's WorkerErrorsEndpoint, with the client's reply
// subject, and that endpoint's handler answers the client through micro,
// which counts it. AsyncErrors counts them too.
func (r *Responder) failAsync(req micro.Request, err error) string {
	code := r.logFailure(req, err)
	r.asyncErrors.Add(1)
	reply := req.Reply()
	if reply == "" {
		return code
	}
	msg := &nats.Msg{Subject: r.errSubject, Reply: reply, Header: nats.Header{}}
	msg.Header.Set(wire.ErrorCodeHeader, code)
	msg.Header.Set(wire.ErrorHeader, err.Error())
	if perr := r.cfg.Conn.PublishMsg(msg); perr != nil {
		r.cfg.Logger.Debug("error reply failed", "subject", req.Subject(), "err", perr)
	}
	return code
}

// WorkerErrorsEndpoint is the micro endpoint that answers, and counts, the
// errors of requests finished by workers.
const WorkerErrorsEndpoint = "worker-errors"

// handleWorkerError answers a worker's error (failAsync) to the client.
func (r *Responder) handleWorkerError(req micro.Request) {
	h := nats.Header(req.Headers())
	code, text := h.Get(wire.ErrorCodeHeader), h.Get(wire.ErrorHeader)
	if code == "" {
		code, text = wire.CodeInternal, "worker error without a code"
	}
	if err := req.Error(code, text, nil); err != nil {
		r.cfg.Logger.Debug("error reply failed", "subject", req.Subject(), "err", err)
	}
}

func (r *Responder) logFailure(req micro.Request, err error) string {
	code := wire.CodeOf(err)
	if code == wire.CodeInternal {
		r.cfg.Logger.Error("request failed", "subject", req.Subject(), "err", err)
	} else {
		r.cfg.Logger.Debug("request failed", "subject", req.Subject(), "code", code, "err", err)
	}
	return code
}

// failAdmin is fail for an operator's change of a tag: one refused for
// going below the ids already issued (ErrBelowFloor, a 503 on an id
// request) is a 400 here, since the same request gets the same refusal
// until the operator asks for a higher floor or max_id, or restarts the
// tag.
func (r *Responder) failAdmin(req micro.Request, err error) {
	if errors.Is(err, segment.ErrBelowFloor) {
		err = fmt.Errorf("%w: %w", segment.ErrInvalid, err)
	}
	r.fail(req, err)
}

// AsyncErrors counts error replies sent by workers, which micro's endpoint
// stats do not include.
func (r *Responder) AsyncErrors() uint64 { return r.asyncErrors.Load() }

func rowOf(t segment.Tag) wire.TagRow {
	m := t.Mode
	if m.IsSegment() {
		m.Kind = segment.KindSegment
	}
	return wire.TagRow{Tag: t.Name.String(), MaxID: t.MaxID, Step: t.Step, Description: t.Description, UpdateTime: t.UpdateTime,
		Mode: string(m.Kind), Width: m.Width, KeyID: m.KeyID}
}

func (r *Responder) adminCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), r.cfg.Timeout+3*time.Second)
}

func (r *Responder) handleTags(req micro.Request) {
	ctx, cancel := r.adminCtx()
	defer cancel()
	names, err := r.cfg.Store.Tags(ctx)
	if err != nil {
		r.fail(req, err)
		return
	}
	rows := make([]wire.TagRow, 0, len(names))
	for _, name := range names {
		tag, err := wire.ParseTag(name) // a name read from the store
		if err != nil {
			r.fail(req, err)
			return
		}
		t, err := r.cfg.Store.Get(ctx, tag)
		if errors.Is(err, segment.ErrUnknownTag) {
			continue // deleted meanwhile
		}
		if err != nil {
			r.fail(req, err)
			return
		}
		rows = append(rows, rowOf(t))
	}
	r.respondJSON(req, rows)
}

// decodeAdmin decodes an admin request and checks its tag: the request and
// the tag, or false once it has answered the error.
func (r *Responder) decodeAdmin(req micro.Request) (wire.AdminRequest, wire.Tag, bool) {
	var a wire.AdminRequest
	if err := json.Unmarshal(req.Data(), &a); err != nil {
		r.fail(req, fmt.Errorf("%w: body must be JSON like {\"tag\":\"demo\",\"step\":1000}: %v", segment.ErrInvalid, err))
		return a, wire.Tag{}, false
	}
	tag, err := wire.ParseTag(a.Tag)
	if err != nil {
		r.fail(req, err)
		return a, tag, false
	}
	return a, tag, true
}

func (r *Responder) handleCreate(req micro.Request) {
	a, tag, ok := r.decodeAdmin(req)
	if !ok {
		return
	}
	ctx, cancel := r.adminCtx()
	defer cancel()
	m := segment.Mode{Kind: segment.Kind(a.Mode), Width: a.Width}
	if m.Kind == segment.KindOpaque {
		if r.cfg.Opaque == nil {
			r.fail(req, fmt.Errorf("%w: node %s has no opaque key (--opaque-key-file or LEAF_OPAQUE_KEY); nothing created", segment.ErrMode, r.cfg.Node))
			return
		}
		m.KeyID = r.cfg.Opaque.ModeID(r.cfg.Regions.N) // the key and the mapping (opaque.Key.ModeID)
		if r.cfg.Regions.Many() && a.MaxID > 1 {
			// The one reason to start an opaque tag above 1 is to continue
			// one served before regions, whose ids lie in every region's
			// class: a region's own permutation may repeat them.
			r.fail(req, fmt.Errorf("%w: with regions an opaque tag starts at 1 (no --max-id): an opaque tag served before regions cannot be continued in a region, its ids lie in every region's remainder class (give it a new name; docs/regions.md); nothing created", segment.ErrInvalid))
			return
		}
		if nm, err := segment.NormalizeMode(m); err == nil && r.cfg.Regions.Many() {
			// Every region would refuse to serve it (segment.Config.Opaque).
			if _, err := r.cfg.Opaque.RegionPerm(tag.String(), nm.Width, r.cfg.Regions.N, r.cfg.Regions.R); err != nil {
				r.fail(req, fmt.Errorf("%w: %v; nothing created", segment.ErrInvalid, err))
				return
			}
		}
	}
	// A live tag is reported as such (another mode: ErrMode) before the
	// peers' floors, which it always has, are asked.
	if t, err := r.cfg.Store.Get(ctx, tag); err == nil {
		if nm, nerr := segment.NormalizeMode(m); nerr == nil && !t.Mode.Equal(nm) {
			r.fail(req, segment.ModeConflict(tag, t.Mode, nm))
			return
		}
		r.fail(req, fmt.Errorf("%w: %q", segment.ErrTagExists, a.Tag))
		return
	}
	if err := r.checkPeerFloors(ctx, tag, max(a.MaxID, 1), "create"); err != nil {
		r.failAdmin(req, err)
		return
	}
	nm, err := segment.NormalizeMode(m)
	if err != nil {
		r.fail(req, err)
		return
	}
	release, err := r.cfg.Homes.Create(ctx, tag, nm, a.MaxID, a.Undeployed)
	if err != nil {
		r.failAdmin(req, err)
		return
	}
	err = r.cfg.Store.Create(ctx, segment.Tag{Name: tag, Step: a.Step, MaxID: a.MaxID, Description: a.Description, Mode: m})
	release()
	if err != nil {
		r.failAdmin(req, err)
		return
	}
	r.announceTag(a.Tag)
	r.respondRow(ctx, req, tag)
}

// handleTagDecode answers the sequence number of an opaque tag's id, with
// this node's key (which must be the tag's).
func (r *Responder) handleTagDecode(req micro.Request) {
	a, tag, ok := r.decodeAdmin(req)
	if !ok {
		return
	}
	ctx, cancel := r.adminCtx()
	defer cancel()
	t, err := r.cfg.Store.Get(ctx, tag)
	if err != nil {
		r.fail(req, err)
		return
	}
	if t.Mode.Kind != segment.KindOpaque {
		r.fail(req, fmt.Errorf("%w: tag %q is %s: its ids are their own sequence numbers", segment.ErrMode, a.Tag, t.Mode))
		return
	}
	if r.cfg.Opaque == nil {
		r.fail(req, fmt.Errorf("%w: tag %q was created with key %s, and node %s has no key", segment.ErrNoKey, a.Tag, t.Mode.KeyID, r.cfg.Node))
		return
	}
	seq, err := r.decodeOpaque(t, a.ID)
	if err != nil {
		r.fail(req, err)
		return
	}
	r.respondJSON(req, wire.TagDecoded{Tag: a.Tag, ID: a.ID, Sequence: seq})
}

// decodeOpaque inverts the permutation that made opaque tag t's id. With
// many regions the id P(l)*N + R names its region R, whose permutation of
// its share is inverted, and the answer is l*N + R (Regions.Local splits
// it): the id the local number has in a plain tag. That assumes region R
// serves the tag with this store's key and width, as docs/regions.md
// asks; another key or width there decodes to a wrong number, never to an
// error that could tell.
func (r *Responder) decodeOpaque(t segment.Tag, id int64) (int64, error) {
	rg := r.cfg.Regions
	local, region := id, int64(0)
	if rg.Many() {
		var ok bool
		if local, region, ok = rg.Local(id); !ok || id > 1<<t.Mode.Width-1 {
			return 0, fmt.Errorf("%w: id %d is not in [%d, 2^%d): no region's id", segment.ErrInvalid, id, rg.N, t.Mode.Width)
		}
	}
	p, err := r.cfg.Opaque.ForMode(t.Name.String(), t.Mode.Width, t.Mode.KeyID, rg.N, region) // the stored name: the tweak the ids were made with
	if errors.Is(err, opaque.ErrWrongKey) {
		return 0, fmt.Errorf("%w: node %s: %v", segment.ErrNoKey, r.cfg.Node, err)
	}
	if err != nil {
		return 0, err
	}
	seq, err := p.Sequence(local)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", segment.ErrInvalid, err)
	}
	return segment.Regions{N: rg.N, R: region}.ID(seq), nil
}

func (r *Responder) handleSetStep(req micro.Request) {
	a, tag, ok := r.decodeAdmin(req)
	if !ok {
		return
	}
	ctx, cancel := r.adminCtx()
	defer cancel()
	if err := r.cfg.Store.SetStep(ctx, tag, a.Step); err != nil {
		r.failAdmin(req, err)
		return
	}
	r.respondRow(ctx, req, tag)
}

func (r *Responder) handleSetMax(req micro.Request) {
	a, tag, ok := r.decodeAdmin(req)
	if !ok {
		return
	}
	ctx, cancel := r.adminCtx()
	defer cancel()
	if err := r.cfg.Store.SetMaxID(ctx, tag, a.MaxID); err != nil {
		r.failAdmin(req, err)
		return
	}
	r.respondRow(ctx, req, tag)
}

// handleRestart starts a tag over at an explicit floor (Store.Restart):
// the only way back for a tag that was deleted.
func (r *Responder) handleRestart(req micro.Request) {
	a, tag, ok := r.decodeAdmin(req)
	if !ok {
		return
	}
	ctx, cancel := r.adminCtx()
	defer cancel()
	if err := r.checkPeerFloors(ctx, tag, a.Floor, "restart"); err != nil {
		r.failAdmin(req, err)
		return
	}
	if err := r.cfg.Homes.Restart(ctx, tag, a.Floor); err != nil {
		r.failAdmin(req, err)
		return
	}
	if err := r.cfg.Store.Restart(ctx, tag, a.Floor); err != nil {
		r.failAdmin(req, err)
		return
	}
	r.cfg.Logger.Warn("segment: tag restarted by an operator", "tag", a.Tag, "floor", a.Floor)
	r.announceTag(a.Tag) // a node that stopped leading the deleted tag looks again
	r.respondRow(ctx, req, tag)
}

// tagTakenIn answers an announcement asked by TellTag (its instance is
// what peers.Set.Tell waits for).
type tagTakenIn struct {
	Node     string `json:"node"`
	Instance string `json:"instance,omitempty"`
}

// tellWait bounds how long a create or restart waits for the live nodes
// to answer its announcement before it replies anyway.
const tellWait = 2 * time.Second

// announceTag tells every node of the region that tag was created or
// restarted (Scope.TagChangedPrefix(): the tag is in its store only), this
// node first (its own copy of the
// announcement comes back later), and with TellTag waits until each live
// node has taken it in. A node that has not answered within tellWait
// (cut off from NATS, or stopping) may answer 404 for the tag until the
// announcement reaches it, or for at most segment.Config.NegativeTTL
// after its last look at the store; the create replies anyway, and says
// so in the log.
func (r *Responder) announceTag(tag string) {
	if r.cfg.TagChanged != nil {
		r.cfg.TagChanged(tag)
	}
	if r.cfg.TellTag == nil {
		if err := r.cfg.Conn.Publish(r.cfg.Scope.TagChangedPrefix()+tag, nil); err != nil {
			r.cfg.Logger.Warn("announcing a tag", "tag", tag, "err", err)
		}
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, tellWait)
	defer cancel()
	if err := r.cfg.TellTag(ctx, r.cfg.Scope.TagChangedPrefix()+tag); err != nil {
		r.cfg.Logger.Warn("announcing a tag: a node may answer 404 for it for a while", "tag", tag, "err", err)
	}
}

func (r *Responder) respondRow(ctx context.Context, req micro.Request, tag wire.Tag) {
	t, err := r.cfg.Store.Get(ctx, tag)
	if err != nil {
		r.fail(req, err)
		return
	}
	r.respondJSON(req, rowOf(t))
}

func (r *Responder) respondJSON(req micro.Request, v any) {
	if err := req.RespondJSON(v); err != nil {
		r.cfg.Logger.Debug("respond failed", "subject", req.Subject(), "err", err)
	}
}
