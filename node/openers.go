package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/segment/kvstore"
	"github.com/leafmq/leafmq/segment/mysql"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/snowflake/dbworker"
	"github.com/leafmq/leafmq/snowflake/kvworker"
	"github.com/leafmq/leafmq/snowflake/zk"
)

// The openers: the one place where the name of a segment store or a worker
// registry meets the package that implements it.

// Segment stores, by Node.storeKind (a MySQL DSN, or JetStream KV).
const (
	storeMySQL = "mysql"
	storeKV    = "jetstream-kv"
)

// stores opens the segment store into n.seg.store.
var stores = map[string]func(*Node, context.Context) error{
	storeMySQL: (*Node).openMySQLStore,
	storeKV:    (*Node).openKVStore,
}

// registries returns, for each --worker-registry but off, the Open
// function the snowflake source calls: at start, again if the worker id
// was refused, and after each lost claim.
var registries = map[string]func(*Node, snowflake.Layout) (func(context.Context) (snowflake.Registry, error), error){
	config.RegistryKV:     (*Node).kvRegistry,
	config.RegistryZK:     (*Node).zkRegistry,
	config.RegistryMySQL:  (*Node).mysqlRegistry,
	config.RegistryStatic: (*Node).staticRegistry,
}

func (n *Node) openMySQLStore(ctx context.Context) error {
	ms, err := mysql.Open(ctx, n.cfg.Store.MySQL, mysql.Options{CreateTable: true})
	if err != nil {
		return fmt.Errorf("mysql store: %w", err)
	}
	n.seg.store = ms
	warn, err := ms.Durability(ctx)
	if err != nil {
		n.log.Warn("mysql: could not check durability settings", "err", err)
	}
	for _, w := range warn {
		n.log.Warn("mysql is not durable: ids can repeat after a power cut", "setting", w)
	}
	return nil
}

func (n *Node) openKVStore(ctx context.Context) error {
	js, err := jetstream.New(n.conn.NC())
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	// A fresh cluster may need a moment to elect a JetStream meta leader:
	// Start retries (await).
	n.seg.store, err = kvstore.Open(ctx, js, kvstore.Options{Replicas: n.cfg.Store.KVReplicas, Bucket: n.scope().Bucket(kvstore.DefaultBucket)})
	if err != nil {
		return fmt.Errorf("jetstream kv store: %w", err)
	}
	return nil
}

func (n *Node) kvRegistry(layout snowflake.Layout) (func(context.Context) (snowflake.Registry, error), error) {
	cfg := n.cfg
	js, err := jetstream.New(n.conn.NC())
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	dir := filepath.Join(cfg.DataDir, "snowflake")
	return func(ctx context.Context) (snowflake.Registry, error) {
		// The worker ids this data directory stopped gracefully with come
		// first: a restart that gets its own back waits only past the
		// last time it used (its stop record), not out a whole lease.
		r, err := kvworker.Open(ctx, js, layout, kvworker.Options{Replicas: cfg.Store.KVReplicas, Node: cfg.Name, Region: cfg.Region.Name,
			Prefer: snowflake.StoppedWorkers(dir, config.RegistryKV)})
		if err != nil {
			return nil, err
		}
		return n.leaseFiles(r, dir, config.RegistryKV), nil
	}, nil
}

func (n *Node) zkRegistry(layout snowflake.Layout) (func(context.Context) (snowflake.Registry, error), error) {
	cfg := n.cfg
	servers := strings.Split(cfg.Registry.ZK, ",")
	cache := filepath.Join(cfg.DataDir, "snowflake", "zk-"+strings.ReplaceAll(cfg.Registry.ZKAddr, ":", "-")+".json")
	return func(ctx context.Context) (snowflake.Registry, error) {
		// The cache file stands in for an unreachable ZooKeeper only at
		// start (Leaf's workerID.properties): once a claim was held, a
		// claim lost later (a partition past the session timeout) is
		// claimed again in ZooKeeper only, where another process with
		// this identity may hold it by now.
		o := zk.Options{Name: cfg.Registry.ZKName, Addr: cfg.Registry.ZKAddr, CacheFile: cache, Owner: cfg.Name, NoCacheRegister: n.serve.sf.Held(), Region: cfg.Region.Name}
		r, err := zk.Open(ctx, servers, layout, o)
		if err != nil {
			return nil, err
		}
		// Wait here, not in Register, for a process that held this
		// identity and died to lose its session: the Source times the
		// claim from the start of Register.
		if err := r.WaitFree(ctx); err != nil {
			_ = r.Close()
			return nil, err
		}
		return r, nil
	}, nil
}

func (n *Node) mysqlRegistry(layout snowflake.Layout) (func(context.Context) (snowflake.Registry, error), error) {
	cfg := n.cfg
	dir := filepath.Join(cfg.DataDir, "snowflake")
	return func(ctx context.Context) (snowflake.Registry, error) {
		r, err := dbworker.Open(ctx, cfg.Registry.WorkerMySQL, layout, dbworker.Options{CreateTable: true, Host: cfg.Name, Region: cfg.Region.Name})
		if err != nil {
			return nil, err
		}
		return n.leaseFiles(r, dir, config.RegistryMySQL), nil
	}, nil
}

func (n *Node) staticRegistry(layout snowflake.Layout) (func(context.Context) (snowflake.Registry, error), error) {
	cfg := n.cfg
	path := filepath.Join(cfg.DataDir, "snowflake", fmt.Sprintf("static-%d.json", cfg.Registry.WorkerID))
	return func(context.Context) (snowflake.Registry, error) {
		st, err := snowflake.NewStatic(layout, cfg.Registry.WorkerID)
		if err != nil {
			return nil, err
		}
		return snowflake.NewLeaseFile(st, path), nil
	}, nil
}

// leaseFiles keeps this host's own copy of each worker id's time leases in
// dir (snowflake.NewLeaseFiles), so that a restart on this data directory
// never starts a worker below a lease it had, even after an operator wiped
// the registry. A directory that cannot be written costs that copy, with a
// warning, not snowflake.
func (n *Node) leaseFiles(r snowflake.Registry, dir, prefix string) snowflake.Registry {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		n.log.Warn("snowflake: no local copy of the time leases", "dir", dir, "err", err)
		return r
	}
	return snowflake.NewLeaseFiles(r, dir, prefix)
}

// storeKind names the node's segment store, as its status does.
func (n *Node) storeKind() string {
	if n.cfg.Store.MySQL != "" {
		return storeMySQL
	}
	return storeKV
}
