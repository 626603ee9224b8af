package dbworker

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	driver "github.com/go-sql-driver/mysql" // registers the "mysql" database/sql driver

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/mysqldb"
	"github.com/leafmq/leafmq/snowflake"
)

// Errors of Open.
var (
	// ErrInvalid: bad Options or DSN.
	ErrInvalid = errors.New("invalid dbworker options")
	// ErrSchema: WORKER_NODE (or the database) is missing or lacks a column.
	ErrSchema = errors.New("worker_node schema")
	// ErrAccess: the server refused the DSN's user (a wrong password,
	// missing grants).
	ErrAccess = errors.New("worker registry: mysql access denied")
)

// Node types of WORKER_NODE.TYPE, as UidGenerator's WorkerNodeType.
const (
	TypeActual    = 1 // a host: UidGenerator's ACTUAL
	TypeContainer = 2 // a container: UidGenerator's CONTAINER
)

// Defaults of Options.
const (
	DefaultType     = TypeContainer
	DefaultTimeout  = 3 * time.Second
	DefaultClaimTTL = 10 * time.Second
)

// maxColumn is the width of HOST_NAME and PORT (VARCHAR(64)).
const maxColumn = 64

// Options configures Open. The zero value means every default.
type Options struct {
	// Host is WORKER_NODE.HOST_NAME. Default os.Hostname(). At most 64
	// characters.
	Host string
	// Port is WORKER_NODE.PORT. Default "{unix ms}-{pid}" of Open, in the
	// shape of UidGenerator's "{unix ms}-{random}" ports for hosts without
	// a configured port: it tells starts apart and names the process. At
	// most 64 characters.
	Port string
	// Type is WORKER_NODE.TYPE: TypeActual or TypeContainer. Default
	// TypeContainer.
	Type int
	// CreateTable creates WORKER_NODE with UidGenerator's DDL if it is
	// missing. An existing table is never altered. Default false: a missing
	// table makes Open fail with ErrSchema. LEAF_WORKER_LEASE is always
	// created if missing.
	CreateTable bool
	// Timeout bounds Open and every call, on top of the caller's context.
	// Unless the DSN sets them it is also the dial time-out and, times 1.5,
	// the read and write time-outs. Default DefaultTimeout.
	Timeout time.Duration
	// ClaimTTL is the Registry's snowflake.ClaimTTLer bound: a Source serves
	// no id later than ClaimTTL after the start of its last successful
	// Register or Lease. A disposable id is taken over only by an operator
	// (WORKER_NODE truncated, its AUTO_INCREMENT lowered); the lease fence
	// stops the old holder at its next Lease, and ClaimTTL bounds how long
	// a holder that cannot reach the database, or was frozen, serves
	// without one. Default DefaultClaimTTL; at least Timeout.
	ClaimTTL time.Duration
	// Region, if set, names the region whose worker ids the registry
	// hands out (0..MaxWorker of a layout with region bits): each region
	// counts its own disposable ids from 0 in LEAF_WORKER_REGION, keeps its
	// leases under its name in LEAF_WORKER_LEASE, and its WORKER_NODE rows
	// carry it in a REGION column (which Open adds to an existing table).
	// Default none: worker ids are WORKER_NODE's IDs, as UidGenerator's,
	// and WORKER_NODE is not altered. At most 64 characters of
	// [A-Za-z0-9_-].
	Region string
	// Clock stamps the default Port. Default clock.Real.
	Clock clock.Clock
}

func (o Options) withDefaults(now time.Time) (Options, error) {
	if o.Host == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			return o, fmt.Errorf("%w: no Host and no hostname (%v)", ErrInvalid, err)
		}
		o.Host = h
	}
	if o.Port == "" {
		o.Port = fmt.Sprintf("%d-%d", now.UnixMilli(), os.Getpid())
	}
	if o.Type == 0 {
		o.Type = DefaultType
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.ClaimTTL == 0 {
		o.ClaimTTL = max(DefaultClaimTTL, o.Timeout)
	}
	switch {
	case utf8.RuneCountInString(o.Host) > maxColumn || !utf8.ValidString(o.Host):
		return o, fmt.Errorf("%w: host %q must be at most %d characters of UTF-8", ErrInvalid, o.Host, maxColumn)
	case utf8.RuneCountInString(o.Port) > maxColumn || !utf8.ValidString(o.Port):
		return o, fmt.Errorf("%w: port %q must be at most %d characters of UTF-8", ErrInvalid, o.Port, maxColumn)
	case len(o.Region) > maxColumn || strings.Trim(o.Region, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "":
		return o, fmt.Errorf("%w: region %q must be at most %d characters of [A-Za-z0-9_-]", ErrInvalid, o.Region, maxColumn)
	case o.Type != TypeActual && o.Type != TypeContainer:
		return o, fmt.Errorf("%w: type %d must be %d (ACTUAL) or %d (CONTAINER)", ErrInvalid, o.Type, TypeActual, TypeContainer)
	case o.Timeout < 0:
		return o, fmt.Errorf("%w: negative timeout %v", ErrInvalid, o.Timeout)
	case o.ClaimTTL < o.Timeout:
		return o, fmt.Errorf("%w: claim ttl %v must be at least the timeout %v", ErrInvalid, o.ClaimTTL, o.Timeout)
	}
	return o, nil
}

// Statements. WORKER_NODE's DDL is UidGenerator's, with IF NOT EXISTS.
const (
	createWorkerNode = "CREATE TABLE IF NOT EXISTS WORKER_NODE\n" +
		"(\n" +
		"ID BIGINT NOT NULL AUTO_INCREMENT COMMENT 'auto increment id',\n" +
		"HOST_NAME VARCHAR(64) NOT NULL COMMENT 'host name',\n" +
		"PORT VARCHAR(64) NOT NULL COMMENT 'port',\n" +
		"TYPE INT NOT NULL COMMENT 'node type: ACTUAL or CONTAINER',\n" +
		"LAUNCH_DATE DATE NOT NULL COMMENT 'launch date',\n" +
		"MODIFIED TIMESTAMP NOT NULL COMMENT 'modified time',\n" +
		"CREATED TIMESTAMP NOT NULL COMMENT 'created time',\n" +
		"PRIMARY KEY(ID)\n" +
		")\n" +
		" COMMENT='DB WorkerID Assigner for UID Generator',ENGINE = INNODB"
	createLease = "CREATE TABLE IF NOT EXISTS LEAF_WORKER_LEASE (\n" +
		"REGION VARCHAR(64) NOT NULL DEFAULT '' COMMENT 'region of the worker id; empty without regions',\n" +
		"WORKER_ID BIGINT NOT NULL COMMENT 'WORKER_NODE.ID, or the worker id within REGION',\n" +
		"LEASE_MS BIGINT NOT NULL COMMENT 'time lease in unix ms, never lowered',\n" +
		"OWNER VARCHAR(64) NOT NULL DEFAULT '' COMMENT 'token of the registration holding the id',\n" +
		"PRIMARY KEY(REGION, WORKER_ID)\n" +
		") COMMENT='leafmq time leases of WORKER_NODE worker ids',ENGINE = INNODB"
	// A table made before OWNER existed gets it (the table is leafmq's).
	verifyOwner = "SELECT OWNER FROM LEAF_WORKER_LEASE LIMIT 0"
	addOwner    = "ALTER TABLE LEAF_WORKER_LEASE ADD COLUMN OWNER VARCHAR(64) NOT NULL DEFAULT '' COMMENT 'token of the registration holding the id'"
	// A table made before regions gets REGION, its rows '' (the worker ids
	// of a deployment without regions), and the key (REGION, WORKER_ID):
	// every statement of an older leafmq still finds its rows.
	verifyLeaseRegion = "SELECT REGION FROM LEAF_WORKER_LEASE LIMIT 0"
	addLeaseRegion    = "ALTER TABLE LEAF_WORKER_LEASE ADD COLUMN REGION VARCHAR(64) NOT NULL DEFAULT '' COMMENT 'region of the worker id; empty without regions' FIRST," +
		" DROP PRIMARY KEY, ADD PRIMARY KEY (REGION, WORKER_ID)"
	verifyWorkerNode = "SELECT ID, HOST_NAME, PORT, TYPE, LAUNCH_DATE, MODIFIED, CREATED FROM WORKER_NODE LIMIT 0"
	insertWorkerNode = "INSERT INTO WORKER_NODE (HOST_NAME, PORT, TYPE, LAUNCH_DATE, MODIFIED, CREATED)" +
		" VALUES (?, ?, ?, CURDATE(), NOW(), NOW())"
	// With a region: WORKER_NODE rows carry it (a column Open adds, '' for
	// the rows before), and each region counts its worker ids in
	// LEAF_WORKER_REGION, LAST_WORKER being the last one handed out.
	verifyNodeRegion = "SELECT REGION FROM WORKER_NODE LIMIT 0"
	addNodeRegion    = "ALTER TABLE WORKER_NODE ADD COLUMN REGION VARCHAR(64) NOT NULL DEFAULT '' COMMENT 'leafmq region of the worker id'"
	insertRegionNode = "INSERT INTO WORKER_NODE (HOST_NAME, PORT, TYPE, LAUNCH_DATE, MODIFIED, CREATED, REGION)" +
		" VALUES (?, ?, ?, CURDATE(), NOW(), NOW(), ?)"
	createRegion = "CREATE TABLE IF NOT EXISTS LEAF_WORKER_REGION (\n" +
		"REGION VARCHAR(64) NOT NULL COMMENT 'region',\n" +
		"LAST_WORKER BIGINT NOT NULL COMMENT 'the last worker id handed out in the region',\n" +
		"PRIMARY KEY(REGION)\n" +
		") COMMENT='leafmq disposable worker ids per region',ENGINE = INNODB"
	// nextRegionWorker takes the region's next worker id (0 first); the
	// row stays locked until the transaction ends, so concurrent
	// registrations of a region get distinct ones.
	nextRegionWorker = "INSERT INTO LEAF_WORKER_REGION (REGION, LAST_WORKER) VALUES (?, 0)" +
		" ON DUPLICATE KEY UPDATE LAST_WORKER = LAST_WORKER + 1"
	selectRegionWorker = "SELECT LAST_WORKER FROM LEAF_WORKER_REGION WHERE REGION = ?"
	selectLease        = "SELECT LEASE_MS FROM LEAF_WORKER_LEASE WHERE REGION = ? AND WORKER_ID = ?"
	// lastWorkerNode is the last ID WORKER_NODE handed out: its highest
	// row, or below its AUTO_INCREMENT counter when rows at the top were
	// deleted or an insert rolled back (the counter never goes back by
	// itself). The counter in information_schema may be cached (MySQL 8)
	// and lag: the highest row bounds it from below.
	lastWorkerNode = "SELECT GREATEST(COALESCE((SELECT MAX(ID) FROM WORKER_NODE), 0)," +
		" COALESCE((SELECT AUTO_INCREMENT - 1 FROM information_schema.TABLES" +
		" WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'WORKER_NODE'), 0))"
	// fenceLease makes the registration the id's owner: any earlier
	// holder's fencedLease matches no row from then on.
	fenceLease = "INSERT INTO LEAF_WORKER_LEASE (REGION, WORKER_ID, LEASE_MS, OWNER) VALUES (?, ?, 0, ?)" +
		" ON DUPLICATE KEY UPDATE OWNER = VALUES(OWNER)"
	// fencedLease raises the lease only while the row is ours; the driver
	// reports found rows (ClientFoundRows), so 0 means fenced out.
	fencedLease = "UPDATE LEAF_WORKER_LEASE SET LEASE_MS = GREATEST(LEASE_MS, ?) WHERE REGION = ? AND WORKER_ID = ? AND OWNER = ?"
)

// Registry is a snowflake.Registry on UidGenerator's WORKER_NODE table. It
// is safe for concurrent use.
type Registry struct {
	db       *sql.DB
	layout   snowflake.Layout
	opts     Options
	lost     chan struct{} // closed when a Lease finds the id taken over
	lostOnce sync.Once

	// mu guards the fields below and is held by Register and Lease while
	// they talk to the database.
	mu         sync.Mutex
	closed     bool
	registered bool
	worker     int64
	lease      time.Time // highest lease stored for worker
	token      string    // this registration's OWNER in LEAF_WORKER_LEASE
}

// Open connects to the database named by dsn (go-sql-driver syntax, e.g.
// "uid:secret@tcp(db:3306)/uid"), creates WORKER_NODE if asked to and
// LEAF_WORKER_LEASE if missing, and checks that WORKER_NODE has
// UidGenerator's columns. A server that cannot be reached gives an error
// wrapping snowflake.ErrRegistryUnavailable; bad options or DSN ErrInvalid;
// a missing table ErrSchema.
func Open(ctx context.Context, dsn string, layout snowflake.Layout, opts Options) (*Registry, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("dbworker: open: %w", err)
	}
	if err := layout.Validate(); err != nil {
		return nil, err
	}
	opts, err := opts.withDefaults(clock.Or(opts.Clock).Now())
	if err != nil {
		return nil, err
	}
	cfg, err := driver.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: dsn: %w", ErrInvalid, err)
	}
	if cfg.DBName == "" {
		return nil, fmt.Errorf("%w: dsn names no database (want user:password@tcp(host:3306)/uid)", ErrInvalid)
	}
	// As in segment/mysql: the context deadline interrupts dialling and
	// statements, the I/O time-outs are the safety net.
	if cfg.Timeout == 0 {
		cfg.Timeout = opts.Timeout
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = opts.Timeout + opts.Timeout/2
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = opts.Timeout + opts.Timeout/2
	}
	cfg.Logger = &driver.NopLogger{} // its lines repeat errors we return
	cfg.ClientFoundRows = true       // a fenced UPDATE that changes nothing still counts its row
	conn, err := driver.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: dsn: %w", ErrInvalid, err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(2)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(3 * time.Minute)
	r := &Registry{db: db, layout: layout, opts: opts, lost: make(chan struct{})}
	err = r.call(ctx, "open", func(ctx context.Context) error {
		if err := db.PingContext(ctx); err != nil {
			return err
		}
		if opts.CreateTable {
			if err := mysqldb.EnsureTable(ctx, db, "WORKER_NODE", createWorkerNode); err != nil {
				return err
			}
		}
		if _, err := db.ExecContext(ctx, verifyWorkerNode); err != nil {
			return err
		}
		if err := mysqldb.EnsureTable(ctx, db, "LEAF_WORKER_LEASE", createLease); err != nil {
			return err
		}
		if err := mysqldb.AddColumn(ctx, db, verifyOwner, addOwner); err != nil {
			return err
		}
		if err := mysqldb.AddColumn(ctx, db, verifyLeaseRegion, addLeaseRegion); err != nil {
			return err
		}
		if opts.Region == "" {
			return nil
		}
		if err := mysqldb.AddColumn(ctx, db, verifyNodeRegion, addNodeRegion); err != nil {
			return err
		}
		return mysqldb.EnsureTable(ctx, db, "LEAF_WORKER_REGION", createRegion)
	})
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return r, nil
}

// call runs f with the registry's time-out and maps its error: the
// caller's context error as is, a missing schema to ErrSchema, a refused
// user to ErrAccess, anything else (our time-out, connection failures) to
// snowflake.ErrRegistryUnavailable.
func (r *Registry) call(ctx context.Context, op string, f func(ctx context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dbworker: %s: %w", op, err)
	}
	cctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	err := f(cctx)
	if err == nil {
		return nil
	}
	if errors.Is(err, snowflake.ErrNoWorker) {
		return err
	}
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("dbworker: %s: %w", op, ctx.Err())
	case cctx.Err() != nil:
		return fmt.Errorf("%w: dbworker: %s: no answer within %v (%v)", snowflake.ErrRegistryUnavailable, op, r.opts.Timeout, err)
	}
	switch {
	case mysqldb.Missing(err):
		return fmt.Errorf("%w: dbworker: %s: %w (create WORKER_NODE with deploy/schema.sql, or set Options.CreateTable)", ErrSchema, op, err)
	case mysqldb.Denied(err): // a configuration to fix, not an outage to wait out
		return fmt.Errorf("%w: dbworker: %s: %w (check the DSN's user, password and grants)", ErrAccess, op, err)
	}
	return fmt.Errorf("%w: dbworker: %s: %w", snowflake.ErrRegistryUnavailable, op, err)
}

// Register implements snowflake.Registry: it inserts this node's WORKER_NODE
// row and returns its ID as the worker id, with the id's lease from
// LEAF_WORKER_LEASE (normally none) as LastLease. Before it reads that
// lease it makes itself the id's OWNER there, which fences out any earlier
// holder of the id (one seen again after an operator reset the counter).
// An ID beyond the layout's MaxWorker gives snowflake.ErrNoWorker. Called
// again, it returns the same registration without inserting a row (or,
// once Lost is closed, an error wrapping snowflake.ErrNotRegistered).
func (r *Registry) Register(ctx context.Context) (snowflake.Registration, error) {
	if err := ctx.Err(); err != nil {
		return snowflake.Registration{}, fmt.Errorf("dbworker: register: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return snowflake.Registration{}, fmt.Errorf("%w: dbworker: register", snowflake.ErrRegistryClosed)
	}
	if r.registered {
		if r.isLost() {
			return snowflake.Registration{}, fmt.Errorf("%w: dbworker: register: worker %d was taken over; open a new Registry", snowflake.ErrNotRegistered, r.worker)
		}
		return snowflake.Registration{Worker: r.worker, LastLease: r.lease}, nil
	}
	var (
		worker int64
		last   time.Time
		token  = newToken()
	)
	err := r.call(ctx, "register", func(ctx context.Context) error {
		var err error
		if worker, err = r.insert(ctx); err != nil {
			return err
		}
		if hi := r.layout.MaxWorker(); worker > hi {
			return fmt.Errorf("%w: dbworker: register: %s gave ID %d, beyond worker id %d of layout %s; "+
				"disposable ids are never reused, so %d bits of worker id allow only %d starts over the table's life "+
				"(UidGenerator's 22 bits allow about 4 million, Leaf's 10 only 1024): use a registry that reuses ids "+
				"(zk, kvworker) or a layout with more worker bits",
				snowflake.ErrNoWorker, r.counter(), worker, hi, r.layout, r.layout.WorkerBits-r.layout.RegionBits, hi)
		}
		// Fence first, then read: a lease an earlier holder got confirmed
		// was committed before the fence, so the read sees it; one it tries
		// after the fence matches no row.
		if _, err := r.db.ExecContext(ctx, fenceLease, r.opts.Region, worker, token); err != nil {
			return err
		}
		var ms int64
		if err := r.db.QueryRowContext(ctx, selectLease, r.opts.Region, worker).Scan(&ms); err != nil {
			return err
		}
		if ms > 0 {
			last = time.UnixMilli(ms)
		}
		return nil
	})
	if err != nil {
		return snowflake.Registration{}, err
	}
	r.registered, r.worker, r.lease, r.token = true, worker, last, token
	return snowflake.Registration{Worker: worker, LastLease: last}, nil
}

// Held implements snowflake.HeldCounter: disposable ids are never handed
// out again, so every id up to the last one handed out counts, whether
// its node runs or not (and, without a region, id 0, which
// AUTO_INCREMENT never gives). With a region: LAST_WORKER+1 of the
// region (0 before its first registration); without one: WORKER_NODE's
// last ID+1, UidGenerator's starts included. Capped at MaxWorker+1.
func (r *Registry) Held(ctx context.Context) (int, error) {
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return 0, fmt.Errorf("%w: dbworker: held", snowflake.ErrRegistryClosed)
	}
	var last int64 = -1 // nothing handed out
	err := r.call(ctx, "held", func(ctx context.Context) error {
		if r.opts.Region == "" {
			return r.db.QueryRowContext(ctx, lastWorkerNode).Scan(&last)
		}
		err := r.db.QueryRowContext(ctx, selectRegionWorker, r.opts.Region).Scan(&last)
		if errors.Is(err, sql.ErrNoRows) {
			last, err = -1, nil
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	return int(min(last+1, r.layout.MaxWorker()+1)), nil
}

// counter names what hands out the worker ids, for errors.
func (r *Registry) counter() string {
	if r.opts.Region == "" {
		return "WORKER_NODE"
	}
	return fmt.Sprintf("LEAF_WORKER_REGION of region %q", r.opts.Region)
}

// insert inserts this node's WORKER_NODE row and returns its worker id:
// the row's ID without a region; with one, the region's next worker id,
// taken in the same transaction as the row.
func (r *Registry) insert(ctx context.Context) (int64, error) {
	if r.opts.Region == "" {
		res, err := r.db.ExecContext(ctx, insertWorkerNode, r.opts.Host, r.opts.Port, r.opts.Type)
		if err != nil {
			return 0, err
		}
		return res.LastInsertId()
	}
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit
	var worker int64
	if _, err := tx.ExecContext(ctx, nextRegionWorker, r.opts.Region); err != nil {
		return 0, err
	}
	if err := tx.QueryRowContext(ctx, selectRegionWorker, r.opts.Region).Scan(&worker); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, insertRegionNode, r.opts.Host, r.opts.Port, r.opts.Type, r.opts.Region); err != nil {
		return 0, err
	}
	return worker, tx.Commit()
}

// Lease implements snowflake.Registry: it raises the worker's LEASE_MS in
// LEAF_WORKER_LEASE to until, rounded up to a millisecond, before it
// returns, never lowering it. The UPDATE is fenced (WHERE OWNER = this
// registration's token), a lower until included, which then only
// confirms the claim: if another registration of the same id has made
// itself OWNER since, Lease closes Lost and fails with an error wrapping
// snowflake.ErrNotRegistered.
func (r *Registry) Lease(ctx context.Context, until time.Time) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dbworker: lease: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return fmt.Errorf("%w: dbworker: lease", snowflake.ErrRegistryClosed)
	case !r.registered:
		return fmt.Errorf("%w: dbworker: lease", snowflake.ErrNotRegistered)
	case r.isLost():
		return fmt.Errorf("%w: dbworker: lease: worker %d was taken over", snowflake.ErrNotRegistered, r.worker)
	}
	ms := until.UnixMilli()
	if time.UnixMilli(ms).Before(until) {
		ms++ // round up: the lease must cover until
	}
	var found int64
	err := r.call(ctx, "lease", func(ctx context.Context) error {
		res, err := r.db.ExecContext(ctx, fencedLease, ms, r.opts.Region, r.worker, r.token)
		if err != nil {
			return err
		}
		found, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return err
	}
	if found == 0 {
		r.lostOnce.Do(func() { close(r.lost) })
		return fmt.Errorf("%w: dbworker: lease: worker %d was registered again (its LEAF_WORKER_LEASE row has another OWNER): claim lost",
			snowflake.ErrNotRegistered, r.worker)
	}
	if up := time.UnixMilli(ms); up.After(r.lease) {
		r.lease = up
	}
	return nil
}

// ClaimTTL implements snowflake.ClaimTTLer with Options.ClaimTTL.
func (r *Registry) ClaimTTL() time.Duration { return r.opts.ClaimTTL }

// Lost implements snowflake.Registry. It is closed only when a Lease finds
// that another registration made itself the id's OWNER: a disposable id
// belongs to its row, and is seen again only after an operator reset
// WORKER_NODE's counter.
func (r *Registry) Lost() <-chan struct{} { return r.lost }

func (r *Registry) isLost() bool {
	select {
	case <-r.lost:
		return true
	default:
		return false
	}
}

// newToken is a registration's OWNER token: 128 random bits in hex.
func newToken() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// Close closes the connection pool; the WORKER_NODE row stays, as in
// UidGenerator. It is idempotent; later Register and Lease calls return
// snowflake.ErrRegistryClosed.
func (r *Registry) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	return r.db.Close()
}

var (
	_ snowflake.Registry    = (*Registry)(nil)
	_ snowflake.ClaimTTLer  = (*Registry)(nil)
	_ snowflake.HeldCounter = (*Registry)(nil)
)
