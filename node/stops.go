package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// stops is the node's stop stack. Start pushes the stop of each subsystem
// before it starts it; Close runs them last pushed first. A node so stops
// in the reverse order it started, from wherever its start got to, and
// the order is written once, in Start. Each stop must be safe to run when
// its subsystem never started.
type stops struct {
	mu    sync.Mutex
	stack []stop
}

type stop struct {
	name string
	fn   func(context.Context) error
}

func (s *stops) push(name string, fn func(context.Context) error) {
	s.mu.Lock()
	s.stack = append(s.stack, stop{name, fn})
	s.mu.Unlock()
}

// run runs every stop, last pushed first, and empties the stack; the
// errors are joined, each named by its subsystem.
func (s *stops) run(ctx context.Context) error {
	s.mu.Lock()
	stack := s.stack
	s.stack = nil
	s.mu.Unlock()
	var errs []error
	for i := len(stack) - 1; i >= 0; i-- {
		if err := stack[i].fn(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", stack[i].name, err))
		}
	}
	return errors.Join(errs...)
}

// closer adapts a Close method to a stop.
func closer(c interface{ Close() error }) func(context.Context) error {
	return func(context.Context) error { return c.Close() }
}
