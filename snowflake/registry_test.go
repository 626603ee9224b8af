package snowflake_test

import (
	"errors"
	"testing"

	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/snowflake/registrytest"
)

func TestStaticConformance(t *testing.T) {
	registrytest.Run(t, registrytest.Factory{
		New: func(t testing.TB) snowflake.Registry {
			r, err := snowflake.NewStatic(snowflake.LeafLayout(), 7)
			if err != nil {
				t.Fatal(err)
			}
			return r
		},
	})
}

func TestNewStaticOutOfRange(t *testing.T) {
	for _, w := range []int64{-1, 1024} {
		if _, err := snowflake.NewStatic(snowflake.LeafLayout(), w); !errors.Is(err, snowflake.ErrNoWorker) {
			t.Errorf("NewStatic(%d): %v, want ErrNoWorker", w, err)
		}
	}
}
