package node

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/wire"
)

// TestMemberWritesAreFenced: a node writes its key conditional on the
// revision it last wrote, and writes again only after it has read where
// the key stands. A write of someone else (or one of its own whose
// acknowledgement was lost) makes the conditional write fail; the node
// then reads the key and goes on — which a node that cannot hear the
// server cannot do, so its key lapses instead of being renewed blindly
// (helper-29: a one-way blackhole held every start for six minutes). A key
// gone (lapsed, purged) is made again.
func TestMemberWritesAreFenced(t *testing.T) {
	nc := natstest.Connect(t, natstest.RunServer(t).ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := joinMembers(ctx, nc, 1, wire.Member{Node: "fenced", Instance: "i1"}, slog.New(slog.DiscardHandler))
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
