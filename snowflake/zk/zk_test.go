package zk_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	gozk "github.com/go-zookeeper/zk"

	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/snowflake/registrytest"
	"github.com/leafmq/leafmq/snowflake/zk"
)

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

func open(t testing.TB, servers []string, l snowflake.Layout, o zk.Options) *zk.Registry {
	t.Helper()
	r, err := zk.Open(ctxT(t), servers, l, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func register(t testing.TB, r snowflake.Registry) snowflake.Registration {
	t.Helper()
	reg, err := r.Register(ctxT(t))
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	return reg
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// pooled is a Registry whose Addr goes back to its pool at Close, so the
// next registry of the conformance suite restarts "the same node".
type pooled struct {
	*zk.Registry
	once    sync.Once
	release func()
}

func (p *pooled) Close() error {
	err := p.Registry.Close()
	p.once.Do(p.release)
	return err
}

// TestConformance: every New is a node with its own Addr (so worker ids
// are distinct among live registries), except that a closed registry's
// Addr is handed to the next one: a node restarting at the same ip:port,
// which in Leaf's scheme gets the same worker id and sees its lease.
func TestConformance(t *testing.T) {
	servers := []string{testenv.ZooKeeper(t)}
	var (
		mu    sync.Mutex
		owner testing.TB
		name  string
		free  []string
		next  int
	)
	registrytest.Run(t, registrytest.Factory{
		New: func(t testing.TB) snowflake.Registry {
			mu.Lock()
			if owner != t { // a fresh namespace per subtest
				owner, name, free, next = t, testenv.RandomName("conf_", 6), nil, 0
			}
			var addr string
			if n := len(free); n > 0 {
				addr, free = free[n-1], free[:n-1]
			} else {
				next++
				addr = fmt.Sprintf("10.0.0.%d:8080", next)
			}
			mu.Unlock()
			r := open(t, servers, layoutBits(4), zk.Options{Name: name, Addr: addr, Timeout: 10 * time.Second})
			return &pooled{Registry: r, release: func() {
				mu.Lock()
				defer mu.Unlock()
				free = append(free, addr)
			}}
		},
		Layout:   layoutBits(4),
		Distinct: true,
		Durable:  true,
	})
}

// TestSameAddrReuse: a registry opened with the Addr of a closed one gets
// its worker id and its lease; another Addr gets another id.
func TestSameAddrReuse(t *testing.T) {
	servers := []string{testenv.ZooKeeper(t)}
	name := testenv.RandomName("reuse_", 6)
	o := zk.Options{Name: name, Addr: "192.168.1.7:2182"}
	r1 := open(t, servers, snowflake.LeafLayout(), o)
	reg1 := register(t, r1)
	until := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	if err := r1.Lease(ctxT(t), until); err != nil {
		t.Fatal(err)
	}
	if err := r1.Close(); err != nil {
		t.Fatal(err)
	}
	reg2 := register(t, open(t, servers, snowflake.LeafLayout(), o))
	if reg2.Worker != reg1.Worker || reg2.LastLease.Before(until) {
		t.Fatalf("same Addr: got %+v, want worker %d and LastLease >= %v", reg2, reg1.Worker, until)
	}
	o.Addr = "192.168.1.8:2182"
	if reg3 := register(t, open(t, servers, snowflake.LeafLayout(), o)); reg3.Worker == reg1.Worker {
		t.Fatalf("other Addr got worker %d too", reg3.Worker)
	}
}

// TestLeafFormat: the znode path and data are Leaf's, and a node Leaf
// created is taken over with its timestamp as LastLease.
func TestLeafFormat(t *testing.T) {
	servers := []string{testenv.ZooKeeper(t)}
	name := testenv.RandomName("leaf_", 6)
	conn, _, err := gozk.Connect(servers, 10*time.Second, gozk.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	root := "/snowflake/" + name + "/forever"

	before := time.Now().UnixMilli()
	r := open(t, servers, snowflake.LeafLayout(), zk.Options{Name: name, Addr: "10.1.2.3:8080"})
	if reg := register(t, r); reg.Worker != 0 {
		t.Fatalf("first node of a new name: worker %d, want 0 (Leaf's)", reg.Worker)
	}
	children, _, err := conn.Children(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(children) != 1 || children[0] != "10.1.2.3:8080-0000000000" {
		t.Fatalf("children of %s: %q, want [10.1.2.3:8080-0000000000]", root, children)
	}
	data, _, err := conn.Get(root + "/" + children[0])
	if err != nil {
		t.Fatal(err)
	}
	var ep map[string]any
	if err := json.Unmarshal(data, &ep); err != nil {
		t.Fatalf("data %q: %v", data, err)
	}
	ts, _ := ep["timestamp"].(float64)
	if len(ep) != 3 || ep["ip"] != "10.1.2.3" || ep["port"] != "8080" || int64(ts) < before || int64(ts) > time.Now().UnixMilli() {
		t.Fatalf("data %s: want {\"ip\":\"10.1.2.3\",\"port\":\"8080\",\"timestamp\":<now>}", data)
	}
	until := time.Now().Add(time.Hour)
	if err := r.Lease(ctxT(t), until); err != nil {
		t.Fatal(err)
	}
	data, _, err = conn.Get(root + "/" + children[0])
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`{"ip":"10.1.2.3","port":"8080","timestamp":%d}`, until.UnixMilli()+1)
	if until.Sub(time.UnixMilli(until.UnixMilli())) == 0 {
		want = fmt.Sprintf(`{"ip":"10.1.2.3","port":"8080","timestamp":%d}`, until.UnixMilli())
	}
	if string(data) != want {
		t.Fatalf("after Lease: %s, want %s", data, want)
	}

	// A node as Leaf writes it (Endpoint via Jackson), for another Addr.
	leafTS := time.Now().Add(2 * time.Hour).UnixMilli()
	path, err := conn.Create(root+"/10.9.9.9:9090-", fmt.Appendf(nil, `{"ip":"10.9.9.9","port":"9090","timestamp":%d}`, leafTS),
		gozk.FlagSequence, gozk.WorldACL(gozk.PermAll))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(path, "-0000000001") {
		t.Fatalf("Leaf's node: %s", path)
	}
	reg := register(t, open(t, servers, snowflake.LeafLayout(), zk.Options{Name: name, Addr: "10.9.9.9:9090"}))
	if reg.Worker != 1 || reg.LastLease.UnixMilli() != leafTS {
		t.Fatalf("Leaf's node: got %+v, want worker 1 and LastLease %d ms", reg, leafTS)
	}
}

// TestNoWorker: sequence numbers beyond the layout's worker ids give
// ErrNoWorker (Leaf #57), also for an Addr that has such a node already.
func TestNoWorker(t *testing.T) {
	servers := []string{testenv.ZooKeeper(t)}
	name := testenv.RandomName("full_", 6)
	l := layoutBits(2)
	for i := range 4 {
		o := zk.Options{Name: name, Addr: fmt.Sprintf("10.0.1.%d:80", i)}
		if reg := register(t, open(t, servers, l, o)); reg.Worker != int64(i) {
			t.Fatalf("node %d: worker %d", i, reg.Worker)
		}
	}
	for range 2 {
		r := open(t, servers, l, zk.Options{Name: name, Addr: "10.0.1.4:80"})
		_, err := r.Register(ctxT(t))
		if !errors.Is(err, snowflake.ErrNoWorker) || !strings.Contains(err.Error(), "Leaf #57") {
			t.Fatalf("fifth node: %v, want ErrNoWorker naming Leaf #57", err)
		}
	}
}

func TestUnreachable(t *testing.T) {
	r := open(t, []string{deadAddr(t)}, snowflake.LeafLayout(), zk.Options{Addr: "10.0.0.1:80", Timeout: 300 * time.Millisecond})
	if _, err := r.Register(ctxT(t)); !errors.Is(err, snowflake.ErrRegistryUnavailable) {
		t.Fatalf("Register: %v, want ErrRegistryUnavailable", err)
	}
	// A cache file that is missing does not help.
	r = open(t, []string{deadAddr(t)}, snowflake.LeafLayout(), zk.Options{Addr: "10.0.0.1:80", Timeout: 300 * time.Millisecond,
		CacheFile: filepath.Join(t.TempDir(), "none.json")})
	if _, err := r.Register(ctxT(t)); !errors.Is(err, snowflake.ErrRegistryUnavailable) {
		t.Fatalf("Register with a missing cache file: %v, want ErrRegistryUnavailable", err)
	}
}

// TestCacheFile: with ZooKeeper down, Register falls back to the worker id
// and lease cached by an earlier run, and Lease keeps the cache.
func TestCacheFile(t *testing.T) {
	servers := []string{testenv.ZooKeeper(t)}
	name := testenv.RandomName("cache_", 6)
	cacheFile := filepath.Join(t.TempDir(), "leaf", "worker.json")
	o := zk.Options{Name: name, Addr: "10.2.0.1:80", CacheFile: cacheFile}
	r := open(t, servers, snowflake.LeafLayout(), o)
	reg := register(t, r)
	until := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	if err := r.Lease(ctxT(t), until); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	down := []string{deadAddr(t)}
	o.Timeout = 300 * time.Millisecond
	r = open(t, down, snowflake.LeafLayout(), o)
	got := register(t, r)
	if got.Worker != reg.Worker || got.LastLease.Before(until) {
		t.Fatalf("from cache: %+v, want worker %d, LastLease >= %v", got, reg.Worker, until)
	}
	later := until.Add(time.Hour)
	if err := r.Lease(ctxT(t), later); err != nil {
		t.Fatalf("Lease from cache: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if got := register(t, open(t, down, snowflake.LeafLayout(), o)); got.LastLease.Before(later) {
		t.Fatalf("cache after Lease: LastLease %v, want >= %v", got.LastLease, later)
	}

	// The cache of another Addr is not used.
	o.Addr = "10.2.0.2:80"
	if _, err := open(t, down, snowflake.LeafLayout(), o).Register(ctxT(t)); !errors.Is(err, snowflake.ErrRegistryUnavailable) {
		t.Fatalf("cache of another Addr: %v, want ErrRegistryUnavailable", err)
	}
}

func TestOpenInvalid(t *testing.T) {
	for _, tc := range []struct {
		name    string
		servers []string
		opts    zk.Options
	}{
		{"no servers", nil, zk.Options{Addr: "10.0.0.1:80"}},
		{"no addr", []string{"127.0.0.1:2181"}, zk.Options{}},
		{"addr without port", []string{"127.0.0.1:2181"}, zk.Options{Addr: "10.0.0.1"}},
		{"name with slash", []string{"127.0.0.1:2181"}, zk.Options{Addr: "10.0.0.1:80", Name: "a/b"}},
		{"negative timeout", []string{"127.0.0.1:2181"}, zk.Options{Addr: "10.0.0.1:80", Timeout: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := zk.Open(context.Background(), tc.servers, snowflake.LeafLayout(), tc.opts)
			if !errors.Is(err, zk.ErrInvalid) {
				if r != nil {
					_ = r.Close()
				}
				t.Fatalf("Open: %v, want ErrInvalid", err)
			}
		})
	}
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}
