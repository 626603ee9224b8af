package node_test

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/node"
	"github.com/leafmq/leafmq/segment/kvstore"
	"github.com/leafmq/leafmq/wire"
)

// TestMonoHomeRegion: a monotonic tag lives in one region (I6). Two
// regions, each a NATS cluster, an operator connected to each (the admin
// queue group answers from the caller's cluster): a monotonic tag created
// in one region is refused in the other, as a monotonic tag and as a tag
// of another mode, and a tag another region holds is refused as a
// monotonic one; with the regions cut apart a monotonic create is refused
// (the other region cannot say it has no such tag) while a segment tag is
// created. Before, the second region created the tag too, elected a second
// leader on leaf.mono.<tag>, and callers took the first of two answers.
func TestMonoHomeRegion(t *testing.T) {
	t.Parallel()
	sc := natstest.RunSuperCluster(t, 1, 1)
	var ncs []*nats.Conn
	for i := range 2 {
		waitServing(t, startNode(t, regionConfig(sc.URL(i), fmt.Sprintf("r%d-1", i), "", i, 2)))
		ncs = append(ncs, natstest.Connect(t, sc.URL(i)))
	}
	refused := func(nc *nats.Conn, req wire.AdminRequest, want string) {
		t.Helper()
		err := adminErr(t, nc, wire.TagCreateSubject, req)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("create %+v: %v, want an error saying %q", req, err, want)
		}
	}
	admin(t, ncs[0], wire.TagCreateSubject, wire.AdminRequest{Tag: "ticks", Mode: "mono"})
	refused(ncs[1], wire.AdminRequest{Tag: "ticks", Mode: "mono"}, "lives in one region")
	refused(ncs[1], wire.AdminRequest{Tag: "ticks"}, "lives in one region")
	admin(t, ncs[0], wire.TagCreateSubject, wire.AdminRequest{Tag: "orders"})
	refused(ncs[1], wire.AdminRequest{Tag: "orders", Mode: "mono"}, "lives in one region")
	admin(t, ncs[1], wire.TagCreateSubject, wire.AdminRequest{Tag: "orders"}) // a segment tag lives in every region

	// Callers of both regions reach the one leader, in order.
	var last int64
	for i := range 20 {
		ids, err := takeMono(ncs[i%2], "ticks")
		if err != nil {
			t.Fatal(err)
		}
		if ids[0] <= last || ids[0]%2 != 0 {
			t.Fatalf("mono id %d after %d: want a larger one of region 0", ids[0], last)
		}
		last = ids[0]
	}

	sc.Cut(0)
	sc.Cut(1)
	refused(ncs[1], wire.AdminRequest{Tag: "beats", Mode: "mono"}, "no answer from region ids [0]")
	admin(t, ncs[1], wire.TagCreateSubject, wire.AdminRequest{Tag: "lines"})
	sc.Heal(0)
	sc.Heal(1)
}

// takeMono asks nc for one id of the monotonic tag, asked again while not
// ready (a leader being elected).
func takeMono(nc *nats.Conn, tag string) ([]int64, error) {
	var err error
	for range 100 {
		var ids []int64
		if ids, err = takeFrom(nc, wire.MonoPrefix+tag, 1, false); err == nil {
			return ids, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, err
}

// TestMonoHomeRowDeletedByHand: the home's row of a monotonic tag deleted
// by hand (`nats kv del leaf_alloc_r0 ticks`) while its leader serves, and
// the tag created at once in another region. The home's leader serves the
// rest of its ranges until its next reservation finds the row gone, so the
// home holds the tag by its lease until then (I6): the create is refused,
// naming the leader. Once the leader stopped (here: its node stops; the
// region's other node, which takes the lease, finds the row gone at its
// first reservation and hands the lease back), the create is refused below
// the home's floor (which that node heard announced) and goes ahead at it:
// the tag's ids still rise. Before, the create went ahead at once, at 1:
// the second region's leader served beside the first, and below it.
func TestMonoHomeRowDeletedByHand(t *testing.T) {
	t.Parallel()
	sc := natstest.RunSuperCluster(t, 1, 1)
	nodes := map[string]*node.Node{}
	for _, name := range []string{"r0-1", "r0-2", "r1-1"} {
		i := int(name[1] - '0')
		nodes[name] = startNode(t, regionConfig(sc.URL(i), name, fmt.Sprintf("r%d", i), i, 2))
		waitServing(t, nodes[name])
	}
	r0, r1 := natstest.Connect(t, sc.URL(0)), natstest.Connect(t, sc.URL(1))
	admin(t, r0, wire.TagCreateSubject, wire.AdminRequest{Tag: "ticks", Mode: "mono", Step: 50})
	var last int64
	for range 60 { // into its second range
		ids, err := takeMono(r0, "ticks")
		if err != nil {
			t.Fatal(err)
		}
		last = ids[0]
	}
	leader := ""
	for name, n := range nodes {
		if slices.Contains(n.MonoLeading(), "ticks") {
			leader = name
		}
	}
	// deleteRow deletes the tag's row in a region's bucket by hand, as
	// `nats kv del leaf_alloc_<region> ticks` does.
	deleteRow := func(nc *nats.Conn, region string) {
		t.Helper()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		kv, err := js.KeyValue(t.Context(), wire.Scope(region).Bucket(kvstore.DefaultBucket))
		if err != nil {
			t.Fatal(err)
		}
		if err := kv.Delete(t.Context(), "ticks"); err != nil {
			t.Fatal(err)
		}
	}
	// belowFloor asks until req on subject is refused for another
	// region's floor rather than for a leader still serving there (asked
	// again), and returns the floor the refusal names (after want).
	belowFloor := func(nc *nats.Conn, subject string, req wire.AdminRequest, want string) int64 {
		t.Helper()
		var floor int64
		testenv.Eventually(t, subject+" refused for the other region's floor, not its leader", 20*time.Second, func() bool {
			err := adminErr(t, nc, subject, req)
			switch {
			case err == nil:
				t.Fatalf("%s %+v done, below the other region's ids up to %d", subject, req, last)
			case strings.Contains(err.Error(), "leads it"):
				return false
			}
			m := regexp.MustCompile(want + ` (\d+)`).FindStringSubmatch(err.Error())
			if m == nil {
				t.Fatalf("%s %+v: %v, want refused below the other region's floor (%q N)", subject, req, err, want)
			}
			floor, _ = strconv.ParseInt(m[1], 10, 64)
			return true
		})
		return floor
	}
	deleteRow(r0, "r0")
	create := wire.AdminRequest{Tag: "ticks", Mode: "mono"}
	err := adminErr(t, r1, wire.TagCreateSubject, create)
	if err == nil || !strings.Contains(err.Error(), "node "+leader+" leads it") {
		t.Fatalf("create ticks in r1 while %s serves it in r0 without a row: %v, want refused naming %s", leader, err, leader)
	}
	if err := nodes[leader].Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	create.MaxID = belowFloor(r1, wire.TagCreateSubject, create, "max_id of at least")
	if create.MaxID*2 < last {
		t.Fatalf("r0's floor %d (local) is below its id %d", create.MaxID, last)
	}
	create.MaxID--
	if err := adminErr(t, r1, wire.TagCreateSubject, create); err == nil {
		t.Fatalf("ticks created in r1 at %d, below r0's floor", create.MaxID)
	}
	create.MaxID++
	create.Step = 50
	admin(t, r1, wire.TagCreateSubject, create)
	ids, err := takeMono(r1, "ticks")
	if err != nil {
		t.Fatal(err)
	}
	if ids[0] <= last {
		t.Fatalf("ticks moved to r1 served %d after r0's %d", ids[0], last)
	}
	last = ids[0]

	// And back, by a restart in r0 once r1's row is deleted by hand and
	// its leader, past its ranges, stopped: above r1's floor.
	deleteRow(r1, "r1")
	for range 200 {
		ids, err := takeFrom(r1, wire.MonoPrefix+"ticks", 1, false)
		if err != nil {
			break
		}
		last = ids[0]
	}
	restart := wire.AdminRequest{Tag: "ticks", Floor: create.MaxID + 1}
	restart.Floor = belowFloor(r0, wire.TagRestartSubject, restart, "floor of at least")
	admin(t, r0, wire.TagRestartSubject, restart)
	ids, err = takeMono(r0, "ticks")
	if err != nil {
		t.Fatal(err)
	}
	if ids[0] <= last {
		t.Fatalf("ticks moved back to r0 served %d after r1's %d", ids[0], last)
	}
}
