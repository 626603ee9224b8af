package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	driver "github.com/go-sql-driver/mysql" // registers the "mysql" database/sql driver

	"github.com/leafmq/leafmq/internal/mysqldb"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/wire"
)

// ErrSchema: the database or table is missing, or the table is not Leaf's
// leaf_alloc (a column is missing, or its engine has no transactions).
var ErrSchema = errors.New("leaf_alloc schema")

// ErrAccess: the server refused the DSN's user (a wrong password, missing
// grants): a configuration to fix, not an outage to wait out.
var ErrAccess = errors.New("mysql access denied")

// Defaults of Options.
const (
	DefaultTable           = "leaf_alloc"
	DefaultTimeout         = 3 * time.Second
	DefaultMaxOpenConns    = 16
	DefaultMaxIdleConns    = 4
	DefaultConnMaxLifetime = 3 * time.Minute
)

// Options configure a Store. The zero value means every default.
type Options struct {
	// Table is the name of the leaf_alloc table in the DSN's database;
	// default DefaultTable. 1-64 characters of [A-Za-z0-9_$].
	Table string
	// HistoryTable is the name of the table recording the highest max_id
	// ever issued for each tag (see the package doc); default Table +
	// "_history" (leaf_alloc_history).
	HistoryTable string
	// ModeTable is the name of the table recording each tag's mode
	// (segment.Mode), written once by Create and never deleted; default
	// Table + "_mode" (leaf_alloc_mode).
	ModeTable string
	// CreateTable creates the tables (Leaf's DDL for Table) if they are
	// missing. An existing table is never altered. Default false: a missing
	// table makes Open fail with ErrSchema.
	CreateTable bool
	// Timeout bounds every call, on top of the caller's context; default
	// DefaultTimeout. Unless the DSN sets them, it is also the dial time-out
	// (timeout) and, times 1.5, the read and write time-outs (readTimeout,
	// writeTimeout) of each connection. A call that also commits may take up
	// to 2.5 times Timeout against a server that hangs during COMMIT.
	Timeout time.Duration
	// MaxOpenConns caps the pool; default DefaultMaxOpenConns.
	MaxOpenConns int
	// MaxIdleConns is how many idle connections are kept; default
	// DefaultMaxIdleConns, at most MaxOpenConns.
	MaxIdleConns int
	// ConnMaxLifetime recycles connections before a server or proxy drops
	// them; default DefaultConnMaxLifetime.
	ConnMaxLifetime time.Duration
}

func (o Options) withDefaults() (Options, error) {
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if !validTable(o.Table) {
		return o, fmt.Errorf("%w: table name %q must be 1-64 characters of [A-Za-z0-9_$]", segment.ErrInvalid, o.Table)
	}
	if o.HistoryTable == "" {
		o.HistoryTable = o.Table + "_history"
	}
	if !validTable(o.HistoryTable) || strings.EqualFold(o.HistoryTable, o.Table) {
		return o, fmt.Errorf("%w: history table name %q must be 1-64 characters of [A-Za-z0-9_$], not the table's", segment.ErrInvalid, o.HistoryTable)
	}
	if o.ModeTable == "" {
		o.ModeTable = o.Table + "_mode"
	}
	if !validTable(o.ModeTable) || strings.EqualFold(o.ModeTable, o.Table) || strings.EqualFold(o.ModeTable, o.HistoryTable) {
		return o, fmt.Errorf("%w: mode table name %q must be 1-64 characters of [A-Za-z0-9_$], not the table's or the history table's", segment.ErrInvalid, o.ModeTable)
	}
	if o.Timeout < 0 || o.MaxOpenConns < 0 || o.MaxIdleConns < 0 || o.ConnMaxLifetime < 0 {
		return o, fmt.Errorf("%w: negative time-out or pool size in %+v", segment.ErrInvalid, o)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxOpenConns == 0 {
		o.MaxOpenConns = DefaultMaxOpenConns
	}
	if o.MaxIdleConns == 0 {
		o.MaxIdleConns = DefaultMaxIdleConns
	}
	o.MaxIdleConns = min(o.MaxIdleConns, o.MaxOpenConns)
	if o.ConnMaxLifetime == 0 {
		o.ConnMaxLifetime = DefaultConnMaxLifetime
	}
	return o, nil
}

func validTable(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '$':
		default:
			return false
		}
	}
	return true
}

// Store is a segment.Store on a MySQL/MariaDB leaf_alloc table.
type Store struct {
	db      *sql.DB
	table   string // unquoted name
	history string // unquoted name of the history table
	modes   string // unquoted name of the mode table
	region  string // unquoted name of the region table
	timeout time.Duration
	closed  atomic.Bool
	q       queries
}

// queries are the statements, with the table name filled in.
type queries struct {
	next, nextStep, alloc       string
	get, tags, create           string
	setStep, setMaxID, maxID    string
	delete, createTable, verify string

	// the history table
	createHistory, verifyHistory, backfill string
	high, highLock, raise                  string
	allocLock, restartSet, restartIns      string
	lower                                  string // the history record set down by a hand-back

	// the mode table
	createModes, verifyModes, modes, modeLock, modeIns string

	// the region table
	createRegion, region, regionIns string
}

// historyDDL is the history table's DDL, with %s for its name.
const historyDDL = "CREATE TABLE IF NOT EXISTS `%s` (\n" +
	"  `biz_tag` varchar(128) NOT NULL DEFAULT '',\n" +
	"  `max_id` bigint(20) NOT NULL COMMENT 'highest max_id ever issued for biz_tag, never lowered',\n" +
	"  `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,\n" +
	"  PRIMARY KEY (`biz_tag`)\n" +
	") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='leafmq: the highest max_id of every tag ever in leaf_alloc'"

// modeDDL is the mode table's DDL, with %s for its name.
const modeDDL = "CREATE TABLE IF NOT EXISTS `%s` (\n" +
	"  `biz_tag` varchar(128) NOT NULL DEFAULT '',\n" +
	"  `kind` varchar(16) NOT NULL COMMENT 'segment, mono or opaque; never changed',\n" +
	"  `width` int(11) NOT NULL DEFAULT '0' COMMENT 'opaque: bits of the id domain',\n" +
	"  `key_id` varchar(64) NOT NULL DEFAULT '' COMMENT 'opaque: the id of the permutation key',\n" +
	"  `create_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,\n" +
	"  PRIMARY KEY (`biz_tag`)\n" +
	") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='leafmq: the mode of every tag ever created, never deleted'"

// regionDDL is the region table's DDL, with %s for its name: one row
// (id 1), the segment.RegionMark of the region whose ids the database
// counts, written once and never changed.
const regionDDL = "CREATE TABLE IF NOT EXISTS `%s` (\n" +
	"  `id` tinyint(4) NOT NULL DEFAULT '1' COMMENT 'always 1: one record',\n" +
	"  `regions` int(11) NOT NULL COMMENT '--regions',\n" +
	"  `region_id` int(11) NOT NULL COMMENT '--region-id',\n" +
	"  `region` varchar(128) NOT NULL COMMENT '--region',\n" +
	"  `create_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP,\n" +
	"  PRIMARY KEY (`id`)\n" +
	") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='leafmq: the region whose ids this database counts, never changed'"

// modeCols reads a tag's mode beside its leaf_alloc row (alias a) from
// the mode table (alias m): a tag without a record there is segment.
const modeCols = "COALESCE(m.kind, ''), COALESCE(m.width, 0), COALESCE(m.key_id, '')"

// quote writes a table's name in SQL.
func quote(table string) string { return "`" + table + "`" }

func newQueries(table, history, modes, region string) queries {
	t := quote(table)
	h := quote(history)
	md := quote(modes)
	rg := quote(region)
	join := " a LEFT JOIN " + md + " m ON m.biz_tag = a.biz_tag"
	return queries{
		createRegion:  fmt.Sprintf(regionDDL, region),
		region:        "SELECT regions, region_id, region FROM " + rg + " WHERE id = 1",
		regionIns:     "INSERT INTO " + rg + " (id, regions, region_id, region) VALUES (1, ?, ?, ?) ON DUPLICATE KEY UPDATE id = id",
		createModes:   fmt.Sprintf(modeDDL, modes),
		verifyModes:   "SELECT biz_tag, kind, width, key_id FROM " + md + " LIMIT 0",
		modes:         "SELECT a.biz_tag, " + modeCols + " FROM " + t + join,
		modeLock:      "SELECT kind, width, key_id FROM " + md + " WHERE biz_tag = ? FOR UPDATE",
		modeIns:       "INSERT INTO " + md + " (biz_tag, kind, width, key_id) VALUES (?, ?, ?, ?)",
		createHistory: fmt.Sprintf(historyDDL, history),
		verifyHistory: "SELECT biz_tag, max_id, update_time FROM " + h + " LIMIT 0",
		backfill: "INSERT INTO " + h + " (biz_tag, max_id) SELECT biz_tag, max_id FROM " + t +
			" ON DUPLICATE KEY UPDATE max_id = GREATEST(" + h + ".max_id, VALUES(max_id))",
		high:     "SELECT max_id FROM " + h + " WHERE biz_tag = ?",
		highLock: "SELECT max_id FROM " + h + " WHERE biz_tag = ? FOR UPDATE",
		raise: "INSERT INTO " + h + " (biz_tag, max_id) VALUES (?, ?)" +
			" ON DUPLICATE KEY UPDATE max_id = GREATEST(max_id, VALUES(max_id))",
		allocLock:  "SELECT max_id, step, description FROM " + t + " WHERE biz_tag = ? FOR UPDATE",
		restartSet: "UPDATE " + t + " SET max_id = ? WHERE biz_tag = ?",
		lower:      "UPDATE " + h + " SET max_id = ? WHERE biz_tag = ?",
		restartIns: "INSERT INTO " + t + " (biz_tag, max_id, step, description) VALUES (?, ?, ?, NULL)",
		next: "UPDATE " + t + " SET max_id = max_id + step" +
			" WHERE biz_tag = ? AND step > 0 AND max_id <= 9223372036854775807 - step",
		nextStep: "UPDATE " + t + " SET max_id = max_id + ?" +
			" WHERE biz_tag = ? AND max_id <= 9223372036854775807 - ?",
		alloc:    "SELECT a.biz_tag, a.max_id, a.step, " + modeCols + " FROM " + t + join + " WHERE a.biz_tag = ?",
		get:      "SELECT a.biz_tag, a.max_id, a.step, a.description, UNIX_TIMESTAMP(a.update_time), " + modeCols + " FROM " + t + join + " WHERE a.biz_tag = ?",
		tags:     "SELECT biz_tag FROM " + t + " ORDER BY biz_tag",
		create:   "INSERT INTO " + t + " (biz_tag, max_id, step, description) VALUES (?, ?, ?, ?)",
		setStep:  "UPDATE " + t + " SET step = ? WHERE biz_tag = ?",
		setMaxID: "UPDATE " + t + " SET max_id = ? WHERE biz_tag = ? AND max_id <= ?",
		maxID:    "SELECT max_id FROM " + t + " WHERE biz_tag = ?",
		delete:   "DELETE FROM " + t + " WHERE biz_tag = ?",
		createTable: "CREATE TABLE IF NOT EXISTS " + t + " (\n" +
			"  `biz_tag` varchar(128) NOT NULL DEFAULT '',\n" +
			"  `max_id` bigint(20) NOT NULL DEFAULT '1',\n" +
			"  `step` int(11) NOT NULL,\n" +
			"  `description` varchar(256) DEFAULT NULL,\n" +
			"  `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,\n" +
			"  PRIMARY KEY (`biz_tag`)\n" +
			") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
		verify: "SELECT biz_tag, max_id, step, description, update_time FROM " + t + " LIMIT 0",
	}
}

// Open connects to the database named by dsn (go-sql-driver syntax, e.g.
// "leaf:secret@tcp(db:3306)/leaf"), creates the table if asked to, and checks
// that it is Leaf's leaf_alloc. A server that cannot be reached is
// segment.ErrUnavailable; a bad DSN or option is segment.ErrInvalid; a
// missing or foreign table is ErrSchema.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	s, err := newStore(dsn, opts)
	if err != nil {
		return nil, err
	}
	if err := s.init(ctx, opts.CreateTable); err != nil {
		_ = s.db.Close()
		return nil, err
	}
	return s, nil
}

// newStore builds a Store without touching the network.
func newStore(dsn string, opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg, err := driver.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: dsn: %w", segment.ErrInvalid, err)
	}
	if cfg.DBName == "" {
		return nil, fmt.Errorf("%w: dsn names no database (want user:password@tcp(host:3306)/leaf)", segment.ErrInvalid)
	}
	// The context deadline interrupts dialling and statements; the I/O
	// time-outs are the safety net for what it cannot reach (COMMIT runs
	// without a context), a little longer so that the deadline, with its
	// clearer error, normally fires first.
	if cfg.Timeout == 0 {
		cfg.Timeout = opts.Timeout
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = opts.Timeout + opts.Timeout/2
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = opts.Timeout + opts.Timeout/2
	}
	cfg.ClientFoundRows = true       // RowsAffected counts matched rows: 0 means no such tag
	cfg.Logger = &driver.NopLogger{} // its lines repeat errors the store returns
	// Interpolated parameters save a prepare and a close per statement; the
	// driver refuses them with multi-byte collations such as gbk, which then
	// keep server-side prepared statements.
	cfg.InterpolateParams = true
	conn, err := driver.NewConnector(cfg)
	if err != nil {
		cfg.InterpolateParams = false
		conn, err = driver.NewConnector(cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: dsn: %w", segment.ErrInvalid, err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(opts.MaxOpenConns)
	db.SetMaxIdleConns(opts.MaxIdleConns)
	db.SetConnMaxLifetime(opts.ConnMaxLifetime)
	region := opts.Table + "_region"
	return &Store{db: db, table: opts.Table, history: opts.HistoryTable, modes: opts.ModeTable, region: region, timeout: opts.Timeout,
		q: newQueries(opts.Table, opts.HistoryTable, opts.ModeTable, region)}, nil
}

// MySQL error numbers the store tells apart.
const (
	erDupEntry       = 1062 // ER_DUP_ENTRY
	erNoSuchTable    = 1146 // ER_NO_SUCH_TABLE
	erWarnDataRange  = 1264 // ER_WARN_DATA_OUT_OF_RANGE
	erTruncatedValue = 1366 // ER_TRUNCATED_WRONG_VALUE_FOR_FIELD (charset)
	erDataTooLong    = 1406 // ER_DATA_TOO_LONG
	erDataOutOfRange = 1690 // ER_DATA_OUT_OF_RANGE (BIGINT arithmetic)
)

func (s *Store) init(ctx context.Context, createTable bool) error {
	return s.call(ctx, func(ctx context.Context) error {
		if err := s.db.PingContext(ctx); err != nil {
			return schemaErr(err)
		}
		if createTable {
			if err := mysqldb.EnsureTable(ctx, s.db, quote(s.table), s.q.createTable); err != nil {
				return schemaErr(err)
			}
		}
		if _, err := s.db.ExecContext(ctx, s.q.verify); err != nil {
			return schemaErr(err)
		}
		if createTable {
			if err := mysqldb.EnsureTable(ctx, s.db, quote(s.history), s.q.createHistory); err != nil {
				return schemaErr(err)
			}
		}
		if _, err := s.db.ExecContext(ctx, s.q.verifyHistory); err != nil {
			return fmt.Errorf("history table %q: %w", s.history, schemaErr(err))
		}
		if createTable {
			if err := mysqldb.EnsureTable(ctx, s.db, quote(s.modes), s.q.createModes); err != nil {
				return schemaErr(err)
			}
		}
		if _, err := s.db.ExecContext(ctx, s.q.verifyModes); err != nil {
			return fmt.Errorf("mode table %q: %w", s.modes, schemaErr(err))
		}
		if createTable { // without it, a missing region table is no record (RegionMark)
			if err := mysqldb.EnsureTable(ctx, s.db, quote(s.region), s.q.createRegion); err != nil {
				return schemaErr(err)
			}
		}
		// Tags whose rows predate the history table (a Leaf database, an
		// older leafmq) get their record now.
		if _, err := s.db.ExecContext(ctx, s.q.backfill); err != nil {
			return fmt.Errorf("filling history table %q: %w", s.history, err)
		}
		var engine, transactions sql.NullString
		err := s.db.QueryRowContext(ctx,
			"SELECT t.ENGINE, e.TRANSACTIONS FROM information_schema.TABLES t"+
				" LEFT JOIN information_schema.ENGINES e ON e.ENGINE = t.ENGINE"+
				" WHERE t.TABLE_SCHEMA = DATABASE() AND t.TABLE_NAME = ?", s.table).Scan(&engine, &transactions)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: table %q not found in information_schema", ErrSchema, s.table)
		}
		if err != nil {
			return err
		}
		if !strings.EqualFold(transactions.String, "YES") {
			return fmt.Errorf("%w: table %q uses engine %q, which has no transactions; leafmq needs InnoDB",
				ErrSchema, s.table, engine.String)
		}
		return nil
	})
}

// schemaErr turns the server's "no such database/table/column" into ErrSchema.
func schemaErr(err error) error {
	if mysqldb.Missing(err) {
		return fmt.Errorf("%w: %w (create it with deploy/schema.sql, or set Options.CreateTable)", ErrSchema, err)
	}
	return err
}

// call runs f with the store's time-out and maps what it returns.
func (s *Store) call(ctx context.Context, f func(ctx context.Context) error) error {
	if s.closed.Load() {
		return fmt.Errorf("mysql: %w", segment.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mysql: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	err := f(cctx)
	if err == nil {
		return nil
	}
	for _, known := range []error{segment.ErrUnknownTag, segment.ErrTagExists, segment.ErrTagDeleted, segment.ErrBelowFloor, segment.ErrInvalid, segment.ErrUnavailable, segment.ErrMoved, segment.ErrMode, ErrSchema, ErrAccess} {
		if errors.Is(err, known) {
			return err
		}
	}
	switch {
	case s.closed.Load():
		return fmt.Errorf("mysql: %w (%v)", segment.ErrClosed, err)
	case ctx.Err() != nil: // the caller's context, not ours
		return fmt.Errorf("mysql: %w", ctx.Err())
	case cctx.Err() != nil: // our time-out: not the caller's deadline
		return fmt.Errorf("%w: mysql did not answer within %v (%v)", segment.ErrUnavailable, s.timeout, err)
	}
	var me *driver.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case erDupEntry:
			return fmt.Errorf("%w: %w", segment.ErrTagExists, err)
		case erWarnDataRange, erTruncatedValue, erDataTooLong, erDataOutOfRange:
			return fmt.Errorf("%w: %w", segment.ErrInvalid, err)
		}
	}
	if mysqldb.Denied(err) {
		return fmt.Errorf("%w: %w (check the DSN's user, password and grants)", ErrAccess, err)
	}
	return fmt.Errorf("%w: %w", segment.ErrUnavailable, err)
}

// inTx runs f in a transaction and commits it; any error rolls it back.
func (s *Store) inTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func unknownTag(tag string) error {
	return fmt.Errorf("%w: %q", segment.ErrUnknownTag, tag)
}

// Advance implements segment.Store: Leaf's updateMaxIdAndGetLeafAlloc
// (step 0) or updateMaxIdByCustomStepAndGetLeafAlloc; a range below floor
// is rolled back with the transaction.
func (s *Store) Advance(ctx context.Context, tag wire.Tag, step int, floor int64) (segment.Alloc, error) {
	if err := segment.CheckAdvanceStep(step); err != nil {
		return segment.Alloc{}, err
	}
	return s.advance(ctx, tag, step, floor)
}

// advance adds step (0: the row's step) to max_id and reads the row back, in
// one transaction.
func (s *Store) advance(ctx context.Context, tag wire.Tag, step int, floor int64) (segment.Alloc, error) {
	var a segment.Alloc
	err := s.call(ctx, func(ctx context.Context) error {
		return s.inTx(ctx, func(tx *sql.Tx) error {
			var (
				res sql.Result
				err error
			)
			if step == 0 {
				res, err = tx.ExecContext(ctx, s.q.next, tag.String())
			} else {
				res, err = tx.ExecContext(ctx, s.q.nextStep, step, tag.String(), step)
			}
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			var maxID int64
			var tableStep int
			var md segment.Mode
			var stored string
			err = tx.QueryRowContext(ctx, s.q.alloc, tag.String()).Scan(&stored, &maxID, &tableStep, &md.Kind, &md.Width, &md.KeyID)
			if errors.Is(err, sql.ErrNoRows) {
				return unknownTag(tag.String())
			}
			if err != nil {
				return err
			}
			// The collation is case-insensitive: "Order" reaches the row
			// "order". A segment tag's ranges stay disjoint whatever the
			// spelling, but an opaque tag's ids are permuted under its name
			// (another spelling, another permutation of one sequence: ids
			// repeat), and a monotonic tag has one leader per name.
			if stored != tag.String() && !modeOf(md).IsSegment() {
				return fmt.Errorf("%w: tag %q is stored as %q, and a %s tag is only served under that name; nothing changed",
					segment.ErrMode, tag, stored, md.Kind)
			}
			used := step
			if used == 0 {
				used = tableStep
			}
			if n == 0 { // the row exists but the guard refused the update
				if err := segment.CheckStep(used); err != nil {
					return fmt.Errorf("tag %q has step %d in the table: %w", tag, used, err)
				}
				if err := segment.CheckAdvance(tag, maxID, used); err != nil {
					return err
				}
				// Not updated, yet the guard holds now: the row appeared
				// after the UPDATE looked. Nothing changed; retry.
				return fmt.Errorf("%w: tag %q changed concurrently", segment.ErrUnavailable, tag)
			}
			// The row is locked by the UPDATE, and every writer of the
			// tag's history record holds that lock (or, in Restart, the
			// row's absence), so this read is current.
			var high int64
			err = tx.QueryRowContext(ctx, s.q.high, tag.String()).Scan(&high)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			if start := maxID - int64(used); start < floor {
				return fmt.Errorf("%w: tag %q: the next range would start at %d, below this node's floor %d; nothing changed",
					segment.ErrBelowFloor, tag, start, floor)
			}
			if start := maxID - int64(used); start < high {
				return fmt.Errorf("%w: tag %q: the next range would start at %d, but ids up to %d were issued "+
					"(%s): max_id was lowered; nothing changed; restart the tag at or above %d",
					segment.ErrBelowFloor, tag, start, high, s.history, high)
			}
			if _, err := tx.ExecContext(ctx, s.q.raise, tag.String(), maxID); err != nil {
				return err
			}
			a = segment.Alloc{Tag: tag, MaxID: maxID, Step: used, TableStep: tableStep, Mode: modeOf(md)}
			return nil
		})
	})
	if err != nil {
		return segment.Alloc{}, err
	}
	return a, nil
}

// Tags implements segment.Store. The names are sorted bytewise, whatever the
// column's collation.
func (s *Store) Tags(ctx context.Context) ([]string, error) {
	var tags []string
	err := s.call(ctx, func(ctx context.Context) error {
		rows, err := s.db.QueryContext(ctx, s.q.tags)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				return err
			}
			tags = append(tags, name)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(tags)
	if tags == nil {
		tags = []string{}
	}
	return tags, nil
}

// Get implements segment.Store. Name is the row's biz_tag as stored (its
// case may differ from tag's; see the package doc).
func (s *Store) Get(ctx context.Context, tag wire.Tag) (segment.Tag, error) {
	var t segment.Tag
	err := s.call(ctx, func(ctx context.Context) error {
		var (
			name string
			desc sql.NullString
			unix sql.NullFloat64
		)
		err := s.db.QueryRowContext(ctx, s.q.get, tag.String()).Scan(&name, &t.MaxID, &t.Step, &desc, &unix, &t.Mode.Kind, &t.Mode.Width, &t.Mode.KeyID)
		if errors.Is(err, sql.ErrNoRows) {
			return unknownTag(tag.String())
		}
		if err != nil {
			return err
		}
		if t.Name, err = wire.ParseTag(name); err != nil { // a row written by hand
			return err
		}
		t.Description = desc.String
		t.Mode = modeOf(t.Mode)
		if unix.Valid && unix.Float64 > 0 {
			sec, frac := math.Modf(unix.Float64)
			t.UpdateTime = time.Unix(int64(sec), int64(frac*1e9)).Round(time.Microsecond)
		}
		return nil
	})
	if err != nil {
		return segment.Tag{}, err
	}
	return t, nil
}

// Create implements segment.Store. An empty description is stored as NULL,
// as in rows inserted by hand without one.
func (s *Store) Create(ctx context.Context, t segment.Tag) error {
	t, err := segment.Normalize(t)
	if err != nil {
		return err
	}
	var desc any
	if t.Description != "" {
		desc = t.Description
	}
	return s.call(ctx, func(ctx context.Context) error {
		return s.inTx(ctx, func(tx *sql.Tx) error {
			var had segment.Mode
			err := tx.QueryRowContext(ctx, s.q.modeLock, t.Name.String()).Scan(&had.Kind, &had.Width, &had.KeyID)
			hasMode := err == nil
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			if hasMode && !modeOf(had).Equal(t.Mode) {
				return segment.ModeConflict(t.Name, modeOf(had), t.Mode)
			}
			_, err = tx.ExecContext(ctx, s.q.create, t.Name.String(), t.MaxID, t.Step, desc)
			var me *driver.MySQLError
			if errors.As(err, &me) && me.Number == erDupEntry {
				if !hasMode && !t.Mode.IsSegment() { // a row from before modes: segment
					return segment.ModeConflict(t.Name, segment.Mode{Kind: segment.KindSegment}, t.Mode)
				}
				return fmt.Errorf("%w: %q", segment.ErrTagExists, t.Name)
			}
			if err != nil {
				return err
			}
			if !hasMode {
				if _, err := tx.ExecContext(ctx, s.q.modeIns, t.Name.String(), t.Mode.Kind, t.Mode.Width, t.Mode.KeyID); err != nil {
					return err
				}
			}
			var high int64
			err = tx.QueryRowContext(ctx, s.q.highLock, t.Name.String()).Scan(&high)
			switch {
			case err == nil:
				return fmt.Errorf("%w: %q (%s records max_id %d)", segment.ErrTagDeleted, t.Name, s.history, high)
			case !errors.Is(err, sql.ErrNoRows):
				return err
			}
			_, err = tx.ExecContext(ctx, s.q.raise, t.Name.String(), t.MaxID)
			return err
		})
	})
}

// Restart implements segment.Store: in one transaction it reads the row and
// the history record (both locked), checks floor against the higher
// max_id, sets or inserts the row and raises the record.
func (s *Store) Restart(ctx context.Context, tag wire.Tag, floor int64) error {
	if err := segment.CheckFloor(tag, floor, 0); err != nil {
		return err
	}
	return s.call(ctx, func(ctx context.Context) error {
		return s.inTx(ctx, func(tx *sql.Tx) error {
			cur, high, exists, err := s.lockRow(ctx, tx, tag)
			if err != nil {
				return err
			}
			if err := segment.CheckFloor(tag, floor, max(cur, high)); err != nil {
				return err
			}
			if exists {
				_, err = tx.ExecContext(ctx, s.q.restartSet, floor, tag.String())
			} else {
				_, err = tx.ExecContext(ctx, s.q.restartIns, tag.String(), floor, segment.DefaultStep)
			}
			if err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, s.q.raise, tag.String(), floor)
			return err
		})
	})
}

// Modes implements segment.Store: every row of leaf_alloc with its mode.
func (s *Store) Modes(ctx context.Context) (map[string]segment.Mode, error) {
	modes := make(map[string]segment.Mode)
	err := s.call(ctx, func(ctx context.Context) error {
		rows, err := s.db.QueryContext(ctx, s.q.modes)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			var md segment.Mode
			if err := rows.Scan(&name, &md.Kind, &md.Width, &md.KeyID); err != nil {
				return err
			}
			modes[name] = modeOf(md)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return modes, nil
}

// modeOf is md as read from the mode table, KindSegment for no record.
func modeOf(md segment.Mode) segment.Mode {
	if md.IsSegment() {
		return segment.Mode{Kind: segment.KindSegment}
	}
	return md
}

// HandBack implements segment.HandBacker: in one transaction, with the row
// and the history record locked, max_id and the record go from from back
// to to, only while max_id is from and the record not above it.
func (s *Store) HandBack(ctx context.Context, tag wire.Tag, from, to int64) error {
	if err := segment.CheckHandBack(tag, from, to); err != nil {
		return err
	}
	return s.call(ctx, func(ctx context.Context) error {
		return s.inTx(ctx, func(tx *sql.Tx) error {
			cur, high, exists, err := s.lockRow(ctx, tx, tag)
			if err != nil {
				return err
			}
			if !exists {
				return unknownTag(tag.String())
			}
			if cur != from || high > from {
				return fmt.Errorf("%w: tag %q: max_id is %d (recorded %d), not %d", segment.ErrMoved, tag, cur, high, from)
			}
			if _, err := tx.ExecContext(ctx, s.q.restartSet, to, tag.String()); err != nil {
				return err
			}
			_, err = tx.ExecContext(ctx, s.q.lower, to, tag.String())
			return err
		})
	})
}

// lockRow reads and locks tag's row (its max_id; exists false without
// one) and its history record (0 without one), in tx.
func (s *Store) lockRow(ctx context.Context, tx *sql.Tx, tag wire.Tag) (cur, high int64, exists bool, err error) {
	var (
		step int
		desc sql.NullString
	)
	err = tx.QueryRowContext(ctx, s.q.allocLock, tag.String()).Scan(&cur, &step, &desc)
	exists = err == nil
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, 0, false, err
	}
	err = tx.QueryRowContext(ctx, s.q.highLock, tag.String()).Scan(&high)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, 0, false, err
	}
	return cur, high, exists, nil
}

// SetStep implements segment.Store.
func (s *Store) SetStep(ctx context.Context, tag wire.Tag, step int) error {
	if err := segment.CheckStep(step); err != nil {
		return err
	}
	return s.call(ctx, func(ctx context.Context) error {
		return s.execOne(ctx, tag.String(), s.q.setStep, step, tag.String())
	})
}

// SetMaxID implements segment.Store: one UPDATE that only matches while the
// row's max_id is not above maxID, so it can never lower it.
func (s *Store) SetMaxID(ctx context.Context, tag wire.Tag, maxID int64) error {
	if maxID < 0 {
		return fmt.Errorf("%w: max_id %d must not be negative", segment.ErrInvalid, maxID)
	}
	return s.call(ctx, func(ctx context.Context) error {
		res, err := s.db.ExecContext(ctx, s.q.setMaxID, maxID, tag.String(), maxID)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil || n > 0 {
			return err
		}
		var cur int64
		err = s.db.QueryRowContext(ctx, s.q.maxID, tag.String()).Scan(&cur)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return unknownTag(tag.String())
		case err != nil:
			return err
		case cur > maxID:
			return fmt.Errorf("%w: max_id %d is below the current %d of %q", segment.ErrInvalid, maxID, cur, tag)
		default: // the row appeared after the UPDATE looked; nothing changed
			return fmt.Errorf("%w: tag %q changed concurrently", segment.ErrUnavailable, tag)
		}
	})
}

// Delete implements segment.Store. The history record stays, so Create
// refuses the tag afterwards.
func (s *Store) Delete(ctx context.Context, tag wire.Tag) error {
	return s.call(ctx, func(ctx context.Context) error {
		return s.execOne(ctx, tag.String(), s.q.delete, tag.String())
	})
}

// execOne runs a statement that must match tag's row.
func (s *Store) execOne(ctx context.Context, tag, query string, args ...any) error {
	res, err := s.db.ExecContext(ctx, query, args...)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return unknownTag(tag)
	}
	return nil
}

// Close closes the pool after the statements already sent to the server have
// finished. It is idempotent; later calls return segment.ErrClosed.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.db.Close()
}

var (
	_ segment.Store        = (*Store)(nil)
	_ segment.HandBacker   = (*Store)(nil)
	_ segment.RegionMarker = (*Store)(nil)
)

// Durability reports the server settings under which a committed
// reservation can be lost in a power cut, and so ids repeat: InnoDB not
// flushing its log at every commit (innodb_flush_log_at_trx_commit other
// than 1), or a binary log that replicas fail over from written without a
// sync at every commit (sync_binlog other than 1 with log_bin on). Empty
// when the server is durable; the node logs each at start.
func (s *Store) Durability(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var flush, syncBinlog, logBin sql.NullInt64
	err := s.db.QueryRowContext(ctx, "SELECT @@innodb_flush_log_at_trx_commit, @@sync_binlog, @@log_bin").Scan(&flush, &syncBinlog, &logBin)
	if err != nil {
		return nil, fmt.Errorf("mysql: read durability settings: %w", err)
	}
	var warn []string
	if flush.Valid && flush.Int64 != 1 {
		warn = append(warn, fmt.Sprintf("innodb_flush_log_at_trx_commit=%d: a power cut can lose committed reservations (set it to 1)", flush.Int64))
	}
	if logBin.Valid && logBin.Int64 == 1 && syncBinlog.Valid && syncBinlog.Int64 != 1 {
		warn = append(warn, fmt.Sprintf("sync_binlog=%d: a replica promoted after a power cut can miss committed reservations (set it to 1)", syncBinlog.Int64))
	}
	return warn, nil
}

// RegionMark implements segment.RegionMarker: the region table's row. A
// database without the table (made before it, opened without
// Options.CreateTable) has no record.
func (s *Store) RegionMark(ctx context.Context) (m segment.RegionMark, ok bool, err error) {
	err = s.call(ctx, func(ctx context.Context) error {
		m, ok, err = s.regionMark(ctx)
		return err
	})
	return m, ok, err
}

// SetRegionMark implements segment.RegionMarker: the row is inserted only
// where there is none (of two nodes inserting at once, the second's insert
// changes nothing), then read back.
func (s *Store) SetRegionMark(ctx context.Context, want segment.RegionMark) (m segment.RegionMark, err error) {
	err = s.call(ctx, func(ctx context.Context) error {
		if _, err := s.db.ExecContext(ctx, s.q.regionIns, want.N, want.R, want.Name); err != nil {
			return fmt.Errorf("region table %q: %w", s.region, schemaErr(err))
		}
		var ok bool
		if m, ok, err = s.regionMark(ctx); err == nil && !ok {
			err = fmt.Errorf("region table %q: no row after the insert", s.region)
		}
		return err
	})
	return m, err
}

func (s *Store) regionMark(ctx context.Context) (m segment.RegionMark, ok bool, err error) {
	err = s.db.QueryRowContext(ctx, s.q.region).Scan(&m.N, &m.R, &m.Name)
	var me *driver.MySQLError
	switch {
	case errors.Is(err, sql.ErrNoRows), errors.As(err, &me) && me.Number == erNoSuchTable:
		return segment.RegionMark{}, false, nil
	case err != nil:
		return m, false, err
	}
	return m, true, nil
}
