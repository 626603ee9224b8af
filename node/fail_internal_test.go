package node

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"
)

// TestFailEndsTheStart: a region id found taken while the node still
// starts (a phase waiting for JetStream, which a healed gateway cut left
// electing its leader) ends the start at once with that error, before any
// later phase runs: the node does not serve on until the phase is done.
// Failed delivers the error too.
func TestFailEndsTheStart(t *testing.T) {
	n := &Node{log: slog.New(slog.DiscardHandler), life: life{failed: make(chan error, 1)}}
	ctx, stop := context.WithCancelCause(context.Background())
	n.life.stopStart = stop
	taken := errors.New("region id 0 is taken by region c0")
	waiting := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- n.runPhases(ctx, []startPhase{
			{name: "quick", start: func(context.Context) error { return nil }},
			{name: "waits for JetStream", start: func(ctx context.Context) error {
				close(waiting)
				<-ctx.Done()
				return ctx.Err()
			}},
			{name: "serves", start: func(context.Context) error { t.Error("a phase ran after the start was ended"); return nil }},
		})
	}()
	<-waiting
	n.fail(taken)
	select {
	case err := <-errc:
		if !errors.Is(err, taken) {
			t.Fatalf("the start ended with %v, want the region's error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the start went on after fail")
	}
	select {
	case err := <-n.Failed():
		if !errors.Is(err, taken) {
			t.Errorf("Failed delivered %v", err)
		}
	default:
		t.Error("Failed delivered nothing")
	}
}
