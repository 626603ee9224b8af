package peers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/client/ask"
	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/jskv"
	"github.com/leafmq/leafmq/wire"
)

// A node keeps a key in its region's members bucket (wire.Scope.Members)
// while it runs and writes it again every memberRenew. A member that does not answer a check counts as
// gone once its key is older than memberTTL, in the server's time (the
// age of the asking node's own fresh write): a node gone without a goodbye
// is passed over from then on, and its key deleted.
var (
	memberTTL   = 10 * time.Second
	memberRenew = 2 * time.Second
)

// members is this node's key in the members bucket and its view of the
// others'. A nil *members (a NATS without JetStream) knows of no one: the
// checks then gather for their window only.
type members struct {
	bucket string // Config.Scope.Members()
	prefix string // the subject prefix of its keys: $KV.<bucket>.
	js     jetstream.JetStream
	cfg    jetstream.KeyValueConfig
	kv     jetstream.KeyValue
	clock  clock.Clock
	log    *slog.Logger
	stop   chan struct{}
	wg     sync.WaitGroup
	closed sync.Once

	wmu sync.Mutex // one write at a time (renew and set), each on the revision the last one wrote

	mu  sync.Mutex
	rec wire.Member
	rev uint64 // the revision of this node's key as it last wrote it; 0: none yet

	// made is when the bucket this node joined was made (its stream's
	// creation time); ownServer: the node runs the NATS server that holds
	// it (the embedded one). See complete.
	made      time.Time
	ownServer bool
}

// memberRead bounds one read of the members bucket: a read that no
// replica answers fails in seconds and the check is tried again, instead
// of holding a start for its whole attempt.
const memberRead = 5 * time.Second

// joinMembers writes this node's key and keeps it fresh until close.
// Its renewals run on clk's ticker.
func joinMembers(ctx context.Context, nc *nats.Conn, bucket string, replicas int, rec wire.Member, clk clock.Clock, log *slog.Logger) (*members, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m := &members{bucket: bucket, prefix: "$KV." + bucket + ".", js: js, cfg: jetstream.KeyValueConfig{
		Bucket:      bucket,
		Description: "leafmq: one key per live node, renewed every few seconds",
		History:     1,
		// No TTL: keys do not expire by themselves. With one, a server
		// down for most of the TTL would drop the keys of live members as
		// it came back, and a newcomer would list no one while a slow
		// member wrote its key again (TestMemberOutlivesServerDowntime).
		// A silent member whose key has aged past memberTTL is passed
		// over instead (Set.gather).
		// On disk: a server restarted after kill -9 (or a crash) keeps
		// the keys. In memory, the bucket would come back empty and a
		// newcomer would take itself for alone while a slow member
		// renewed (TestMembersSurviveServerRestart).
		Storage:  jetstream.FileStorage,
		Replicas: replicas,
	}, clock: clk, log: log, stop: make(chan struct{}), rec: rec}
	if m.kv, err = jskv.OpenOrCreate(cctx, js, m.cfg); err != nil {
		return nil, fmt.Errorf("members bucket %s: %w", bucket, err)
	}
	if st, err := m.kv.Status(cctx); err == nil {
		if b, ok := st.(*jetstream.KeyValueBucketStatus); ok {
			m.made = b.StreamInfo().Created
			switch {
			case b.StreamInfo().Config.Storage == jetstream.MemoryStorage:
				log.Warn("members: the bucket is in memory (made by an older leafd): a restart of its server empties it; delete it once while no node starts, and the next renewal makes it on disk",
					"bucket", bucket)
			case b.TTL() != 0: // made by an older leafd: its keys expire
				// The TTL only: its replicas stay as made (a node with
				// --kv-replicas 1 must not shrink an R3 bucket).
				cfg := m.cfg
				cfg.Replicas = b.StreamInfo().Config.Replicas
				if _, err := js.UpdateKeyValue(cctx, cfg); err != nil {
					log.Warn("members: could not take the TTL off the bucket", "bucket", bucket, "err", err)
				}
			}
		}
	}
	if err := m.put(cctx); err != nil {
		return nil, err
	}
	m.wg.Add(1)
	go m.renew()
	return m, nil
}

// put writes this node's record, conditional on the revision it last
// wrote. A write whose acknowledgement never came back makes the next one
// fail at the server, and the key is written again only once the node has
// read where it stands: a node whose link carries its own messages but not
// the server's answers (a one-way blackhole) stops renewing, and its key
// lapses within memberTTL. Renewed blindly, it would stay a member that
// never answers and hold every start back.
func (m *members) put(ctx context.Context) error {
	m.wmu.Lock()
	defer m.wmu.Unlock()
	m.mu.Lock()
	b, err := json.Marshal(m.rec)
	key, kv, rev := m.rec.Instance, m.kv, m.rev
	m.mu.Unlock()
	if err != nil {
		return err
	}
	var next uint64
	if rev == 0 {
		next, err = kv.Create(ctx, key, b)
	} else {
		next, err = kv.Update(ctx, key, b, rev)
	}
	if err != nil {
		// Where does the key stand: ours at another revision (an
		// acknowledgement lost), or gone (lapsed, purged, the bucket made
		// again)? Reading it needs the server's answer.
		e, gerr := kv.Get(ctx, key)
		switch {
		case errors.Is(gerr, jetstream.ErrKeyNotFound):
			next, err = kv.Create(ctx, key, b)
		case gerr == nil:
			next, err = kv.Update(ctx, key, b, e.Revision())
		default:
			err = gerr
		}
		if err != nil {
			return fmt.Errorf("members: write %s: %w", key, err)
		}
	}
	m.mu.Lock()
	m.rev = next
	m.mu.Unlock()
	return nil
}

// set changes this node's record (what it answers by now) and writes it.
func (m *members) set(ctx context.Context, f func(*wire.Member)) {
	if m == nil {
		return
	}
	select {
	case <-m.stop:
		return // closed: its key is gone and stays gone
	default:
	}
	m.mu.Lock()
	f(&m.rec)
	m.mu.Unlock()
	if err := m.put(ctx); err != nil {
		m.log.Warn("members: could not write this node's record", "err", err)
	}
}

func (m *members) renew() {
	defer m.wg.Done()
	t := m.clock.NewTicker(memberRenew)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C():
		}
		if err := m.renewOnce(); err != nil {
			m.log.Warn("members: renewal failed", "err", err)
		}
	}
}

// renewOnce writes this node's key again. A renewal after a lost answer
// is three round trips (Update, Get, Create): it has the whole memberTTL
// (with half of it, a node 0.85 s from NATS would never write its key
// again while it serves).
func (m *members) renewOnce() error {
	ctx, cancel := context.WithTimeout(context.Background(), memberTTL)
	defer cancel()
	err := m.put(ctx)
	if err != nil {
		// The bucket may be gone (deleted by hand): make it again.
		if kv, oerr := jskv.OpenOrCreate(ctx, m.js, m.cfg); oerr == nil {
			m.mu.Lock()
			m.kv, m.rev = kv, 0
			m.mu.Unlock()
			err = m.put(ctx)
		}
	}
	return err
}

// close stops renewing and removes this node's key: the others stop
// waiting for it at once.
func (m *members) close(ctx context.Context) error {
	if m == nil {
		return nil
	}
	var err error
	m.closed.Do(func() {
		close(m.stop)
		m.wg.Wait()
		m.mu.Lock()
		key, kv := m.rec.Instance, m.kv
		m.mu.Unlock()
		if e := kv.Delete(ctx, key); e != nil && !errors.Is(e, jetstream.ErrKeyNotFound) {
			err = fmt.Errorf("members: delete %s: %w", key, e)
		}
	})
	return err
}

// dropDead deletes the key of inst, a member known to be dead (the
// process that ran on this node's data directory before, Set.Join's dead),
// on the revision read: the others stop waiting for it at once instead of
// for its key to lapse. A dead process writes no more, so only a write
// that was under way as it died can land since, and then the delete fails
// and the key lapses as any other.
func (m *members) dropDead(ctx context.Context, inst string) {
	if m == nil || inst == "" {
		return
	}
	m.mu.Lock()
	self, kv := m.rec.Instance, m.kv
	m.mu.Unlock()
	if inst == self {
		return
	}
	e, err := m.get(ctx, inst)
	if err != nil || e == nil {
		return
	}
	if err := kv.Delete(ctx, inst, jetstream.LastRevision(e.Sequence)); err != nil {
		m.log.Info("members: the key of this data directory's previous instance was not deleted; it lapses", "instance", inst, "err", err)
		return
	}
	m.log.Info("members: deleted the key of this data directory's previous instance (it is dead: this node holds the directory's lock)", "instance", inst)
}

// others returns the members other than this one whose record matches
// want, by instance (with their names, for errors), however old their
// keys: a member silent for a check is passed over only if its key is
// still old after the check waited (lapsed).
func (m *members) others(ctx context.Context, want func(wire.Member) bool) (map[string]string, error) {
	out, _, err := m.list(ctx, want)
	return out, err
}

// list is others, and whether the list holds every live node that could
// answer (members.complete).
//
// Every read goes to the bucket's stream leader, each within memberRead:
// a direct get may be routed to any replica, one cut off from the rest
// of the cluster among them, and went unanswered for the whole attempt.
// Only where the leader's read is refused for want of a meta leader does
// it read a replica, and only a copy as new as the leader's (keyReader).
func (m *members) list(ctx context.Context, want func(wire.Member) bool) (_ map[string]string, complete bool, _ error) {
	if m == nil {
		return nil, false, nil
	}
	m.mu.Lock()
	self := m.rec.Instance
	m.mu.Unlock()
	info, err := m.info(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("members: list: %w", err)
	}
	out := map[string]string{}
	rd := &keyReader{m: m, info: info}
	for subject := range info.State.Subjects {
		key := strings.TrimPrefix(subject, m.prefix)
		if key == self || key == subject {
			continue
		}
		e, err := rd.get(ctx, key)
		if err != nil {
			return nil, false, fmt.Errorf("members: get %s: %w", key, err)
		}
		if e == nil {
			continue // gone meanwhile, or a delete marker
		}
		var rec wire.Member
		if json.Unmarshal(e.Data, &rec) != nil || rec.Instance != key {
			continue
		}
		if want == nil || want(rec) {
			out[key] = rec.Node
		}
	}
	return out, m.complete(info), nil
}

// complete reports whether a listing of the bucket as info describes it
// holds every live node that could answer a check, so that a check need
// wait for no one else. Every node writes its key (acknowledged) before it
// lists the others, and answers from before it writes its key: of two
// nodes that start together, the one that lists second sees the other's
// key and waits for its answer. That holds for keys the bucket keeps. A
// bucket made less than memberTTL ago (by hand, or by a renewal after it
// was deleted) may still lack the keys of live nodes that have not
// written theirs again: not complete, unless it is the bucket this node
// made or found at its join on the NATS server it runs itself (the
// embedded one: every member writes its key through that server, whose
// store is on this node's locked data directory).
func (m *members) complete(info *jetstream.StreamInfo) bool {
	if info.TimeStamp.Sub(info.Created) >= memberTTL {
		return true
	}
	return m.ownServer && info.Created.Equal(m.made)
}

// info is the bucket's stream info with its keys' subjects, from the
// stream leader.
func (m *members) info(ctx context.Context) (*jetstream.StreamInfo, error) {
	rctx, cancel := context.WithTimeout(ctx, memberRead)
	defer cancel()
	st, err := m.js.Stream(rctx, "KV_"+m.bucket)
	if err != nil {
		return nil, err
	}
	return st.Info(rctx, jetstream.WithSubjectFilter(m.prefix+">"))
}

// get reads key from the bucket's stream leader; nil when there is no
// such key (or it was deleted).
func (m *members) get(ctx context.Context, key string) (*jskv.StoredMsg, error) {
	rctx, cancel := context.WithTimeout(ctx, memberRead)
	defer cancel()
	e, err := jskv.MsgGet(rctx, m.js.Conn(), jskv.GetSubject(m.js, m.bucket), jskv.MsgGetRequest{LastFor: m.prefix + key})
	if err != nil || e == nil || e.Deleted() {
		return nil, err
	}
	return e, nil
}

// keyReader reads members' keys: from the bucket's stream leader (get),
// or, once the leader's read is refused for want of a JetStream meta
// leader (a region cut off from the others, whose stream leader still
// answers stream info and takes writes), from a replica's copy of every
// key that holds all the leader had written when its stream info was
// taken, or more (replicaKeys). A copy that lags could miss a member that
// joined, and a check would then not wait for it.
type keyReader struct {
	m       *members
	info    *jetstream.StreamInfo      // the leader's; read when needed, if nil
	replica map[string]*jskv.StoredMsg // nil until the leader's read was refused
}

func (r *keyReader) get(ctx context.Context, key string) (*jskv.StoredMsg, error) {
	if r.replica == nil {
		e, err := r.m.get(ctx, key)
		if !jskv.NoMetaLeader(err) {
			return e, err
		}
		if r.info == nil {
			if r.info, err = r.m.info(ctx); err != nil {
				return nil, err
			}
		}
		if r.replica, err = r.m.replicaKeys(ctx, r.info.State.LastSeq); err != nil {
			return nil, err
		}
	}
	if e := r.replica[key]; e != nil && !e.Deleted() {
		return e, nil
	}
	return nil, nil
}

// replicaKeys reads every key's last message from any replica, asking
// again (within memberRead) until one answers with a copy at or past the
// stream's sequence last (jskv.DirectLast): the leader's last sequence
// when it was asked, after this node's own write.
func (m *members) replicaKeys(ctx context.Context, last uint64) (map[string]*jskv.StoredMsg, error) {
	rctx, cancel := context.WithTimeout(ctx, memberRead)
	defer cancel()
	subject := jskv.DirectSubject(m.js, m.bucket)
	keys := map[string]*jskv.StoredMsg{}
	for {
		clear(keys)
		current, err := jskv.DirectLast(rctx, m.js.Conn(), subject, m.prefix+">", last, func(e *jskv.StoredMsg) error {
			keys[strings.TrimPrefix(e.Subject, m.prefix)] = e
			return nil
		})
		switch {
		case err == nil && current:
			return keys, nil
		case err == nil:
			err = fmt.Errorf("members: a replica's copy is behind sequence %d", last)
		}
		if clock.Sleep(rctx, m.clock, 20*time.Millisecond) != nil {
			return nil, fmt.Errorf("%w (%v)", err, rctx.Err())
		}
	}
}

// lapsed returns those of insts (members that did not answer a check)
// whose keys are gone or older than memberTTL in the server's time, and
// deletes the old keys (each on the revision it read: a write since wins).
// The server's time is the age of this node's own key, written just now.
func (m *members) lapsed(ctx context.Context, insts []string) (map[string]bool, error) {
	if m == nil {
		return nil, nil
	}
	if err := m.put(ctx); err != nil {
		return nil, err
	}
	m.mu.Lock()
	self, kv := m.rec.Instance, m.kv
	m.mu.Unlock()
	rd := &keyReader{m: m}
	own, err := rd.get(ctx, self)
	if err == nil && own == nil {
		err = jetstream.ErrKeyNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("members: get %s: %w", self, err)
	}
	gone := map[string]bool{}
	for _, inst := range insts {
		e, err := rd.get(ctx, inst)
		switch {
		case err != nil:
			return nil, fmt.Errorf("members: get %s: %w", inst, err)
		case e == nil:
			gone[inst] = true // said goodbye meanwhile
		case own.Time.Sub(e.Time) > memberTTL:
			// Gone only once its key is deleted on the revision read: a
			// renewal that landed since makes the delete fail, and the
			// member counts as alive.
			if err := kv.Delete(ctx, inst, jetstream.LastRevision(e.Sequence)); err != nil {
				m.log.Info("members: a silent member's key was not deleted; still waited for", "instance", inst, "err", err)
				continue
			}
			gone[inst] = true
		}
	}
	return gone, nil
}

// gather asks every live node on subject, as ask.Gather, and waits past
// window for every member that want selects (up to memberTTL, asking again
// every second). A member that still did not answer and whose key was
// written within memberTTL (server time) makes the check fail with
// ErrSilent; one whose key is older is gone (lapsed). A slow answer is
// never taken for no node: a node 200 ms from NATS would otherwise take a
// worker id a live node serves, and a newcomer create a tag afresh beside
// loaded peers (TestSlowPeerIsWaitedFor in node, chaos op-kv-bucket-join).
// With the members' list complete (members.complete) the check ends once
// every listed member answered, with no window.
func (s *Set) gather(ctx context.Context, subject string, window time.Duration, want func(wire.Member) bool,
	each func(*nats.Msg)) error {
	expect, complete, err := s.members.list(ctx, want)
	if err != nil {
		// Not the window alone: a node that cannot tell whom to wait for
		// does not decide (TestUnlistableMembersDecideNothing). The next
		// renewal makes the bucket again.
		return fmt.Errorf("%w: %v", ErrSilent, err)
	}
	if complete {
		window = 0
	}
	ectx, cancel := context.WithTimeout(ctx, window+memberTTL)
	defer cancel()
	exp := make(map[string]bool, len(expect))
	for inst := range expect {
		exp[inst] = true
	}
	missing, err := ask.GatherExpect(ectx, s.cfg.Conn, subject, window, exp, answerInstance, each)
	if err != nil {
		return err
	}
	if len(missing) > 0 && ctx.Err() == nil { // the caller's time left: were they gone?
		gone, err := s.members.lapsed(ctx, missing)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrSilent, err)
		}
		kept := missing[:0]
		for _, inst := range missing {
			if !gone[inst] {
				kept = append(kept, inst)
			}
		}
		missing = kept
	}
	if len(missing) > 0 {
		names := make([]string, 0, len(missing))
		for _, inst := range missing {
			names = append(names, fmt.Sprintf("%s (instance %s)", expect[inst], inst))
		}
		return fmt.Errorf("%w: %s on %s within %v", ErrSilent, strings.Join(names, ", "), subject, window+memberTTL)
	}
	return nil
}

// answerInstance names the instance that sent an answer: every answer a
// member gathers (wire.NodeStatus, NodeFloors, NodeFloor) has one.
func answerInstance(m *nats.Msg) string {
	var st struct {
		Instance string `json:"instance"`
	}
	_ = json.Unmarshal(m.Data, &st)
	return st.Instance
}
