package jskv

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestClassify(t *testing.T) {
	api := func(code, errCode int) error {
		return &jetstream.APIError{Code: code, ErrorCode: jetstream.ErrorCode(errCode)}
	}
	tests := []struct {
		name                           string
		err                            error
		conflict, transient, unavailbl bool
	}{
		{"nil", nil, false, false, false},
		{"revision mismatch", fmt.Errorf("x: %w", jetstream.ErrKeyRevisionMismatch), true, false, false},
		{"wrong last seq 10071", api(400, 10071), true, false, false},
		{"wrong last seq clustered 10164", api(400, 10164), true, false, false},
		{"no responders", nats.ErrNoResponders, false, true, true},
		{"leader election 503", api(503, 10008), false, true, true},
		{"jetstream disabled", api(503, int(jetstream.JSErrCodeJetStreamNotEnabled)), false, false, true},
		{"timeout", nats.ErrTimeout, false, false, true},
		{"deadline", context.DeadlineExceeded, false, false, true},
		{"other", errors.New("boom"), false, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Conflict(tc.err); got != tc.conflict {
				t.Errorf("Conflict = %v", got)
			}
			if got := Transient(tc.err); got != tc.transient {
				t.Errorf("Transient = %v", got)
			}
			if got := Unavailable(tc.err); got != tc.unavailbl {
				t.Errorf("Unavailable = %v", got)
			}
		})
	}
}
