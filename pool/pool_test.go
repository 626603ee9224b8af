package pool_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/pool"
	"github.com/leafmq/leafmq/wire"
)

// counter is a Source of consecutive ids shared by every filler of a test,
// as one segment store would be.
type counter struct{ next atomic.Int64 }

func (c *counter) fill(_ context.Context, dst []int64) error {
	end := c.next.Add(int64(len(dst)))
	for i := range dst {
		dst[i] = end - int64(len(dst)) + int64(i) + 1
	}
	return nil
}

func newJS(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(natstest.Connect(t, url))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func newFiller(t *testing.T, js jetstream.JetStream, cfg pool.FillerConfig) *pool.Filler {
	t.Helper()
	cfg.JS = js
	if cfg.Interval == 0 {
		cfg.Interval = 20 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, err := pool.NewFiller(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// waitLevel waits until the stream of subject holds want batches: the
// filler's publishes land in a real (embedded) JetStream server.
func waitLevel(t *testing.T, f *pool.Filler, subject string, want int) {
	t.Helper()
	testenv.Eventually(t, fmt.Sprintf("level %d of %s", want, subject), 10*time.Second, func() bool {
		l, err := f.Level(context.Background(), subject)
		return err == nil && l == want
	})
}

// ids collects ids and fails on a duplicate.
type ids struct {
	mu   sync.Mutex
	seen map[int64]bool
}

func (s *ids) add(t *testing.T, batch []int64) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[int64]bool{}
	}
	for _, id := range batch {
		if s.seen[id] {
			t.Errorf("id %d used twice", id)
		}
		s.seen[id] = true
	}
}

func TestFillAndTake(t *testing.T) {
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	var c counter
	f := newFiller(t, js, pool.FillerConfig{Depth: 4, Batch: 10})
	subject := pool.SegmentSubject("orders")
	ctx := context.Background()
	if _, err := pool.Take(ctx, js, subject, 0); !errors.Is(err, pool.ErrEmpty) {
		t.Fatalf("take before the pool exists: %v, want ErrEmpty", err)
	}
	if err := f.Add(ctx, subject, c.fill); err != nil {
		t.Fatal(err)
	}
	waitLevel(t, f, subject, 4)
	var got ids
	for i := range 12 { // three times the depth: it refills
		batch, err := pool.Take(ctx, js, subject, 5*time.Second)
		if err != nil {
			t.Fatalf("take %d: %v", i, err)
		}
		if len(batch) != 10 || !slices.IsSorted(batch) {
			t.Fatalf("batch %v", batch)
		}
		got.add(t, batch)
	}
	waitLevel(t, f, subject, 4)
	if f.Levels()[subject] > 4 {
		t.Fatalf("levels %v", f.Levels())
	}
	for _, bad := range []string{"leaf.pool.segment.a.b", "leaf.pool.segment.", "orders", "leaf.pool.segment.*"} {
		if _, err := pool.Take(ctx, js, bad, 0); !errors.Is(err, pool.ErrInvalid) {
			t.Errorf("take %q: %v, want ErrInvalid", bad, err)
		}
		if err := f.Add(ctx, bad, c.fill); !errors.Is(err, pool.ErrInvalid) {
			t.Errorf("add %q: %v, want ErrInvalid", bad, err)
		}
	}
}

// Three nodes top up one pool: the per-subject bound holds, and the ids
// they lose to refused publishes are a gap, never a duplicate.
func TestBoundWithManyFillers(t *testing.T) {
	srv := natstest.RunServer(t)
	var c counter
	subject := pool.SnowflakeSubject
	var fillers []*pool.Filler
	for range 3 {
		js := newJS(t, srv.ClientURL())
		f := newFiller(t, js, pool.FillerConfig{Depth: 8, Batch: 5, Interval: 5 * time.Millisecond})
		if err := f.Add(context.Background(), subject, c.fill); err != nil {
			t.Fatal(err)
		}
		fillers = append(fillers, f)
	}
	js := newJS(t, srv.ClientURL())
	var got ids
	for i := range 40 {
		batch, err := pool.Take(context.Background(), js, subject, 5*time.Second)
		if err != nil {
			t.Fatalf("take %d: %v", i, err)
		}
		got.add(t, batch)
		if l, err := fillers[0].Level(context.Background(), subject); err != nil || l > 8 {
			t.Fatalf("level %d (%v), bound 8", l, err)
		}
	}
}

// The redelivery race of RECIPES.md: a client fetches a batch and stalls
// past AckWait while others keep taking. The stalled batch is never
// delivered again, and the stalled client does not use it unless its ack
// was confirmed — so no id is used twice.
func TestStalledClientNeverSharesABatch(t *testing.T) {
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	var c counter
	f := newFiller(t, js, pool.FillerConfig{Depth: 4, Batch: 10, AckWait: time.Second})
	subject := pool.SegmentSubject("race")
	if err := f.Add(context.Background(), subject, c.fill); err != nil {
		t.Fatal(err)
	}
	waitLevel(t, f, subject, 4)
	var got ids
	stalled := make(chan struct{})
	resume := make(chan struct{})
	type result struct {
		ids []int64
		err error
	}
	res := make(chan result, 1)
	go func() {
		b, err := pool.TakeWith(context.Background(), newJS(t, srv.ClientURL()), subject, 5*time.Second, func() {
			close(stalled)
			<-resume
		})
		res <- result{b, err}
	}()
	<-stalled
	// While it stalls past AckWait, the others drain and the filler refills.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		b, err := pool.Take(context.Background(), js, subject, time.Second)
		if err != nil && !errors.Is(err, pool.ErrEmpty) {
			t.Fatalf("take: %v", err)
		}
		got.add(t, b)
	}
	close(resume)
	r := <-res
	switch {
	case r.err == nil:
		got.add(t, r.ids) // its ack was confirmed: it is the only user
	case errors.Is(r.err, pool.ErrUsed):
		t.Logf("the stalled batch was thrown away: %v", r.err)
	default:
		t.Fatalf("stalled take: %v", r.err)
	}
	// The unacked batch was deleted (advisory), so the pool fills up again.
	waitLevel(t, f, subject, 4)
	if len(got.seen) == 0 {
		t.Fatal("no ids taken")
	}
}

func TestFillerConfig(t *testing.T) {
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	for _, cfg := range []pool.FillerConfig{
		{},
		{JS: js, Batch: -1},
		{JS: js, Depth: -2},
		{JS: js, AckWait: time.Millisecond},
	} {
		if _, err := pool.NewFiller(context.Background(), cfg); !errors.Is(err, pool.ErrInvalid) {
			t.Errorf("config %+v: %v, want ErrInvalid", cfg, err)
		}
	}
}

// A client that fetched a batch and died never acks it: the filler deletes
// it when the max-deliveries advisory names it, and the pool fills up again.
func TestDeadClientBatchIsDeleted(t *testing.T) {
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	var c counter
	f := newFiller(t, js, pool.FillerConfig{Depth: 2, Batch: 10, AckWait: time.Second})
	subject := pool.SegmentSubject("dead")
	if err := f.Add(context.Background(), subject, c.fill); err != nil {
		t.Fatal(err)
	}
	waitLevel(t, f, subject, 2)
	cons, err := js.Consumer(context.Background(), pool.Stream, "pool_segment_dead")
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(2, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range batch.Messages() {
		n++ // fetched, never acked: the client is gone
	}
	if n != 2 {
		t.Fatalf("fetched %d", n)
	}
	// Both batches are out; after AckWait they are deleted and replaced.
	var got ids
	for i := range 2 {
		b, err := pool.Take(context.Background(), js, subject, 10*time.Second)
		if err != nil {
			t.Fatalf("take %d after the dead client: %v", i, err)
		}
		got.add(t, b)
	}
}

// The stream and consumer calls of NewFiller and Add are asked again when
// JetStream does not answer (a meta leader election) or answers with a
// transient error, until their ctx ends; other errors return at once.
func TestRetryAPI(t *testing.T) {
	// The pauses between attempts pass on a fake clock, moved as soon as
	// the retry waits on it.
	clk := clock.NewFake(time.Now())
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-stop; cancel() }()
		for clk.BlockUntil(ctx, 1) == nil {
			clk.Advance(250 * time.Millisecond)
		}
	}()
	defer func() { close(stop); <-done }()
	calls := 0
	err := pool.RetryAPI(context.Background(), clk, 20*time.Millisecond, func(ctx context.Context) error {
		calls++
		switch calls {
		case 1: // unanswered
			<-ctx.Done()
			return ctx.Err()
		case 2:
			return nats.ErrNoResponders
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("err %v after %d calls, want success on the third", err, calls)
	}

	calls = 0
	bad := errors.New("stream name already in use with a different configuration")
	if err := pool.RetryAPI(context.Background(), clk, 20*time.Millisecond, func(context.Context) error { calls++; return bad }); err != bad || calls != 1 {
		t.Fatalf("a permanent error: %v after %d calls", err, calls)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	calls = 0
	err = pool.RetryAPI(ctx, clk, 20*time.Millisecond, func(ctx context.Context) error {
		calls++
		<-ctx.Done()
		return ctx.Err()
	})
	if !errors.Is(err, context.DeadlineExceeded) || calls < 2 {
		t.Fatalf("never answered: %v after %d calls", err, calls)
	}
}

// A server that crashes before it flushes its consumer state (nats-server
// writes it asynchronously, about every 100ms, even with sync_always)
// forgets that it delivered a batch: after the restart the same batch is
// delivered again, as a first delivery. Deleting and re-creating the
// consumer forgets the same way. Both clients must not use it: exactly one
// may, the other gets ErrUsed.
func TestLostDeliveryStateNeverSharesABatch(t *testing.T) {
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	var c counter
	f := newFiller(t, js, pool.FillerConfig{Depth: 1, Batch: 10, AckWait: 30 * time.Second})
	subject := pool.SegmentSubject("forgot")
	if err := f.Add(context.Background(), subject, c.fill); err != nil {
		t.Fatal(err)
	}
	waitLevel(t, f, subject, 1)
	if err := f.Close(); err != nil { // no refills: the pool holds this one batch
		t.Fatal(err)
	}
	ctx := context.Background()
	fetched := make(chan struct{})
	resume := make(chan struct{})
	type result struct {
		ids []int64
		err error
	}
	first := make(chan result, 1)
	go func() {
		b, err := pool.TakeWith(ctx, newJS(t, srv.ClientURL()), subject, 5*time.Second, func() {
			close(fetched)
			<-resume
		})
		first <- result{b, err}
	}()
	<-fetched
	// The server forgets the delivery.
	s, err := js.Stream(ctx, pool.Stream)
	if err != nil {
		t.Fatal(err)
	}
	cc := pool.ConsumerConfig("", subject, 30*time.Second)
	if err := s.DeleteConsumer(ctx, cc.Durable); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateConsumer(ctx, cc); err != nil {
		t.Fatal(err)
	}
	second, err2 := pool.Take(ctx, js, subject, 5*time.Second)
	close(resume)
	r := <-first
	t.Logf("first: %v (%v); second: %v (%v)", r.ids, r.err, second, err2)
	used := 0
	for _, e := range []error{r.err, err2} {
		switch {
		case e == nil:
			used++
		case errors.Is(e, pool.ErrUsed), errors.Is(e, pool.ErrEmpty):
		default:
			t.Fatalf("take: %v", e)
		}
	}
	if used != 1 {
		t.Fatalf("%d clients used the batch, want exactly 1", used)
	}
}

// A batch stored twice — a publish retried after its reply was lost — is
// one batch: the filler names each by its first id, and JetStream's
// duplicate window keeps one copy. (The source here repeats itself to make
// the second publish.)
func TestBatchPublishedTwiceIsStoredOnce(t *testing.T) {
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	clk := clock.NewFake(time.Now())
	f := newFiller(t, js, pool.FillerConfig{Depth: 4, Batch: 10, Clock: clk})
	subject := pool.SegmentSubject("twice")
	var calls atomic.Int64
	same := func(_ context.Context, dst []int64) error {
		for i := range dst {
			dst[i] = int64(i) + 1
		}
		calls.Add(1)
		return nil
	}
	if err := f.Add(context.Background(), subject, same); err != nil {
		t.Fatal(err)
	}
	// Many top-up rounds, one per tick: each asks the source for the 3
	// batches missing (every publish after the first is a duplicate). The
	// last round starts after the one before it has published all three.
	const rounds = 10
	for i := range rounds + 1 {
		clk.Advance(20 * time.Millisecond)
		testenv.Eventually(t, fmt.Sprintf("top-up round %d", i+1), 10*time.Second,
			func() bool { return calls.Load() > int64(3*i) })
	}
	if l, err := f.Level(context.Background(), subject); err != nil || l != 1 {
		t.Fatalf("level %d (%v): the same batch was stored more than once", l, err)
	}
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		subject string
		scope   wire.Scope
		tag     string
	}{
		{"leaf.pool.snowflake", "", ""},
		{"leaf.pool.segment.orders", "", "orders"},
		{"leaf.in.east.pool.snowflake", "east", ""},
		{"leaf.in.east.pool.segment.orders", "east", "orders"},
	} {
		s, tag, err := pool.Parse(c.subject)
		if err != nil || s != c.scope || tag != c.tag {
			t.Errorf("Parse(%q) = %q, %q, %v; want %q, %q", c.subject, s, tag, err, c.scope, c.tag)
		}
	}
	for _, bad := range []string{"leaf.in.east.pool.segment.", "leaf.in.east.segment.orders", "leaf.in..pool.snowflake",
		"leaf.in.e*.pool.snowflake", "leaf.in.east", "leaf.in.east.admin.floor.x", "leaf.in.east.pool.segment.a.b"} {
		if _, _, err := pool.Parse(bad); !errors.Is(err, pool.ErrInvalid) {
			t.Errorf("Parse(%q): %v, want ErrInvalid", bad, err)
		}
	}
	if got := pool.StreamIn("east"); got != "LEAF_POOL_east" {
		t.Errorf("StreamIn(east) = %s", got)
	}
	if got := pool.SegmentSubjectIn("", "orders"); got != pool.SegmentSubject("orders") {
		t.Errorf("SegmentSubjectIn of no region = %s", got)
	}
}

// Each region's filler keeps its own stream (LEAF_POOL_<region>) on its own
// subjects, beside the pool of no region on the same server: a take in a
// region gets that region's batches only, a filler takes no other scope's
// subject, and a batch fetched and never acked in a region's stream is
// deleted too (the advisory of its stream).
func TestRegionPools(t *testing.T) {
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	ctx := context.Background()
	scopes := []wire.Scope{"", "east", "west"}
	fillers := map[wire.Scope]*pool.Filler{}
	for i, s := range scopes {
		base := int64(i) * 1_000_000 // each scope's ids recognisable
		var c counter
		c.next.Store(base)
		f := newFiller(t, js, pool.FillerConfig{Scope: s, Depth: 2, Batch: 10, AckWait: time.Second})
		if err := f.Add(ctx, pool.SegmentSubjectIn(s, "orders"), c.fill); err != nil {
			t.Fatal(err)
		}
		for _, o := range scopes {
			if o != s {
				if err := f.Add(ctx, pool.SegmentSubjectIn(o, "orders"), c.fill); !errors.Is(err, pool.ErrInvalid) {
					t.Errorf("filler of %q adds %q's subject: %v, want ErrInvalid", s, o, err)
				}
			}
		}
		fillers[s] = f
	}
	for i, s := range scopes {
		subject := pool.SegmentSubjectIn(s, "orders")
		waitLevel(t, fillers[s], subject, 2)
		st, err := js.Stream(ctx, pool.StreamIn(s))
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs != 2 || !slices.Equal(info.Config.Subjects, []string{pool.PrefixIn(s) + ">"}) {
			t.Errorf("stream %s: %d batches on %v, want its scope's 2 on %s>", pool.StreamIn(s), info.State.Msgs, info.Config.Subjects, pool.PrefixIn(s))
		}
		for range 4 {
			b, err := pool.Take(ctx, js, subject, 5*time.Second)
			if err != nil {
				t.Fatalf("take %s: %v", subject, err)
			}
			if b[0]/1_000_000 != int64(i) {
				t.Fatalf("take %s: batch %v of another scope's filler", subject, b)
			}
		}
	}
	cons, err := js.Consumer(ctx, pool.StreamIn("east"), "pool_segment_orders")
	if err != nil {
		t.Fatal(err)
	}
	waitLevel(t, fillers["east"], pool.SegmentSubjectIn("east", "orders"), 2)
	batch, err := cons.Fetch(2, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for range batch.Messages() { // fetched, never acked
	}
	for i := range 2 {
		if _, err := pool.Take(ctx, js, pool.SegmentSubjectIn("east", "orders"), 10*time.Second); err != nil {
			t.Fatalf("take %d after the dead client in east: %v", i, err)
		}
	}
}
