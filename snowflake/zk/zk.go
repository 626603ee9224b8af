package zk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

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
	// Addr is this node's identity, "ip:port", as in Leaf's
	// leaf.snowflake.port and its local ip. It names the node's znode, so
	// the worker id is tied to it: two live nodes with one Addr share a
	// worker id. Required.
	Addr string
	// SessionTimeout is the ZooKeeper session timeout. Default 10s (the
	// server clamps it to 2..20 ticks).
	SessionTimeout time.Duration
	// CacheFile, if set, is a local JSON file where the worker id and the
	// last lease are kept after each successful Register and Lease. Register
	// uses it only when ZooKeeper cannot be reached (like Leaf's
	// workerID.properties). Default none.
	CacheFile string
	// Timeout bounds each Register and Lease, waiting for a session
	// included. Default 5s.
	Timeout time.Duration
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

	lost     chan struct{}
	lostOnce sync.Once
	wg       sync.WaitGroup // calls in flight (see call)

	// leaseMu serializes Lease calls; mu guards the fields below and is held
	// by Register while it talks to the server. Order: leaseMu before mu.
	leaseMu    sync.Mutex
	mu         sync.Mutex
	registered bool
	cached     bool // registered from CacheFile: ZooKeeper was unreachable
	closed     bool
	worker     int64
	path       string    // the forever znode
	lease      time.Time // highest lease recorded (in ZooKeeper, or the cache file)

	now func() time.Time // for testing
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
		layout: layout,
		opts:   opts,
		ip:     ip,
		port:   port,
		root:   "/snowflake/" + opts.Name + "/forever",
		lost:   make(chan struct{}),
		now:    time.Now,
	}
	conn, _, err := zk.Connect(servers, opts.SessionTimeout,
		zk.WithLogger(nopLogger{}),
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

func defaults(o *Options) error {
	if o.Name == "" {
		o.Name = DefaultName
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
	return nil
}

// Register implements snowflake.Registry: it finds this Addr's forever
// znode (/snowflake/{Name}/forever/{Addr}-NNNNNNNNNN) or creates it as a
// persistent sequential node, and returns its sequence number as the worker
// id and its timestamp as LastLease. A sequence number beyond the layout's
// MaxWorker gives snowflake.ErrNoWorker. Without a session within
// Options.Timeout it falls back to Options.CacheFile, else fails with
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
			return snowflake.Registration{}, fmt.Errorf("%w: zk: register: session of worker %d expired; open a new Registry", snowflake.ErrNotRegistered, r.worker)
		}
		return snowflake.Registration{Worker: r.worker, LastLease: r.lease}, nil
	}
	cctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	if err := r.waitSession(cctx); err != nil {
		if ctx.Err() == nil && r.opts.CacheFile != "" {
			return r.registerCachedLocked(err)
		}
		return snowflake.Registration{}, r.fail(ctx, "register", err)
	}
	path, ep, err := r.findOrCreate(cctx)
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
	var last time.Time
	if ep.Timestamp > 0 {
		last = time.UnixMilli(ep.Timestamp)
	}
	r.registered, r.worker, r.path, r.lease = true, worker, path, last
	_ = r.writeCache(worker, last) // best effort: ZooKeeper has it
	return snowflake.Registration{Worker: worker, LastLease: last}, nil
}

// registerCachedLocked registers from the cache file when ZooKeeper is
// unreachable (cause).
func (r *Registry) registerCachedLocked(cause error) (snowflake.Registration, error) {
	b, err := os.ReadFile(r.opts.CacheFile)
	if err != nil {
		return snowflake.Registration{}, fmt.Errorf("%w: zk: register: %v; cache file: %v", snowflake.ErrRegistryUnavailable, cause, err)
	}
	var c cache
	if err := json.Unmarshal(b, &c); err != nil {
		return snowflake.Registration{}, fmt.Errorf("%w: zk: register: %v; cache file %s: %v", snowflake.ErrRegistryUnavailable, cause, r.opts.CacheFile, err)
	}
	if c.Name != r.opts.Name || c.Addr != r.opts.Addr || c.Worker < 0 || c.Worker > r.layout.MaxWorker() {
		return snowflake.Registration{}, fmt.Errorf("%w: zk: register: %v; cache file %s is for %s/%s worker %d, not usable here",
			snowflake.ErrRegistryUnavailable, cause, r.opts.CacheFile, c.Name, c.Addr, c.Worker)
	}
	var last time.Time
	if c.Lease > 0 {
		last = time.UnixMilli(c.Lease)
	}
	r.registered, r.cached, r.worker, r.lease = true, true, c.Worker, last
	return snowflake.Registration{Worker: c.Worker, LastLease: last}, nil
}

// findOrCreate returns the forever znode of this Addr, creating the parents
// and the node when missing, and its data.
func (r *Registry) findOrCreate(ctx context.Context) (string, endpoint, error) {
	parts := strings.Split(strings.TrimPrefix(r.root, "/"), "/")
	for i := range parts {
		p := "/" + strings.Join(parts[:i+1], "/")
		err := r.call(ctx, func() error {
			_, err := r.conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll))
			return err
		})
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return "", endpoint{}, fmt.Errorf("create %s: %w", p, err)
		}
	}
	var children []string
	err := r.call(ctx, func() (err error) {
		children, _, err = r.conn.Children(r.root)
		return err
	})
	if err != nil {
		return "", endpoint{}, fmt.Errorf("children of %s: %w", r.root, err)
	}
	// Leaf keys children by the part before "-"; with several nodes for
	// one Addr (concurrent first starts) take the lowest number.
	prefix := r.opts.Addr + "-"
	var mine []string
	for _, c := range children {
		if strings.HasPrefix(c, prefix) {
			if _, err := seqOf(c); err == nil {
				mine = append(mine, c)
			}
		}
	}
	sort.Strings(mine) // fixed-width numbers: string order is numeric order
	if len(mine) > 0 {
		path := r.root + "/" + mine[0]
		ep, _, err := r.read(ctx, path)
		if err != nil {
			return "", endpoint{}, err
		}
		return path, ep, nil
	}
	ep := endpoint{IP: r.ip, Port: r.port, Timestamp: r.now().UnixMilli()}
	data, err := json.Marshal(ep)
	if err != nil {
		return "", endpoint{}, err
	}
	var path string
	err = r.call(ctx, func() (err error) {
		path, err = r.conn.Create(r.root+"/"+prefix, data, zk.FlagSequence, zk.WorldACL(zk.PermAll))
		return err
	})
	if err != nil {
		return "", endpoint{}, fmt.Errorf("create %s: %w", r.root+"/"+prefix, err)
	}
	return path, ep, nil
}

// read returns the data of a forever znode and its version.
func (r *Registry) read(ctx context.Context, path string) (endpoint, int32, error) {
	var data []byte
	var st *zk.Stat
	err := r.call(ctx, func() (err error) {
		data, st, err = r.conn.Get(path)
		return err
	})
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
// until (rounded up to a millisecond; never lowering it) with a versioned
// set before it returns, and then the cache file. Registered from the cache
// file, it records the lease in the cache file only.
func (r *Registry) Lease(ctx context.Context, until time.Time) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("zk: lease: %w", err)
	}
	r.leaseMu.Lock()
	defer r.leaseMu.Unlock()
	r.mu.Lock()
	closed, registered, cached, worker, path, cur := r.closed, r.registered, r.cached, r.worker, r.path, r.lease
	r.mu.Unlock()
	switch {
	case closed:
		return fmt.Errorf("%w: zk: lease", snowflake.ErrRegistryClosed)
	case !registered:
		return fmt.Errorf("%w: zk: lease", snowflake.ErrNotRegistered)
	case r.isLost():
		return fmt.Errorf("%w: zk: lease: session of worker %d expired", snowflake.ErrNotRegistered, worker)
	}
	ms := until.UnixMilli()
	if until.Sub(time.UnixMilli(ms)) > 0 {
		ms++ // round up: the stored lease must not be below until
	}
	if ms <= cur.UnixMilli() && !cur.IsZero() {
		return nil
	}
	if cached {
		if err := r.writeCache(worker, time.UnixMilli(ms)); err != nil {
			return fmt.Errorf("%w: zk: lease: %v", snowflake.ErrRegistryUnavailable, err)
		}
		r.setLease(ms)
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	for {
		ep, version, err := r.read(cctx, path)
		if errors.Is(err, zk.ErrNoNode) {
			return fmt.Errorf("%w: zk: lease: znode %s was removed", snowflake.ErrNotRegistered, path)
		}
		if err != nil {
			return r.fail(ctx, "lease", err)
		}
		if ep.Timestamp >= ms {
			break
		}
		ep.Timestamp = ms
		if ep.IP == "" {
			ep.IP, ep.Port = r.ip, r.port
		}
		data, err := json.Marshal(ep)
		if err != nil {
			return err
		}
		err = r.call(cctx, func() error {
			_, err := r.conn.Set(path, data, version)
			return err
		})
		if err == nil {
			break
		}
		if !errors.Is(err, zk.ErrBadVersion) {
			return r.fail(ctx, "lease: set "+path, err)
		}
		// Someone else wrote it (Leaf's own reporter, or a node with the
		// same Addr): catch up with the leader, read again.
		_ = r.call(cctx, func() error { _, err := r.conn.Sync(path); return err })
	}
	r.setLease(ms)
	_ = r.writeCache(worker, time.UnixMilli(ms)) // best effort: ZooKeeper has it
	return nil
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
	c := cache{Name: r.opts.Name, Addr: r.opts.Addr, Worker: worker}
	if !lease.IsZero() {
		c.Lease = lease.UnixMilli()
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	dir := filepath.Dir(r.opts.CacheFile)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, filepath.Base(r.opts.CacheFile)+".tmp*")
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), r.opts.CacheFile)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
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
func (r *Registry) expired() {
	r.mu.Lock()
	registered, cached := r.registered, r.cached
	r.mu.Unlock()
	if registered && !cached {
		r.markLost()
	}
}

// Close implements snowflake.Registry: it closes the ZooKeeper session and
// waits for calls in flight. The forever znode stays (as in Leaf), so a
// node with the same Addr gets the same worker id and its lease later.
// Close is idempotent; later calls of Register and Lease return
// snowflake.ErrRegistryClosed.
func (r *Registry) Close() error {
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
	t := time.NewTicker(poll)
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
		case <-t.C:
		}
	}
}

// call runs op, a go-zookeeper call, which has no context: it returns when
// ctx ends even if op has not. The goroutine then ends when op does, at
// the latest when Close closes the connection (go-zookeeper fails queued
// requests then); Close waits for it.
func (r *Registry) call(ctx context.Context, op func() error) error {
	done := make(chan error, 1)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		done <- op()
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
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

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

var _ snowflake.Registry = (*Registry)(nil)
