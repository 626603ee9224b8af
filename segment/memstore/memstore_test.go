package memstore_test

import (
	"testing"

	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/memstore"
	"github.com/leafmq/leafmq/segment/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Factory{
		New: func(testing.TB) segment.Store { return memstore.New() },
		Unreachable: func(testing.TB) (segment.Store, error) {
			s := memstore.New()
			s.SetDown(true)
			return s, nil
		},
	})
}
