package peers

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/wire"
)

// Tell asks every live member that serves on subject and waits for each to
// answer (each answer names its instance: responder's tag-changed answer),
// as HighestFloor waits for their floors: past window while the members'
// list cannot be trusted, and up to ctx. A member that does not answer
// within ctx makes it fail with ErrSilent naming it (one whose key lapsed
// is gone and not waited for).
func (s *Set) Tell(ctx context.Context, subject string) error {
	return s.gather(ctx, subject, CreateWindow, func(m wire.Member) bool { return m.Serving }, func(*nats.Msg) {})
}
