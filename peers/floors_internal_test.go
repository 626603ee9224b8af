package peers

import (
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/wire"
)

// TestPeerFloorsSameNameOtherProcess: an announcement under this node's
// name from another process (two nodes started at once under one name,
// which CheckName cannot see) is a peer's floor, not this node's own.
func TestPeerFloorsSameNameOtherProcess(t *testing.T) {
	p := &Set{cfg: Config{Name: "twin", Instance: "aaaa"}}
	p.heard = &heard{self: p.self, prefix: wire.FloorAnnouncePrefix, store: "inc", max: 10, floors: map[string]int64{}, modes: map[string]string{}}
	announce := func(tag, instance string, floor int64) {
		b, _ := json.Marshal(wire.FloorAnnounce{Node: "twin", Instance: instance, Store: "inc", Floor: floor})
		p.heard.announced(&nats.Msg{Subject: wire.FloorAnnouncePrefix + tag, Data: b})
	}
	announce("own", "aaaa", 500)
	announce("other", "bbbb", 700)
	announce("old", "", 900) // a node that sends no instance: by name, itself
	if f, _ := p.Floor("own"); f != 0 {
		t.Errorf("own announcement taken as a peer's floor: %d", f)
	}
	if f, _ := p.Floor("other"); f != 700 {
		t.Errorf("floor of another process under the same name = %d, want 700", f)
	}
	if f, _ := p.Floor("old"); f != 0 {
		t.Errorf("an announcement without instance under this name = %d, want 0 (itself)", f)
	}
}
