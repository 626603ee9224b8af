package peers_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/peers"
	"github.com/leafmq/leafmq/wire"
)

// member is a started, joined Set named name on url whose status is st
// (with its name and instance filled in) and whose own floor of every tag
// is floor.
func member(t testing.TB, url, name string, st wire.NodeStatus, floor int64) *peers.Set {
	t.Helper()
	return memberIn(t, url, "", name, st, floor)
}

// memberIn is member in scope.
func memberIn(t testing.TB, url string, scope wire.Scope, name string, st wire.NodeStatus, floor int64) *peers.Set {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	inst := peers.NewInstance()
	st.Node, st.Instance = name, inst
	s, err := peers.New(peers.Config{
		Conn:     natstest.Connect(t, url),
		Scope:    scope,
		Name:     name,
		Instance: inst,
		Log:      slog.New(slog.DiscardHandler),
		Status:   func() wire.NodeStatus { return st },
		Floor:    func(string) int64 { return floor },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Join(ctx, ""); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestChecksAgainstLiveMembers: each check of one Set sees every other
// live member, and never this process itself: a second process under one
// name is refused, a worker id another member claims has a holder, the
// highest past lease and floor of any member count.
func TestChecksAgainstLiveMembers(t *testing.T) {
	url := natstest.RunServer(t).ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	claim := int64(5)
	until := time.Unix(1_900_000_000, 0)
	a := member(t, url, "a", wire.NodeStatus{Snow: &wire.SnowflakeStatus{Worker: -1, Claim: &claim,
		Past: []wire.WorkerLease{{Worker: 7, Until: until.UnixNano()}}}}, 900)
	c := member(t, url, "c", wire.NodeStatus{}, 0)

	for _, s := range []*peers.Set{a, c} {
		if err := s.CheckName(ctx); err != nil {
			t.Fatalf("CheckName among distinct names: %v", err)
		}
	}
	sts, err := c.Statuses(ctx)
	if err != nil || len(sts) != 1 || sts[0].Node != "a" {
		t.Fatalf("c's Statuses = %v, %v; want a's alone (not its own)", sts, err)
	}
	if h, ok, err := c.Holder(ctx, 5); err != nil || !ok || h.Node != "a" {
		t.Fatalf("Holder(5) = %v, %v, %v; want a, which claims it", h.Node, ok, err)
	}
	if _, ok, err := a.Holder(ctx, 5); err != nil || ok {
		t.Fatalf("a's Holder(5) = %v, %v; want none: a's own claim is not a peer's", ok, err)
	}
	if l, err := c.Lease(ctx, 7); err != nil || !l.Equal(until) {
		t.Fatalf("Lease(7) = %v, %v; want %v", l, err, until)
	}
	tag := wire.MustTag("t")
	if high, who, err := c.HighestFloor(ctx, tag, peers.CreateWindow); err != nil || high != 900 || who != "a" {
		t.Fatalf("HighestFloor = %d, %q, %v; want 900 from a", high, who, err)
	}
	twin := member(t, url, "a", wire.NodeStatus{}, 0)
	if err := twin.CheckName(ctx); !errors.Is(err, peers.ErrNameTaken) {
		t.Fatalf("a second process named a: %v, want ErrNameTaken", err)
	}
	if err := a.CheckName(ctx); !errors.Is(err, peers.ErrNameTaken) {
		t.Fatalf("the first process named a beside a second: %v, want ErrNameTaken", err)
	}
}

// TestSilentMemberFailsChecks: a member that stopped answering (its key
// still fresh) fails every check with ErrSilent instead of being taken for
// no node; once it leaves, the checks pass at once.
func TestSilentMemberFailsChecks(t *testing.T) {
	url := natstest.RunServer(t).ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := member(t, url, "a", wire.NodeStatus{}, 0)
	c := member(t, url, "c", wire.NodeStatus{}, 0)
	a.StopFloors()
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	_, _, err := c.HighestFloor(short, wire.MustTag("t"), peers.CreateWindow)
	cancelShort()
	if err == nil {
		t.Fatal("HighestFloor beside a member that stopped answering its floors: no error")
	}
	if err := a.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.HighestFloor(ctx, wire.MustTag("t"), peers.CreateWindow); err != nil {
		t.Fatalf("HighestFloor once the silent member left: %v", err)
	}
}

// A node's life among its peers, in the order a leafd goes through it.
func ExampleSet() {
	ctx := context.Background()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		return
	}
	defer nc.Close()
	s, err := peers.New(peers.Config{
		Conn:     nc,
		Name:     "leaf-1",
		Instance: peers.NewInstance(),
		Status:   func() wire.NodeStatus { return wire.NodeStatus{Node: "leaf-1", Starting: true} },
		Floor:    func(tag string) int64 { return 0 }, // this node's own floor of tag
	})
	if err != nil {
		return
	}
	defer s.Close(ctx)
	if err := s.Start(ctx); err != nil { // answer the status and the floors
		return
	}
	if err := s.Join(ctx, ""); err != nil { // a member: the others wait for its answers
		return
	}
	if err := s.CheckName(ctx); err != nil { // errors.Is(err, peers.ErrNameTaken): refuse to start
		return
	}
	if err := s.HearFloors(ctx, peers.Floors{}); err != nil { // the peers' floors, before any range
		return
	}
	fmt.Println(s.Floor("orders")) // reserve above this
	_ = s.Started(ctx)             // the responder answers the status from here
}

func ExampleDescribe() {
	started := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	fmt.Println(peers.Describe(wire.NodeStatus{Node: "leaf-2", PID: 4242, Host: "far", Started: started.UnixNano()}))
	// Output: node leaf-2 (pid 4242 on host far, started 2026-01-02T03:04:05Z)
}

// TestModesPassedAlong: what a node heard of a tag's mode and floor from
// a peer it answers on to a node that starts later, so a rolling
// replacement onto new data directories keeps the mode while at every
// moment some live node knows it (a store's mode row can be deleted; on
// MySQL nothing else remembers it). a served tag o in mode opaque and
// stops; b heard it from a; c, started after a stopped, learns it from b.
func TestModesPassedAlong(t *testing.T) {
	url := natstest.RunServer(t).ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const mode = "opaque/20/k1"
	hear := func(s *peers.Set, floors map[string]int64, modes map[string]string) {
		t.Helper()
		if err := s.HearFloors(ctx, peers.Floors{All: func() map[string]int64 { return floors },
			Modes: func() map[string]string { return modes }}); err != nil {
			t.Fatal(err)
		}
	}
	a := member(t, url, "a", wire.NodeStatus{}, 0)
	hear(a, map[string]int64{"o": 500}, map[string]string{"o": mode})
	b := member(t, url, "b", wire.NodeStatus{}, 0)
	hear(b, map[string]int64{}, map[string]string{})
	if b.Mode("o") != mode {
		t.Fatalf("b heard mode %q from a, want %q", b.Mode("o"), mode)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c := member(t, url, "c", wire.NodeStatus{}, 0)
	hear(c, map[string]int64{}, map[string]string{})
	if got := c.Mode("o"); got != mode {
		t.Errorf("c's mode of o = %q after a stopped, want %q (b knew it)", got, mode)
	}
	if got, _ := c.Floor("o"); got < 500 {
		t.Errorf("c's peer floor of o = %d after a stopped, want >= 500 (b knew it)", got)
	}
}
