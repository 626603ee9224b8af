package testenv_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leafmq/leafmq/internal/testenv"
)

func TestMySQLFreshDatabase(t *testing.T) {
	var name, admin string
	t.Run("use", func(t *testing.T) {
		dsn := testenv.MySQL(t)
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(cfg.DBName, "leaf_test_") || !cfg.ParseTime {
			t.Fatalf("DSN %q: want a leaf_test_ database and parseTime", dsn)
		}
		name = cfg.DBName
		cfg.DBName = ""
		admin = cfg.FormatDSN()
		if other := testenv.MySQL(t); other == dsn {
			t.Fatalf("two calls returned the same database %q", dsn)
		}

		db := open(t, dsn)
		ctx := ctxT(t)
		var n int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("fresh database has %d tables", n)
		}
		if _, err := db.ExecContext(ctx, "CREATE TABLE t (a int)"); err != nil {
			t.Fatal(err)
		}
	})
	if name == "" {
		return // skipped
	}
	var n int
	err := open(t, admin).QueryRowContext(ctxT(t),
		"SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", name).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("database %s was not dropped at clean-up", name)
	}
}

func TestMySQLPID(t *testing.T) {
	pid := testenv.MySQLPID()
	if pid == 0 {
		if os.Getenv(testenv.EnvMySQLDSN) != "" && testenv.Required() {
			t.Fatalf("%s is set but %s is not", testenv.EnvMySQLDSN, testenv.EnvMySQLPID)
		}
		t.Skip(testenv.EnvMySQLPID + " is not set")
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		t.Fatalf("%s=%d: %v", testenv.EnvMySQLPID, pid, err)
	}
	if c := strings.TrimSpace(string(comm)); c != "mariadbd" && c != "mysqld" {
		t.Fatalf("%s=%d is %q, not mariadbd", testenv.EnvMySQLPID, pid, c)
	}
}

func TestMySQLPIDUnset(t *testing.T) {
	for _, v := range []string{"", "x", "-3", "0"} {
		t.Setenv(testenv.EnvMySQLPID, v)
		if got := testenv.MySQLPID(); got != 0 {
			t.Errorf("%s=%q: MySQLPID = %d, want 0", testenv.EnvMySQLPID, v, got)
		}
	}
}

func TestMySQLWithoutServer(t *testing.T) {
	t.Setenv(testenv.EnvMySQLDSN, "")
	for _, tc := range []struct {
		name, require string
		wantSkip      bool
	}{
		{"skips", "", true},
		{"required fails", "1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(testenv.EnvRequire, tc.require)
			r := &recorder{TB: t}
			r.run(func() { testenv.MySQL(r) })
			if tc.wantSkip && (r.skip == "" || r.fatal != "") {
				t.Fatalf("skip=%q fatal=%q, want a skip", r.skip, r.fatal)
			}
			if !tc.wantSkip && (r.fatal == "" || r.skip != "") {
				t.Fatalf("skip=%q fatal=%q, want a failure", r.skip, r.fatal)
			}
			if msg := r.skip + r.fatal; !strings.Contains(msg, "make test") {
				t.Fatalf("message %q does not say to run make test", msg)
			}
		})
	}
}

// recorder is a testing.TB whose Skip and Fatal are recorded instead of
// ending the real test.
type recorder struct {
	testing.TB
	skip, fatal string
}

func (r *recorder) run(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

func (r *recorder) Skip(args ...any) { r.skip = fmt.Sprint(args...); runtime.Goexit() }
func (r *recorder) Skipf(format string, args ...any) {
	r.skip = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Fatal(args ...any) { r.fatal = fmt.Sprint(args...); runtime.Goexit() }
func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func open(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestZooKeeperWithoutServer(t *testing.T) {
	t.Setenv(testenv.EnvZKAddr, "")
	for _, tc := range []struct {
		name, require string
		wantSkip      bool
	}{
		{"skips", "", true},
		{"required fails", "1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(testenv.EnvRequire, tc.require)
			r := &recorder{TB: t}
			r.run(func() { testenv.ZooKeeper(r) })
			if tc.wantSkip && (r.skip == "" || r.fatal != "") {
				t.Fatalf("skip=%q fatal=%q, want a skip", r.skip, r.fatal)
			}
			if !tc.wantSkip && (r.fatal == "" || r.skip != "") {
				t.Fatalf("skip=%q fatal=%q, want a failure", r.skip, r.fatal)
			}
			if msg := r.skip + r.fatal; !strings.Contains(msg, "make test") {
				t.Fatalf("message %q does not say to run make test", msg)
			}
		})
	}
}

func TestEventually(t *testing.T) {
	n := 0
	testenv.Eventually(t, "the third call", time.Second, func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
	ft := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		testenv.Eventually(ft, "never", 20*time.Millisecond, func() bool { return false })
	}()
	<-done
	if !strings.Contains(ft.msg, "timed out after 20ms waiting for never") {
		t.Fatalf("message %q", ft.msg)
	}
}

// fatalRecorder records Fatalf and ends the goroutine, as testing does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
