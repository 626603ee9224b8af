package dbworker_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql" // also the "mysql" driver, for the tests' own queries

	"github.com/leafmq/leafmq/internal/freeport"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/snowflake/dbworker"
	"github.com/leafmq/leafmq/snowflake/registrytest"
)

// uidGenDDL is UidGenerator's WORKER_NODE DDL, verbatim.
const uidGenDDL = `CREATE TABLE WORKER_NODE
(
ID BIGINT NOT NULL AUTO_INCREMENT COMMENT 'auto increment id',
HOST_NAME VARCHAR(64) NOT NULL COMMENT 'host name',
PORT VARCHAR(64) NOT NULL COMMENT 'port',
TYPE INT NOT NULL COMMENT 'node type: ACTUAL or CONTAINER',
LAUNCH_DATE DATE NOT NULL COMMENT 'launch date',
MODIFIED TIMESTAMP NOT NULL COMMENT 'modified time',
CREATED TIMESTAMP NOT NULL COMMENT 'created time',
PRIMARY KEY(ID)
)
 COMMENT='DB WorkerID Assigner for UID Generator',ENGINE = INNODB`

// layoutBits returns Leaf's layout with 2^bits worker ids.
func layoutBits(bits int) snowflake.Layout {
	l := snowflake.LeafLayout()
	l.WorkerBits, l.SequenceBits = bits, 22-bits
	return l
}

func ctxT(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func open(t testing.TB, dsn string, l snowflake.Layout, o dbworker.Options) *dbworker.Registry {
	t.Helper()
	r, err := dbworker.Open(ctxT(t), dsn, l, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func sqlDB(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func TestConformance(t *testing.T) {
	dsn := testenv.MySQL(t)
	registrytest.Run(t, registrytest.Factory{
		New: func(t testing.TB) snowflake.Registry {
			return open(t, dsn, snowflake.LeafLayout(), dbworker.Options{CreateTable: true})
		},
		NewRegion: func(t testing.TB, region string) snowflake.Registry {
			return open(t, dsn, snowflake.LeafDCLayout(), dbworker.Options{CreateTable: true, Region: region})
		},
		Held:       true,
		Disposable: true,
		Distinct:   true,
		Durable:    false, // a disposable id is never handed out again
		// An operator hands the id out again: the rows from it on deleted
		// and the counter set back to it.
		Takeover: func(t testing.TB, _ snowflake.Registry, worker int64) {
			db := sqlDB(t, dsn)
			for _, q := range []string{
				fmt.Sprintf("DELETE FROM WORKER_NODE WHERE ID >= %d", worker),
				fmt.Sprintf("ALTER TABLE WORKER_NODE AUTO_INCREMENT = %d", worker),
			} {
				if _, err := db.ExecContext(ctxT(t), q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
		},
	})
}

func TestRowsLikeUidGenerator(t *testing.T) {
	dsn := testenv.MySQL(t)
	db := sqlDB(t, dsn)
	ctx := ctxT(t)
	if _, err := db.ExecContext(ctx, uidGenDDL); err != nil {
		t.Fatalf("UidGenerator DDL: %v", err)
	}
	// A row as UidGenerator's DisposableWorkerIdAssigner writes it on a host.
	if _, err := db.ExecContext(ctx, "INSERT INTO WORKER_NODE (HOST_NAME, PORT, TYPE, LAUNCH_DATE, MODIFIED, CREATED)"+
		" VALUES ('10.1.2.3', '1700000000000-12345', 1, CURDATE(), NOW(), NOW())"); err != nil {
		t.Fatal(err)
	}
	showCreate := func() string {
		var name, ddl string
		if err := db.QueryRowContext(ctx, "SHOW CREATE TABLE WORKER_NODE").Scan(&name, &ddl); err != nil {
			t.Fatal(err)
		}
		// The AUTO_INCREMENT counter is the one thing Register must change.
		var kept []string
		for _, f := range strings.Fields(ddl) {
			if !strings.HasPrefix(f, "AUTO_INCREMENT=") {
				kept = append(kept, f)
			}
		}
		return strings.Join(kept, " ")
	}
	before := showCreate()

	tests := []struct {
		name string
		opts dbworker.Options
		host string
		port string // "" checks the default's shape
		typ  int
	}{
		{"defaults", dbworker.Options{}, "", "", dbworker.TypeContainer},
		{"actual", dbworker.Options{Host: "10.9.8.7", Port: "8080", Type: dbworker.TypeActual}, "10.9.8.7", "8080", dbworker.TypeActual},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := open(t, dsn, snowflake.LeafLayout(), tc.opts)
			reg, err := r.Register(ctx)
			if err != nil {
				t.Fatalf("Register: %v", err)
			}
			if want := int64(i + 2); reg.Worker != want || !reg.LastLease.IsZero() {
				t.Fatalf("Register = %+v, want worker %d and no lease", reg, want)
			}
			var (
				host, port string
				typ        int
				today      bool
				fresh      bool
			)
			err = db.QueryRowContext(ctx, "SELECT HOST_NAME, PORT, TYPE, LAUNCH_DATE = CURDATE(),"+
				" ABS(TIMESTAMPDIFF(SECOND, MODIFIED, NOW())) < 60 AND MODIFIED = CREATED FROM WORKER_NODE WHERE ID = ?",
				reg.Worker).Scan(&host, &port, &typ, &today, &fresh)
			if err != nil {
				t.Fatal(err)
			}
			if tc.host != "" && host != tc.host || host == "" {
				t.Errorf("HOST_NAME %q, want %q", host, tc.host)
			}
			if tc.port != "" && port != tc.port {
				t.Errorf("PORT %q, want %q", port, tc.port)
			}
			if tc.port == "" {
				var ms, pid int64
				if _, err := fmt.Sscanf(port, "%d-%d", &ms, &pid); err != nil || pid <= 0 {
					t.Errorf("default PORT %q, want {unix ms}-{pid}", port)
				}
			}
			if typ != tc.typ || !today || !fresh {
				t.Errorf("TYPE %d (want %d), LAUNCH_DATE today %v, MODIFIED/CREATED now %v", typ, tc.typ, today, fresh)
			}
			again, err := r.Register(ctx)
			if err != nil || again != reg {
				t.Fatalf("second Register = %+v, %v; want %+v", again, err, reg)
			}
		})
	}
	if after := showCreate(); after != before {
		t.Fatalf("WORKER_NODE changed:\n%s\nwas\n%s", after, before)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM WORKER_NODE").Scan(&n); err != nil || n != 3 {
		t.Fatalf("%d rows (%v), want 3: one per Registry", n, err)
	}
}

func TestMissingTable(t *testing.T) {
	dsn := testenv.MySQL(t)
	_, err := dbworker.Open(ctxT(t), dsn, snowflake.LeafLayout(), dbworker.Options{})
	if !errors.Is(err, dbworker.ErrSchema) {
		t.Fatalf("Open without WORKER_NODE: %v, want ErrSchema", err)
	}
}

// TestAccessDenied: a user the server refuses, or one without the grants
// the registry needs, is a configuration to fix (ErrAccess), not an outage
// to wait out: a node fails its start with it instead of retrying for
// ever (it did, as "worker registry unavailable").
func TestAccessDenied(t *testing.T) {
	dsn := testenv.MySQL(t)
	cfg, err := driver.ParseDSN(testenv.MySQLUser(t, dsn, "SELECT"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = dbworker.Open(ctxT(t), cfg.FormatDSN(), snowflake.LeafLayout(), dbworker.Options{CreateTable: true})
	if !errors.Is(err, dbworker.ErrAccess) || errors.Is(err, snowflake.ErrRegistryUnavailable) {
		t.Fatalf("Open by a user who may only read: %v, want ErrAccess alone", err)
	}
	cfg.Passwd = "wrong"
	_, err = dbworker.Open(ctxT(t), cfg.FormatDSN(), snowflake.LeafLayout(), dbworker.Options{})
	if !errors.Is(err, dbworker.ErrAccess) || errors.Is(err, snowflake.ErrRegistryUnavailable) {
		t.Fatalf("Open with a wrong password: %v, want ErrAccess alone", err)
	}
}

func TestNoWorkerBeyondLayout(t *testing.T) {
	dsn := testenv.MySQL(t)
	l := layoutBits(4) // worker ids 0..15
	open(t, dsn, l, dbworker.Options{CreateTable: true})
	if _, err := sqlDB(t, dsn).ExecContext(ctxT(t), "ALTER TABLE WORKER_NODE AUTO_INCREMENT = 15"); err != nil {
		t.Fatal(err)
	}
	reg, err := open(t, dsn, l, dbworker.Options{}).Register(ctxT(t))
	if err != nil || reg.Worker != 15 {
		t.Fatalf("Register = %+v, %v; want worker 15", reg, err)
	}
	_, err = open(t, dsn, l, dbworker.Options{}).Register(ctxT(t))
	if !errors.Is(err, snowflake.ErrNoWorker) {
		t.Fatalf("Register past the layout: %v, want ErrNoWorker", err)
	}
	for _, s := range []string{"ID 16", "never reused", "1024"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
}

func TestLeaseInSideTable(t *testing.T) {
	dsn := testenv.MySQL(t)
	db := sqlDB(t, dsn)
	ctx := ctxT(t)
	r := open(t, dsn, snowflake.LeafLayout(), dbworker.Options{CreateTable: true})
	reg, err := r.Register(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stored := func() int64 {
		t.Helper()
		var ms int64
		if err := db.QueryRowContext(ctx, "SELECT LEASE_MS FROM LEAF_WORKER_LEASE WHERE WORKER_ID = ?", reg.Worker).Scan(&ms); err != nil {
			t.Fatal(err)
		}
		return ms
	}
	base := time.UnixMilli(2_000_000_000_000)
	steps := []struct {
		name  string
		until time.Time
		want  int64
	}{
		{"first", base, base.UnixMilli()},
		{"higher, rounded up", base.Add(1500 * time.Microsecond), base.UnixMilli() + 2},
		{"lower is a no-op", base.Add(-time.Hour), base.UnixMilli() + 2},
	}
	for _, s := range steps {
		if err := r.Lease(ctx, s.until); err != nil {
			t.Fatalf("%s: Lease: %v", s.name, err)
		}
		if got := stored(); got != s.want {
			t.Fatalf("%s: LEASE_MS %d, want %d", s.name, got, s.want)
		}
	}
	// Another registry (this one's id seen again, say after a TRUNCATE)
	// must not lower it either: the upsert keeps the greatest.
	if _, err := db.ExecContext(ctx, "INSERT INTO LEAF_WORKER_LEASE (WORKER_ID, LEASE_MS) VALUES (?, 1)"+
		" ON DUPLICATE KEY UPDATE LEASE_MS = GREATEST(LEASE_MS, VALUES(LEASE_MS))", reg.Worker); err != nil {
		t.Fatal(err)
	}
	if got := stored(); got != base.UnixMilli()+2 {
		t.Fatalf("LEASE_MS %d after a lower upsert", got)
	}
	// A recycled id (counter reset) reports the previous holder's lease.
	if _, err := db.ExecContext(ctx, "TRUNCATE TABLE WORKER_NODE"); err != nil {
		t.Fatal(err)
	}
	again, err := open(t, dsn, snowflake.LeafLayout(), dbworker.Options{}).Register(ctx)
	if err != nil || again.Worker != reg.Worker || again.LastLease.UnixMilli() != base.UnixMilli()+2 {
		t.Fatalf("Register after TRUNCATE = %+v, %v; want worker %d with its lease", again, err, reg.Worker)
	}
}

func TestUnreachable(t *testing.T) {
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = dbworker.Open(ctxT(t), "root@tcp("+addr+")/leaf", snowflake.LeafLayout(), dbworker.Options{Timeout: time.Second})
	if !errors.Is(err, snowflake.ErrRegistryUnavailable) {
		t.Fatalf("Open on a closed port: %v, want ErrRegistryUnavailable", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Open took %v with a 1s timeout", d)
	}
}

func TestInvalidOptions(t *testing.T) {
	tests := []struct {
		name string
		dsn  string
		opts dbworker.Options
	}{
		{"no database", "root@tcp(127.0.0.1:1)/", dbworker.Options{}},
		{"bad dsn", "root@tcp(127.0.0.1:1", dbworker.Options{}},
		{"type", "root@tcp(127.0.0.1:1)/x", dbworker.Options{Type: 3}},
		{"long host", "root@tcp(127.0.0.1:1)/x", dbworker.Options{Host: strings.Repeat("h", 65)}},
		{"long port", "root@tcp(127.0.0.1:1)/x", dbworker.Options{Port: strings.Repeat("p", 65)}},
		{"negative timeout", "root@tcp(127.0.0.1:1)/x", dbworker.Options{Timeout: -time.Second}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := dbworker.Open(ctxT(t), tc.dsn, snowflake.LeafLayout(), tc.opts)
			if !errors.Is(err, dbworker.ErrInvalid) {
				t.Fatalf("Open: %v, want ErrInvalid", err)
			}
		})
	}
}

// TestLeaseTableWithoutOwner: a LEAF_WORKER_LEASE made before its OWNER
// column existed gets it at Open, and fencing works on it.
func TestLeaseTableWithoutOwner(t *testing.T) {
	dsn := testenv.MySQL(t)
	db := sqlDB(t, dsn)
	ctx := ctxT(t)
	if _, err := db.ExecContext(ctx, "CREATE TABLE LEAF_WORKER_LEASE (WORKER_ID BIGINT NOT NULL, LEASE_MS BIGINT NOT NULL, PRIMARY KEY(WORKER_ID)) ENGINE = INNODB"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO LEAF_WORKER_LEASE (WORKER_ID, LEASE_MS) VALUES (1, 2000000000000)"); err != nil {
		t.Fatal(err)
	}
	r := open(t, dsn, snowflake.LeafLayout(), dbworker.Options{CreateTable: true})
	reg, err := r.Register(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if reg.Worker != 1 || reg.LastLease.UnixMilli() != 2000000000000 {
		t.Fatalf("Register = %+v, want worker 1 with the stored lease", reg)
	}
	if err := r.Lease(ctx, time.UnixMilli(2000000000001)); err != nil {
		t.Fatalf("Lease: %v", err)
	}
	if got := r.ClaimTTL(); got != dbworker.DefaultClaimTTL {
		t.Fatalf("ClaimTTL = %v, want %v", got, dbworker.DefaultClaimTTL)
	}
}

// TestTakeoverStopsSource: an operator resets WORKER_NODE's counter while
// a node serves, and another node registers the same worker id. The first
// node's Source stops serving at its next renewal (the Lease is fenced on
// OWNER), and the new holder starts after the first one's lease.
func TestTakeoverStopsSource(t *testing.T) {
	dsn := testenv.MySQL(t)
	db := sqlDB(t, dsn)
	ctx := ctxT(t)
	opened := false
	src, err := snowflake.StartSource(ctx, snowflake.SourceConfig{
		// A new registry: no other process can serve its worker ids.
		NewWorker: func(context.Context, int64) bool { return true },
		Open: func(ctx context.Context) (snowflake.Registry, error) {
			if opened {
				return nil, errors.New("test: no second registry")
			}
			opened = true
			return dbworker.Open(ctx, dsn, snowflake.LeafLayout(), dbworker.Options{CreateTable: true})
		},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	w := src.Worker()
	// A worker id with no lease on record waits out a holder that stopped.
	testenv.Eventually(t, "the source to serve", 10*time.Second, func() bool { return src.State() == snowflake.StateServing })
	if _, err := src.Fill(ctx, make([]int64, 16)); err != nil {
		t.Fatalf("Fill: %v", err)
	}
	leased := src.Leased()
	for _, q := range []string{
		fmt.Sprintf("DELETE FROM WORKER_NODE WHERE ID >= %d", w),
		fmt.Sprintf("ALTER TABLE WORKER_NODE AUTO_INCREMENT = %d", w),
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	reg, err := open(t, dsn, snowflake.LeafLayout(), dbworker.Options{}).Register(ctx)
	if err != nil || reg.Worker != w {
		t.Fatalf("Register after the reset = %+v, %v; want worker %d", reg, err, w)
	}
	if reg.LastLease.Before(leased.Truncate(time.Millisecond)) {
		t.Fatalf("new holder: LastLease %v, below the old holder's lease %v", reg.LastLease, leased)
	}
	testenv.Eventually(t, "the old holder to stop serving", 10*time.Second, func() bool {
		_, ok := src.Holds()
		return !ok && src.State() != snowflake.StateServing
	})
	dst := make([]int64, 16)
	if n, err := src.Fill(ctx, dst); n != 0 || err == nil {
		t.Fatalf("Fill on the old holder = %d ids, %v; want an error", n, err)
	}
}

// TestRegionMigration: tables made before regions get them at Open without
// losing a row: WORKER_NODE's rows and LEAF_WORKER_LEASE's leases are those
// of region "" (no regions), which a region's registrations never see, and
// an older leafmq's statements still find them.
func TestRegionMigration(t *testing.T) {
	dsn := testenv.MySQL(t)
	db := sqlDB(t, dsn)
	ctx := ctxT(t)
	for _, q := range []string{
		uidGenDDL,
		"INSERT INTO WORKER_NODE (HOST_NAME, PORT, TYPE, LAUNCH_DATE, MODIFIED, CREATED) VALUES ('old', '1', 2, CURDATE(), NOW(), NOW())",
		"CREATE TABLE LEAF_WORKER_LEASE (WORKER_ID BIGINT NOT NULL, LEASE_MS BIGINT NOT NULL, OWNER VARCHAR(64) NOT NULL DEFAULT '', PRIMARY KEY(WORKER_ID)) ENGINE = INNODB",
		"INSERT INTO LEAF_WORKER_LEASE (WORKER_ID, LEASE_MS, OWNER) VALUES (0, 2000000000000, 'old'), (1, 2000000000000, 'old')",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	eu := open(t, dsn, snowflake.LeafDCLayout(), dbworker.Options{Region: "eu"})
	reg, err := eu.Register(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if reg.Worker != 0 || !reg.LastLease.IsZero() {
		t.Fatalf("first registration of region eu = %+v, want worker 0 with no lease (the old lease of worker 0 is region \"\"'s)", reg)
	}
	if err := eu.Lease(ctx, time.UnixMilli(2100000000000)); err != nil {
		t.Fatal(err)
	}
	var region string
	if err := db.QueryRowContext(ctx, "SELECT REGION FROM WORKER_NODE WHERE HOST_NAME = 'old'").Scan(&region); err != nil || region != "" {
		t.Fatalf("the row before regions: region %q, %v; want \"\"", region, err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM WORKER_NODE WHERE REGION = 'eu'").Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows of region eu: %d, %v; want 1", n, err)
	}
	// An older leafmq's fenced lease still finds its row, and only its own.
	res, err := db.ExecContext(ctx, "UPDATE LEAF_WORKER_LEASE SET LEASE_MS = GREATEST(LEASE_MS, ?) WHERE WORKER_ID = ? AND OWNER = ?", 2000000000001, 0, "old")
	if err != nil {
		t.Fatal(err)
	}
	if k, _ := res.RowsAffected(); k != 1 {
		t.Fatalf("an older leafmq's lease of worker 0 changed %d rows, want 1", k)
	}
	var ms int64
	if err := db.QueryRowContext(ctx, "SELECT LEASE_MS FROM LEAF_WORKER_LEASE WHERE REGION = 'eu' AND WORKER_ID = 0").Scan(&ms); err != nil || ms != 2100000000000 {
		t.Fatalf("region eu's lease of worker 0: %d, %v; want 2100000000000", ms, err)
	}
	// A second open (another node) finds the tables done, and the next
	// worker of the region.
	reg, err = open(t, dsn, snowflake.LeafDCLayout(), dbworker.Options{Region: "eu"}).Register(ctx)
	if err != nil || reg.Worker != 1 || !reg.LastLease.IsZero() {
		t.Fatalf("second registration of region eu = %+v, %v; want worker 1 with no lease", reg, err)
	}
	// Without regions the worker id is WORKER_NODE's ID, as before, and
	// the leases are those of region "".
	reg, err = open(t, dsn, snowflake.LeafLayout(), dbworker.Options{}).Register(ctx)
	if err != nil || reg.Worker != 4 {
		t.Fatalf("registration without regions = %+v, %v; want worker 4 (the table's fourth row)", reg, err)
	}
}
