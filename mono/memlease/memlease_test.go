package memlease_test

import (
	"testing"
	"time"

	"github.com/leafmq/leafmq/mono"
	"github.com/leafmq/leafmq/mono/leasetest"
	"github.com/leafmq/leafmq/mono/memlease"
)

func TestConformance(t *testing.T) {
	leasetest.Run(t, time.Second, func(t *testing.T, ttl time.Duration) mono.Lease {
		return memlease.New(ttl, nil)
	})
}
