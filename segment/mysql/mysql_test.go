package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leafmq/leafmq/wire"

	driver "github.com/go-sql-driver/mysql"

	"github.com/leafmq/leafmq/internal/freeport"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/mysql"
	"github.com/leafmq/leafmq/segment/storetest"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/snowflake/dbworker"
)

// leafDDL and leafInsert are verbatim from Leaf's README.
const (
	leafDDL = "CREATE TABLE `leaf_alloc` (\n" +
		"  `biz_tag` varchar(128)  NOT NULL DEFAULT '',\n" +
		"  `max_id` bigint(20) NOT NULL DEFAULT '1',\n" +
		"  `step` int(11) NOT NULL,\n" +
		"  `description` varchar(256)  DEFAULT NULL,\n" +
		"  `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,\n" +
		"  PRIMARY KEY (`biz_tag`)\n" +
		") ENGINE=InnoDB"
	leafInsert = "insert into leaf_alloc(biz_tag, max_id, step, description) " +
		"values('leaf-segment-test', 1, 2000, 'Test leaf Segment Mode Get Id')"
)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// open opens a Store on dsn, closed at clean-up.
func open(t testing.TB, dsn string, opts mysql.Options) *mysql.Store {
	t.Helper()
	s, err := mysql.Open(testCtx(t), dsn, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// rawDB opens a plain database/sql pool on dsn, closed at clean-up.
func rawDB(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func exec(t testing.TB, db *sql.DB, query string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(testCtx(t), query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// deadDSN names a database on a 127.0.0.1 port nothing listens on.
func deadDSN(t testing.TB) string {
	t.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return "root@tcp(" + addr + ")/leaf"
}

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Factory{
		New: func(t testing.TB) segment.Store {
			return open(t, testenv.MySQL(t), mysql.Options{CreateTable: true})
		},
		// Built without Open's ping, so that every call meets the dead port.
		Unreachable: func(t testing.TB) (segment.Store, error) {
			s, err := mysql.NewUnconnected(deadDSN(t), mysql.Options{Timeout: 500 * time.Millisecond})
			if err != nil {
				return nil, err
			}
			return s, nil
		},
	})
}

func TestOpenUnreachable(t *testing.T) {
	start := time.Now()
	_, err := mysql.Open(testCtx(t), deadDSN(t), mysql.Options{Timeout: 500 * time.Millisecond})
	if !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("Open on a closed port = %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Open took %v to fail", d)
	}
}

func TestOpenErrors(t *testing.T) {
	dsn := testenv.MySQL(t)
	cfg, err := driver.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := rawDB(t, dsn)
	exec(t, db, "CREATE TABLE not_leaf (biz_tag varchar(128) PRIMARY KEY, max_id bigint NOT NULL)")
	exec(t, db, "CREATE TABLE myisam_alloc (biz_tag varchar(128) NOT NULL PRIMARY KEY, max_id bigint NOT NULL DEFAULT 1,"+
		" step int NOT NULL, description varchar(256), update_time timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP) ENGINE=MyISAM")
	noDB := *cfg
	noDB.DBName = ""
	otherDB := *cfg
	otherDB.DBName = cfg.DBName + "_missing"
	wrongPassword := *cfg
	wrongPassword.User, wrongPassword.Passwd = "leafmq_nobody", "wrong"

	tests := []struct {
		name string
		dsn  string
		opts mysql.Options
		want error
	}{
		{"bad dsn", "root@tcp(127.0.0.1:1", mysql.Options{}, segment.ErrInvalid},
		{"no database", noDB.FormatDSN(), mysql.Options{}, segment.ErrInvalid},
		{"bad table name", dsn, mysql.Options{Table: "leaf.alloc"}, segment.ErrInvalid},
		{"table name injection", dsn, mysql.Options{Table: "t`; DROP TABLE x; --"}, segment.ErrInvalid},
		{"negative timeout", dsn, mysql.Options{Timeout: -time.Second}, segment.ErrInvalid},
		{"negative pool", dsn, mysql.Options{MaxOpenConns: -1}, segment.ErrInvalid},
		{"table missing", dsn, mysql.Options{}, mysql.ErrSchema},
		{"database missing", otherDB.FormatDSN(), mysql.Options{CreateTable: true}, mysql.ErrSchema},
		{"wrong columns", dsn, mysql.Options{Table: "not_leaf", CreateTable: true}, mysql.ErrSchema},
		{"not transactional", dsn, mysql.Options{Table: "myisam_alloc"}, mysql.ErrSchema},
		{"wrong password", wrongPassword.FormatDSN(), mysql.Options{}, mysql.ErrAccess},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := mysql.Open(testCtx(t), tc.dsn, tc.opts)
			if err == nil {
				_ = s.Close()
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Open = %v, want %v", err, tc.want)
			}
		})
	}
	var n int
	if err := db.QueryRowContext(testCtx(t), "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("failed Opens left %d tables, want the 2 the test made", n)
	}
}

// A database set up by Leaf's own README is used as it is.
func TestLeafDatabase(t *testing.T) {
	dsn := testenv.MySQL(t)
	db := rawDB(t, dsn)
	exec(t, db, leafDDL)
	exec(t, db, leafInsert)
	showCreate := func() string {
		var name, ddl string
		if err := db.QueryRowContext(testCtx(t), "SHOW CREATE TABLE leaf_alloc").Scan(&name, &ddl); err != nil {
			t.Fatal(err)
		}
		return ddl
	}
	before := showCreate()

	// Leaf's database has no history table: Open needs CreateTable (as
	// leafd sets it) or deploy/schema.sql to add it.
	if s, err := mysql.Open(testCtx(t), dsn, mysql.Options{}); !errors.Is(err, mysql.ErrSchema) ||
		!strings.Contains(err.Error(), "leaf_alloc_history") {
		if err == nil {
			_ = s.Close()
		}
		t.Fatalf("Open without the history table = %v, want ErrSchema naming leaf_alloc_history", err)
	}
	for _, create := range []bool{true, false} {
		s := open(t, dsn, mysql.Options{CreateTable: create})
		_ = s.Close()
	}
	s := open(t, dsn, mysql.Options{CreateTable: true})
	ctx := testCtx(t)
	got, err := s.Get(ctx, wire.MustTag("leaf-segment-test"))
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != wire.MustTag("leaf-segment-test") || got.MaxID != 1 || got.Step != 2000 ||
		got.Description != "Test leaf Segment Mode Get Id" {
		t.Fatalf("Get = %+v", got)
	}
	if d := time.Since(got.UpdateTime); d < -time.Minute || d > time.Minute {
		t.Fatalf("update_time = %v, %v from now: time zone mix-up?", got.UpdateTime, d)
	}
	for i, want := range []int64{1, 2001, 4001} {
		a, err := s.Advance(ctx, wire.MustTag("leaf-segment-test"), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if a.Start() != want || a.End() != want+2000 || a.TableStep != 2000 {
			t.Fatalf("Next #%d = %+v, want [%d,%d)", i, a, want, want+2000)
		}
	}
	tags, err := s.Tags(ctx)
	if err != nil || len(tags) != 1 || tags[0] != "leaf-segment-test" {
		t.Fatalf("Tags = %v, %v", tags, err)
	}

	// Rows leafmq writes read back as Leaf reads them.
	if err := s.Create(ctx, segment.Tag{Name: wire.MustTag("from-leafmq"), Step: 1000}); err != nil {
		t.Fatal(err)
	}
	var (
		maxID int64
		step  int
		desc  sql.NullString
		upd   time.Time
	)
	err = db.QueryRowContext(ctx, "SELECT max_id, step, description, update_time FROM leaf_alloc WHERE biz_tag = ?",
		"from-leafmq").Scan(&maxID, &step, &desc, &upd)
	if err != nil {
		t.Fatal(err)
	}
	if maxID != 1 || step != 1000 || desc.Valid {
		t.Fatalf("row = %d %d %v, want 1 1000 NULL", maxID, step, desc)
	}
	if err := db.QueryRowContext(ctx, "SELECT max_id FROM leaf_alloc WHERE biz_tag = 'leaf-segment-test'").Scan(&maxID); err != nil || maxID != 6001 {
		t.Fatalf("max_id = %d, %v; want 6001", maxID, err)
	}

	// Leaf's table keeps the database's default charset (latin1 on a server
	// without a config): in strict mode text it cannot hold is ErrInvalid.
	var charset, sqlMode string
	err = db.QueryRowContext(ctx, "SELECT CHARACTER_SET_NAME, @@SESSION.sql_mode FROM information_schema.COLUMNS"+
		" WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'leaf_alloc' AND COLUMN_NAME = 'description'").Scan(&charset, &sqlMode)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Create(ctx, segment.Tag{Name: wire.MustTag("cjk"), Description: "美团点评"})
	switch {
	case strings.HasPrefix(charset, "utf8") && err != nil:
		t.Fatalf("Create with a CJK description in %s = %v", charset, err)
	case !strings.HasPrefix(charset, "utf8") && strings.Contains(sqlMode, "STRICT") && !errors.Is(err, segment.ErrInvalid):
		t.Fatalf("Create with a CJK description in %s = %v, want ErrInvalid", charset, err)
	}

	if after := showCreate(); after != before {
		t.Fatalf("the table was altered:\n%s\nbecame\n%s", before, after)
	}
}

// Case-insensitive collation: one row, one counter, whatever the case.
func TestTagCase(t *testing.T) {
	s := open(t, testenv.MySQL(t), mysql.Options{CreateTable: true})
	ctx := testCtx(t)
	if err := s.Create(ctx, segment.Tag{Name: wire.MustTag("Order"), Step: 10, Description: "美团点评"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, segment.Tag{Name: wire.MustTag("order")}); !errors.Is(err, segment.ErrTagExists) {
		t.Fatalf("Create(order) next to Order = %v, want ErrTagExists", err)
	}
	a, err := s.Advance(ctx, wire.MustTag("Order"), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Advance(ctx, wire.MustTag("order"), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if b.Start() != a.End() {
		t.Fatalf("Order %+v and order %+v do not share one counter", a, b)
	}
	got, err := s.Get(ctx, wire.MustTag("ORDER"))
	if err != nil || got.Name != wire.MustTag("Order") || got.Description != "美团点评" {
		t.Fatalf("Get(ORDER) = %+v, %v", got, err)
	}
}

// An opaque or monotonic tag is served only under the name it is stored
// as: the case-insensitive collation would let "OP" reach the row "op",
// and opaque ids are permuted under the name asked (two spellings would
// repeat each other's ids).
func TestModeTagCaseAliasRefused(t *testing.T) {
	s := open(t, testenv.MySQL(t), mysql.Options{CreateTable: true})
	ctx := testCtx(t)
	for _, tc := range []struct {
		name string
		mode segment.Mode
	}{
		{"op", segment.Mode{Kind: segment.KindOpaque, Width: 20, KeyID: "k"}},
		{"mo", segment.Mode{Kind: segment.KindMono}},
	} {
		if err := s.Create(ctx, segment.Tag{Name: wire.MustTag(tc.name), Step: 10, Mode: tc.mode}); err != nil {
			t.Fatal(err)
		}
		alias := strings.ToUpper(tc.name)
		for _, next := range []func() (segment.Alloc, error){
			func() (segment.Alloc, error) { return s.Advance(ctx, wire.MustTag(alias), 0, 0) },
			func() (segment.Alloc, error) { return s.Advance(ctx, wire.MustTag(alias), 5, 0) },
			func() (segment.Alloc, error) { return s.Advance(ctx, wire.MustTag(alias), 0, 1) },
		} {
			if a, err := next(); !errors.Is(err, segment.ErrMode) || !strings.Contains(err.Error(), `stored as "`+tc.name+`"`) {
				t.Fatalf("%s under %q = %+v, %v; want ErrMode naming %q", tc.mode.Kind, alias, a, err, tc.name)
			}
		}
		if got, err := s.Get(ctx, wire.MustTag(tc.name)); err != nil || got.MaxID != 1 {
			t.Fatalf("a refused alias moved the row: %+v, %v", got, err)
		}
		if a, err := s.Advance(ctx, wire.MustTag(tc.name), 0, 0); err != nil || a.Start() != 1 {
			t.Fatalf("Next(%q) = %+v, %v", tc.name, a, err)
		}
	}
}

func TestCustomTable(t *testing.T) {
	dsn := testenv.MySQL(t)
	s := open(t, dsn, mysql.Options{Table: "ids_2", CreateTable: true})
	ctx := testCtx(t)
	if err := s.Create(ctx, segment.Tag{Name: wire.MustTag("x"), Step: 5}); err != nil {
		t.Fatal(err)
	}
	if a, err := s.Advance(ctx, wire.MustTag("x"), 0, 0); err != nil || a.End() != 6 {
		t.Fatalf("Next = %+v, %v", a, err)
	}
	var n int
	if err := rawDB(t, dsn).QueryRowContext(ctx, "SELECT COUNT(*) FROM ids_2").Scan(&n); err != nil || n != 1 {
		t.Fatalf("ids_2 has %d rows, %v", n, err)
	}
}

// Two Stores, two pools, like two leafd nodes on one database.
func TestTwoStoresNoOverlap(t *testing.T) {
	dsn := testenv.MySQL(t)
	nodes := []*mysql.Store{
		open(t, dsn, mysql.Options{CreateTable: true, MaxOpenConns: 4}),
		open(t, dsn, mysql.Options{CreateTable: true, MaxOpenConns: 4}),
	}
	ctx := testCtx(t)
	if err := nodes[0].Create(ctx, segment.Tag{Name: wire.MustTag("shared"), Step: 100}); err != nil {
		t.Fatal(err)
	}
	const workers, each = 6, 30
	var (
		mu     sync.Mutex
		ranges []segment.Alloc
		wg     sync.WaitGroup
		errs   = make(chan error, len(nodes)*workers)
	)
	for n, s := range nodes {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					var a segment.Alloc
					var err error
					if i%4 == 0 {
						a, err = s.Advance(ctx, wire.MustTag("shared"), 1+w+n*10, 0)
					} else {
						a, err = s.Advance(ctx, wire.MustTag("shared"), 0, 0)
					}
					if err != nil {
						errs <- fmt.Errorf("node %d worker %d call %d: %w", n, w, i, err)
						return
					}
					mu.Lock()
					ranges = append(ranges, a)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(ranges) != len(nodes)*workers*each {
		t.Fatalf("%d ranges, want %d", len(ranges), len(nodes)*workers*each)
	}
	sort.Slice(ranges, func(i, j int) bool { return ranges[i].Start() < ranges[j].Start() })
	next := int64(1)
	for _, r := range ranges {
		if r.Start() != next {
			t.Fatalf("range [%d,%d) follows %d: overlap or lost update", r.Start(), r.End(), next)
		}
		next = r.End()
	}
	got, err := nodes[1].Get(ctx, wire.MustTag("shared"))
	if err != nil || got.MaxID != next {
		t.Fatalf("max_id = %+v, %v; want %d", got, err, next)
	}
}

// A SIGSTOPped server (a hung MySQL) makes calls fail with ErrUnavailable
// within the store's time-out; the store recovers once it runs again. The
// server is shared with other packages' tests, so the stop lasts about a
// second.
func TestServerStopped(t *testing.T) {
	dsn := testenv.MySQL(t)
	pid := testenv.MySQLPID()
	if pid == 0 {
		if testenv.Required() {
			t.Fatal(testenv.EnvMySQLPID + " is not set")
		}
		t.Skip(testenv.EnvMySQLPID + " is not set")
	}
	const timeout = 400 * time.Millisecond
	s := open(t, dsn, mysql.Options{CreateTable: true, Timeout: timeout})
	ctx := testCtx(t)
	if err := s.Create(ctx, segment.Tag{Name: wire.MustTag("hang"), Step: 10}); err != nil {
		t.Fatal(err)
	}
	before, err := s.Advance(ctx, wire.MustTag("hang"), 0, 0)
	if err != nil {
		t.Fatal(err)
	}

	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %d: %v", pid, err)
	}
	stopped := true
	resume := func() {
		if stopped {
			stopped = false
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT %d: %v", pid, err)
			}
		}
	}
	t.Cleanup(resume) // runs before testenv drops the database

	start := time.Now()
	_, nextErr := s.Advance(ctx, wire.MustTag("hang"), 0, 0)
	nextTook := time.Since(start)

	short, cancel := context.WithTimeout(ctx, timeout/4)
	start = time.Now()
	_, tagsErr := s.Tags(short)
	tagsTook := time.Since(start)
	cancel()
	resume()
	t.Logf("stopped server: Next = %v after %v; Tags = %v after %v", nextErr, nextTook, tagsErr, tagsTook)

	if !errors.Is(nextErr, segment.ErrUnavailable) || errors.Is(nextErr, context.DeadlineExceeded) {
		t.Errorf("Next on a stopped server = %v, want ErrUnavailable (and not the caller's deadline)", nextErr)
	}
	if nextTook > timeout+time.Second {
		t.Errorf("Next took %v to fail, time-out %v", nextTook, timeout)
	}
	if !errors.Is(tagsErr, context.DeadlineExceeded) {
		t.Errorf("Tags with a caller deadline on a stopped server = %v, want context.DeadlineExceeded", tagsErr)
	}
	if tagsTook > timeout {
		t.Errorf("Tags took %v to fail, caller deadline %v", tagsTook, timeout/4)
	}

	// Running again: the next call works and does not go back.
	var after segment.Alloc
	deadline := time.Now().Add(10 * time.Second)
	for {
		after, err = s.Advance(ctx, wire.MustTag("hang"), 0, 0)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("Next after SIGCONT: %v", err)
	}
	if after.Start() < before.End() {
		t.Fatalf("range after the stop %+v overlaps the one before %+v", after, before)
	}
}

// deploy/schema.sql makes the same table as Options.CreateTable.
// schemaStatements splits deploy/schema.sql into its statements: lines that
// start with "--" are comments, and a statement ends with ";" at the end of
// a line (as the mariadb client reads the file).
func schemaStatements(t *testing.T) []string {
	t.Helper()
	text, err := os.ReadFile("../../deploy/schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	var (
		stmts []string
		stmt  strings.Builder
	)
	for line := range strings.Lines(string(text)) {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		stmt.WriteString(line)
		if strings.HasSuffix(trimmed, ";") {
			stmts = append(stmts, strings.TrimSuffix(strings.TrimSpace(stmt.String()), ";"))
			stmt.Reset()
		}
	}
	if rest := strings.TrimSpace(stmt.String()); rest != "" {
		t.Fatalf("deploy/schema.sql ends with an unterminated statement:\n%s", rest)
	}
	return stmts
}

// TestSchemaFile runs deploy/schema.sql statement by statement, then opens
// the segment store and the WORKER_NODE registry on it the way leafd does
// (tables created where missing) with an account that may only read and
// write rows, and checks the file makes the very tables the packages make.
// Before, that account was refused at every start: CREATE TABLE IF NOT
// EXISTS needs the CREATE privilege though the table is there, and the
// file's LEAF_WORKER_LEASE lacked the columns leafd then added.
func TestSchemaFile(t *testing.T) {
	stmts := schemaStatements(t)
	tables := []string{"leaf_alloc", "leaf_alloc_history", "leaf_alloc_mode", "leaf_alloc_region", "WORKER_NODE", "LEAF_WORKER_LEASE", "LEAF_WORKER_REGION"}
	if len(stmts) != len(tables) {
		t.Fatalf("deploy/schema.sql has %d statements, want %d (%v):\n%s",
			len(stmts), len(tables), tables, strings.Join(stmts, "\n;\n"))
	}
	fromFile := testenv.MySQL(t)
	fileDB := rawDB(t, fromFile)
	for _, stmt := range stmts {
		exec(t, fileDB, stmt)
	}
	for _, stmt := range stmts { // IF NOT EXISTS: running it again is harmless
		exec(t, fileDB, stmt)
	}
	ctx := testCtx(t)
	for _, table := range tables {
		var n int
		err := fileDB.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TABLES "+
			"WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", table).Scan(&n)
		if err != nil || n != 1 {
			t.Fatalf("table %s after deploy/schema.sql: count %d, %v", table, n, err)
		}
	}

	// The stores work on the file's tables with an account that may only
	// read and write rows.
	rows := testenv.MySQLUser(t, fromFile, "SELECT, INSERT, UPDATE, DELETE")
	s := open(t, rows, mysql.Options{CreateTable: true})
	if err := segment.CheckRegionMark(ctx, s, segment.RegionMark{N: 2, R: 1, Name: "r1"}); err != nil {
		t.Fatalf("CheckRegionMark: %v", err)
	}
	if err := s.Create(ctx, segment.Tag{Name: wire.MustTag("deploy"), Step: 10}); err != nil {
		t.Fatal(err)
	}
	if a, err := s.Advance(ctx, wire.MustTag("deploy"), 10, 0); err != nil || a.End() != 11 {
		t.Fatalf("NextStep = %+v, %v", a, err)
	}
	var leases int
	if err := fileDB.QueryRowContext(ctx, "SELECT COUNT(*) FROM LEAF_WORKER_LEASE").Scan(&leases); err != nil {
		t.Fatal(err)
	}
	reg, err := dbworker.Open(ctx, rows, snowflake.LeafLayout(), dbworker.Options{Host: "deploy-test", CreateTable: true})
	if err != nil {
		t.Fatalf("dbworker.Open on the file's WORKER_NODE: %v", err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	r, err := reg.Register(ctx)
	if err != nil || r.Worker != 1 {
		t.Fatalf("Register = %+v, %v; want worker 1 (the first WORKER_NODE row)", r, err)
	}
	until := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	if err := reg.Lease(ctx, until); err != nil {
		t.Fatalf("Lease: %v", err)
	}
	var host string
	var leaseMS int64
	if err := fileDB.QueryRowContext(ctx, "SELECT HOST_NAME FROM WORKER_NODE WHERE ID = 1").Scan(&host); err != nil || host != "deploy-test" {
		t.Fatalf("WORKER_NODE row 1: host %q, %v", host, err)
	}
	if err := fileDB.QueryRowContext(ctx, "SELECT LEASE_MS FROM LEAF_WORKER_LEASE WHERE WORKER_ID = 1").Scan(&leaseMS); err != nil || leaseMS != until.UnixMilli() {
		t.Fatalf("LEAF_WORKER_LEASE of worker 1: %d, %v; want %d", leaseMS, err, until.UnixMilli())
	}

	// With regions too, once WORKER_NODE has the column the file's
	// comment says to add.
	for _, stmt := range schemaComments(t) {
		exec(t, fileDB, stmt)
	}
	inRegion, err := dbworker.Open(ctx, rows, snowflake.LeafLayout(), dbworker.Options{Host: "deploy-test", CreateTable: true, Region: "r1"})
	if err != nil {
		t.Fatalf("dbworker.Open with a region on the file's tables: %v", err)
	}
	t.Cleanup(func() { _ = inRegion.Close() })
	if r, err := inRegion.Register(ctx); err != nil || r.Worker != 0 {
		t.Fatalf("Register in region r1 = %+v, %v; want worker 0 (the region's first)", r, err)
	}

	// The file's DDL is the packages' DDL.
	fromOpen := testenv.MySQL(t)
	open(t, fromOpen, mysql.Options{CreateTable: true})
	created, err := dbworker.Open(ctx, fromOpen, snowflake.LeafLayout(), dbworker.Options{CreateTable: true, Region: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	_ = created.Close()
	showCreate := func(dsn, table string) string {
		var name, ddl string
		if err := rawDB(t, dsn).QueryRowContext(ctx, "SHOW CREATE TABLE "+table).Scan(&name, &ddl); err != nil {
			t.Fatal(err)
		}
		// The AUTO_INCREMENT counter differs once a row went in.
		return autoIncrement.ReplaceAllString(ddl, "")
	}
	for _, table := range tables {
		if a, b := showCreate(fromFile, table), showCreate(fromOpen, table); a != b {
			t.Errorf("deploy/schema.sql makes\n%s\nbut CreateTable makes\n%s", a, b)
		}
	}
}

var autoIncrement = regexp.MustCompile(` AUTO_INCREMENT=\d+`)

// schemaComments returns the statements deploy/schema.sql gives in its
// comments for an operator to run by hand ("--   ALTER TABLE …;").
func schemaComments(t *testing.T) []string {
	t.Helper()
	text, err := os.ReadFile("../../deploy/schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	var stmts []string
	for line := range strings.Lines(string(text)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "--   ALTER TABLE "); ok {
			stmts = append(stmts, "ALTER TABLE "+strings.TrimSuffix(strings.TrimSpace(rest), ";"))
		}
	}
	if len(stmts) != 1 {
		t.Fatalf("deploy/schema.sql gives %d ALTER TABLE statements in its comments, want 1", len(stmts))
	}
	return stmts
}

// A gbk connection (common in Leaf shops) cannot use interpolated parameters;
// the store falls back to prepared statements.
func TestGBKConnection(t *testing.T) {
	s := open(t, testenv.MySQL(t)+"&collation=gbk_chinese_ci", mysql.Options{CreateTable: true})
	ctx := testCtx(t)
	if err := s.Create(ctx, segment.Tag{Name: wire.MustTag("gbk"), Step: 3, Description: "美团点评"}); err != nil {
		t.Fatal(err)
	}
	if a, err := s.Advance(ctx, wire.MustTag("gbk"), 7, 0); err != nil || a.End() != 8 {
		t.Fatalf("NextStep = %+v, %v", a, err)
	}
	got, err := s.Get(ctx, wire.MustTag("gbk"))
	if err != nil || got.Description != "美团点评" || got.MaxID != 8 {
		t.Fatalf("Get = %+v, %v", got, err)
	}
}

// TestOperatorDeletesRow: on MySQL, a row deleted from
// leaf_alloc by hand is not created again at 1 (auto-create calls Create);
// Restart brings it back only at or above the max_id it had.
func TestOperatorDeletesRow(t *testing.T) {
	dsn := testenv.MySQL(t)
	s := open(t, dsn, mysql.Options{CreateTable: true})
	db := rawDB(t, dsn)
	ctx := testCtx(t)
	if err := s.Create(ctx, segment.Tag{Name: wire.MustTag("orders"), Step: 100}); err != nil {
		t.Fatal(err)
	}
	var last segment.Alloc
	for range 3 {
		a, err := s.Advance(ctx, wire.MustTag("orders"), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		last = a
	}
	exec(t, db, "DELETE FROM leaf_alloc WHERE biz_tag = 'orders'")
	if err := s.Create(ctx, segment.Tag{Name: wire.MustTag("orders"), Step: 100}); !errors.Is(err, segment.ErrTagDeleted) {
		t.Fatalf("Create after DELETE = %v, want ErrTagDeleted", err)
	}
	if _, err := s.Get(ctx, wire.MustTag("orders")); !errors.Is(err, segment.ErrUnknownTag) {
		t.Fatalf("a refused Create left a row: Get = %v", err)
	}
	if err := s.Restart(ctx, wire.MustTag("orders"), last.End()-1); !errors.Is(err, segment.ErrBelowFloor) {
		t.Fatalf("Restart below the record = %v, want ErrBelowFloor", err)
	}
	if err := s.Restart(ctx, wire.MustTag("orders"), last.End()); err != nil {
		t.Fatal(err)
	}
	if a, err := s.Advance(ctx, wire.MustTag("orders"), 0, 0); err != nil || a.Start() != last.End() {
		t.Fatalf("Next after Restart = %+v, %v; want start %d", a, err, last.End())
	}
}

// TestOperatorLowersMaxID: a max_id lowered by hand makes Next fail with
// ErrBelowFloor, and the refused allocation changes nothing.
func TestOperatorLowersMaxID(t *testing.T) {
	dsn := testenv.MySQL(t)
	s := open(t, dsn, mysql.Options{CreateTable: true})
	db := rawDB(t, dsn)
	ctx := testCtx(t)
	if err := s.Create(ctx, segment.Tag{Name: wire.MustTag("low"), Step: 10}); err != nil {
		t.Fatal(err)
	}
	var last segment.Alloc
	for range 5 {
		a, err := s.Advance(ctx, wire.MustTag("low"), 20, 0)
		if err != nil {
			t.Fatal(err)
		}
		last = a
	}
	exec(t, db, "UPDATE leaf_alloc SET max_id = 1 WHERE biz_tag = 'low'")
	for _, step := range []int{0, 20} {
		var err error
		if step == 0 {
			_, err = s.Advance(ctx, wire.MustTag("low"), 0, 0)
		} else {
			_, err = s.Advance(ctx, wire.MustTag("low"), step, 0)
		}
		if !errors.Is(err, segment.ErrBelowFloor) {
			t.Fatalf("allocation (step %d) after max_id was lowered = %v, want ErrBelowFloor", step, err)
		}
	}
	if got, err := s.Get(ctx, wire.MustTag("low")); err != nil || got.MaxID != 1 {
		t.Fatalf("a refused allocation changed the row: %+v, %v", got, err)
	}
	// Even a step that jumps over the record is refused: its range would
	// still begin among issued ids.
	if _, err := s.Advance(ctx, wire.MustTag("low"), int(last.End()), 0); !errors.Is(err, segment.ErrBelowFloor) {
		t.Fatalf("NextStep over the record = %v, want ErrBelowFloor", err)
	}
	if err := s.Restart(ctx, wire.MustTag("low"), last.End()); err != nil {
		t.Fatal(err)
	}
	if a, err := s.Advance(ctx, wire.MustTag("low"), 0, 0); err != nil || a.Start() != last.End() {
		t.Fatalf("Next after Restart = %+v, %v; want start %d", a, err, last.End())
	}
}

// TestHistoryBackfill: tags of a database that had no history table (Leaf's,
// or an older leafmq's) get their record when the store opens it.
func TestHistoryBackfill(t *testing.T) {
	dsn := testenv.MySQL(t)
	db := rawDB(t, dsn)
	exec(t, db, leafDDL)
	exec(t, db, "INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES ('old', 5001, 1000)")
	s := open(t, dsn, mysql.Options{CreateTable: true})
	ctx := testCtx(t)
	exec(t, db, "DELETE FROM leaf_alloc WHERE biz_tag = 'old'")
	if err := s.Create(ctx, segment.Tag{Name: wire.MustTag("old")}); !errors.Is(err, segment.ErrTagDeleted) {
		t.Fatalf("Create of a tag deleted after the backfill = %v, want ErrTagDeleted", err)
	}
	if err := s.Restart(ctx, wire.MustTag("old"), 5000); !errors.Is(err, segment.ErrBelowFloor) {
		t.Fatalf("Restart below the backfilled max_id = %v, want ErrBelowFloor", err)
	}
}

// TestAutoCreateAfterRowDeleted: a deleted row through the engine, as
// leafd runs it (--mysql --auto-create true): after DELETE FROM leaf_alloc
// the tag is refused, never started again at 1.
func TestAutoCreateAfterRowDeleted(t *testing.T) {
	dsn := testenv.MySQL(t)
	s := open(t, dsn, mysql.Options{CreateTable: true})
	db := rawDB(t, dsn)
	ctx := testCtx(t)
	e, err := segment.New(segment.Config{Store: s, AutoCreate: true, DefaultStep: 100, RefreshInterval: -1,
		Logger: slog.New(slog.DiscardHandler), ReadyWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	seen := map[int64]bool{}
	for range 250 {
		id, err := e.Next(ctx, wire.MustTag("orders"))
		if err != nil {
			t.Fatal(err)
		}
		seen[id] = true
	}
	exec(t, db, "DELETE FROM leaf_alloc WHERE biz_tag = 'orders'")
	if err := e.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		id, err := e.Next(ctx, wire.MustTag("orders"))
		if err == nil {
			t.Fatalf("Next after DELETE = id %d (already issued: %v), want an error", id, seen[id])
		}
		if !errors.Is(err, segment.ErrTagDeleted) {
			t.Fatalf("Next after DELETE = %v, want ErrTagDeleted", err)
		}
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM leaf_alloc WHERE biz_tag = 'orders'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("the row was made again: %d, %v", n, err)
	}
}

// A server that does not flush InnoDB's log at every commit can lose a
// committed reservation in a power cut: Durability says so.
func TestDurability(t *testing.T) {
	dsn := testenv.MySQL(t)
	s := open(t, dsn, mysql.Options{CreateTable: true})
	ctx := context.Background()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "SET GLOBAL innodb_flush_log_at_trx_commit = 1") })
	if _, err := db.ExecContext(ctx, "SET GLOBAL innodb_flush_log_at_trx_commit = 1"); err != nil { // the default
		t.Fatal(err)
	}
	warn, err := s.Durability(ctx)
	if err != nil || len(warn) != 0 {
		t.Fatalf("Durability of the test server = %q, %v; want none", warn, err)
	}
	if _, err := db.ExecContext(ctx, "SET GLOBAL innodb_flush_log_at_trx_commit = 2"); err != nil {
		t.Fatal(err)
	}
	warn, err = s.Durability(ctx)
	if err != nil || len(warn) != 1 || !strings.Contains(warn[0], "innodb_flush_log_at_trx_commit=2") {
		t.Fatalf("Durability with innodb_flush_log_at_trx_commit=2 = %q, %v", warn, err)
	}
}

// TestRegionMarkOlderDatabase: a database from before the region table
// (opened without CreateTable) has no record and serves a node without
// regions as before; leafd's open (CreateTable) adds the table, and the
// first node with regions records its region there.
func TestRegionMarkOlderDatabase(t *testing.T) {
	dsn := testenv.MySQL(t)
	ctx := testCtx(t)
	open(t, dsn, mysql.Options{CreateTable: true})
	exec(t, rawDB(t, dsn), "DROP TABLE leaf_alloc_region")
	old := open(t, dsn, mysql.Options{})
	if m, ok, err := old.RegionMark(ctx); err != nil || ok {
		t.Fatalf("RegionMark without the table = %+v, %v, %v; want none", m, ok, err)
	}
	if err := segment.CheckRegionMark(ctx, old, segment.RegionMark{}); err != nil {
		t.Fatalf("a node without regions on a database without the table: %v", err)
	}
	s := open(t, dsn, mysql.Options{CreateTable: true})
	want := segment.RegionMark{N: 2, R: 1, Name: "eu"}
	if err := segment.CheckRegionMark(ctx, s, want); err != nil {
		t.Fatal(err)
	}
	if err := segment.CheckRegionMark(ctx, old, segment.RegionMark{N: 2, R: 0, Name: "us"}); !errors.Is(err, segment.ErrRegionMark) {
		t.Fatalf("a second region on the database: %v; want ErrRegionMark", err)
	}
}
