package responder_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/responder"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/memstore"
	"github.com/leafmq/leafmq/wire"
)

// counter hands out ids 1, 2, 3… for known tags; "down" answers not ready;
// "slow" waits until release is closed.
type counter struct {
	next    atomic.Int64
	tags    map[string]bool
	release chan struct{}
}

// TrySegment makes the counter a TrySource: "demo" is always in memory.
func (c *counter) TrySegment(tag wire.Tag, dst []int64) int {
	if tag.String() != "demo" || len(dst) > 10 {
		return 0
	}
	if err := c.Segment(context.Background(), tag, dst); err != nil {
		return 0
	}
	return len(dst)
}

func (c *counter) Segment(ctx context.Context, t wire.Tag, dst []int64) error {
	tag := t.String()
	if tag == "slow" {
		select {
		case <-c.release:
		case <-ctx.Done():
			return ctx.Err()
		}
		tag = "demo"
	}
	if tag == "down" {
		return fmt.Errorf("%w: store is down", segment.ErrNotReady)
	}
	if !c.tags[tag] {
		return fmt.Errorf("%w: %q", segment.ErrUnknownTag, tag)
	}
	end := c.next.Add(int64(len(dst)))
	for i := range dst {
		dst[i] = end - int64(len(dst)) + int64(i) + 1
	}
	return nil
}

func setup(t *testing.T) (*nats.Conn, *memstore.Store) {
	nc, store, _ := setupCounter(t)
	return nc, store
}

func setupCounter(t *testing.T) (*nats.Conn, *memstore.Store, *counter) {
	t.Helper()
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s.ClientURL())
	store := memstore.New()
	c := &counter{tags: map[string]bool{"demo": true, "a-B_9": true}, release: make(chan struct{})}
	r, err := responder.Start(responder.Config{
		Conn:  nc,
		IDs:   c,
		Store: store,
		Node:  "test",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop() })
	t.Cleanup(func() {
		select {
		case <-c.release:
		default:
			close(c.release)
		}
	})
	return nc, store, c
}

// A request that waits (a tag whose store is slow) holds up nothing else:
// small and large requests of other tags are answered meanwhile.
func TestSlowTagBlocksNothing(t *testing.T) {
	nc, _, c := setupCounter(t)
	slow := make(chan error, 4)
	for i := 0; i < 4; i++ {
		go func() {
			reply, err := nc.Request("leaf.segment.slow", []byte("5"), 10*time.Second)
			if err == nil {
				err = wire.ReplyError(reply)
			}
			slow <- err
		}()
	}
	for _, body := range []string{"", "3", "500"} {
		if ids, err := request(t, nc, "leaf.segment.demo", body, false); err != nil || len(ids) == 0 {
			t.Fatalf("demo %q while slow requests wait: %v %v", body, ids, err)
		}
	}
	select {
	case err := <-slow:
		t.Fatalf("slow request finished before release: %v", err)
	default:
	}
	close(c.release)
	for i := 0; i < 4; i++ {
		if err := <-slow; err != nil {
			t.Fatalf("slow request: %v", err)
		}
	}
}

func request(t *testing.T, nc *nats.Conn, subject, body string, binary bool) ([]int64, error) {
	t.Helper()
	msg := nats.NewMsg(subject)
	msg.Data = []byte(body)
	if binary {
		msg.Header.Set(wire.EncodingHeader, wire.EncodingBinary)
	}
	reply, err := nc.RequestMsg(msg, 5*time.Second)
	if err != nil {
		t.Fatalf("request %s %q: %v", subject, body, err)
	}
	if err := wire.ReplyError(reply); err != nil {
		if len(reply.Data) != 0 {
			t.Errorf("error reply carries data %q", reply.Data)
		}
		return nil, err
	}
	return wire.DecodeIDs(nil, reply.Data, binary)
}

func TestSegmentRequests(t *testing.T) {
	nc, _ := setup(t)
	for _, bin := range []bool{false, true} {
		for _, n := range []int{1, 2, 64, 65, 5000, wire.DefaultMaxBatch} {
			body := fmt.Sprint(n)
			if n == 1 {
				body = ""
			}
			ids, err := request(t, nc, "leaf.segment.demo", body, bin)
			if err != nil {
				t.Fatalf("n=%d binary=%v: %v", n, bin, err)
			}
			if len(ids) != n {
				t.Fatalf("n=%d binary=%v: got %d ids", n, bin, len(ids))
			}
			for i := 1; i < len(ids); i++ {
				if ids[i] != ids[i-1]+1 {
					t.Fatalf("ids not consecutive from the counter: %d then %d", ids[i-1], ids[i])
				}
			}
		}
	}
}

func TestBadInput(t *testing.T) {
	nc, _ := setup(t)
	tests := []struct {
		name, subject, body string
		want                error
		msg                 string
	}{
		{"zero", "leaf.segment.demo", "0", wire.ErrBadRequest, "out of range"},
		{"too many", "leaf.segment.demo", "10001", wire.ErrBadRequest, "out of range"},
		{"negative", "leaf.segment.demo", "-5", wire.ErrBadRequest, "not a number"},
		{"garbage", "leaf.segment.demo", "\x00\xffzz", wire.ErrBadRequest, "not a number"},
		{"huge", "leaf.segment.demo", strings.Repeat("9", 5000), wire.ErrBadRequest, "not a number"},
		{"bad tag char", "leaf.segment.a$b", "", wire.ErrBadRequest, "must be 1-128"},
		{"long tag", "leaf.segment." + strings.Repeat("x", 129), "", wire.ErrBadRequest, "must be 1-128"},
		{"unknown tag", "leaf.segment.nope", "", wire.ErrUnknownTag, "unknown tag"},
		{"not ready", "leaf.segment.down", "3", wire.ErrUnavailable, "not ready"},
		{"admin bad json", "leaf.admin.tag.create", "{", wire.ErrBadRequest, "must be JSON"},
		{"admin bad tag", "leaf.admin.tag.create", `{"tag":"a.b"}`, wire.ErrBadRequest, "must be 1-128"},
		{"admin bad step", "leaf.admin.tag.step", `{"tag":"nope","step":0}`, wire.ErrBadRequest, "step 0"},
		{"admin unknown", "leaf.admin.tag.step", `{"tag":"nope","step":5}`, wire.ErrUnknownTag, "unknown tag"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := request(t, nc, tc.subject, tc.body, false)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want %v containing %q", err, tc.want, tc.msg)
			}
			// A good request right after still works.
			if ids, err := request(t, nc, "leaf.segment.demo", "", false); err != nil || len(ids) != 1 {
				t.Fatalf("good request after bad one: %v %v", ids, err)
			}
		})
	}
	// Subjects with more tokens are not ours: nobody answers.
	if _, err := nc.Request("leaf.segment.a.b", nil, 200*time.Millisecond); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("leaf.segment.a.b: %v, want no responders", err)
	}
}

func TestAdmin(t *testing.T) {
	nc, store := setup(t)
	call := func(subject string, v any, out any) error {
		t.Helper()
		body, _ := json.Marshal(v)
		reply, err := nc.Request(subject, body, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := wire.ReplyError(reply); err != nil {
			return err
		}
		return json.Unmarshal(reply.Data, out)
	}
	var row wire.TagRow
	if err := call("leaf.admin.tag.create", wire.AdminRequest{Tag: "orders", Step: 500, Description: "order ids"}, &row); err != nil {
		t.Fatal(err)
	}
	if row.Tag != "orders" || row.Step != 500 || row.MaxID != 1 || row.Description != "order ids" {
		t.Fatalf("created row = %+v", row)
	}
	if err := call("leaf.admin.tag.create", wire.AdminRequest{Tag: "orders"}, &row); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("second create: %v, want bad request", err)
	}
	if err := call("leaf.admin.tag.step", wire.AdminRequest{Tag: "orders", Step: 9000}, &row); err != nil || row.Step != 9000 {
		t.Fatalf("set step: %+v %v", row, err)
	}
	if err := call("leaf.admin.tag.max", wire.AdminRequest{Tag: "orders", MaxID: 100}, &row); err != nil || row.MaxID != 100 {
		t.Fatalf("set max: %+v %v", row, err)
	}
	if err := call("leaf.admin.tag.max", wire.AdminRequest{Tag: "orders", MaxID: 50}, &row); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("lower max: %v, want bad request", err)
	}
	// A deleted tag cannot be created again; restart names its floor.
	if err := store.Delete(context.Background(), wire.MustTag("orders")); err != nil {
		t.Fatal(err)
	}
	if err := call("leaf.admin.tag.create", wire.AdminRequest{Tag: "orders"}, &row); !errors.Is(err, wire.ErrUnknownTag) ||
		!strings.Contains(err.Error(), "restart") {
		t.Fatalf("create of a deleted tag: %v, want not found naming restart", err)
	}
	if err := call("leaf.admin.tag.restart", wire.AdminRequest{Tag: "orders", Floor: 99}, &row); !errors.Is(err, wire.ErrBadRequest) ||
		!strings.Contains(err.Error(), "below") {
		t.Fatalf("restart below the deleted max_id: %v, want bad request", err)
	}
	if err := call("leaf.admin.tag.restart", wire.AdminRequest{Tag: "orders"}, &row); !errors.Is(err, wire.ErrBadRequest) {
		t.Fatalf("restart without a floor: %v, want bad request", err)
	}
	if err := call("leaf.admin.tag.restart", wire.AdminRequest{Tag: "orders", Floor: 100}, &row); err != nil ||
		row.MaxID != 100 || row.Step != 9000 {
		t.Fatalf("restart: %+v %v; want max_id 100, step 9000", row, err)
	}
	var rows []wire.TagRow
	if err := call("leaf.admin.tags", nil, &rows); err != nil || len(rows) != 1 || rows[0].Tag != "orders" {
		t.Fatalf("tags: %+v %v", rows, err)
	}
	store.SetDown(true)
	if err := call("leaf.admin.tags", nil, &rows); !errors.Is(err, wire.ErrUnavailable) {
		t.Fatalf("tags with store down: %v, want unavailable", err)
	}
}

// Large requests go to workers: many at once must all complete and be unique.
func TestConcurrentBatches(t *testing.T) {
	nc, _ := setup(t)
	var (
		mu   sync.Mutex
		seen = map[int64]bool{}
		wg   sync.WaitGroup
		errs = make(chan error, 16)
	)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				reply, err := nc.Request("leaf.segment.demo", []byte("1000"), 5*time.Second)
				if err != nil {
					errs <- err
					return
				}
				ids, err := wire.DecodeIDs(nil, reply.Data, false)
				if err != nil || len(ids) != 1000 {
					errs <- fmt.Errorf("bad reply: %d ids, %v", len(ids), err)
					return
				}
				mu.Lock()
				for _, id := range ids {
					if seen[id] {
						mu.Unlock()
						errs <- fmt.Errorf("duplicate %d", id)
						return
					}
					seen[id] = true
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != 16*20*1000 {
		t.Fatalf("got %d ids", len(seen))
	}
}

// Stop waits for handlers that micro may still run by polling on
// Config.Clock: it returns after three quiet polls, each 5 ms of the clock
// apart, and not before.
func TestStopPollsOnTheClock(t *testing.T) {
	nc := natstest.Connect(t, natstest.RunServer(t).ClientURL())
	f := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	r, err := responder.Start(responder.Config{Conn: nc, IDs: &counter{tags: map[string]bool{"demo": true}}, Node: "test",
		Clock: f, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- r.Stop() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 3 {
		if err := f.BlockUntil(ctx, 1); err != nil {
			t.Fatalf("poll %d: Stop is not waiting on the clock: %v", i+1, err)
		}
		select {
		case err := <-stopped:
			t.Fatalf("Stop returned (%v) after %d quiet polls, want 3", err, i)
		default:
		}
		f.Advance(5 * time.Millisecond)
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("Stop did not return after three quiet polls")
	}
}

// Observation.Took is measured on Config.Clock.
func TestObserveTookOnTheClock(t *testing.T) {
	nc := natstest.Connect(t, natstest.RunServer(t).ClientURL())
	var reads atomic.Int64
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	// Each reading is a second after the last one.
	tick := clock.WithNow(nil, func() time.Time { return t0.Add(time.Duration(reads.Add(1)) * time.Second) })
	obs := make(chan responder.Observation, 1)
	r, err := responder.Start(responder.Config{Conn: nc, IDs: &counter{tags: map[string]bool{"demo": true}}, Node: "test",
		Clock: tick, Logger: slog.New(slog.DiscardHandler), Observe: func(o responder.Observation) { obs <- o }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop() })
	if ids, err := request(t, nc, "leaf.segment.demo", "3", false); err != nil || len(ids) != 3 {
		t.Fatalf("demo: %v %v", ids, err)
	}
	if o := <-obs; o.Took != time.Second || o.Code != "200" || o.IDs != 3 || o.Tag != "demo" {
		t.Fatalf("observed %+v, want 3 ids of demo taking 1s (two readings of the clock)", o)
	}
}

// More requests for slow tags than the workers and their queue hold do not
// stall the subject: a ring hit of another tag is answered at once, and
// the requests past the queue get a 503 at once, not silence.
func TestFullQueueAnswersBusy(t *testing.T) {
	nc, _, c := setupCounter(t)
	const slow = 32 + 4*32 + 40 // workers, their queue, and more
	inbox := nats.NewInbox()
	replies, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	for range slow {
		if err := nc.PublishRequest("leaf.segment.slow", inbox, []byte("5")); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	busy := 0
	for busy < 40 {
		m, err := replies.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("%d busy answers, then: %v", busy, err)
		}
		if err := wire.ReplyError(m); !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "busy") {
			t.Fatalf("answer while the queue is full: %v, want a 503 busy", err)
		}
		busy++
	}
	msg := nats.NewMsg("leaf.segment.demo")
	if _, err := nc.RequestMsg(msg, time.Second); err != nil {
		t.Fatalf("a ring hit while every worker waits: %v", err)
	}
	close(c.release)
	for range slow - busy {
		m, err := replies.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := wire.ReplyError(m); err != nil {
			t.Fatalf("a queued slow request: %v", err)
		}
	}
}
