package ask

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/wire"
)

// ErrNoLeafd: no node answers the subject (no responders).
var ErrNoLeafd = errors.New("no leafd is answering")

// Request sends msg to the one node that answers it (a queue group, or
// the first reply) within ctx and returns the reply; an error reply is its
// wire error (wire.ReplyError), no responder is ErrNoLeafd.
func Request(ctx context.Context, nc *nats.Conn, msg *nats.Msg) (*nats.Msg, error) {
	reply, err := nc.RequestMsgWithContext(ctx, msg)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("%w: %s (is leafd running?)", ErrNoLeafd, msg.Subject)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", msg.Subject, err)
	}
	if err := wire.ReplyError(reply); err != nil {
		return nil, err
	}
	return reply, nil
}

// Admin sends req as JSON (an empty body when nil) to an admin subject
// (wire.TagsSubject, wire.TagCreateSubject, …) and decodes the JSON reply
// into out, as Request does.
func Admin(ctx context.Context, nc *nats.Conn, subject string, req, out any) error {
	msg := nats.NewMsg(subject)
	if req != nil {
		b, err := json.Marshal(req)
		if err != nil {
			return err
		}
		msg.Data = b
	}
	reply, err := Request(ctx, nc, msg)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(reply.Data, out); err != nil {
		return fmt.Errorf("%s: reply: %w", subject, err)
	}
	return nil
}
