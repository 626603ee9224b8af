package responder_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/wire"
)

// The engines' errors carry their wire codes (wire.CodeOf), wrapped or
// joined, with 400 over 404 over 503 when a chain holds several.
func TestEngineErrorCodes(t *testing.T) {
	for _, c := range []struct {
		err  error
		code string
	}{
		{segment.ErrInvalid, wire.CodeBadRequest},
		{segment.ErrTagExists, wire.CodeBadRequest},
		{segment.ErrBelowFloor, wire.CodeUnavailable},
		{fmt.Errorf("%w: %w", segment.ErrNotReady, segment.ErrBelowFloor), wire.CodeUnavailable},
		{fmt.Errorf("%w: %w", segment.ErrInvalid, segment.ErrBelowFloor), wire.CodeBadRequest}, // an operator's floor (failAdmin)
		{segment.ErrUnknownTag, wire.CodeNotFound},
		{segment.ErrTagDeleted, wire.CodeNotFound},
		{segment.ErrStoreChanged, wire.CodeNotFound},
		{segment.ErrNotReady, wire.CodeUnavailable},
		{segment.ErrUnavailable, wire.CodeUnavailable},
		{segment.ErrClosed, wire.CodeUnavailable},
		{segment.ErrTagLimit, wire.CodeUnavailable},
		{snowflake.ErrNotServing, wire.CodeUnavailable},
		{snowflake.ErrClockBackwards, wire.CodeUnavailable},
		{snowflake.ErrLeaseFailed, wire.CodeUnavailable},
		{snowflake.ErrExpired, wire.CodeUnavailable},
		{snowflake.ErrOutOfRange, wire.CodeUnavailable},
		{context.DeadlineExceeded, wire.CodeUnavailable},
		{fmt.Errorf("x: %w", context.Canceled), wire.CodeUnavailable},
		{errors.New("disk on fire"), wire.CodeInternal},
		{fmt.Errorf("tag %q: %w", "t", segment.ErrUnknownTag), wire.CodeNotFound},
		{fmt.Errorf("%w: %w", segment.ErrNotReady, segment.ErrMode), wire.CodeBadRequest},
		{fmt.Errorf("%w: %w", segment.ErrNotReady, segment.ErrTagDeleted), wire.CodeNotFound},
		{errors.Join(errors.New("a"), fmt.Errorf("b: %w", snowflake.ErrNotServing)), wire.CodeUnavailable},
	} {
		if got := wire.CodeOf(c.err); got != c.code {
			t.Errorf("CodeOf(%v) = %s, want %s", c.err, got, c.code)
		}
	}
}
