package responder_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/mono"
	"github.com/leafmq/leafmq/mono/memlease"
	"github.com/leafmq/leafmq/responder"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/memstore"
	"github.com/leafmq/leafmq/wire"
)

// TestServeMono: leaf.mono.<tag> is answered from the tag's leader while
// ServeMono runs: ids strictly increasing across requests, a probe counted
// and answered with no id taken, 503 once the leader no longer leads, no
// responder once stopped, and no ServeMono after the Responder stopped.
func TestServeMono(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	nc := natstest.Connect(t, natstest.RunServer(t).ClientURL())
	store := memstore.New()
	tag := wire.MustTag("ticks")
	if err := store.Create(context.Background(), segment.Tag{Name: tag, Step: 10, Mode: segment.Mode{Kind: segment.KindMono}}); err != nil {
		t.Fatal(err)
	}
	l, err := mono.NewLeader(mono.Config{Tag: tag, Node: "a", Ranges: &segment.Reserver{Store: store, Logger: quiet},
		Lease: memlease.New(time.Second, nil), Step: 10, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	go l.Run(context.Background())
	t.Cleanup(l.Close)
	testenv.Eventually(t, "leading", 10*time.Second, l.Leading)

	observed := make(chan responder.Observation, 10)
	r, err := responder.Start(responder.Config{Conn: nc, IDs: &counter{}, Node: "n", Instance: "i1", Logger: quiet,
		Observe: func(o responder.Observation) { observed <- o }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop() })
	stop, err := r.ServeMono(tag, l)
	if err != nil {
		t.Fatal(err)
	}
	subject := wire.MonoPrefix + tag.String()
	var last int64
	for _, n := range []int{25, 1, 7} {
		msg, err := nc.RequestMsg(wire.NewRequest(subject, n, true), 5*time.Second)
		if err == nil {
			err = wire.ReplyError(msg)
		}
		if err != nil {
			t.Fatalf("leaf.mono.ticks (%d ids): %v", n, err)
		}
		ids, err := wire.DecodeIDs(nil, msg.Data, true)
		if err != nil || len(ids) != n {
			t.Fatalf("decoded %v, %v; want %d ids", ids, err, n)
		}
		for _, id := range ids {
			if id <= last {
				t.Fatalf("id %d after %d: not strictly increasing", id, last)
			}
			last = id
		}
		if o := <-observed; o.Engine != "mono" || o.Tag != "ticks" || o.Code != "200" || o.IDs != n {
			t.Fatalf("observed %+v, want mono ticks 200 with %d ids", o, n)
		}
	}

	probe := &nats.Msg{Subject: subject, Header: nats.Header{wire.ProbeHeader: []string{"n"}}}
	reply, err := nc.RequestMsg(probe, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var pr wire.ProbeReply
	if err := json.Unmarshal(reply.Data, &pr); err != nil || pr != (wire.ProbeReply{Node: "n", Instance: "i1", Subject: wire.SubjectMono}) {
		t.Fatalf("probe reply %q: %+v, %v", reply.Data, pr, err)
	}
	if got := r.Probed(wire.SubjectMono); got != 1 {
		t.Fatalf("Probed(mono) = %d, want 1", got)
	}

	l.Close() // no longer leads: a switch-over, 503
	msg, err := nc.RequestMsg(wire.NewRequest(subject, 1, true), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.ReplyError(msg); !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("leaf.mono.ticks from a node that no longer leads = %v, want a 503", err)
	}

	stop()
	if _, err := nc.RequestMsg(wire.NewRequest(subject, 1, true), 2*time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("leaf.mono.ticks after stop = %v, want no responders", err)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ServeMono(tag, l); err == nil {
		t.Fatal("ServeMono after Stop succeeded")
	}
}

// TestServeMonoShedsFlood: with many clients asking leaf.mono.<tag> for
// the largest batch at once, more than the leader can serve in time, a
// 1-id request beside them is still answered within the client's 1 s
// deadline, with its id or a retryable 503, instead of waiting behind
// every big request queued before it. The ids served meanwhile stay
// strictly increasing in the order they are handed out: no two replies'
// ranges overlap.
func TestServeMonoShedsFlood(t *testing.T) {
	const (
		floodClients = 200 // more than the leader serves within the deadline on any machine
		floodConns   = 8
		batch        = wire.DefaultMaxBatch
		flood        = 3 * time.Second
		deadline     = time.Second // the availability goal: a later answer counts as none
	)
	quiet := slog.New(slog.DiscardHandler)
	url := natstest.RunServer(t).ClientURL()
	nc := natstest.Connect(t, url)
	store := memstore.New()
	tag := wire.MustTag("ticks")
	// A step below the batch: a big request takes several ranges, as on a
	// node whose step is sized for small requests.
	const step = 100
	if err := store.Create(context.Background(), segment.Tag{Name: tag, Step: step, Mode: segment.Mode{Kind: segment.KindMono}}); err != nil {
		t.Fatal(err)
	}
	l, err := mono.NewLeader(mono.Config{Tag: tag, Node: "a", Ranges: &segment.Reserver{Store: store, Logger: quiet},
		Lease: memlease.New(time.Second, nil), Step: step, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	go l.Run(context.Background())
	t.Cleanup(l.Close)
	testenv.Eventually(t, "leading", 10*time.Second, l.Leading)
	r, err := responder.Start(responder.Config{Conn: nc, IDs: &counter{}, Node: "n", Instance: "i1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop() })
	stop, err := r.ServeMono(tag, l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	subject := wire.MonoPrefix + tag.String()

	type span struct{ first, last int64 }
	var (
		mu      sync.Mutex
		spans   []span
		bigOK   int
		bigBusy int
		errs    []error
	)
	// record checks one reply's ids and keeps their span.
	record := func(msg *nats.Msg, n int) error {
		ids, err := wire.DecodeIDs(nil, msg.Data, true)
		if err != nil || len(ids) != n {
			return errors.Join(err, errors.New("wrong number of ids"))
		}
		for i := 1; i < len(ids); i++ {
			if ids[i] <= ids[i-1] {
				return errors.New("ids of one reply not strictly increasing")
			}
		}
		mu.Lock()
		spans = append(spans, span{ids[0], ids[len(ids)-1]})
		mu.Unlock()
		return nil
	}

	ctx, cancel := context.WithTimeout(context.Background(), flood)
	defer cancel()
	var wg sync.WaitGroup
	conns := make([]*nats.Conn, floodConns)
	for i := range conns {
		conns[i] = natstest.Connect(t, url)
	}
	for i := range floodClients {
		c := conns[i%floodConns]
		wg.Go(func() {
			for ctx.Err() == nil {
				msg, err := c.RequestMsg(wire.NewRequest(subject, batch, true), 10*time.Second)
				if err == nil {
					err = wire.ReplyError(msg)
				}
				switch {
				case err == nil:
					if err := record(msg, batch); err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
						return
					}
					mu.Lock()
					bigOK++
					mu.Unlock()
				case errors.Is(err, wire.ErrUnavailable):
					mu.Lock()
					bigBusy++
					mu.Unlock()
					time.Sleep(10 * time.Millisecond) // a client backs off before asking again
				default:
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}

	small := natstest.Connect(t, url)
	var took []time.Duration
	late, refused := 0, 0
	time.Sleep(200 * time.Millisecond) // the flood is under way
	for ctx.Err() == nil {
		start := time.Now()
		msg, err := small.RequestMsg(wire.NewRequest(subject, 1, true), 5*time.Second)
		d := time.Since(start)
		took = append(took, d)
		if d > deadline {
			late++
		}
		if err == nil {
			err = wire.ReplyError(msg)
		}
		switch {
		case err == nil:
			if err := record(msg, 1); err != nil {
				t.Error(err)
			}
		case errors.Is(err, wire.ErrUnavailable):
			refused++
		default:
			t.Errorf("1-id request: %v, want ids or a 503", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	for _, err := range errs {
		t.Errorf("big request: %v", err)
	}
	slices.Sort(took)
	t.Logf("1-id requests: %d, refused (503) %d, over %v %d; answer time p50 %v max %v; big requests served %d, refused %d",
		len(took), refused, deadline, late, took[len(took)/2], took[len(took)-1], bigOK, bigBusy)
	if late > 0 {
		t.Errorf("%d of %d 1-id requests answered after %v (max %v): a late answer counts as none", late, len(took), deadline, took[len(took)-1])
	}
	if bigOK == 0 {
		t.Error("no big request served: the node sheds everything")
	}
	slices.SortFunc(spans, func(a, b span) int { return int(a.first - b.first) })
	for i := 1; i < len(spans); i++ {
		if spans[i].first <= spans[i-1].last {
			t.Fatalf("replies' ids overlap: [%d, %d] and [%d, %d]", spans[i-1].first, spans[i-1].last, spans[i].first, spans[i].last)
		}
	}
}

// TestServeMonoSilentStore: while the leader's store does not answer (its
// next range never comes), a request gets a 503 within a client's 1 s
// deadline, not silence.
func TestServeMonoSilentStore(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	url := natstest.RunServer(t).ClientURL()
	r, err := responder.Start(responder.Config{Conn: natstest.Connect(t, url), IDs: &counter{}, Node: "n", Instance: "i1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop() })
	tag := wire.MustTag("ticks")
	stop, err := r.ServeMono(tag, monoBlocked{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	nc := natstest.Connect(t, url)
	for i := range 3 {
		reply, err := nc.Request(wire.MonoPrefix+tag.String(), []byte("1"), time.Second)
		if err != nil {
			t.Fatalf("request %d: %v, want a 503 within 1 s", i, err)
		}
		if err := wire.ReplyError(reply); !errors.Is(err, wire.ErrUnavailable) {
			t.Fatalf("request %d: %v, want a 503", i, err)
		}
	}
}

// monoBlocked is a leader whose next range never comes: it waits as long
// as the request may.
type monoBlocked struct{}

func (monoBlocked) Next(ctx context.Context, _ int) (int64, int, error) {
	<-ctx.Done()
	return 0, 0, ctx.Err()
}

// monoFunc is a MonoSource from a function.
type monoFunc func(n int) (int64, int, error)

func (f monoFunc) Next(_ context.Context, n int) (int64, int, error) { return f(n) }

// TestServeMonoOldLeaderLosesTheRace: during a switch-over two nodes can
// hold leaf.mono.<tag> (an old leader that woke after its fence keeps its
// subscription until it notices); every subscriber gets every request and
// the client keeps the first reply. The old leader's 503s are held back,
// so the new leader's ids reach the client first: all requests get ids.
func TestServeMonoOldLeaderLosesTheRace(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	url := natstest.RunServer(t).ClientURL()
	tag := wire.MustTag("ticks")
	serve := func(node string, src responder.MonoSource) {
		t.Helper()
		r, err := responder.Start(responder.Config{Conn: natstest.Connect(t, url), IDs: &counter{}, Node: node, Instance: node, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Stop() })
		if _, err := r.ServeMono(tag, src); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var next int64
	serve("new", monoFunc(func(n int) (int64, int, error) {
		mu.Lock()
		defer mu.Unlock()
		first := next + 1
		next += int64(n)
		return first, n, nil
	}))
	serve("old", monoFunc(func(int) (int64, int, error) {
		return 0, 0, wire.NewCodedError(wire.CodeUnavailable, "mono: not the leader of the tag")
	}))
	nc := natstest.Connect(t, url)
	subject := wire.MonoPrefix + tag.String()
	ids, refused := 0, 0
	var last int64
	for range 100 {
		msg, err := nc.RequestMsg(wire.NewRequest(subject, 1, false), 5*time.Second)
		if err == nil {
			err = wire.ReplyError(msg)
		}
		switch {
		case err == nil:
			got, derr := wire.DecodeIDs(nil, msg.Data, false)
			if derr != nil || len(got) != 1 || got[0] <= last {
				t.Fatalf("ids %v after %d: %v", got, last, derr)
			}
			last = got[0]
			ids++
		case errors.Is(err, wire.ErrUnavailable):
			refused++
		default:
			t.Fatal(err)
		}
	}
	if refused > 0 {
		t.Errorf("%d of 100 requests got the old leader's 503 while the new leader served (%d ids)", refused, ids)
	}
}

// TestServeMonoStopAnswersTheRequestInFlight: a leader that loses its
// lease stops serving its tag (ServeMono's stop) while a request waits in
// its source; that request's 503 still reaches the client (which asks
// again and finds the next leader), as do the refusals of every request
// queued behind it: none is left without an answer.
func TestServeMonoStopAnswersTheRequestInFlight(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	url := natstest.RunServer(t).ClientURL()
	r, err := responder.Start(responder.Config{Conn: natstest.Connect(t, url), IDs: &counter{}, Node: "n", Instance: "i1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop() })
	tag := wire.MustTag("ticks")
	called, lost := make(chan struct{}), make(chan struct{})
	var once sync.Once
	stop, err := r.ServeMono(tag, monoFunc(func(int) (int64, int, error) {
		once.Do(func() { close(called) })
		<-lost
		return 0, 0, wire.NewCodedError(wire.CodeUnavailable, "mono: not the leader of the tag")
	}))
	if err != nil {
		t.Fatal(err)
	}
	nc := natstest.Connect(t, url)
	// Every request reaches the server before the stop: one sent after it
	// would rightly find no responder.
	inbox := nc.NewInbox()
	replies, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	const requests = 5
	for range requests {
		if err := nc.PublishRequest(wire.MonoPrefix+tag.String(), inbox, []byte("1")); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	<-called
	stop()
	time.Sleep(50 * time.Millisecond) // the stop has run its course
	close(lost)
	for i := range requests {
		reply, err := replies.NextMsg(2 * time.Second)
		if err == nil {
			err = wire.ReplyError(reply)
		}
		if !errors.Is(err, wire.ErrUnavailable) {
			t.Errorf("request %d: %v, want a 503", i, err)
		}
	}
}

// TestServeMonoStopAnswersEveryRequestDelivered: requests that NATS
// delivered to a leader's subscription before it stopped serving the tag
// (a leader that just lost its lease) are answered — ids, or a 503 — not
// dropped unread with the subscription.
func TestServeMonoStopAnswersEveryRequestDelivered(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	url := natstest.RunServer(t).ClientURL()
	r, err := responder.Start(responder.Config{Conn: natstest.Connect(t, url), IDs: &counter{}, Node: "n", Instance: "i1", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop() })
	tag := wire.MustTag("ticks")
	var mu sync.Mutex
	var next int64
	stop, err := r.ServeMono(tag, monoFunc(func(n int) (int64, int, error) {
		mu.Lock()
		defer mu.Unlock()
		first := next + 1
		next += int64(n)
		return first, n, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	nc := natstest.Connect(t, url)
	const sent = 3000
	replies := make(chan *nats.Msg, sent)
	inbox := nats.NewInbox()
	sub, err := nc.ChanSubscribe(inbox, replies)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for range sent {
		if err := nc.PublishRequest(wire.MonoPrefix+tag.String(), inbox, []byte("1")); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	stop() // while the leader's connection still holds requests unread
	got := 0
	for timeout := time.After(3 * time.Second); got < sent; got++ {
		select {
		case <-replies:
		case <-timeout:
			t.Fatalf("%d of %d requests answered after the stop", got, sent)
		}
	}
}
