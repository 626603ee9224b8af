package responder_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/client/ask"
	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/producer"
	"github.com/leafmq/leafmq/responder"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/wire"
)

// newRing is a real snowflake stack: a Source on worker 1 of Leaf's layout
// (a Static registry) and a producer.Snowflake ring over it.
func newRing(t testing.TB) *producer.Snowflake {
	t.Helper()
	layout := snowflake.LeafLayout()
	src, err := snowflake.StartSource(context.Background(), snowflake.SourceConfig{
		Open: func(context.Context) (snowflake.Registry, error) {
			return snowflake.NewStatic(layout, 1)
		},
		Layout: layout,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	ring, err := producer.NewSnowflake(producer.SnowflakeConfig{IDs: src, Size: 4096, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ring.Close() })
	return ring
}

// startSnowflake starts a Responder on nc from cfg; the counter stands in
// for the segment producer.
func startSnowflake(t testing.TB, nc *nats.Conn, cfg responder.Config) *responder.Responder {
	t.Helper()
	cfg.Conn = nc
	cfg.IDs = &counter{tags: map[string]bool{"demo": true}}
	url := nc.ConnectedUrl()
	cfg.SnowflakeConn = func() (*nats.Conn, error) {
		return nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(true))
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	r, err := responder.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop() })
	return r
}

// serving starts a server and a Responder in the snowflake queue group with
// snowflake ids from src, and returns the one connection both use (so a
// request sent after a SetSnowflake reaches the server after its
// subscription change).
func serving(t testing.TB, src responder.SnowflakeSource) (*nats.Conn, *responder.Responder) {
	t.Helper()
	nc := natstest.Connect(t, natstest.RunServer(t).ClientURL())
	r := startSnowflake(t, nc, responder.Config{Node: "sf", Snowflake: src})
	if err := r.SetSnowflake(true); err != nil {
		t.Fatal(err)
	}
	return nc, r
}

func TestSetSnowflake(t *testing.T) {
	nc := natstest.Connect(t, natstest.RunServer(t).ClientURL())
	noResponders := func(t *testing.T) {
		t.Helper()
		if _, err := nc.Request(wire.SnowflakeSubject, nil, 5*time.Second); !errors.Is(err, nats.ErrNoResponders) {
			t.Fatalf("request: %v, want no responders", err)
		}
	}
	answers := func(t *testing.T) {
		t.Helper()
		if ids, err := request(t, nc, wire.SnowflakeSubject, "3", false); err != nil || len(ids) != 3 {
			t.Fatalf("request: %v %v, want 3 ids", ids, err)
		}
	}

	t.Run("no source", func(t *testing.T) {
		r := startSnowflake(t, nc, responder.Config{})
		if err := r.SetSnowflake(true); err == nil {
			t.Fatal("SetSnowflake(true) without a source succeeded")
		}
		if err := r.SetSnowflake(false); err != nil {
			t.Fatalf("SetSnowflake(false): %v", err)
		}
		if r.SnowflakeService() != nil {
			t.Fatal("a snowflake service without a source")
		}
	})

	t.Run("join and leave", func(t *testing.T) {
		r := startSnowflake(t, nc, responder.Config{Snowflake: newRing(t)})
		if r.SnowflakeService() != nil {
			t.Fatal("in the queue group before SetSnowflake(true)")
		}
		noResponders(t)
		for range 2 { // idempotent
			if err := r.SetSnowflake(true); err != nil {
				t.Fatal(err)
			}
		}
		svc := r.SnowflakeService()
		if svc == nil || svc.Info().Metadata["engine"] != "snowflake" {
			t.Fatalf("snowflake service = %v", svc)
		}
		answers(t)
		for range 2 {
			if err := r.SetSnowflake(false); err != nil {
				t.Fatal(err)
			}
		}
		if r.SnowflakeService() != nil {
			t.Fatal("still in the queue group after SetSnowflake(false)")
		}
		noResponders(t)
		if err := r.SetSnowflake(true); err != nil { // and back
			t.Fatal(err)
		}
		answers(t)
		if err := r.Stop(); err != nil {
			t.Fatal(err)
		}
		if r.SnowflakeService() != nil {
			t.Fatal("still in the queue group after Stop")
		}
		if err := r.SetSnowflake(true); err == nil {
			t.Fatal("SetSnowflake(true) after Stop succeeded")
		}
		noResponders(t)
	})
}

func TestSnowflakeRequests(t *testing.T) {
	nc, _ := serving(t, newRing(t))
	layout := snowflake.LeafLayout()
	for _, subject := range []string{wire.SnowflakeSubject, wire.SnowflakePrefix + "orders", wire.SnowflakePrefix + "a-B_9"} {
		for _, bin := range []bool{false, true} {
			for _, n := range []int{1, 2, 64, 65, 5000, wire.DefaultMaxBatch} {
				body := fmt.Sprint(n)
				if n == 1 {
					body = ""
				}
				ids, err := request(t, nc, subject, body, bin)
				if err != nil {
					t.Fatalf("%s n=%d binary=%v: %v", subject, n, bin, err)
				}
				if len(ids) != n {
					t.Fatalf("%s n=%d binary=%v: got %d ids", subject, n, bin, len(ids))
				}
				seen := make(map[int64]bool, n)
				for _, id := range ids {
					if seen[id] || layout.Decompose(id).Worker != 1 {
						t.Fatalf("%s n=%d: id %d repeated or not of worker 1", subject, n, id)
					}
					seen[id] = true
				}
			}
		}
	}
}

func TestSnowflakeBadInput(t *testing.T) {
	nc, _ := serving(t, newRing(t))
	tests := []struct {
		name, subject, body string
		msg                 string
	}{
		{"zero", wire.SnowflakeSubject, "0", "out of range"},
		{"too many", wire.SnowflakeSubject, "10001", "out of range"},
		{"negative", wire.SnowflakeSubject, "-5", "not a number"},
		{"garbage", wire.SnowflakeSubject, "\x00\xffzz", "not a number"},
		{"keyed zero", wire.SnowflakePrefix + "orders", "0", "out of range"},
		{"bad key char", wire.SnowflakePrefix + "a$b", "", "key"},
		{"long key", wire.SnowflakePrefix + strings.Repeat("x", 129), "", "key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := request(t, nc, tc.subject, tc.body, false)
			if !errors.Is(err, wire.ErrBadRequest) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want bad request containing %q", err, tc.msg)
			}
			if ids, err := request(t, nc, wire.SnowflakeSubject, "", false); err != nil || len(ids) != 1 {
				t.Fatalf("good request after bad one: %v %v", ids, err)
			}
		})
	}
}

// failingSource has no ids in memory and its Next fails with err.
type failingSource struct{ err error }

func (f failingSource) Next(context.Context, []int64) error { return f.err }
func (failingSource) Try([]int64) int                       { return 0 }

func TestSnowflakeErrors(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want error
		code string
	}{
		{"not serving", fmt.Errorf("%w: waiting: clock is 2s behind", snowflake.ErrNotServing), wire.ErrUnavailable, wire.CodeUnavailable},
		{"clock backwards", fmt.Errorf("%w (%w)", snowflake.ErrNotServing, snowflake.ErrClockBackwards), wire.ErrUnavailable, wire.CodeUnavailable},
		{"lease failed", fmt.Errorf("%w: %w: registry unreachable", snowflake.ErrNotServing, snowflake.ErrLeaseFailed), wire.ErrUnavailable, wire.CodeUnavailable},
		{"expired", snowflake.ErrExpired, wire.ErrUnavailable, wire.CodeUnavailable},
		{"other", errors.New("disk on fire"), wire.ErrInternal, wire.CodeInternal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nc, r := serving(t, failingSource{tc.err})
			_, err := request(t, nc, wire.SnowflakeSubject, "3", false)
			var werr *wire.Error
			if !errors.As(err, &werr) || !errors.Is(err, tc.want) || werr.Code != tc.code || werr.Message != tc.err.Error() {
				t.Fatalf("err = %v, want code %s with message %q", err, tc.code, tc.err)
			}
			if r.AsyncErrors() != 1 {
				t.Fatalf("AsyncErrors = %d, want 1", r.AsyncErrors())
			}
			// Counted where operators look (nats micro stats): a worker's
			// error reply too, not only the handler's own.
			// (micro updates them once the handler returned: soon after
			// the reply.)
			testenv.Eventually(t, "the worker's error in micro's stats", 5*time.Second, func() bool {
				for _, e := range r.Service().Stats().Endpoints {
					if e.Name == responder.WorkerErrorsEndpoint {
						return e.NumErrors == 1
					}
				}
				return false
			})
		})
	}
}

func decode(t testing.TB, nc *nats.Conn, body string) (wire.Decoded, error) {
	t.Helper()
	reply, err := nc.Request(wire.SnowflakePrefix+"decode", []byte(body), 5*time.Second)
	if err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
	var d wire.Decoded
	if err := wire.ReplyError(reply); err != nil {
		return d, err
	}
	if err := json.Unmarshal(reply.Data, &d); err != nil {
		t.Fatalf("decode %q: reply %q: %v", body, reply.Data, err)
	}
	return d, nil
}

// want is what leaf.snowflake.decode should say of id, from Decompose.
func want(layout snowflake.Layout, id int64) wire.Decoded {
	d := layout.Decompose(id)
	return wire.Decoded{
		ID:        id,
		Timestamp: d.Timestamp,
		Time:      d.Time.UTC().Format(time.RFC3339Nano),
		Worker:    d.Worker,
		Sequence:  d.Sequence,
		Layout:    layout.String(),
	}
}

func TestDecode(t *testing.T) {
	at := time.Date(2026, 3, 14, 15, 9, 26, 535_000_000, time.UTC)
	uidgen := snowflake.UidGenLayout(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	layouts := []struct {
		name   string
		layout snowflake.Layout
	}{{"default", snowflake.Layout{}}, {"leaf", snowflake.LeafLayout()}, {"uidgen", uidgen}}
	for _, tc := range layouts {
		layout := tc.layout
		t.Run(tc.name, func(t *testing.T) {
			nc := natstest.Connect(t, natstest.RunServer(t).ClientURL())
			// Out of the snowflake queue group: decode answers anyway.
			startSnowflake(t, nc, responder.Config{Snowflake: failingSource{}, Layout: layout})
			for _, worker := range []int64{0, 1, layout.MaxWorker()} {
				id, err := layout.Compose(at, worker, layout.MaxSequence())
				if err != nil {
					t.Fatal(err)
				}
				for _, body := range []string{strconv.FormatInt(id, 10), " " + strconv.FormatInt(id, 10) + "\n"} {
					got, err := decode(t, nc, body)
					if err != nil {
						t.Fatalf("decode %q: %v", body, err)
					}
					if w := want(layout, id); got != w {
						t.Fatalf("decode %q = %+v, want %+v", body, got, w)
					}
					if got.Worker != worker || got.Sequence != layout.MaxSequence() {
						t.Fatalf("decode %q = %+v: not worker %d", body, got, worker)
					}
				}
			}
		})
	}
}

func TestDecodeBadBody(t *testing.T) {
	nc := natstest.Connect(t, natstest.RunServer(t).ClientURL())
	startSnowflake(t, nc, responder.Config{Snowflake: failingSource{}})
	for _, body := range []string{"", "abc", "-1", "1.5", "0x10", "9223372036854775808"} {
		if _, err := decode(t, nc, body); !errors.Is(err, wire.ErrBadRequest) || !strings.Contains(err.Error(), "must be a snowflake id") {
			t.Fatalf("decode %q: %v, want bad request", body, err)
		}
	}
}

// While the node serves snowflake ids, leaf.snowflake.* matches
// leaf.snowflake.decode too; every decode request must still get exactly
// one answer (from the decode endpoint or the wildcard one).
func TestDecodeWhileServing(t *testing.T) {
	nc, _ := serving(t, newRing(t))
	layout := snowflake.LeafLayout()
	id, err := layout.Compose(time.Now(), 1, 7)
	if err != nil {
		t.Fatal(err)
	}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := nc.PublishRequest(wire.SnowflakePrefix+"decode", inbox, []byte(strconv.FormatInt(id, 10))); err != nil {
			t.Fatal(err)
		}
		// The wildcard endpoint handles its messages in order and answers
		// on nc, so a reply it gave to the decode request would reach us
		// before its reply to this one.
		if err := nc.PublishRequest(wire.SnowflakePrefix+"sync", inbox, nil); err != nil {
			t.Fatal(err)
		}
		var decoded, ids int
		for decoded == 0 || ids == 0 {
			msg, err := sub.NextMsg(5 * time.Second)
			if err != nil {
				t.Fatalf("round %d: %d decode and %d id replies, then: %v", i, decoded, ids, err)
			}
			if err := wire.ReplyError(msg); err != nil {
				t.Fatalf("round %d: error reply %v", i, err)
			}
			var d wire.Decoded
			if json.Unmarshal(msg.Data, &d) == nil {
				if d != want(layout, id) {
					t.Fatalf("round %d: decoded %+v", i, d)
				}
				decoded++
			} else {
				ids++
			}
		}
		if decoded != 1 || ids != 1 {
			t.Fatalf("round %d: %d decode and %d id replies, want one each", i, decoded, ids)
		}
	}
	if n, _, _ := sub.Pending(); n != 0 {
		t.Fatalf("%d replies too many", n)
	}
}

// Every node answers leaf.admin.time with its own clock (no queue group);
// AskPeerClocks gathers them and skips answers that are not a NodeTime.
func TestAskPeerClocks(t *testing.T) {
	srv := natstest.RunServer(t)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(off time.Duration) func() time.Time { return func() time.Time { return t0.Add(off) } }
	for _, n := range []struct {
		name string
		off  time.Duration
	}{{"ahead", 90 * time.Second}, {"behind", -30 * time.Second}} {
		// Only the readings stand still: Stop's wait keeps the real timers.
		startSnowflake(t, natstest.Connect(t, srv.ClientURL()), responder.Config{Node: n.name, Clock: clock.WithNow(nil, at(n.off))})
	}
	nc := natstest.Connect(t, srv.ClientURL())
	// A stranger that answers nonsense.
	if _, err := nc.Subscribe(wire.TimeSubject, func(m *nats.Msg) { _ = m.Respond([]byte("not json")) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// Our clock stands still, so the round trip adds nothing: the offsets
	// are exactly +90s and -30s.
	pc, err := ask.PeerClocks(context.Background(), nc, "", 2*time.Second, at(0))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(pc.Peers)
	if !slices.Equal(pc.Peers, []string{"ahead", "behind"}) || pc.Offset != 30*time.Second || pc.Max != 90*time.Second {
		t.Fatalf("peer clocks = %+v, want peers ahead and behind, offset 30s, max 90s", pc)
	}
}

func TestAskPeerClocksAlone(t *testing.T) {
	nc := natstest.Connect(t, natstest.RunServer(t).ClientURL())
	pc, err := ask.PeerClocks(context.Background(), nc, "", 100*time.Millisecond, time.Now)
	if err != nil || len(pc.Peers) != 0 || pc.Offset != 0 || pc.Max != 0 {
		t.Fatalf("alone: %+v %v, want no peers and no error", pc, err)
	}
}

// A SetSnowflake(true) racing Stop must not leave the node in the queue
// group once Stop has returned.
func TestSetSnowflakeRacingStop(t *testing.T) {
	nc := natstest.Connect(t, natstest.RunServer(t).ClientURL())
	r := startSnowflake(t, nc, responder.Config{Snowflake: newRing(t)})
	if err := r.SetSnowflake(true); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- r.Stop() }()
	for r.SetSnowflake(true) == nil {
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if svc := r.SnowflakeService(); svc != nil {
		_ = svc.Stop()
		t.Fatal("the snowflake service outlived Stop")
	}
}

// Gather: no reply is not an error, a closed connection is.
func TestGatherErrors(t *testing.T) {
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s.ClientURL())
	if err := ask.Gather(context.Background(), nc, "nobody.here", 50*time.Millisecond, func(*nats.Msg) {}); err != nil {
		t.Fatalf("no responders: %v", err)
	}
	other := natstest.Connect(t, s.ClientURL())
	if _, err := other.Subscribe("one.here", func(m *nats.Msg) { _ = m.Respond([]byte("hi")) }); err != nil {
		t.Fatal(err)
	}
	if err := other.Flush(); err != nil {
		t.Fatal(err)
	}
	// The connection closes under Gather, after the first reply.
	err := ask.Gather(context.Background(), nc, "one.here", 5*time.Second, func(*nats.Msg) { nc.Close() })
	if err == nil {
		t.Fatal("Gather whose connection closed: no error")
	}
}
