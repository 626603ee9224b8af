package node

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// starting is what a node is waiting for before it serves, shown on
// /readyz while Start runs: every phase under way, as checks run together.
type starting struct {
	at      time.Time // Start began; set before anything runs
	mu      sync.Mutex
	started bool
	phases  []string         // under way, in the order they began
	errs    map[string]error // the last failed attempt of a phase under way
}

// set notes phase under way, err its last failed attempt (nil: none yet).
func (s *starting) set(phase string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.errs == nil {
		s.errs = map[string]error{}
	}
	if _, ok := s.errs[phase]; !ok {
		s.phases = append(s.phases, phase)
	}
	s.errs[phase] = err
}

// end notes phase done.
func (s *starting) end(phase string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.errs[phase]; ok {
		delete(s.errs, phase)
		s.phases = slices.DeleteFunc(s.phases, func(p string) bool { return p == phase })
	}
}

// done notes the node started.
func (s *starting) done() {
	s.mu.Lock()
	s.started, s.phases, s.errs = true, nil, nil
	s.mu.Unlock()
}

// why is "" once the node has started, else what it waits for.
func (s *starting) why() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return ""
	}
	if len(s.phases) == 0 {
		return "starting"
	}
	parts := make([]string, len(s.phases))
	for i, p := range s.phases {
		parts[i] = p
		if err := s.errs[p]; err != nil {
			parts[i] = fmt.Sprintf("%s: %v", p, err)
		}
	}
	return "starting: " + strings.Join(parts, "; ")
}
