package peers

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/freeport"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/wire"
)

// TestMemberWritesAreFenced: a node writes its key conditional on the
// revision it last wrote, and writes again only after it has read where
// the key stands. A write of someone else (or one of its own whose
// acknowledgement was lost) makes the conditional write fail; the node
// then reads the key and goes on — which a node that cannot hear the
// server cannot do, so its key lapses instead of being renewed blindly
// (a member behind a one-way blackhole would hold every start back). A key
// gone (lapsed, purged) is made again.
func TestMemberWritesAreFenced(t *testing.T) {
	nc := natstest.Connect(t, natstest.RunServer(t).ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := joinMembers(ctx, nc, wire.MembersBucket, 1, wire.Member{Node: "fenced", Instance: "i1"}, clock.Real, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer m.close(ctx)
	first := m.rev
	if first == 0 {
		t.Fatal("no revision after the first write")
	}
	// Someone else's write moves the revision: the conditional write
	// fails, the node reads the key and writes again.
	if _, err := m.kv.Put(ctx, "i1", []byte(`{"node":"fenced","instance":"i1"}`)); err != nil {
		t.Fatal(err)
	}
	stale := m.rev
	if _, err := m.kv.Update(ctx, "i1", []byte(`{}`), stale); err == nil {
		t.Fatal("a write on the revision the node last wrote succeeded after another write: not conditional")
	}
	if err := m.put(ctx); err != nil {
		t.Fatalf("put after a write it did not make: %v", err)
	}
	if m.rev <= stale+1 {
		t.Fatalf("revision %d after re-reading, want past %d", m.rev, stale+1)
	}
	// Gone: made again.
	if err := m.kv.Purge(ctx, "i1"); err != nil {
		t.Fatal(err)
	}
	if err := m.put(ctx); err != nil {
		t.Fatalf("put after the key was purged: %v", err)
	}
	if e, err := m.kv.Get(ctx, "i1"); err != nil || e.Revision() != m.rev {
		t.Fatalf("key after put: %v, %v; want revision %d", e, err, m.rev)
	}
}

// deafKV is a bucket seen through a link that carries the node's messages
// to the server but none of the server's answers back (a one-way
// blackhole): writes are stored, their acknowledgements and every read
// are lost.
type deafKV struct{ jetstream.KeyValue }

var errNoAnswer = errors.New("no answer: the link drops the server's messages")

func (d deafKV) Create(ctx context.Context, key string, v []byte, o ...jetstream.KVCreateOpt) (uint64, error) {
	_, _ = d.KeyValue.Create(ctx, key, v, o...)
	return 0, errNoAnswer
}

func (d deafKV) Update(ctx context.Context, key string, v []byte, rev uint64) (uint64, error) {
	_, _ = d.KeyValue.Update(ctx, key, v, rev)
	return 0, errNoAnswer
}

func (d deafKV) Get(context.Context, string) (jetstream.KeyValueEntry, error) {
	return nil, errNoAnswer
}

// TestDeafMemberLapses: a node that cannot hear the server must not keep
// its key alive, or every check waits for a member that never answers.
// Its first write after the link went deaf is stored (it cannot know),
// every later one is refused by the server, so the key lapses with its
// TTL. Written blindly (kv.Put), each renewal would be stored again.
func TestDeafMemberLapses(t *testing.T) {
	nc := natstest.Connect(t, natstest.RunServer(t).ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := joinMembers(ctx, nc, wire.MembersBucket, 1, wire.Member{Node: "deaf", Instance: "i2"}, clock.Real, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	m.closed.Do(func() { close(m.stop) }) // no renewal loop: the test renews by hand
	m.wg.Wait()
	real := m.kv
	m.kv = deafKV{real}
	for range 5 {
		if err := m.put(ctx); err == nil {
			t.Fatal("a write through a deaf link reported success")
		}
	}
	e, err := real.Get(ctx, "i2")
	if err != nil {
		t.Fatal(err)
	}
	// The join's write and the first deaf one: nothing after.
	if e.Revision() != m.rev+1 {
		t.Fatalf("key at revision %d after 5 deaf renewals, want %d (one stored before the node could know)", e.Revision(), m.rev+1)
	}
}

func (d deafKV) Put(ctx context.Context, key string, v []byte) (uint64, error) {
	_, _ = d.KeyValue.Put(ctx, key, v)
	return 0, errNoAnswer
}

// TestUnlistableMembersDecideNothing: a node that cannot list the members
// (leaf_nodes deleted by hand, its server down) does not fall back to the
// window, in which a slow peer goes unheard: the check fails as
// unavailable, and Start or the client asks again.
func TestUnlistableMembersDecideNothing(t *testing.T) {
	nc := natstest.Connect(t, natstest.RunServer(t).ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	m, err := joinMembers(ctx, nc, wire.MembersBucket, 1, wire.Member{Node: "lister", Instance: "i3"}, clock.Real, log)
	if err != nil {
		t.Fatal(err)
	}
	m.closed.Do(func() { close(m.stop) }) // no renewal makes the bucket again
	m.wg.Wait()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(ctx, wire.MembersBucket); err != nil {
		t.Fatal(err)
	}
	n := &Set{cfg: Config{Conn: nc, Log: log}, members: m}
	err = n.gather(ctx, wire.StatusSubject, 100*time.Millisecond, nil, func(*nats.Msg) {})
	if !errors.Is(err, ErrSilent) {
		t.Fatalf("a check with leaf_nodes gone: %v, want ErrSilent", err)
	}
}

// TestMembersSurviveServerRestart: the server holding leaf_nodes is killed
// and comes back; the members' keys are still there before any of them
// renews. In memory, the bucket would come back empty: a newcomer's check
// would list no one and skip a slow live member.
func TestMembersSurviveServerRestart(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	opts := func(o *server.Options) { o.StoreDir, o.Port = dir, port }
	s := natstest.RunServer(t, opts)
	nc := natstest.Connect(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := joinMembers(ctx, nc, wire.MembersBucket, 1, wire.Member{Node: "kept", Instance: "i4", Serving: true}, clock.Real, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	m.closed.Do(func() { close(m.stop) }) // no renewal: the key must outlive the restart by itself
	m.wg.Wait()
	s.Shutdown()
	s.WaitForShutdown()
	s = natstest.RunServer(t, opts)
	other := natstest.Connect(t, s.ClientURL())
	o, err := joinMembers(ctx, other, wire.MembersBucket, 1, wire.Member{Node: "newcomer", Instance: "i5"}, clock.Real, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer o.close(ctx)
	live, err := o.others(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if live["i4"] != "kept" {
		t.Fatalf("members after the server's restart: %v, want kept (i4)", live)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	p, err := freeport.Take(1) // held: the server is restarted on it
	if err != nil {
		t.Fatal(err)
	}
	return p[0]
}

// TestMemberOutlivesServerDowntime: the server holding leaf_nodes is down
// for longer than a member's key may age; the member is alive (it only
// could not renew), so its key must still be listed when the server is
// back, and a check must wait for its answer. With a TTL on the bucket,
// the keys would expire as the server came back and a newcomer would list
// no one. A member that stays silent is passed over once its key is old
// (lapsed).
func TestMemberOutlivesServerDowntime(t *testing.T) {
	old := memberTTL
	memberTTL = 2 * time.Second
	t.Cleanup(func() { memberTTL = old })
	dir := t.TempDir()
	port := freePort(t)
	opts := func(o *server.Options) { o.StoreDir, o.Port = dir, port }
	s := natstest.RunServer(t, opts)
	nc := natstest.Connect(t, s.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	m, err := joinMembers(ctx, nc, wire.MembersBucket, 1, wire.Member{Node: "slow", Instance: "i6", Serving: true}, clock.Real, log)
	if err != nil {
		t.Fatal(err)
	}
	m.closed.Do(func() { close(m.stop) }) // it cannot renew while the server is down
	m.wg.Wait()
	s.Shutdown()
	s.WaitForShutdown()
	time.Sleep(memberTTL + 500*time.Millisecond)
	s = natstest.RunServer(t, opts)
	other := natstest.Connect(t, s.ClientURL())
	o, err := joinMembers(ctx, other, wire.MembersBucket, 1, wire.Member{Node: "newcomer", Instance: "i7"}, clock.Real, log)
	if err != nil {
		t.Fatal(err)
	}
	defer o.close(ctx)
	live, err := o.others(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if live["i6"] != "slow" {
		t.Fatalf("members after %v down: %v, want slow (i6)", memberTTL+500*time.Millisecond, live)
	}
	// A check waits for it (asking again: it answers once it is back on
	// NATS, a second late), and hears it.
	n := &Set{cfg: Config{Conn: other, Log: log}, members: o}
	sub, err := natstest.Connect(t, s.ClientURL()).Subscribe("test.check", func(msg *nats.Msg) {
		go func() {
			time.Sleep(1500 * time.Millisecond)
			_ = msg.Respond([]byte(`{"instance":"i6"}`))
		}()
	})
	if err != nil {
		t.Fatal(err)
	}
	heard := 0
	if err := n.gather(ctx, "test.check", 100*time.Millisecond, nil, func(*nats.Msg) { heard++ }); err != nil || heard != 1 {
		t.Fatalf("check beside a slow member: %v, heard %d answers, want 1", err, heard)
	}
	// Silent for good: passed over once its key is old, and its key deleted.
	_ = sub.Unsubscribe()
	if err := n.gather(ctx, "test.check", 100*time.Millisecond, nil, func(*nats.Msg) {}); err != nil {
		t.Fatalf("check beside a member silent past its key's age: %v", err)
	}
	if _, err := o.kv.Get(ctx, "i6"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the lapsed member's key: %v, want deleted", err)
	}
}

// renewingKV is a bucket in which the member's renewal lands between the
// checker's read of its key and the delete.
type renewingKV struct {
	jetstream.KeyValue
	member string
}

func (r renewingKV) Delete(ctx context.Context, key string, o ...jetstream.KVDeleteOpt) error {
	if key == r.member {
		if _, err := r.KeyValue.Put(ctx, key, []byte(`{"node":"late","instance":"`+key+`"}`)); err != nil {
			return err
		}
	}
	return r.KeyValue.Delete(ctx, key, o...)
}

// TestLapsedMemberRenewingIsKept: a silent member whose
// key is old is gone only if its key is deleted on the revision read; a
// renewal that lands in between keeps it (the check still waits for it).
func TestLapsedMemberRenewingIsKept(t *testing.T) {
	old := memberTTL
	memberTTL = time.Second
	t.Cleanup(func() { memberTTL = old })
	nc := natstest.Connect(t, natstest.RunServer(t).ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	late, err := joinMembers(ctx, nc, wire.MembersBucket, 1, wire.Member{Node: "late", Instance: "i9"}, clock.Real, log)
	if err != nil {
		t.Fatal(err)
	}
	late.closed.Do(func() { close(late.stop) })
	late.wg.Wait()
	m, err := joinMembers(ctx, nc, wire.MembersBucket, 1, wire.Member{Node: "checker", Instance: "i10"}, clock.Real, log)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close(ctx)
	time.Sleep(memberTTL + 200*time.Millisecond) // i9's key is old now
	m.mu.Lock()
	m.kv = renewingKV{KeyValue: m.kv, member: "i9"}
	m.mu.Unlock()
	gone, err := m.lapsed(ctx, []string{"i9"})
	if err != nil {
		t.Fatal(err)
	}
	if gone["i9"] {
		t.Fatal("a member whose renewal landed before the delete was passed over as gone")
	}
	m.mu.Lock()
	m.kv = m.kv.(renewingKV).KeyValue
	m.mu.Unlock()
	time.Sleep(memberTTL + 200*time.Millisecond) // silent again, and old
	if gone, err := m.lapsed(ctx, []string{"i9"}); err != nil || !gone["i9"] {
		t.Fatalf("a member silent past its key's age: gone %v, %v; want gone", gone, err)
	}
}

// TestOlderBucketLosesItsTTL: a leaf_nodes bucket made by an older leafd
// (keys expiring after 10 s) loses its TTL when a node joins, and keeps
// the rest of its settings.
func TestOlderBucketLosesItsTTL(t *testing.T) {
	nc := natstest.Connect(t, natstest.RunServer(t).ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: wire.MembersBucket, History: 1, TTL: 10 * time.Second, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	m, err := joinMembers(ctx, nc, wire.MembersBucket, 1, wire.Member{Node: "new", Instance: "i11"}, clock.Real, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer m.close(ctx)
	st, err := m.kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.TTL() != 0 || st.History() != 1 {
		t.Fatalf("bucket after a new node joined: TTL %v, history %d; want no TTL, history 1", st.TTL(), st.History())
	}
}

// TestMembersWithoutMetaLeader: in a region cut off from the others'
// majority (no JetStream meta leader) the servers refuse the stream
// leader's message gets, though the bucket's leader is there and takes
// writes. A node that lists the members then (a reconnect gathers the
// floors again; a check) reads a replica's copy as new as the leader's.
// Before, every listing failed with 10008 until the heal, and a leafd
// that reconnected during a cut failed its segment tags once their
// buffers ran out.
func TestMembersWithoutMetaLeader(t *testing.T) {
	sc := natstest.RunSuperCluster(t, 1, 1, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	join := func(node, inst string) *members {
		m, err := joinMembers(ctx, natstest.Connect(t, sc.URL(0)), wire.MembersBucket, 1, wire.Member{Node: node, Instance: inst, Serving: true}, clock.Real, log)
		if err != nil {
			t.Fatalf("join %s: %v", node, err)
		}
		t.Cleanup(func() { m.close(context.Background()) })
		return m
	}
	a := join("a", "ia")
	join("b", "ib")
	sc.Cut(0)
	sc.Cut(1)
	sc.Cut(2)
	sc.WaitNoMetaLeader(0, "KV_"+wire.MembersBucket)
	join("c", "ic") // a member that joins during the cut
	live, err := a.others(ctx, nil)
	if err != nil {
		t.Fatalf("members with c0 cut off: %v", err)
	}
	if live["ib"] != "b" || live["ic"] != "c" || len(live) != 2 {
		t.Fatalf("members with c0 cut off: %v, want b (ib) and c (ic)", live)
	}
	gone, err := a.lapsed(ctx, []string{"ib"})
	if err != nil || gone["ib"] {
		t.Fatalf("lapsed(ib) with c0 cut off: %v, %v; want b kept (its key is fresh)", gone, err)
	}
	sc.Heal(0)
	sc.Heal(1)
	sc.Heal(2)
}
