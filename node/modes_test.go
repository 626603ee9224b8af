package node_test

import (
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/node"
	"github.com/leafmq/leafmq/opaque"
	"github.com/leafmq/leafmq/wire"
)

const (
	testOpaqueKey  = "00112233445566778899aabbccddeeff"
	otherOpaqueKey = "ffeeddccbbaa99887766554433221100"
)

// TestOpaqueTagEndToEnd: an opaque tag created through the admin subject
// records the node's key id; two nodes with the key serve it from their
// rings as permuted, unique ids that the admin decode inverts; a node with
// another key or none refuses the tag (never serving ids of another
// permutation), and the mode cannot be changed by creating the tag again.
func TestOpaqueTagEndToEnd(t *testing.T) {
	t.Parallel()
	first := startNode(t, config.Config{Name: "first", NATS: config.NATSConfig{Listen: "127.0.0.1:-1"}, Store: config.StoreConfig{OpaqueKey: testOpaqueKey}})
	second := startNode(t, config.Config{Name: "second", NATS: config.NATSConfig{URL: first.ClientURL()}, Store: config.StoreConfig{OpaqueKey: testOpaqueKey}})
	nc := natstest.Connect(t, first.ClientURL())
	admin(t, nc, wire.TagCreateSubject, wire.AdminRequest{Tag: "orders", Step: 100, Mode: "opaque", Width: 40})

	key, _ := opaque.ParseKey(testOpaqueKey)
	perm, _ := key.Perm("orders", 40)
	seen := map[int64]bool{}
	rises := 0
	var prev int64
	for i := 0; len(seen) < 2000; i++ {
		ids, err := takeReady(nc, "orders", 1+i%5, i%2 == 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if id < 1 || id >= 1<<40 || seen[id] {
				t.Fatalf("id %d outside 40 bits or repeated", id)
			}
			seen[id] = true
			if seq, err := perm.Sequence(id); err != nil || seq < 1 || seq > 100_000 {
				t.Fatalf("id %d is not a permuted sequence number of the tag: %d, %v", id, seq, err)
			}
			if id > prev {
				rises++
			}
			prev = id
		}
	}
	if rises > len(seen)*6/10 {
		t.Fatalf("%d of %d ids rose: the order shows", rises, len(seen))
	}

	// The admin decode inverts an id, with the tag's key.
	var id int64
	for id = range seen {
		break
	}
	body, _ := json.Marshal(wire.AdminRequest{Tag: "orders", ID: id})
	reply, err := nc.Request(wire.TagDecodeSubject, body, 10*time.Second)
	if err != nil || wire.ReplyError(reply) != nil {
		t.Fatalf("decode: %v %v", err, wire.ReplyError(reply))
	}
	var d wire.TagDecoded
	if err := json.Unmarshal(reply.Data, &d); err != nil {
		t.Fatal(err)
	}
	if want, _ := perm.Sequence(id); d.Sequence != want {
		t.Fatalf("decode(%d) = %+v, want sequence %d", id, d, want)
	}

	// A tag's mode is fixed: creating it again as anything else fails.
	for _, mode := range []string{"", "mono"} {
		body, _ := json.Marshal(wire.AdminRequest{Tag: "orders", Mode: mode})
		reply, err := nc.Request(wire.TagCreateSubject, body, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := wire.ReplyError(reply); !errors.Is(err, wire.ErrBadRequest) || !strings.Contains(err.Error(), "opaque") {
			t.Fatalf("create orders as %q again = %v, want a 400 naming its mode", mode, err)
		}
	}

	_ = second
}

// TestOpaqueTagRefusedWithoutItsKey: the same store and tag, started again
// with another key or none: the node serves none of the tag's ids (they
// would be another permutation's, which can repeat ids already served),
// says why, and takes no new range for each request.
func TestOpaqueTagRefusedWithoutItsKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	n := startNode(t, config.Config{Name: "keyed", NATS: config.NATSConfig{Listen: "127.0.0.1:-1"}, DataDir: dir, Store: config.StoreConfig{OpaqueKey: testOpaqueKey}})
	nc := natstest.Connect(t, n.ClientURL())
	admin(t, nc, wire.TagCreateSubject, wire.AdminRequest{Tag: "orders", Step: 100, Mode: "opaque"})
	if _, err := takeReady(nc, "orders", 3, false); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	if err := n.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	for name, key := range map[string]string{"other key": otherOpaqueKey, "no key": ""} {
		t.Run(name, func(t *testing.T) {
			n := startNode(t, config.Config{Name: "unkeyed", NATS: config.NATSConfig{Listen: "127.0.0.1:-1"}, DataDir: dir, Store: config.StoreConfig{OpaqueKey: key}})
			nc := natstest.Connect(t, n.ClientURL())
			for range 3 { // a 503: a client asks again, and another node may hold the key
				ids, err := take(nc, "orders", 1, false)
				if !errors.Is(err, wire.ErrUnavailable) || !strings.Contains(err.Error(), "key") {
					t.Fatalf("ids %v, %v; want a 503 about the key", ids, err)
				}
			}
			body, _ := json.Marshal(wire.AdminRequest{Tag: "fresh", Mode: "opaque"})
			reply, err := nc.Request(wire.TagCreateSubject, body, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			werr := wire.ReplyError(reply)
			switch {
			case key == "" && !errors.Is(werr, wire.ErrBadRequest):
				t.Fatalf("create opaque without a key = %v, want 400", werr)
			case key != "" && werr != nil:
				t.Fatalf("create opaque with another key = %v", werr)
			}
			nc.Close()
			_ = n.Close(t.Context())
		})
	}
}

// TestModeRemovedByHandRefused: an operator removes an opaque tag's mode
// from the store (the mode key purged, the row put again without its copy
// of the mode). A node that never served the tag learned its mode from its
// peers and refuses it; the node that served it refuses it after a
// restart, from its data directory. Neither serves plain ids, which could
// repeat permuted ids served before.
func TestModeRemovedByHandRefused(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	url := srv.ClientURL()
	dirA := t.TempDir()
	a := startNode(t, config.Config{Name: "served", NATS: config.NATSConfig{URL: url}, DataDir: dirA, Store: config.StoreConfig{OpaqueKey: testOpaqueKey}})
	nc := natstest.Connect(t, url)
	admin(t, nc, wire.TagCreateSubject, wire.AdminRequest{Tag: "orders", Step: 100, Mode: "opaque"})
	for range 5 {
		if _, err := takeReady(nc, "orders", 50, true); err != nil {
			t.Fatal(err)
		}
	}
	b := startNode(t, config.Config{Name: "never-served", NATS: config.NATSConfig{URL: url}, Store: config.StoreConfig{OpaqueKey: testOpaqueKey}})

	// The operator's hand: nats kv purge leaf_alloc mode.orders, and the
	// row put again without "mode".
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), "leaf_alloc")
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(t.Context(), "mode.orders"); err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(t.Context(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	var row map[string]any
	if err := json.Unmarshal(e.Value(), &row); err != nil {
		t.Fatal(err)
	}
	if _, ok := row["mode"]; !ok {
		t.Fatalf("an opaque row carries no copy of its mode: %s", e.Value())
	}
	delete(row, "mode")
	plain, _ := json.Marshal(row)
	if _, err := kv.Put(t.Context(), "orders", plain); err != nil {
		t.Fatal(err)
	}

	refused := func(who string) {
		t.Helper()
		for range 3 {
			ids, err := takeReady(nc, "orders", 10, true)
			if !errors.Is(err, wire.ErrBadRequest) || !strings.Contains(err.Error(), "mode") {
				t.Fatalf("%s: ids %v, %v; want a 400 about the tag's mode", who, ids, err)
			}
		}
	}
	if err := a.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	refused("a node that learned the mode from its peer")
	if err := b.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	startNode(t, config.Config{Name: "served-again", NATS: config.NATSConfig{URL: url}, DataDir: dirA, Store: config.StoreConfig{OpaqueKey: testOpaqueKey}})
	refused("the node that served it, restarted on its data directory")
}

// TestOpaqueDomainEnd: a node serves an opaque tag up to the last id of
// its domain, over NATS and HTTP, each id once, then answers both with a
// 400 that says the domain is used up (a client does not retry a 400).
func TestOpaqueDomainEnd(t *testing.T) {
	t.Parallel()
	n := startNode(t, config.Config{Name: "domain", NATS: config.NATSConfig{Listen: "127.0.0.1:-1"}, Store: config.StoreConfig{OpaqueKey: testOpaqueKey}})
	nc := natstest.Connect(t, n.ClientURL())
	const left = 250 // the last range reaches past the domain's end
	admin(t, nc, wire.TagCreateSubject, wire.AdminRequest{Tag: "tiny", Step: 100, MaxID: 1<<20 - left, Mode: "opaque", Width: 20})
	key, _ := opaque.ParseKey(testOpaqueKey)
	perm, _ := key.Perm("tiny", 20)
	seen := map[int64]bool{}
	add := func(id int64) {
		t.Helper()
		seq, err := perm.Sequence(id)
		if err != nil || seq < 1<<20-left || seen[id] {
			t.Fatalf("id %d (sequence %d, %v) repeated or not among the last %d of the domain", id, seq, err, left)
		}
		seen[id] = true
	}
	for len(seen) < left/2 {
		ids, err := takeReady(nc, "tiny", 1, len(seen)%2 == 0)
		if err != nil {
			t.Fatalf("after %d ids: %v", len(seen), err)
		}
		add(ids[0])
	}
	for {
		resp, err := http.Get("http://" + n.HTTPAddr() + "/api/segment/get/tiny")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			if resp.StatusCode != 400 || !strings.Contains(string(b), "domain exhausted") {
				t.Fatalf("after %d ids: HTTP %d %s, want 400 domain exhausted", len(seen), resp.StatusCode, b)
			}
			break
		}
		id, err := strconv.ParseInt(string(b), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		add(id)
		if len(seen) > left {
			t.Fatal("more ids than the domain has left")
		}
	}
	if len(seen) != left {
		t.Fatalf("served %d ids, want the %d left in the domain", len(seen), left)
	}
	_, natsErr := takeReady(nc, "tiny", 1, false)
	if !errors.Is(natsErr, wire.ErrBadRequest) || !strings.Contains(natsErr.Error(), "domain exhausted") {
		t.Fatalf("NATS after the domain's end: %v, want a 400 domain exhausted", natsErr)
	}
}

// TestModeRowDeletedOnMySQL: an operator deletes the leaf_alloc_mode row of
// an opaque tag, or of a monotonic one, while the node that served it is
// alive: the store then reports the tag as plain segment. A node that
// never served the tag learns its mode from that node (leaf.admin.floors)
// and refuses it on leaf.segment.<tag> (plain ids could repeat permuted
// ids already served; a monotonic tag's ids come from its leader only).
// Once the row is back, the monotonic tag's leader serves it again, above
// every id before.
func TestModeRowDeletedOnMySQL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		req  wire.AdminRequest
	}{
		{"opaque", wire.AdminRequest{Tag: "orders", Step: 100, Mode: "opaque", Width: 20}},
		{"mono", wire.AdminRequest{Tag: "ticks", Step: 100, Mode: "mono"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := testenv.MySQL(t)
			url := natstest.RunServer(t).ClientURL()
			cfg := func(name string) config.Config {
				return config.Config{Name: name, NATS: config.NATSConfig{URL: url}, Registry: config.RegistryConfig{Kind: config.RegistryOff},
					Store: config.StoreConfig{MySQL: dsn, OpaqueKey: testOpaqueKey}}
			}
			startNode(t, cfg("served"))
			nc := natstest.Connect(t, url)
			admin(t, nc, wire.TagCreateSubject, tc.req)
			tag := tc.req.Tag
			seen := map[int64]bool{}
			var last int64
			add := func(what string, ids []int64) {
				t.Helper()
				for _, id := range ids {
					if seen[id] {
						t.Fatalf("%s: id %d handed out twice", what, id)
					}
					seen[id] = true
					last = max(last, id)
				}
			}
			subject := wire.SegmentPrefix + tag
			if tc.req.Mode == "mono" {
				subject = wire.MonoPrefix + tag
			}
			takeSome := func(what string) {
				t.Helper()
				for range 5 {
					ids, err := takeRetry(nc, subject, 50)
					if err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					if tc.req.Mode == "mono" && ids[0] <= last {
						t.Fatalf("%s: monotonic ids from %d after %d", what, ids[0], last)
					}
					add(what, ids)
				}
			}
			takeSome("before")

			db, err := sql.Open("mysql", dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var kind string
			if err := db.QueryRowContext(t.Context(), "SELECT kind FROM leaf_alloc_mode WHERE biz_tag = ?", tag).Scan(&kind); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(t.Context(), "DELETE FROM leaf_alloc_mode WHERE biz_tag = ?", tag); err != nil {
				t.Fatal(err)
			}

			fresh := startNode(t, cfg("never-served"))
			for range 3 {
				code, body := getAnswered(t, fresh, "/api/segment/get/"+tag)
				if code == 200 {
					id, _ := strconv.ParseInt(body, 10, 64)
					add("the node that never served it", []int64{id})
					t.Fatalf("the node that never served %s tag %q serves it as plain segment ids: %s", tc.req.Mode, tag, body)
				}
				if code != 400 || !strings.Contains(body, "mode") {
					t.Fatalf("the node that never served it: HTTP %d %s; want a 400 about the tag's mode", code, body)
				}
			}
			if tc.req.Mode != "mono" {
				return
			}
			if _, err := db.ExecContext(t.Context(), "INSERT INTO leaf_alloc_mode (biz_tag, kind) VALUES (?, ?)", tag, kind); err != nil {
				t.Fatal(err)
			}
			takeSome("after the row came back")
		})
	}
}

// TestModeRowDeletedRollingReplacement: an opaque tag's leaf_alloc_mode
// row deleted on MySQL, then the nodes replaced one at a time onto new
// data directories: while some live node knows the tag's mode, none
// serves the tag as plain ids (which repeat its permuted ids: both lie in
// [1, 2^20)). The node that served it stops after a new one heard the mode
// from it; a third node, started after that, must hear it from the second.
func TestModeRowDeletedRollingReplacement(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQL(t)
	url := natstest.RunServer(t).ClientURL()
	cfg := func(name string) config.Config {
		return config.Config{Name: name, NATS: config.NATSConfig{URL: url}, Registry: config.RegistryConfig{Kind: config.RegistryOff},
			Store: config.StoreConfig{MySQL: dsn, OpaqueKey: testOpaqueKey}}
	}
	served := startNode(t, cfg("served"))
	nc := natstest.Connect(t, url)
	admin(t, nc, wire.TagCreateSubject, wire.AdminRequest{Tag: "rolled", Step: 100, Mode: "opaque", Width: 20})
	if _, err := takeRetry(nc, wire.SegmentPrefix+"rolled", 50); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(t.Context(), "DELETE FROM leaf_alloc_mode WHERE biz_tag = ?", "rolled"); err != nil {
		t.Fatal(err)
	}
	refuses := func(who string, n *node.Node) {
		t.Helper()
		code, body := getAnswered(t, n, "/api/segment/get/rolled")
		if code != 400 || !strings.Contains(body, "mode") {
			t.Fatalf("%s: HTTP %d %s; want a 400 about the tag's mode (plain ids repeat the permuted ones)", who, code, body)
		}
	}
	second := startNode(t, cfg("second"))
	refuses("the node started while the one that served it lived", second)
	if err := served.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	third := startNode(t, cfg("third"))
	refuses("the node started after the one that served it stopped", third)
}

// getAnswered GETs path from n's HTTP API, asking again for up to 20 s
// while it answers 503 (the tag's first load still under way on a busy
// machine), as a client does: ids or a 400 are the answer.
func getAnswered(t *testing.T, n *node.Node, path string) (int, string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + n.HTTPAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return resp.StatusCode, string(body)
		}
	}
}

// takeRetry takes n ids from subject, asking again for up to 30 s after
// no responder, no answer or a 503 (a leader not elected yet, a busy
// machine), as the Go client does.
func takeRetry(nc *nats.Conn, subject string, n int) ([]int64, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ids, err := takeFrom(nc, subject, n, true)
		again := errors.Is(err, wire.ErrUnavailable) || errors.Is(err, nats.ErrNoResponders) || errors.Is(err, nats.ErrTimeout)
		if err == nil || !again || time.Now().After(deadline) {
			return ids, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
