package responder_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/opaque"
	"github.com/leafmq/leafmq/responder"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/memstore"
	"github.com/leafmq/leafmq/wire"
)

// opaqueAdmin is a responder of region rg with key k on a server of its
// own, and a call of its admin subjects: the reply's error, or its body
// decoded into out.
func opaqueAdmin(t *testing.T, k *opaque.Key, rg segment.Regions) func(subject string, a wire.AdminRequest, out any) error {
	t.Helper()
	s := natstest.RunServer(t)
	nc := natstest.Connect(t, s.ClientURL())
	r, err := responder.Start(responder.Config{Conn: nc, IDs: &counter{}, Store: memstore.New(), Node: "test", Opaque: k, Regions: rg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop() })
	return func(subject string, a wire.AdminRequest, out any) error {
		t.Helper()
		body, _ := json.Marshal(a)
		var reply *nats.Msg
		if reply, err = nc.Request(subject, body, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := wire.ReplyError(reply); err != nil {
			return err
		}
		return json.Unmarshal(reply.Data, out)
	}
}

// TestTagDecodeRegions: with many regions an opaque id P(l)*N + R decodes
// to l*N + R, the id local number l has in a plain tag (Regions.Local
// splits it), for an id of any region (this one's store's key and width);
// an id of no region's share is refused; with one region decode answers
// Perm.Sequence as it always did. Tag create refuses a width that leaves a
// region too small a share.
func TestTagDecodeRegions(t *testing.T) {
	k, err := opaque.ParseKey("000102030405060708090a0b0c0d0e0f")
	if err != nil {
		t.Fatal(err)
	}
	rg := segment.Regions{N: 3, R: 1}
	call := opaqueAdmin(t, k, rg)
	var row wire.TagRow
	if err := call(wire.TagCreateSubject, wire.AdminRequest{Tag: "orders", Mode: "opaque", Width: 20}, &row); err != nil {
		t.Fatal(err)
	}
	decode := func(id int64) (int64, error) {
		var d wire.TagDecoded
		err := call(wire.TagDecodeSubject, wire.AdminRequest{Tag: "orders", ID: id}, &d)
		return d.Sequence, err
	}
	for r := range rg.N {
		p, err := k.RegionPerm("orders", 20, rg.N, r)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range []int64{1, 2, 1000, p.Max()} {
			id := p.Permute(l)*rg.N + r
			seq, err := decode(id)
			if err != nil {
				t.Fatalf("decode(%d): %v", id, err)
			}
			if got, reg, ok := rg.Local(seq); !ok || got != l || reg != r {
				t.Fatalf("decode(%d) = %d: local %d of region %d, want local %d of region %d", id, seq, got, reg, l, r)
			}
		}
	}
	for _, id := range []int64{0, 2, 1 << 20, 1<<20 + 1} {
		if _, err := decode(id); !errors.Is(err, wire.ErrBadRequest) {
			t.Fatalf("decode(%d): %v, want bad request", id, err)
		}
	}

	one := opaqueAdmin(t, k, segment.Regions{})
	if err := one(wire.TagCreateSubject, wire.AdminRequest{Tag: "orders", Mode: "opaque", Width: 20}, &row); err != nil {
		t.Fatal(err)
	}
	p, _ := k.Perm("orders", 20)
	var d wire.TagDecoded
	if err := one(wire.TagDecodeSubject, wire.AdminRequest{Tag: "orders", ID: p.Permute(77)}, &d); err != nil || d.Sequence != 77 {
		t.Fatalf("decode with one region: %+v, %v; want sequence 77", d, err)
	}

	narrow := opaqueAdmin(t, k, segment.Regions{N: 32, R: 3})
	err = narrow(wire.TagCreateSubject, wire.AdminRequest{Tag: "orders", Mode: "opaque", Width: 20}, &row)
	if !errors.Is(err, wire.ErrBadRequest) || !strings.Contains(err.Error(), "at least 22 bits") {
		t.Fatalf("create of a 20-bit tag in 32 regions: %v, want bad request naming 22 bits", err)
	}
	if err := narrow(wire.TagCreateSubject, wire.AdminRequest{Tag: "orders", Mode: "opaque", Width: 22}, &row); err != nil {
		t.Fatalf("create of a 22-bit tag in 32 regions: %v", err)
	}
}
