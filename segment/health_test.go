package segment_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leafmq/leafmq/segment"
)

// TestLoadHealth: failed loads of a tag count up from the first one's
// time, keeping the last error; a load that succeeds ends the run and
// reports it once; Failing lists the failing tags in order.
func TestLoadHealth(t *testing.T) {
	var h segment.LoadHealth
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	errA, errB := errors.New("a"), errors.New("b")
	if _, ended := h.Record(segment.LoadEvent{Tag: "ok"}, t0); ended {
		t.Fatal("a first load that succeeds ended a run of failures")
	}
	h.Record(segment.LoadEvent{Tag: "y", Err: errA}, t0)
	h.Record(segment.LoadEvent{Tag: "x", Err: errA}, t0.Add(time.Second))
	f, _ := h.Record(segment.LoadEvent{Tag: "y", Err: errB}, t0.Add(2*time.Second))
	if want := (segment.LoadFailure{Tag: "y", Failures: 2, Since: t0, Err: errB}); f != want {
		t.Fatalf("second failure of y: %+v, want %+v", f, want)
	}
	if got := h.Failing(); len(got) != 2 || got[0].Tag != "x" || got[1].Tag != "y" {
		t.Fatalf("Failing = %+v, want x then y", got)
	}
	f, ended := h.Record(segment.LoadEvent{Tag: "y"}, t0.Add(3*time.Second))
	if !ended || f.Failures != 2 || !f.Since.Equal(t0) {
		t.Fatalf("y loads again: %+v, %v; want the run of 2 since t0", f, ended)
	}
	if _, ended := h.Record(segment.LoadEvent{Tag: "y"}, t0.Add(4*time.Second)); ended {
		t.Fatal("the run of y ended twice")
	}
	if got := h.Failing(); len(got) != 1 || got[0].Tag != "x" {
		t.Fatalf("Failing = %+v, want x alone", got)
	}
}
