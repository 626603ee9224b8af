package chaos_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leafmq/leafmq/internal/chaos"
	"github.com/leafmq/leafmq/internal/testenv"
)

// TestChaosShort is the short soak: every fault once in about 100 s of load
// at 1500 req/s on a real 3-node NATS cluster, MariaDB, ZooKeeper and three
// leafd processes. It fails on a duplicate id, a crash or a fault that could
// not be injected; availability and recovery are reported, not asserted.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: a 2-minute soak; not in -short")
	}
	if os.Getenv(testenv.EnvMySQLDSN) == "" && !testenv.Required() {
		t.Skip("chaos: a 2-minute soak that runs under make test (LEAF_TEST_MYSQL_DSN unset)")
	}
	if err := chaos.Available(); err != nil {
		if testenv.Required() {
			t.Fatalf("%v (%s=1 forbids skipping)", err, testenv.EnvRequire)
		}
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := chaos.Run(ctx, chaos.Config{
		Duration:      100 * time.Second,
		Rate:          1500,
		Logger:        slog.New(slog.NewTextHandler(t.Output(), nil)),
		Progress:      t.Output(),
		ProgressEvery: 20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	rep.WriteText(t.Output())
	path := filepath.Join(t.TempDir(), "report.json")
	if err := rep.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	if rep.Duplicates != 0 {
		t.Errorf("%d duplicate ids", rep.Duplicates)
	}
	if !rep.Pass {
		t.Errorf("run failed: %v", rep.Failures)
	}
}
