// Package progress tracks what a process waits for while it starts: the
// phases under way (several may run together) and each one's last failed
// attempt, for a readiness endpoint to name.
package progress

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Starting is what a process is waiting for before it serves: every
// phase under way, as checks may run together. Safe for concurrent use.
type Starting struct {
	At      time.Time // the start began; set before anything runs
	mu      sync.Mutex
	started bool
	phases  []string         // under way, in the order they began
	errs    map[string]error // the last failed attempt of a phase under way
}

// Set notes phase under way, err its last failed attempt (nil: none yet).
func (s *Starting) Set(phase string, err error) {
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

// End notes phase done.
func (s *Starting) End(phase string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.errs[phase]; ok {
		delete(s.errs, phase)
		s.phases = slices.DeleteFunc(s.phases, func(p string) bool { return p == phase })
	}
}

// Done notes the start finished.
func (s *Starting) Done() {
	s.mu.Lock()
	s.started, s.phases, s.errs = true, nil, nil
	s.mu.Unlock()
}

// Why is "" once the start finished, else what it waits for.
func (s *Starting) Why() string {
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
