package zk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/fsutil"
	"github.com/leafmq/leafmq/snowflake"
)

// Defaults of Options.
const (
	DefaultName           = "leafmq"
	DefaultSessionTimeout = 10 * time.Second
	DefaultTimeout        = 5 * time.Second
)

// ErrInvalid: bad Options or arguments of Open.
var ErrInvalid = errors.New("invalid zk registry options")

// Options configures Open. Addr is required; every other field has a
// default.
type Options struct {
	// Name is the Leaf name (leaf.name): the znodes live under
	// /snowflake/{Name}/forever. Default "leafmq". No "/".
	Name string
	// Region, if set, names the region whose worker ids the registry hands
	// out: its znodes live under /snowflake/{Name}/regions/{Region}
	// instead (forever, owner, lease), so each region numbers its workers
	// from 0 on its own and two regions with the same worker id never see
	// each other's znodes. Default none. [A-Za-z0-9_-]+.
	Region string
	// Addr is this node's identity, "ip:port", as in Leaf's
	// leaf.snowflake.port and its local ip. It names the node's znode, so
	// the worker id is tied to it; of two live processes with one Addr only
	// one holds the worker id (the owner znode), the other's Register fails
	// with ErrInUse. Required.
	Addr string
	// SessionTimeout is the ZooKeeper session timeout. Default 10s (the
	// server clamps it to 2..20 ticks).
	SessionTimeout time.Duration
	// CacheFile, if set, is a local JSON file where the worker id and the
	// last lease are kept after each successful Register and Lease. Register
	// uses it only when ZooKeeper cannot be reached (like Leaf's
	// workerID.properties). Default none.
	CacheFile string
	// NoCacheRegister keeps writing CacheFile but never registers from it:
	// for a process that already held a claim in ZooKeeper and lost it
	// (a partition past the session timeout). Another process with this
	// Addr may hold the worker id by then, and a registration from the
	// cache has no owner znode to check: it would serve beside it.
	NoCacheRegister bool
	// Timeout bounds each Register and Lease, waiting for a session
	// included (Register may wait OwnerWait more). Default 5s.
	Timeout time.Duration
	// OwnerWait is how long Register waits for another session's owner
	// znode of the same worker to go away (a process that was killed holds
	// it until its session expires) before it fails with ErrInUse. Default
	// SessionTimeout plus Timeout; negative: do not wait.
	OwnerWait time.Duration
	// Owner describes this process in its owner znode, next to the pid,
	// the host name and the start time (e.g. the node name). Default none.
	Owner string
	// Clock stamps the forever znode and the owner znode's start time, and
	// times the wait for a session. Default clock.Real.
	Clock clock.Clock
}

// ErrInUse: the worker id of this Addr is held by another live ZooKeeper
// session, a process that is still running (or that stopped less than a
// session timeout ago). The error names it.
var ErrInUse = errors.New("worker id in use by another live process")

// owner is the data of an owner znode: who holds the worker id now.
type owner struct {
	Node    string `json:"node,omitempty"`
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	Addr    string `json:"addr"`
	Started string `json:"started"` // RFC 3339
	Session string `json:"session"` // hex session id
}

func (o owner) String() string {
	s := fmt.Sprintf("pid %d on host %s", o.PID, o.Host)
	if o.Node != "" {
		s = "node " + o.Node + ", " + s
	}
	return s + fmt.Sprintf(" (addr %s, since %s, session %s)", o.Addr, o.Started, o.Session)
}

// endpoint is the data of a forever znode, as Leaf's Endpoint class
// serializes it (Jackson): ip and port are strings, timestamp unix ms.
type endpoint struct {
	IP        string `json:"ip"`
	Port      string `json:"port"`
	Timestamp int64  `json:"timestamp"`
}

// cache is the JSON of Options.CacheFile.
type cache struct {
	Name   string `json:"name"`
	Region string `json:"region,omitempty"`
	Addr   string `json:"addr"`
	Worker int64  `json:"worker"`
	Lease  int64  `json:"lease"` // unix ms
}

// Registry is a snowflake.Registry on ZooKeeper in Leaf's layout. It is
// safe for concurrent use.
type Registry struct {
	conn     *zk.Conn
	layout   snowflake.Layout
	opts     Options
	ip, port string
	root     string // /snowflake/{Name}/forever
	owners   string // /snowflake/{Name}/owner
	leases   string // /snowflake/{Name}/lease
	started  time.Time
	ttl      atomic.Int64 // negotiated session timeout, ns (0: none yet)

	lost      chan struct{}
	lostOnce  sync.Once
	closing   chan struct{} // closed when Close starts
	closeOnce sync.Once
	held      atomic.Bool    // registered in ZooKeeper: a session expiry loses the claim
	wg        sync.WaitGroup // calls in flight (see call)

	// leaseMu serializes Lease calls; mu guards the fields below and is held
	// by Register while it talks to the server. Order: leaseMu before mu.
	leaseMu      sync.Mutex
	mu           sync.Mutex
	registered   bool
	cached       bool // registered from CacheFile: ZooKeeper was unreachable
	noSession    bool // WaitFree found no session: Register does not wait for one again
	closed       bool
	worker       int64
	path         string    // the forever znode
	ownerPath    string    // this registration's ephemeral owner znode
	ownerVersion int32     // its version
	session      int64     // the session that created ownerPath
	version      int32     // version of the forever znode this registration last wrote or checked
	ep           endpoint  // its data then
	lease        time.Time // highest lease recorded (in ZooKeeper, or the cache file)
}

// Open returns a Registry for layout on the ZooKeeper ensemble servers
// ("host:port" each). Like go-zookeeper's Connect it does not wait for a
// session: Register does, and fails with an error wrapping
// snowflake.ErrRegistryUnavailable if none is established within
// Options.Timeout (unless Options.CacheFile can stand in). Bad options give
// ErrInvalid.
func Open(ctx context.Context, servers []string, layout snowflake.Layout, opts Options) (*Registry, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("zk: open: %w", err)
	}
	if len(servers) == 0 {
		return nil, fmt.Errorf("%w: no servers", ErrInvalid)
	}
	if err := layout.Validate(); err != nil {
		return nil, err
	}
	if err := defaults(&opts); err != nil {
		return nil, err
	}
	ip, port, err := net.SplitHostPort(opts.Addr)
	if err != nil || ip == "" || port == "" {
		return nil, fmt.Errorf("%w: addr %q must be ip:port", ErrInvalid, opts.Addr)
	}
	r := &Registry{
		layout:  layout,
		opts:    opts,
		ip:      ip,
		port:    port,
		root:    Base(opts.Name, opts.Region) + "/forever",
		owners:  Base(opts.Name, opts.Region) + "/owner",
		leases:  Base(opts.Name, opts.Region) + "/lease",
		lost:    make(chan struct{}),
		closing: make(chan struct{}),
	}
	r.started = r.opts.Clock.Now()
	conn, _, err := zk.Connect(servers, opts.SessionTimeout,
		zk.WithLogger(timeoutLogger{r}),
		zk.WithEventCallback(func(ev zk.Event) {
			if ev.Type == zk.EventSession && ev.State == zk.StateExpired {
				r.expired()
			}
		}))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	r.conn = conn
	return r, nil
}

// Base is the znode under which the registry of name and region keeps its
// forever, owner and lease znodes: /snowflake/{name}, or
// /snowflake/{name}/regions/{region} for a region.
func Base(name, region string) string {
	if region == "" {
		return "/snowflake/" + name
	}
	return "/snowflake/" + name + "/regions/" + region
}

func defaults(o *Options) error {
	o.Clock = clock.Or(o.Clock)
	if o.Name == "" {
		o.Name = DefaultName
	}
	if strings.Trim(o.Region, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
		return fmt.Errorf("%w: region %q must be [A-Za-z0-9_-]+", ErrInvalid, o.Region)
	}
	if strings.ContainsAny(o.Name, "/\x00") {
		return fmt.Errorf("%w: name %q must not contain /", ErrInvalid, o.Name)
	}
	if o.Addr == "" {
		return fmt.Errorf("%w: addr (this node's ip:port) is required", ErrInvalid)
	}
	if strings.Contains(o.Addr, "/") {
		return fmt.Errorf("%w: addr %q must not contain /", ErrInvalid, o.Addr)
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = DefaultSessionTimeout
	}
	if o.SessionTimeout < 0 {
		return fmt.Errorf("%w: negative session timeout %v", ErrInvalid, o.SessionTimeout)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Timeout < 0 {
		return fmt.Errorf("%w: negative timeout %v", ErrInvalid, o.Timeout)
	}
	if o.OwnerWait == 0 {
		o.OwnerWait = o.SessionTimeout + o.Timeout
	}
	return nil
}

// Register implements snowflake.Registry: it finds this Addr's forever
// znode (/snowflake/{Name}/forever/{Addr}-NNNNNNNNNN) or creates it as a
// persistent sequential node, and takes its worker id, the sequence number.
// Then it creates the worker's owner znode (/snowflake/{Name}/owner/
// NNNNNNNNNN), an ephemeral node of this session that names this process; while another session holds it, Register waits up to
// Options.OwnerWait for it to go away and then fails with ErrInUse naming
// the holder. Last it writes the forever znode (conditional on the version
// it read, raising its timestamp to the cache file's lease if that is
// later), which fences out every earlier registration of the worker: their
// next Lease fails. LastLease is the highest of the znode's timestamp and
// the cache file's lease. A sequence number beyond the layout's MaxWorker
// gives snowflake.ErrNoWorker. Without a session within Options.Timeout it
// falls back to Options.CacheFile, else fails with
// snowflake.ErrRegistryUnavailable. Called again, it returns the same
// worker (or, once Lost is closed, snowflake.ErrNotRegistered).
func (r *Registry) Register(ctx context.Context) (snowflake.Registration, error) {
	if err := ctx.Err(); err != nil {
		return snowflake.Registration{}, fmt.Errorf("zk: register: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return snowflake.Registration{}, fmt.Errorf("%w: zk: register", snowflake.ErrRegistryClosed)
	}
	if r.registered {
		if r.isLost() {
			return snowflake.Registration{}, fmt.Errorf("%w: zk: register: the claim of worker %d was lost; open a new Registry", snowflake.ErrNotRegistered, r.worker)
		}
		return snowflake.Registration{Worker: r.worker, LastLease: r.lease}, nil
	}
	cctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	wctx := cctx
	if r.noSession { // WaitFree just waited Options.Timeout for a session
		r.noSession = false
		var wcancel context.CancelFunc
		wctx, wcancel = context.WithTimeout(cctx, 0) // look once, do not wait again
		defer wcancel()
	}
	if err := r.waitSession(wctx); err != nil {
		if ctx.Err() == nil && r.opts.CacheFile != "" && !r.opts.NoCacheRegister {
			return r.registerCachedLocked(err)
		}
		return snowflake.Registration{}, r.fail(ctx, "register", err)
	}
	path, _, created, err := r.findOrCreate(cctx)
	if err != nil {
		return snowflake.Registration{}, r.fail(ctx, "register", err)
	}
	worker, err := seqOf(path)
	if err != nil {
		return snowflake.Registration{}, err
	}
	if worker > r.layout.MaxWorker() {
		return snowflake.Registration{}, fmt.Errorf("%w: zk: znode %s has sequence number %d, beyond worker id %d of layout %s; "+
			"sequence numbers are never reused (Leaf #57): use a new leaf name or remove old nodes of %s",
			snowflake.ErrNoWorker, path, worker, r.layout.MaxWorker(), r.layout, r.root)
	}
	ownerPath, ownerVersion, session, err := r.own(ctx, path, worker, r.opts.OwnerWait, true)
	if err != nil {
		return snowflake.Registration{}, err
	}
	fctx, fcancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer fcancel()
	ep, lease, version, err := r.fence(fctx, path, worker, created)
	if err != nil {
		return snowflake.Registration{}, r.fail(ctx, "register", err)
	}
	// The owner znode must still be this session's: were the session
	// replaced meanwhile, the node is gone (or another process's).
	st, err := callV(r, fctx, func() (*zk.Stat, error) {
		_, st, err := r.conn.Exists(ownerPath)
		return st, err
	})
	if err != nil {
		return snowflake.Registration{}, r.fail(ctx, "register", err)
	}
	if st == nil || st.EphemeralOwner != session || r.conn.SessionID() != session {
		return snowflake.Registration{}, fmt.Errorf("%w: zk: register: the session changed while registering worker %d", snowflake.ErrRegistryUnavailable, worker)
	}
	var last time.Time
	if lease > 0 {
		last = time.UnixMilli(lease)
	}
	r.registered, r.worker, r.path, r.lease = true, worker, path, last
	r.held.Store(true)
	r.ownerPath, r.ownerVersion, r.session, r.version, r.ep = ownerPath, ownerVersion, session, version, ep
	_ = r.writeCache(worker, last) // best effort: ZooKeeper has it
	return snowflake.Registration{Worker: worker, LastLease: last}, nil
}

// own creates the ephemeral owner znode of the worker whose forever znode
// is path, for this session, and returns its path and version and the
// session. While another session holds it, it waits up to
// Options.OwnerWait for the node to go away, then fails with ErrInUse.
//
// With create false it creates nothing: it waits the same way for another
// session's owner znode to go and returns "" once there is none.
func (r *Registry) own(ctx context.Context, path string, worker int64, wait time.Duration, create bool) (string, int32, int64, error) {
	op := fmt.Sprintf("%s/%010d", r.owners, worker) // by worker id, whichever Addr

	cctx, cancel := context.WithTimeout(ctx, r.opts.Timeout+max(wait, 0))
	defer cancel()
	err := r.call(cctx, func() error {
		_, err := r.conn.Create(r.owners, nil, 0, zk.WorldACL(zk.PermAll))
		return err
	})
	if err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return "", 0, 0, r.fail(ctx, "register: create "+r.owners, err)
	}
	host, _ := os.Hostname()
	for {
		session := r.conn.SessionID()
		data, err := json.Marshal(owner{Node: r.opts.Owner, Host: host, PID: os.Getpid(), Addr: r.opts.Addr,
			Started: r.started.UTC().Format(time.RFC3339Nano), Session: fmt.Sprintf("0x%x", session)})
		if err != nil {
			return "", 0, 0, err
		}
		if create {
			err = r.call(cctx, func() error {
				_, err := r.conn.Create(op, data, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
				return err
			})
			if err != nil && !errors.Is(err, zk.ErrNodeExists) {
				return "", 0, 0, r.fail(ctx, "register: create "+op, err)
			}
		}
		type getW struct {
			od []byte
			st *zk.Stat
			ch <-chan zk.Event
		}
		g, err := callV(r, cctx, func() (g getW, err error) {
			g.od, g.st, g.ch, err = r.conn.GetW(op)
			return g, err
		})
		od, st, ch := g.od, g.st, g.ch
		if errors.Is(err, zk.ErrNoNode) {
			if !create {
				return "", 0, 0, nil // free
			}
			continue // gone meanwhile: try again
		}
		if err != nil {
			return "", 0, 0, r.fail(ctx, "register: get "+op, err)
		}
		if st.EphemeralOwner == session && session == r.conn.SessionID() {
			if !create {
				return "", 0, 0, nil
			}
			return op, st.Version, session, nil
		}
		var o owner
		if json.Unmarshal(od, &o) != nil || o.PID == 0 {
			o = owner{Host: "?", Addr: "?", Started: "?", Session: fmt.Sprintf("0x%x", st.EphemeralOwner)}
		}
		inUse := fmt.Errorf("%w: zk: register: worker %d (%s) is held by %s; stop that process, or give this one another identity (--zk-addr)",
			ErrInUse, worker, path, o)
		if st.EphemeralOwner == 0 {
			return "", 0, 0, fmt.Errorf("%w; %s is not ephemeral: remove it", inUse, op)
		}
		if wait < 0 {
			return "", 0, 0, inUse
		}
		select {
		case <-ch: // deleted, or the watch ended: look again
		case <-r.closing:
			return "", 0, 0, fmt.Errorf("%w: zk: register (%w)", snowflake.ErrRegistryClosed, inUse)
		case <-cctx.Done():
			if ctx.Err() != nil {
				return "", 0, 0, fmt.Errorf("zk: register: %w (%w)", ctx.Err(), inUse)
			}
			return "", 0, 0, inUse
		}
	}
}

// WaitFree waits until no other live process holds this Addr's worker id
// (until its owner znode is gone), at most Options.OwnerWait, and fails
// with ErrInUse naming the holder if it is still held then. Register waits
// the same way; WaitFree lets a caller that times the claim from the start
// of Register (snowflake.Source, whose Open function can call it) do the
// waiting before. It creates nothing, and leaves failures to reach
// ZooKeeper to Register: it returns nil then.
func (r *Registry) WaitFree(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return fmt.Errorf("%w: zk: wait", snowflake.ErrRegistryClosed)
	}
	if r.registered || r.opts.OwnerWait < 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	if r.waitSession(cctx) != nil {
		r.noSession = ctx.Err() == nil
		return ctx.Err()
	}
	children, err := callV(r, cctx, func() ([]string, error) {
		children, _, err := r.conn.Children(r.root)
		return children, err
	})
	if err != nil {
		return ctx.Err() // no znodes yet, or ZooKeeper trouble: Register's
	}
	path := r.mine(children)
	if path == "" {
		return nil
	}
	worker, err := seqOf(path)
	if err != nil {
		return nil
	}
	_, _, _, err = r.own(ctx, path, worker, r.opts.OwnerWait, false)
	if errors.Is(err, ErrInUse) || errors.Is(err, snowflake.ErrRegistryClosed) || ctx.Err() != nil {
		return err
	}
	return nil
}

// fence writes the forever znode at path, conditional on the version it
// read: its timestamp becomes the higher of its own and the cache file's
// lease of worker. The write bumps the version, so every earlier
// registration's conditional Lease fails from then on. It returns the data
// written, the worker's last lease (unix ms, 0 if none) and the new
// version. A znode this registration created (created) and nobody wrote
// since holds its creation time, which is no one's lease: after
// /snowflake/<name> was removed, the new znode of a worker id that a
// stopped process served must not hide that there is no lease on record
// (TestNewZnodeHasNoLease).
func (r *Registry) fence(ctx context.Context, path string, worker int64, created bool) (endpoint, int64, int32, error) {
	cached := r.cachedLease(worker)
	lp := r.leasePath(worker)
	for _, p := range []string{r.leases, lp} {
		err := r.call(ctx, func() error {
			_, err := r.conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll))
			return err
		})
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return endpoint{}, 0, 0, fmt.Errorf("create %s: %w", p, err)
		}
	}
	for {
		ep, version, err := r.read(ctx, path)
		if err != nil {
			return endpoint{}, 0, 0, err
		}
		wl, err := r.readLease(ctx, lp)
		if err != nil {
			return endpoint{}, 0, 0, err
		}
		own := ep.Timestamp
		if created && version == 0 {
			own = 0
		}
		lease := max(own, cached, wl)
		ep.Timestamp = max(ep.Timestamp, lease)
		if ep.IP == "" {
			ep.IP, ep.Port = r.ip, r.port
		}
		data, err := json.Marshal(ep)
		if err != nil {
			return endpoint{}, 0, 0, err
		}
		ldata, err := json.Marshal(workerLease{Timestamp: lease, Addr: r.opts.Addr})
		if err != nil {
			return endpoint{}, 0, 0, err
		}
		res, err := callV(r, ctx, func() ([]zk.MultiResponse, error) {
			return r.conn.Multi(
				&zk.SetDataRequest{Path: path, Data: data, Version: version},
				&zk.SetDataRequest{Path: lp, Data: ldata, Version: -1})
		})
		if err == nil {
			if len(res) > 0 && res[0].Stat != nil {
				return ep, lease, res[0].Stat.Version, nil
			}
			return ep, lease, version + 1, nil
		}
		if !errors.Is(err, zk.ErrBadVersion) {
			return endpoint{}, 0, 0, fmt.Errorf("set %s: %w", path, err)
		}
		// An earlier holder's last Lease got in first: catch up with the
		// leader and read its lease.
		_ = r.call(ctx, func() error { _, err := r.conn.Sync(path); return err })
	}
}

// workerLease is the data of a worker's lease znode.
type workerLease struct {
	Timestamp int64  `json:"timestamp"` // unix ms
	Addr      string `json:"addr"`      // of the node that wrote it
}

// leasePath is the lease znode of worker: /snowflake/{Name}/lease/NNNNNNNNNN.
func (r *Registry) leasePath(worker int64) string { return fmt.Sprintf("%s/%010d", r.leases, worker) }

// readLease returns the timestamp of a lease znode, 0 if it has none.
func (r *Registry) readLease(ctx context.Context, lp string) (int64, error) {
	data, err := callV(r, ctx, func() ([]byte, error) {
		data, _, err := r.conn.Get(lp)
		return data, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("get %s: %w", lp, err)
	}
	var wl workerLease
	if len(data) > 0 && json.Unmarshal(data, &wl) != nil {
		return 0, fmt.Errorf("znode %s: bad data %q", lp, data)
	}
	return wl.Timestamp, nil
}

// cachedLease returns the lease (unix ms) of the cache file if it was
// written for this Name, Addr and worker, else 0.
func (r *Registry) cachedLease(worker int64) int64 {
	c, err := r.readCache()
	if err != nil || c.Name != r.opts.Name || c.Addr != r.opts.Addr || c.Worker != worker {
		return 0
	}
	return c.Lease
}

func (r *Registry) readCache() (cache, error) {
	var c cache
	if r.opts.CacheFile == "" {
		return c, errors.New("no cache file")
	}
	b, err := os.ReadFile(r.opts.CacheFile)
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("cache file %s: %v", r.opts.CacheFile, err)
	}
	return c, nil
}

// registerCachedLocked registers from the cache file when ZooKeeper is
// unreachable (cause).
func (r *Registry) registerCachedLocked(cause error) (snowflake.Registration, error) {
	c, err := r.readCache()
	if err != nil {
		return snowflake.Registration{}, fmt.Errorf("%w: zk: register: %v; cache file: %v", snowflake.ErrRegistryUnavailable, cause, err)
	}
	if c.Name != r.opts.Name || c.Region != r.opts.Region || c.Addr != r.opts.Addr || c.Worker < 0 || c.Worker > r.layout.MaxWorker() {
		return snowflake.Registration{}, fmt.Errorf("%w: zk: register: %v; cache file %s is for %s/%s worker %d of region %q, not usable here",
			snowflake.ErrRegistryUnavailable, cause, r.opts.CacheFile, c.Name, c.Addr, c.Worker, c.Region)
	}
	var last time.Time
	if c.Lease > 0 {
		last = time.UnixMilli(c.Lease)
	}
	r.registered, r.cached, r.worker, r.lease = true, true, c.Worker, last
	// The cache holds this host's leases only: another process with this
	// identity may have used the worker id in ZooKeeper since (Partial).
	return snowflake.Registration{Worker: c.Worker, LastLease: last, Partial: true}, nil
}

// findOrCreate returns the forever znode of this Addr, creating the parents
// and the node when missing, its data, and whether it created the node.
func (r *Registry) findOrCreate(ctx context.Context) (string, endpoint, bool, error) {
	parts := strings.Split(strings.TrimPrefix(r.root, "/"), "/")
	for i := range parts {
		p := "/" + strings.Join(parts[:i+1], "/")
		err := r.call(ctx, func() error {
			_, err := r.conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll))
			return err
		})
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return "", endpoint{}, false, fmt.Errorf("create %s: %w", p, err)
		}
	}
	children, err := callV(r, ctx, func() ([]string, error) {
		children, _, err := r.conn.Children(r.root)
		return children, err
	})
	if err != nil {
		return "", endpoint{}, false, fmt.Errorf("children of %s: %w", r.root, err)
	}
	prefix := r.opts.Addr + "-"
	if path := r.mine(children); path != "" {
		ep, _, err := r.read(ctx, path)
		if err != nil {
			return "", endpoint{}, false, err
		}
		return path, ep, false, nil
	}
	ep := endpoint{IP: r.ip, Port: r.port, Timestamp: r.opts.Clock.Now().UnixMilli()}
	data, err := json.Marshal(ep)
	if err != nil {
		return "", endpoint{}, false, err
	}
	path, err := callV(r, ctx, func() (string, error) {
		return r.conn.Create(r.root+"/"+prefix, data, zk.FlagSequence, zk.WorldACL(zk.PermAll))
	})
	if err != nil {
		return "", endpoint{}, false, fmt.Errorf("create %s: %w", r.root+"/"+prefix, err)
	}
	return path, ep, true, nil
}

// mine returns the forever znode of this Addr among children of the
// forever node, or "". Leaf keys children by the part before "-"; with
// several nodes for one Addr (concurrent first starts) it takes the lowest
// number.
func (r *Registry) mine(children []string) string {
	prefix := r.opts.Addr + "-"
	var mine []string
	for _, c := range children {
		if strings.HasPrefix(c, prefix) {
			if _, err := seqOf(c); err == nil {
				mine = append(mine, c)
			}
		}
	}
	if len(mine) == 0 {
		return ""
	}
	sort.Strings(mine) // fixed-width numbers: string order is numeric order
	return r.root + "/" + mine[0]
}

// read returns the data of a forever znode and its version.
func (r *Registry) read(ctx context.Context, path string) (endpoint, int32, error) {
	type got struct {
		data []byte
		st   *zk.Stat
	}
	g, err := callV(r, ctx, func() (g got, err error) {
		g.data, g.st, err = r.conn.Get(path)
		return g, err
	})
	data, st := g.data, g.st
	if err != nil {
		return endpoint{}, 0, fmt.Errorf("get %s: %w", path, err)
	}
	var ep endpoint
	if len(data) > 0 {
		if err := json.Unmarshal(data, &ep); err != nil {
			return endpoint{}, 0, fmt.Errorf("znode %s: bad data %q: %v", path, data, err)
		}
	}
	return ep, st.Version, nil
}

// seqOf parses the sequence number after the last "-" of a znode name.
func seqOf(path string) (int64, error) {
	i := strings.LastIndexByte(path, '-')
	s := path[i+1:]
	if i < 0 || len(s) != 10 {
		return 0, fmt.Errorf("zk: znode %q is not {ip}:{port}-NNNNNNNNNN", path)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("zk: znode %q is not {ip}:{port}-NNNNNNNNNN", path)
	}
	return n, nil
}

// Lease implements snowflake.Registry: it raises the znode's "timestamp" to
// until (rounded up to a millisecond; never lowering it) before it returns,
// and then the cache file. The write is one ZooKeeper transaction,
// conditional on this registration's owner znode and on the forever
// znode's version being the one this registration last wrote: after a
// later Register of the worker (by any process), a session expiry, or the
// removal of either znode, it fails with an error wrapping
// snowflake.ErrNotRegistered and closes Lost. A lease not above the last
// one writes nothing but still checks both versions, so every nil return
// confirms the claim. Registered from the cache file, it records the lease
// in the cache file only, until ZooKeeper has a session again: then it
// moves the registration there first (see the package doc).
func (r *Registry) Lease(ctx context.Context, until time.Time) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("zk: lease: %w", err)
	}
	r.leaseMu.Lock()
	defer r.leaseMu.Unlock()
	r.mu.Lock()
	closed, registered, cached, worker, path, cur := r.closed, r.registered, r.cached, r.worker, r.path, r.lease
	ownerPath, ownerVersion, session, version, ep := r.ownerPath, r.ownerVersion, r.session, r.version, r.ep
	r.mu.Unlock()
	switch {
	case closed:
		return fmt.Errorf("%w: zk: lease", snowflake.ErrRegistryClosed)
	case !registered:
		return fmt.Errorf("%w: zk: lease", snowflake.ErrNotRegistered)
	case r.isLost():
		return fmt.Errorf("%w: zk: lease: the claim of worker %d was lost", snowflake.ErrNotRegistered, worker)
	}
	ms := until.UnixMilli()
	if until.Sub(time.UnixMilli(ms)) > 0 {
		ms++ // round up: the stored lease must not be below until
	}
	raise := cur.IsZero() || ms > cur.UnixMilli()
	if cached && r.conn.State() == zk.StateHasSession {
		// ZooKeeper is back: hold the worker id there from now on.
		switch err := r.upgrade(ctx, worker, cur); {
		case err == nil:
			r.mu.Lock()
			cached, path, cur = false, r.path, r.lease
			ownerPath, ownerVersion, session, version, ep = r.ownerPath, r.ownerVersion, r.session, r.version, r.ep
			r.mu.Unlock()
			raise = ms > cur.UnixMilli()
		case errors.Is(err, snowflake.ErrNotRegistered):
			return err
		}
		// Otherwise ZooKeeper is not quite back: the cache file serves on.
	}
	if cached {
		if !raise {
			return nil
		}
		if err := r.writeCache(worker, time.UnixMilli(ms)); err != nil {
			return fmt.Errorf("%w: zk: lease: %v", snowflake.ErrRegistryUnavailable, err)
		}
		r.setLease(ms)
		return nil
	}
	if s := r.conn.SessionID(); s != session {
		r.markLost()
		return fmt.Errorf("%w: zk: lease: the session of worker %d (0x%x) ended; its owner znode %s is gone", snowflake.ErrNotRegistered, worker, session, ownerPath)
	}
	ops := []any{&zk.CheckVersionRequest{Path: ownerPath, Version: ownerVersion}}
	if raise {
		ep.Timestamp = ms
		data, err := json.Marshal(ep)
		if err != nil {
			return err
		}
		ldata, err := json.Marshal(workerLease{Timestamp: ms, Addr: r.opts.Addr})
		if err != nil {
			return err
		}
		ops = append(ops, &zk.SetDataRequest{Path: path, Data: data, Version: version},
			&zk.SetDataRequest{Path: r.leasePath(worker), Data: ldata, Version: -1})
	} else {
		ops = append(ops, &zk.CheckVersionRequest{Path: path, Version: version})
	}
	cctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	res, err := callV(r, cctx, func() ([]zk.MultiResponse, error) { return r.conn.Multi(ops...) })
	if err != nil {
		if len(res) >= 2 && (fenced(res[0].Error) || fenced(res[1].Error) || len(res) > 2 && fenced(res[2].Error)) {
			r.markLost()
			what := "the owner znode " + ownerPath
			switch {
			case fenced(res[0].Error):
			case fenced(res[1].Error):
				what = fmt.Sprintf("the forever znode %s (version %d)", path, version)
			default:
				what = "the lease znode " + r.leasePath(worker)
			}
			return fmt.Errorf("%w: zk: lease: worker %d was taken over or removed: %s changed", snowflake.ErrNotRegistered, worker, what)
		}
		if fenced(err) {
			r.markLost()
			return fmt.Errorf("%w: zk: lease: worker %d was taken over or removed: %v", snowflake.ErrNotRegistered, worker, err)
		}
		return r.fail(ctx, "lease", err)
	}
	if !raise {
		return nil
	}
	r.mu.Lock()
	r.version, r.ep = version+1, ep // a set at version v makes v+1
	if len(res) >= 2 && res[1].Stat != nil {
		r.version = res[1].Stat.Version
	}
	r.mu.Unlock()
	r.setLease(ms)
	_ = r.writeCache(worker, time.UnixMilli(ms)) // best effort: ZooKeeper has it
	return nil
}

// upgrade moves a registration from the cache file to ZooKeeper once it has
// a session: it takes the owner znode of worker (not waiting for another
// holder) and fences the forever znode, as Register does. If ZooKeeper has
// another worker for this Addr now, another session holds the owner znode,
// or the znode's lease is beyond cur (another process used the worker
// meanwhile), the claim is lost: Lost is closed and the error wraps
// snowflake.ErrNotRegistered. Called with leaseMu held.
func (r *Registry) upgrade(ctx context.Context, worker int64, cur time.Time) error {
	lost := func(format string, a ...any) error {
		r.markLost()
		return fmt.Errorf("%w: zk: lease: worker %d, registered from the cache file while ZooKeeper was unreachable: %s",
			snowflake.ErrNotRegistered, worker, fmt.Sprintf(format, a...))
	}
	cctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	path, _, _, err := r.findOrCreate(cctx)
	if err != nil {
		return r.fail(ctx, "lease", err)
	}
	if w, err := seqOf(path); err != nil || w != worker {
		return lost("ZooKeeper has %s for %s now", path, r.opts.Addr)
	}
	ownerPath, ownerVersion, session, err := r.own(ctx, path, worker, -1, true)
	if errors.Is(err, ErrInUse) {
		return lost("%v", err)
	}
	if err != nil {
		return err
	}
	ep, _, err := r.read(cctx, path)
	if err != nil {
		return r.fail(ctx, "lease", err)
	}
	wl, err := r.readLease(cctx, r.leasePath(worker))
	if err != nil {
		return r.fail(ctx, "lease", err)
	}
	if last := max(ep.Timestamp, wl); !cur.IsZero() && last > cur.UnixMilli() {
		return lost("ZooKeeper has a lease of it (%d ms) beyond this registration's (%d ms): another process used the worker id", last, cur.UnixMilli())
	}
	ep, _, version, err := r.fence(cctx, path, worker, false)
	if err != nil {
		return r.fail(ctx, "lease", err)
	}
	if r.conn.SessionID() != session {
		return fmt.Errorf("%w: zk: lease: the session changed while moving worker %d back to ZooKeeper", snowflake.ErrRegistryUnavailable, worker)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cached, r.path = false, path
	r.held.Store(true)
	r.ownerPath, r.ownerVersion, r.session, r.version, r.ep = ownerPath, ownerVersion, session, version, ep
	if ep.Timestamp > 0 && time.UnixMilli(ep.Timestamp).After(r.lease) {
		r.lease = time.UnixMilli(ep.Timestamp)
	}
	return nil
}

// fenced reports whether err from a conditional ZooKeeper write means the
// claim is no longer this registration's.
func fenced(err error) bool {
	return errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNoNode)
}

func (r *Registry) setLease(ms int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t := time.UnixMilli(ms); t.After(r.lease) {
		r.lease = t
	}
}

// writeCache writes worker and lease to the cache file (atomically, by
// rename), if there is one. Calls are serialized by mu (Register) or
// leaseMu (Lease), which never run it at once: Lease needs a registration.
func (r *Registry) writeCache(worker int64, lease time.Time) error {
	if r.opts.CacheFile == "" {
		return nil
	}
	c := cache{Name: r.opts.Name, Region: r.opts.Region, Addr: r.opts.Addr, Worker: worker}
	if !lease.IsZero() {
		c.Lease = lease.UnixMilli()
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return fsutil.WriteFile(r.opts.CacheFile, append(b, '\n'))
}

// Lost implements snowflake.Registry: it is closed when the ZooKeeper
// session expires after Register (and by Close). See the package doc for
// what that means with Leaf's scheme.
func (r *Registry) Lost() <-chan struct{} { return r.lost }

func (r *Registry) isLost() bool {
	select {
	case <-r.lost:
		return true
	default:
		return false
	}
}

func (r *Registry) markLost() { r.lostOnce.Do(func() { close(r.lost) }) }

// expired is called by the connection on session expiry.
// It takes no lock: go-zookeeper calls it from its event loop, which a
// Register holding mu may be waiting on.
func (r *Registry) expired() {
	if r.held.Load() {
		r.markLost()
	}
}

// Close implements snowflake.Registry: it closes the ZooKeeper session and
// waits for calls in flight. The forever znode stays (as in Leaf), so a
// node with the same Addr gets the same worker id and its lease later.
// Close is idempotent; later calls of Register and Lease return
// snowflake.ErrRegistryClosed.
func (r *Registry) Close() error {
	r.closeOnce.Do(func() { close(r.closing) }) // a Register waiting for an owner gives up
	r.leaseMu.Lock()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		r.leaseMu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	r.leaseMu.Unlock()
	r.markLost() // a closed registry holds no claim
	r.conn.Close()
	r.wg.Wait()
	return nil
}

// waitSession waits until the connection has a session.
func (r *Registry) waitSession(ctx context.Context) error {
	const poll = 20 * time.Millisecond
	t := r.opts.Clock.NewTicker(poll)
	defer t.Stop()
	for {
		switch r.conn.State() {
		case zk.StateHasSession:
			return nil
		case zk.StateExpired:
			// go-zookeeper reconnects with a new session by itself.
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no session with %s: %w", r.conn.Server(), ctx.Err())
		case <-t.C():
		}
	}
}

// call runs op, a go-zookeeper call, which has no context: it returns when
// ctx ends even if op has not. The goroutine then ends when op does, at
// the latest when Close closes the connection (go-zookeeper fails queued
// requests then); Close waits for it.
func (r *Registry) call(ctx context.Context, op func() error) error {
	_, err := callV(r, ctx, func() (struct{}, error) { return struct{}{}, op() })
	return err
}

// callV is call for an op with a result. The result comes back only
// through the channel: an op that outlives ctx writes no variable its
// caller reads (results captured by the closure raced with the caller's
// reads after a timeout: go test -race, TestThreeSnowflakeNodesZooKeeper
// on a loaded machine).
func callV[T any](r *Registry, ctx context.Context, op func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		v, err := op()
		done <- result{v, err}
	}()
	select {
	case res := <-done:
		return res.v, res.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// fail wraps err: the caller's own context ending is reported as is,
// anything else (timeouts, lost connections) as ErrRegistryUnavailable.
func (r *Registry) fail(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("zk: %s: %w", op, ctx.Err())
	}
	if errors.Is(err, zk.ErrNoAuth) || errors.Is(err, zk.ErrBadArguments) || errors.Is(err, zk.ErrInvalidPath) {
		return fmt.Errorf("zk: %s: %w", op, err)
	}
	return fmt.Errorf("%w: zk: %s: %w", snowflake.ErrRegistryUnavailable, op, err)
}

// Held implements snowflake.HeldCounter: the sequence numbers of the
// forever znodes ZooKeeper has handed out, as many as the forever
// node's child version (each child created or deleted under it raised
// it; the next sequential child is numbered with it). They count whether
// their node runs or not, and even once an operator deleted their
// znode: a worker id belongs to its ip:port for good, and a new Addr gets
// the next number, never an old one. Capped at MaxWorker+1; 0 before any
// registration made the forever node.
func (r *Registry) Held(ctx context.Context) (int, error) {
	// Counted in wg before Close can wait on it (Close takes leaseMu
	// after closing closing), so the calls' own wg.Add never races its
	// Wait; leaseMu is not held over the call, which must not hold up a
	// Lease.
	r.leaseMu.Lock()
	select {
	case <-r.closing:
		r.leaseMu.Unlock()
		return 0, fmt.Errorf("%w: zk: held", snowflake.ErrRegistryClosed)
	default:
	}
	r.wg.Add(1)
	r.leaseMu.Unlock()
	defer r.wg.Done()
	cctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	type got struct {
		ok bool
		st *zk.Stat
	}
	g, err := callV(r, cctx, func() (g got, err error) {
		g.ok, g.st, err = r.conn.Exists(r.root)
		return g, err
	})
	if err != nil {
		return 0, r.fail(ctx, "held: exists "+r.root, err)
	}
	if !g.ok {
		return 0, nil
	}
	return int(min(int64(g.st.Cversion), r.layout.MaxWorker()+1)), nil
}

// ClaimTTL implements snowflake.ClaimTTLer: the session timeout the server
// granted (or Options.SessionTimeout, if lower or not known yet). Another
// process can take the worker id over only once this registration's owner
// znode is gone, that is once its session expired, which the server does no
// sooner than that long after it last heard from this process, and a
// successful Lease is heard.
func (r *Registry) ClaimTTL() time.Duration {
	if n := time.Duration(r.ttl.Load()); n > 0 && n < r.opts.SessionTimeout {
		return n
	}
	return r.opts.SessionTimeout
}

// timeoutLogger discards go-zookeeper's log lines, except that it reads the
// negotiated session timeout from the one go-zookeeper logs for every new
// session (it has no other way to tell).
type timeoutLogger struct{ r *Registry }

func (l timeoutLogger) Printf(format string, args ...any) {
	if format != "authenticated: id=%d, timeout=%d" || len(args) != 2 {
		return
	}
	if ms, ok := args[1].(int32); ok && ms > 0 {
		l.r.ttl.Store(int64(time.Duration(ms) * time.Millisecond))
	}
}

var (
	_ snowflake.ClaimTTLer  = (*Registry)(nil)
	_ snowflake.HeldCounter = (*Registry)(nil)
)

var _ snowflake.Registry = (*Registry)(nil)
