package region_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/region"
	"github.com/leafmq/leafmq/wire"
)

// count is the region count of the tests' regions.
const count = 16

// start starts a Guard for node of region name, id on url, closed at
// clean-up; the error is Start's.
func start(t *testing.T, url, name string, id int, node string, period time.Duration, conflict func(error)) (*region.Guard, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := region.Start(ctx, region.Config{
		Conn:     natstest.Connect(t, url),
		Count:    count,
		Region:   name,
		ID:       id,
		Node:     node,
		Instance: node + "-1",
		Period:   period,
		Conflict: conflict,
		Log:      slog.New(slog.DiscardHandler),
	})
	if err == nil {
		t.Cleanup(g.Close)
	}
	return g, err
}

// mustStart is start that fails the test on an error.
func mustStart(t *testing.T, url, name string, id int, node string) *region.Guard {
	t.Helper()
	g, err := start(t, url, name, id, node, 0, nil)
	if err != nil {
		t.Fatalf("node %s of region %s, id %d: %v", node, name, id, err)
	}
	return g
}

// refused fails the test unless err wraps ErrIDTaken and names the other
// region and node.
func refused(t *testing.T, err error, other, node string) {
	t.Helper()
	if !errors.Is(err, region.ErrIDTaken) {
		t.Fatalf("error %v, want ErrIDTaken", err)
	}
	if !strings.Contains(err.Error(), `region "`+other+`"`) || !strings.Contains(err.Error(), "node "+node) {
		t.Fatalf("error %q does not name region %s and node %s", err, other, node)
	}
}

// TestRegionIDs: over two clusters joined by gateways (c0 of one server,
// c1 of two), regions of different ids pass, a second region on a taken
// id refuses to start whichever starts first, many nodes of one region on
// one id pass, and the default region name is the cluster's.
func TestRegionIDs(t *testing.T) {
	t.Parallel()
	sc := natstest.RunSuperCluster(t, 1, 2)
	c0, c1 := sc.URL(0), sc.URL(1)

	t.Run("default name", func(t *testing.T) {
		for i, want := range []string{"c0", "c1"} {
			got, err := region.DefaultName(natstest.Connect(t, sc.URL(i)))
			if err != nil || got != want {
				t.Fatalf("DefaultName on cluster %d = %q, %v; want %q", i, got, err, want)
			}
		}
		got, err := region.DefaultName(natstest.Connect(t, natstest.RunServer(t).ClientURL()))
		if err != nil || got != "" {
			t.Fatalf("DefaultName on a lone server = %q, %v; want \"\"", got, err)
		}
	})
	t.Run("different ids", func(t *testing.T) {
		mustStart(t, c0, "c0", 1, "a")
		mustStart(t, c1, "c1", 2, "b")
	})
	t.Run("one id, c0 first", func(t *testing.T) {
		mustStart(t, c0, "c0", 3, "a")
		_, err := start(t, c1, "c1", 3, "b", 0, nil)
		refused(t, err, "c0", "a")
	})
	t.Run("one id, c1 first", func(t *testing.T) {
		mustStart(t, c1, "c1", 4, "b")
		_, err := start(t, c0, "c0", 4, "a", 0, nil)
		refused(t, err, "c1", "b")
	})
	t.Run("one region, many nodes", func(t *testing.T) {
		s0, s1 := sc.Clusters[1][0].ClientURL(), sc.Clusters[1][1].ClientURL()
		for i, url := range []string{s0, s1, s0, s1} {
			mustStart(t, url, "c1", 5, "b"+string(rune('0'+i)))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := region.Check(ctx, natstest.Connect(t, s1), "c1", 5, count, 0); err != nil {
			t.Fatal(err)
		}
		err := region.Check(ctx, natstest.Connect(t, c0), "c0", 5, count, 0)
		if !errors.Is(err, region.ErrIDTaken) {
			t.Fatalf("another region's Check: %v, want ErrIDTaken", err)
		}
	})
	t.Run("a starting node stops no running one", func(t *testing.T) {
		conflicts := make(chan error, 1)
		g, err := start(t, c0, "c0", 6, "a", 100*time.Millisecond, func(err error) { conflicts <- err })
		if err != nil {
			t.Fatal(err)
		}
		// A node of c1 on id 6 that has not passed its start check
		// answers; its answer counts for a start, not for a running node.
		var checked atomic.Bool
		questions := make(chan struct{}, 100)
		other := natstest.Connect(t, c1)
		if _, err := other.Subscribe(wire.RegionSubject(6), func(m *nats.Msg) {
			b, _ := json.Marshal(wire.NodeRegion{Node: "b", Region: "c1", ID: 6, Checked: checked.Load()})
			_ = m.Respond(b)
			questions <- struct{}{}
		}); err != nil {
			t.Fatal(err)
		}
		if err := other.Flush(); err != nil {
			t.Fatal(err)
		}
		_, err = start(t, c0, "c0", 6, "a2", 0, nil)
		refused(t, err, "c1", "b")
		// The start check asks twice, then the running node once a
		// period: by the fifth question the answers to two running
		// questions have come.
		for range 5 {
			select {
			case <-questions:
			case <-time.After(10 * time.Second):
				if err := g.Err(); err != nil {
					t.Fatalf("a starting node's answer stopped a running one: %v", err)
				}
				t.Fatal("the running node asks no more")
			}
		}
		if err := g.Err(); err != nil {
			t.Fatalf("a starting node's answer stopped a running one: %v", err)
		}
		checked.Store(true)
		select {
		case err := <-conflicts:
			refused(t, err, "c1", "b")
		case <-time.After(10 * time.Second):
			t.Fatal("no conflict reported")
		}
		if !errors.Is(g.Err(), region.ErrIDTaken) {
			t.Fatalf("Err() = %v after the conflict", g.Err())
		}
	})
}

// startBoth starts, at once, a Guard of each region i of sc on ids[i] of
// count counts[i] (the two start within Skew of each other, so neither is
// older), with period, reporting its conflict on the channel returned.
func startBoth(t *testing.T, sc *natstest.SuperCluster, ids, counts [2]int, period time.Duration) [2]chan error {
	t.Helper()
	var conflicts [2]chan error
	errs := make(chan error, 2)
	for i, name := range sc.Names[:2] {
		conflicts[i] = make(chan error, 1)
		go func() {
			_, err := startCount(t, sc.URL(i), name, ids[i], counts[i], name+"-node", period, func(err error) { conflicts[i] <- err })
			if err != nil {
				err = fmt.Errorf("region %s: %w", name, err)
			}
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return conflicts
}

// TestRegionIDPartition: two regions on one id start at once while their
// gateway is cut, so both pass; once it heals, the running check of each
// reports the conflict within its period: neither is older, both stop.
func TestRegionIDPartition(t *testing.T) {
	t.Parallel()
	sc := natstest.RunSuperCluster(t, 1, 1)
	sc.Cut(0)
	sc.Cut(1)
	const period = time.Second
	conflicts := startBoth(t, sc, [2]int{7, 7}, [2]int{count, count}, period)
	sc.Heal(0)
	sc.Heal(1)
	healed := time.Now()
	// Within a period and a check's window (the default, on loopback).
	within := period + region.DefaultWindow + 500*time.Millisecond
	for i, other := range []string{"c1", "c0"} {
		select {
		case err := <-conflicts[i]:
			refused(t, err, other, other+"-node")
			t.Logf("region %s reported the conflict %v after the heal", sc.Names[i], time.Since(healed))
		case <-time.After(within - time.Since(healed)):
			t.Fatalf("region %s reported no conflict within %v of the heal", sc.Names[i], within)
		}
	}
}

// TestRegionIDSlowGateway: behind a gateway slowed 60 ms each way, a
// check still hears the other region on its id: a region that runs, and
// one that starts at the same moment (its first question crosses the
// gateway before the other's interest has).
func TestRegionIDSlowGateway(t *testing.T) {
	t.Parallel()
	sc := natstest.RunSuperCluster(t, 1, 1)
	sc.Slow(0, 60*time.Millisecond)
	sc.Slow(1, 60*time.Millisecond)

	t.Run("running", func(t *testing.T) {
		mustStart(t, sc.URL(0), "c0", 8, "a")
		t0 := time.Now()
		_, err := start(t, sc.URL(1), "c1", 8, "b", 0, nil)
		refused(t, err, "c0", "a")
		t.Logf("refused after %v", time.Since(t0))
		mustStart(t, sc.URL(1), "c1", 9, "b")
	})
	t.Run("starting together", func(t *testing.T) {
		conns := []*nats.Conn{natstest.Connect(t, sc.URL(0)), natstest.Connect(t, sc.URL(1))}
		errs := make(chan error, 2)
		for i, nc := range conns {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				g, err := region.Start(ctx, region.Config{Conn: nc, Count: count, Region: sc.Names[i], ID: 10, Node: sc.Names[i] + "-node",
					Log: slog.New(slog.DiscardHandler)})
				if err == nil {
					g.Close()
				}
				errs <- err
			}()
		}
		refusals := 0
		for range 2 {
			err := <-errs
			switch {
			case errors.Is(err, region.ErrIDTaken):
				refusals++
			case err != nil:
				t.Fatal(err)
			}
		}
		if refusals == 0 {
			t.Fatal("two regions started on one id at once, and neither refused")
		}
		t.Logf("%d of 2 refused", refusals)
	})
}

// TestGuardChecksEveryPeriod: a running Guard asks again at each period of
// its clock, and once closed it asks no more and leaves no goroutine.
// It counts the process's goroutines: it runs alone, not in parallel.
func TestGuardChecksEveryPeriod(t *testing.T) {
	url := natstest.RunServer(t).ClientURL()
	questions := make(chan struct{}, 100)
	other := natstest.Connect(t, url)
	if _, err := other.Subscribe(wire.RegionSubject(11), func(m *nats.Msg) {
		b, _ := json.Marshal(wire.NodeRegion{Node: "same", Region: "r", ID: 11, Checked: true})
		_ = m.Respond(b)
		questions <- struct{}{}
	}); err != nil {
		t.Fatal(err)
	}
	if err := other.Flush(); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := region.Start(ctx, region.Config{Conn: nc, Count: count, Region: "r", ID: 11, Node: "a", Window: 50 * time.Millisecond,
		Period: time.Minute, Clock: clk, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	asked := func(n int) {
		t.Helper()
		for range n {
			select {
			case <-questions:
			case <-ctx.Done():
				t.Fatal("a question did not come")
			}
		}
	}
	asked(2) // the start check
	for range 2 {
		if err := clk.BlockUntil(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Minute)
		asked(1)
	}
	if err := g.Err(); err != nil {
		t.Fatalf("a node of the same region is a conflict: %v", err)
	}
	g.Close()
	g.Close()
	nc.Close()
	if len(questions) != 0 {
		t.Fatalf("%d questions more than the checks asked", len(questions))
	}
	testenv.Eventually(t, "the Guard's goroutines to end", 10*time.Second, func() bool { return runtime.NumGoroutine() <= before })
}

// startCount starts a Guard for node of region name, id, in a deployment
// of n regions (0: no regions), on url, closed at clean-up.
func startCount(t *testing.T, url, name string, id, n int, node string, period time.Duration, conflict func(error)) (*region.Guard, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := region.Start(ctx, region.Config{Conn: natstest.Connect(t, url), Count: n, Region: name, ID: id, Node: node,
		Period: period, Conflict: conflict, Log: slog.New(slog.DiscardHandler)})
	if err == nil {
		t.Cleanup(g.Close)
	}
	return g, err
}

// countsDiffer fails the test unless err wraps ErrRegionsDiffer and names
// the other node and both counts.
func countsDiffer(t *testing.T, err error, node, other, mine string) {
	t.Helper()
	if !errors.Is(err, region.ErrRegionsDiffer) {
		t.Fatalf("error %v, want ErrRegionsDiffer", err)
	}
	for _, s := range []string{"node " + node, "runs with " + other, "this node with " + mine} {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("error %q does not say %q", err, s)
		}
	}
}

// TestRegionCounts: over two clusters joined by a gateway, a node whose
// region count differs from a running node's refuses to start, whichever
// starts first, in another region or its own, with regions or without;
// nodes of one count pass, and a node that answers no count (an older
// version) is nothing to compare.
func TestRegionCounts(t *testing.T) {
	t.Parallel()
	sc := natstest.RunSuperCluster(t, 1, 1)
	c0, c1 := sc.URL(0), sc.URL(1)
	mustStartCount := func(t *testing.T, url, name string, id, n int, node string) {
		t.Helper()
		if _, err := startCount(t, url, name, id, n, node, 0, nil); err != nil {
			t.Fatalf("node %s, --regions %d: %v", node, n, err)
		}
	}
	t.Run("one count", func(t *testing.T) {
		mustStartCount(t, c0, "c0", 0, 3, "a")
		mustStartCount(t, c1, "c1", 1, 3, "b")
		mustStartCount(t, c1, "c1", 1, 3, "b2")
	})
	t.Run("another region, larger count", func(t *testing.T) {
		mustStartCount(t, c0, "c0", 0, 2, "a")
		mustStartCount(t, c1, "c1", 1, 2, "b")
		_, err := startCount(t, c1, "c2", 2, 4, "c", 0, nil)
		if !errors.Is(err, region.ErrRegionsDiffer) {
			t.Fatalf("region id 2 of 4 beside 2 regions: %v, want ErrRegionsDiffer", err)
		}
	})
	t.Run("another region, smaller count", func(t *testing.T) {
		mustStartCount(t, c0, "c0", 2, 4, "a")
		_, err := startCount(t, c1, "c1", 1, 2, "b", 0, nil)
		countsDiffer(t, err, "a", "--regions 4", "--regions 2")
	})
	t.Run("one region", func(t *testing.T) {
		mustStartCount(t, c0, "c0", 1, 4, "a")
		_, err := startCount(t, c0, "c0", 1, 3, "a2", 0, nil)
		countsDiffer(t, err, "a", "--regions 4", "--regions 3")
	})
	t.Run("regions beside none", func(t *testing.T) {
		mustStartCount(t, c0, "", 0, 0, "a")
		mustStartCount(t, c1, "", 0, 0, "a2")
		_, err := startCount(t, c1, "c1", 0, 2, "b", 0, nil)
		countsDiffer(t, err, "a", "no --regions", "--regions 2")
	})
	t.Run("none beside regions", func(t *testing.T) {
		mustStartCount(t, c1, "c1", 0, 2, "b")
		// Without regions the start waits for no check: the one it runs
		// at once reports the difference (Conflict, Err) within its window.
		found := make(chan error, 1)
		g, err := startCount(t, c0, "", 0, 0, "a", time.Hour, func(err error) { found <- err })
		if err != nil {
			t.Fatalf("a start without regions waited for its check: %v", err)
		}
		select {
		case err = <-found:
		case <-time.After(10 * time.Second):
			t.Fatal("no conflict reported within 10 s of the start")
		}
		countsDiffer(t, err, "b", "--regions 2", "no --regions")
		countsDiffer(t, g.Err(), "b", "--regions 2", "no --regions")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = region.Check(ctx, natstest.Connect(t, c0), "", 0, 0, 0)
		countsDiffer(t, err, "b", "--regions 2", "no --regions")
	})
	t.Run("older version", func(t *testing.T) {
		// It answers its region id without a count, and not RegionsSubject.
		other := natstest.Connect(t, c1)
		if _, err := other.Subscribe(wire.RegionSubject(1), func(m *nats.Msg) {
			_ = m.Respond([]byte(`{"node":"old","region":"c1","id":1,"checked":true}`))
		}); err != nil {
			t.Fatal(err)
		}
		if err := other.Flush(); err != nil {
			t.Fatal(err)
		}
		mustStartCount(t, c1, "c1", 1, 2, "b")
	})
}

// TestRegionCountPartition: two regions of two counts start at once
// while their gateway is cut, so both pass; once it heals, the running
// check of each reports the other's count within its period.
func TestRegionCountPartition(t *testing.T) {
	t.Parallel()
	sc := natstest.RunSuperCluster(t, 1, 1)
	sc.Cut(0)
	sc.Cut(1)
	const period = time.Second
	counts := [2]int{2, 3}
	conflicts := startBoth(t, sc, [2]int{0, 1}, counts, period)
	sc.Heal(0)
	sc.Heal(1)
	healed := time.Now()
	within := period + region.DefaultWindow + 500*time.Millisecond
	for i, other := range []string{"c1", "c0"} {
		select {
		case err := <-conflicts[i]:
			countsDiffer(t, err, other+"-node", fmt.Sprintf("--regions %d", counts[1-i]), fmt.Sprintf("--regions %d", counts[i]))
		case <-time.After(within - time.Since(healed)):
			t.Fatalf("region %s reported no conflict within %v of the heal", sc.Names[i], within)
		}
	}
}

// TestRegionIDSlowGateway300: behind a gateway slowed 300 ms each way (a
// round trip of 600 ms, more than the old 500 ms window), a second region
// on a taken id, or a node of another region count, is refused at start
// (StartWindow); and of two regions that start on one id at the same
// moment at least one refuses.
func TestRegionIDSlowGateway300(t *testing.T) {
	t.Parallel()
	sc := natstest.RunSuperCluster(t, 1, 1)
	sc.Slow(0, 300*time.Millisecond)
	sc.Slow(1, 300*time.Millisecond)

	t.Run("running", func(t *testing.T) {
		mustStart(t, sc.URL(0), "c0", 20, "a")
		t0 := time.Now()
		_, err := start(t, sc.URL(1), "c1", 20, "b", 0, nil)
		refused(t, err, "c0", "a")
		t.Logf("refused at start after %v", time.Since(t0))
		_, err = startCount(t, sc.URL(1), "c1", 21, 3, "b", 0, nil)
		countsDiffer(t, err, "a", fmt.Sprintf("--regions %d", count), "--regions 3")
	})
	t.Run("starting together", func(t *testing.T) {
		errs := make(chan error, 2)
		for i, name := range sc.Names {
			go func() {
				_, err := startCount(t, sc.URL(i), name, 22, count, name+"-node", 0, nil)
				errs <- err
			}()
		}
		refusals := 0
		for range 2 {
			err := <-errs
			switch {
			case errors.Is(err, region.ErrIDTaken):
				refusals++
			case err != nil:
				t.Fatal(err)
			}
		}
		if refusals == 0 {
			t.Fatal("two regions started on one id at once, and neither refused")
		}
		t.Logf("%d of 2 refused", refusals)
	})
}

// TestRegionIDSlowerGateway: behind a gateway slowed 1.2 s each way, more
// than a start check waits for, a region started on a taken id passes its
// start check; the running region's answer to its start's question comes
// 2.4 s on, and it stops at once, long before its first period (a
// minute): an answer counts whenever it comes. The running region, older,
// keeps serving.
func TestRegionIDSlowerGateway(t *testing.T) {
	t.Parallel()
	sc := natstest.RunSuperCluster(t, 1, 1)
	sc.Slow(0, 1200*time.Millisecond)
	sc.Slow(1, 1200*time.Millisecond)
	older := make(chan error, 1)
	a, err := start(t, sc.URL(0), "c0", 23, "a", time.Minute, func(err error) { older <- err })
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(region.Skew) // so that a is clearly older
	conflicts := make(chan error, 1)
	t0 := time.Now()
	if _, err := start(t, sc.URL(1), "c1", 23, "b", time.Minute, func(err error) { conflicts <- err }); err != nil {
		t.Fatalf("the start check heard the other region across a gateway of 2.4 s round trip (%v): the test needs a slower one", err)
	}
	select {
	case err := <-conflicts:
		refused(t, err, "c0", "a")
		t.Logf("stopped %v after the start began: %v", time.Since(t0), err)
	case <-time.After(10 * time.Second):
		t.Fatal("the late answer stopped no node within 10 s of its start")
	}
	select {
	case err := <-older:
		t.Fatalf("the older region stopped: %v", err)
	case <-time.After(time.Second):
	}
	if err := a.Err(); err != nil {
		t.Fatalf("the older region stopped: %v", err)
	}
}

// TestRegionSameNameTwoClusters: a region is one NATS cluster. A region
// of the same name and id as a running one, on another NATS cluster (a
// configuration copied to a new region), is refused at start, and found
// by the running checks once a cut heals; two regions of two names and ids
// share one NATS cluster, and many nodes of one region on two servers of
// its cluster pass.
func TestRegionSameNameTwoClusters(t *testing.T) {
	t.Parallel()
	sc := natstest.RunSuperCluster(t, 1, 2)
	t.Run("at start", func(t *testing.T) {
		mustStart(t, sc.URL(0), "prod", 24, "a")
		_, err := start(t, sc.URL(1), "prod", 24, "b", 0, nil)
		if !errors.Is(err, region.ErrIDTaken) || !strings.Contains(err.Error(), "on NATS cluster c0") || !strings.Contains(err.Error(), "node a") {
			t.Fatalf("the same region name and id on another cluster: %v, want ErrIDTaken naming cluster c0 and node a", err)
		}
	})
	t.Run("one cluster", func(t *testing.T) {
		s0, s1 := sc.Clusters[1][0].ClientURL(), sc.Clusters[1][1].ClientURL()
		mustStart(t, s0, "east", 25, "e0")
		mustStart(t, s1, "east", 25, "e1")
		mustStart(t, s1, "west", 26, "w0")
		_, err := start(t, s0, "west", 25, "w1", 0, nil)
		refused(t, err, "east", "e")
	})
	t.Run("after a cut", func(t *testing.T) {
		sc.Cut(0)
		sc.Cut(1)
		const period = time.Second
		var conflicts [2]chan error
		errs := make(chan error, 2)
		for i := range 2 {
			conflicts[i] = make(chan error, 1)
			go func() {
				_, err := start(t, sc.URL(i), "prod", 27, fmt.Sprintf("p%d", i), period, func(err error) { conflicts[i] <- err })
				errs <- err
			}()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("while cut: %v", err)
			}
		}
		sc.Heal(0)
		sc.Heal(1)
		healed := time.Now()
		// They started together: neither is older, so both stop, the
		// first found at least, within a period of the heal.
		select {
		case err := <-conflicts[0]:
			t.Logf("c0's node stopped %v after the heal: %v", time.Since(healed), err)
		case err := <-conflicts[1]:
			t.Logf("c1's node stopped %v after the heal: %v", time.Since(healed), err)
		case <-time.After(period + region.DefaultWindow + 500*time.Millisecond):
			t.Fatal("no node stopped after the heal")
		}
	})
}

// TestRegionIDHealOlderSurvives: region r0 serves on an id; while the
// gateway is cut, region r1 is started on the same id and passes (nothing
// answers). Once the cut heals, the newer r1 stops, within a period, and
// the older r0 keeps serving: r1 said it stopped.
func TestRegionIDHealOlderSurvives(t *testing.T) {
	t.Parallel()
	sc := natstest.RunSuperCluster(t, 1, 1)
	const period = time.Second
	older, newer := make(chan error, 1), make(chan error, 1)
	a, err := start(t, sc.URL(0), "r0", 28, "a", period, func(err error) { older <- err })
	if err != nil {
		t.Fatal(err)
	}
	sc.Cut(0)
	sc.Cut(1)
	time.Sleep(region.Skew + 500*time.Millisecond) // more than the clocks may differ
	if _, err := start(t, sc.URL(1), "r1", 28, "b", period, func(err error) { newer <- err }); err != nil {
		t.Fatalf("r1 while cut: %v", err)
	}
	sc.Heal(0)
	sc.Heal(1)
	healed := time.Now()
	select {
	case err := <-newer:
		refused(t, err, "r0", "a")
		t.Logf("the newer region stopped %v after the heal", time.Since(healed))
	case err := <-older:
		t.Fatalf("the older region stopped: %v", err)
	case <-time.After(period + region.DefaultWindow + 500*time.Millisecond):
		t.Fatal("the newer region did not stop within a period of the heal")
	}
	// Past the time the older waits for a younger node to stop.
	select {
	case err := <-older:
		t.Fatalf("the older region stopped: %v", err)
	case <-time.After(2*period + 6*time.Second):
	}
	if err := a.Err(); err != nil {
		t.Fatalf("the older region stopped: %v", err)
	}
}

// TestRegionOlderWaitsForTheYounger: a running node that hears a younger
// node of another region on its id keeps serving only while the younger
// stops: one that says it stopped is left be, and one that still serves
// 2 periods and 5 s after it was first heard (it may not hear the older)
// stops the older too, so that never both serve.
func TestRegionOlderWaitsForTheYounger(t *testing.T) {
	t.Parallel()
	url := natstest.RunServer(t).ClientURL()
	const period = 200 * time.Millisecond
	var conflicts [2]chan error
	for i, id := range []int{29, 30} {
		conflicts[i] = make(chan error, 1)
		if _, err := start(t, url, "old", id, fmt.Sprintf("old%d", i), period, func(err error) { conflicts[i] <- err }); err != nil {
			t.Fatal(err)
		}
	}
	younger := time.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano)
	other := natstest.Connect(t, url)
	for i, id := range []int{29, 30} {
		var asked atomic.Int32
		if _, err := other.Subscribe(wire.RegionSubject(id), func(m *nats.Msg) {
			// On id 30 the younger node says it stopped from its second
			// answer on; on id 29 it never does.
			stopped := i == 1 && asked.Add(1) > 1
			_ = m.Respond(fmt.Appendf(nil, `{"node":"young","region":"new","id":%d,"checked":true,"since":%q,"stopped":%t}`, id, younger, stopped))
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := other.Flush(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	grace := 2*period + 5*time.Second
	select {
	case err := <-conflicts[0]:
		refused(t, err, "new", "young")
		if !strings.Contains(err.Error(), "has not stopped") {
			t.Fatalf("the older stopped for %v, want for a younger that has not stopped", err)
		}
		if d := time.Since(t0); d < grace-time.Second {
			t.Fatalf("the older stopped %v after the younger was heard, before it waited %v for it", d, grace)
		}
		t.Logf("the older stopped %v after it first heard the younger", time.Since(t0))
	case err := <-conflicts[1]:
		t.Fatalf("the older stopped beside a younger that stopped: %v", err)
	case <-time.After(grace + 2*time.Second):
		t.Fatal("the older kept serving beside a younger that still serves")
	}
	select {
	case err := <-conflicts[1]:
		t.Fatalf("the older stopped beside a younger that stopped: %v", err)
	case <-time.After(time.Second):
	}
}
