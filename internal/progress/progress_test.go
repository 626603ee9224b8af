package progress

import (
	"errors"
	"testing"
)

// While phases run together, Why names every one under way with its last
// error (a node's /readyz), not the last one to begin.
func TestStartingNamesEveryPhase(t *testing.T) {
	var s Starting
	if got := s.Why(); got != "starting" {
		t.Errorf("before any phase: %q", got)
	}
	s.Set("checking the name", nil)
	s.Set("registering a snowflake worker", nil)
	s.Set("checking the name", errors.New("node b silent"))
	if got, want := s.Why(), "starting: checking the name: node b silent; registering a snowflake worker"; got != want {
		t.Errorf("two phases: %q, want %q", got, want)
	}
	s.End("checking the name")
	if got, want := s.Why(), "starting: registering a snowflake worker"; got != want {
		t.Errorf("one ended: %q, want %q", got, want)
	}
	s.End("registering a snowflake worker")
	s.Done()
	if got := s.Why(); got != "" {
		t.Errorf("started: %q", got)
	}
}
