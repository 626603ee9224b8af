package node

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/peers"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/mysql"
	"github.com/leafmq/leafmq/snowflake"
)

// Start waits out what passes by itself and fails at once on a wrong
// configuration.
func TestTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("listing tags: %w", segment.ErrUnavailable), true},
		{fmt.Errorf("x: %w", nats.ErrTimeout), true},
		{fmt.Errorf("x: %w", nats.ErrNoResponders), true},
		{fmt.Errorf("kv create: %w", jetstream.ErrNoStreamResponse), true}, // the stream has no leader yet
		{fmt.Errorf("connect to nats: %w", nats.ErrNoServers), true},
		{fmt.Errorf("connect to nats: %w", nats.ErrAuthorization), false},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{fmt.Errorf("snowflake: open registry: %w: kvworker: open bucket leaf_workers: no answer in time: context deadline exceeded", snowflake.ErrRegistryUnavailable), true},
		{fmt.Errorf("%w: bad flag", config.ErrConfig), false},
		{fmt.Errorf("asking the live nodes for their floors: %w", peers.ErrSilent), true},
		{fmt.Errorf("%w: %w: name", config.ErrConfig, peers.ErrNameTaken), false},
		{fmt.Errorf("mysql store: %w", mysql.ErrAccess), false},
		{fmt.Errorf("mysql store: %w", mysql.ErrSchema), false},
		{fmt.Errorf("%w: bucket name", segment.ErrInvalid), false},
		{errors.New("something else"), false},
	} {
		if got := transient(c.err); got != c.want {
			t.Errorf("transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
