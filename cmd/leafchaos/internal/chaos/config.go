package chaos

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/wire"
)

// Config is one soak run. Zero values mean the defaults in comments.
type Config struct {
	Duration    time.Duration // load and faults; default 3m
	Rate        int           // requests a second, all clients together; default 3000
	PoolRate    int           // pool takes a second; default 20; negative: none
	Concurrency int           // request workers; default 64
	Connections int           // client NATS connections; default 4
	MaxBatch    int           // largest batch asked for (batches are 2..MaxBatch); default 500
	Timeout     time.Duration // per request and pool take; default 2s
	Tags        []string      // segment tags; default a, b, c. The first also has a pool.
	Step        int           // step of the tags in leaf_alloc; default 1000
	// MaxStep is the leafds' --max-step; default 10,000,000. At the
	// default load the first tag takes ~17k ids/s per node, which Leaf's
	// cap of 1,000,000 buffers for about a minute only: too close to a
	// 60 s DB pause.
	MaxStep int
	DBPause time.Duration // how long MariaDB is SIGSTOPped; default Duration/10, 5s to 60s
	Faults  []string      // faults in the order of the schedule (cycled); default AllFaults
	// Freeze is how long a freeze fault keeps its process stopped; default
	// 13s: past leafd's KV claim TTL (10s) and ZooKeeper session timeout
	// (10s), the longest TTLs of the cluster.
	Freeze   time.Duration
	HostsFor time.Duration // how long the extra hosts serve; default 8s
	NetFor   time.Duration // how long a network fault lasts; default 4s
	Seed     int64         // of the clients' and the faults' randomness; default the time
	// Goals: the run fails when, after a fault heals and the recovery
	// time named for it has passed, fewer than 99.9% of the requests of a
	// class are answered with ids within 1 s (see recoveryGoal), or a node
	// says it serves what it does not answer; the schedule then leaves
	// each fault that recovery time plus goalSustain of calm. Without it
	// the figures are reported, not judged.
	Goals bool
	// Overlap runs the main track in two lanes at the same time (see
	// lanes): each fault kind is still injected, in about half the time,
	// but a fault's availability figures blend with the other lane's.
	// For quick runs; it cannot go with Goals.
	Overlap bool
	// OpPhase: how long each phase of an operator scenario takes ids;
	// default 2s.
	OpPhase time.Duration

	// Regions ≥ 2 is the many-regions mode (RunRegions): that many
	// NATS clusters joined by gateways, each with its own
	// leafds. 0: the single-region mode (Run).
	Regions int
	// LeafdsPerRegion: leafds in each region, 1 or 2; default 1.
	LeafdsPerRegion int
	// ServersPerRegion: nats-servers in each region's cluster, 1 or 3;
	// default 1. With 3 the leafds run with --kv-replicas 3: the
	// region's buckets keep a majority of their replicas in the region.
	ServersPerRegion int
	// GatewayLatency delays every byte on every gateway link, each way:
	// a request across regions and its reply take 2× it more than one in
	// a region. Default 30ms.
	GatewayLatency time.Duration
	// RegionFor is how long a region fault lasts; default 8s.
	RegionFor time.Duration

	Repo     string // the leafmq checkout (scripts/, cmd/leafd); default found from the working directory up
	WorkDir  string // everything the run writes; default a fresh temp dir, removed unless Keep
	Keep     bool   // keep WorkDir (logs, data) after the run
	Leafd    string // leafd binary; default built from Repo into WorkDir
	NATSBin  string // nats-server binary; default built from the Go module into WorkDir
	Logger   *slog.Logger
	Progress io.Writer // a line every ProgressEvery; nil: none
	// ProgressEvery is how often a progress line is written; default 10s.
	ProgressEvery time.Duration
}

// Faults the harness injects. Those of the main track strike the main
// cluster one at a time, under the main load; the operator faults (Op…) run
// on a track of their own at the same time, on a cluster of their own (see
// doc.go).
const (
	// MonoTag is the monotonic tag of the main cluster: clients take its
	// ids through the Go client through every fault, and the report checks
	// their history for strict order (Report.MonoOrder).
	MonoTag = "mono"

	FaultKillLeafd   = "kill-leafd"     // kill -9 a random leafd, restart it with the same flags
	FaultPauseDB     = "pause-db"       // freeze: SIGSTOP MariaDB for DBPause, then SIGCONT
	FaultKillNATS    = "kill-nats"      // kill -9 a random nats-server, restart it
	FaultRestartZK   = "restart-zk"     // kill -9 ZooKeeper, start it again on the same port and data
	FaultClockBack1  = "clock-back-1s"  // restart a leafd whose snowflake clock steps back 1s after 5s
	FaultClockBack10 = "clock-back-10s" // the same, 10s
	FaultClockFwd1   = "clock-fwd-1s"   // the same, stepping forward 1s (then back on the real clock)
	FaultClockFwd10  = "clock-fwd-10s"  // the same, forward 10s
	FaultClockSlow   = "clock-slow"     // restart a leafd whose snowflake clock runs 2s behind (--fault-clock-offset -2s)
	FaultClockFast   = "clock-fast"     // the same, 2s ahead

	// Freeze: SIGSTOP past every TTL (Config.Freeze), then SIGCONT.
	FaultFreezeLeafdKV = "freeze-leafd-kv" // the KV-lease leafd; meanwhile a new leafd on KV leases takes the worker id it held
	FaultFreezeLeafdZK = "freeze-leafd-zk" // a ZooKeeper leafd; meanwhile a new leafd with its --zk-addr takes its worker
	FaultFreezeNATS    = "freeze-nats"     // a random nats-server
	FaultFreezeZK      = "freeze-zk"       // ZooKeeper

	// Many hosts: two more leafd "hosts" on 127.0.0.2 and 127.0.0.3, with
	// identical flags and ports (the same --http port), join the cluster
	// for HostsFor under the load.
	FaultHostsKV   = "hosts-kv"        // worker ids from JetStream KV leases
	FaultHostsZK   = "hosts-zk"        // from ZooKeeper, each with its own --zk-addr <host>:<port>
	FaultHostsZKNA = "hosts-zk-noaddr" // from ZooKeeper, with no --zk-addr: each host's identity is its own address

	// Network, through Toxiproxy (in-process) on one link for NetFor:
	// latency (+500ms±100ms each way), blackhole (nothing passes, the
	// connections stay open), reset (every connection reset by peer on its
	// next byte, new ones too) and partition (the proxy closed: connections
	// dropped, new ones refused). Links: leafd↔NATS (all three servers),
	// leafd↔MariaDB, leafd↔ZooKeeper, NATS↔NATS routes (one server cut off
	// from the other two).
	FaultNetLatencyNATS    = "net-latency-nats"
	FaultNetLatencyDB      = "net-latency-db"
	FaultNetLatencyZK      = "net-latency-zk"
	FaultNetLatencyRoute   = "net-latency-route"
	FaultNetBlackholeNATS  = "net-blackhole-nats"
	FaultNetBlackholeDB    = "net-blackhole-db"
	FaultNetBlackholeZK    = "net-blackhole-zk"
	FaultNetBlackholeRoute = "net-blackhole-route"
	FaultNetResetNATS      = "net-reset-nats"
	FaultNetResetDB        = "net-reset-db"
	FaultNetResetZK        = "net-reset-zk"
	FaultNetResetRoute     = "net-reset-route"
	FaultNetPartitionNATS  = "net-partition-nats"
	FaultNetPartitionDB    = "net-partition-db"
	FaultNetPartitionZK    = "net-partition-zk"
	FaultNetPartitionRoute = "net-partition-route"
	// FaultNetDBReplyLost: MariaDB's replies to leafd are dropped for
	// NetFor and their connections then closed, while leafd's statements
	// still reach it: commits whose reply never arrives.
	FaultNetDBReplyLost = "net-db-reply-lost"

	// Operator errors, on the operator track (see doc.go): each takes ids
	// of a fresh tag, stops the track's leafds, does the operator's act,
	// takes ids again with the same nodes... and restarted ones.
	FaultOpKVKeyDel    = "op-kv-key-del"         // the tag's key deleted from bucket leaf_alloc (nats kv del)
	FaultOpKVBucket    = "op-kv-bucket-recreate" // bucket leaf_alloc deleted and made again
	FaultOpSQLRowDel   = "op-sql-row-del"        // DELETE FROM leaf_alloc WHERE biz_tag = the tag (--auto-create true)
	FaultOpSQLLowerMax = "op-sql-maxid-lower"    // UPDATE leaf_alloc SET max_id = max_id - 10*step
	FaultOpSQLStep     = "op-sql-step"           // UPDATE leaf_alloc SET step = 1, then 100*step
	FaultOpZnodeDel    = "op-znode-del"          // the worker znodes deleted (/snowflake/<name> and below)
	FaultOpSharedData  = "op-shared-data-dir"    // two leafd (embedded NATS) started on one --data
	// The acts above, then a third leafd on a new data directory joins the
	// live two: it has no floor, no lease file and no recorded incarnation
	// of its own, only what it can ask the live nodes.
	FaultOpKVBucketJoin  = "op-kv-bucket-join"  // leaf_alloc deleted and made again; the newcomer is asked for the tag
	FaultOpKVWorkersWipe = "op-kv-workers-wipe" // leaf_workers deleted; the newcomer registers a worker id
	FaultOpZKWipeJoin    = "op-zk-wipe-join"    // /snowflake/<name> deleted; the newcomer registers in ZooKeeper
	// FaultOpKVWorkersPurge: every record of leaf_workers purged with no
	// marker left (nats stream purge KV_leaf_workers) under the live nodes,
	// which lose their worker ids and claim new ones; the newcomer may get
	// one that a live node held, with no lease on record.
	FaultOpKVWorkersPurge = "op-kv-workers-purge"
	// FaultOpKVBucketRestart: node 1 reaches NATS through opRestartLatency
	// each way; node 2 stops, node 1 stops gracefully and starts again on
	// its data directory, and while it is still starting (its engine has
	// loaded the tag, it is not ready yet) leaf_alloc is deleted and made
	// again and the newcomer is asked for the tag (the case of
	// TestRestartingNodeFloorsHeard).
	FaultOpKVBucketRestart = "op-kv-bucket-restart"
)

// joinsAfter reports whether operator fault kind starts a newcomer after
// its act.
func joinsAfter(kind string) bool {
	switch kind {
	case FaultOpKVBucketJoin, FaultOpKVWorkersWipe, FaultOpZKWipeJoin, FaultOpKVWorkersPurge, FaultOpKVBucketRestart:
		return true
	}
	return false
}

// AllFaults is the default schedule: each once per cycle.
var AllFaults = []string{
	FaultKillLeafd, FaultPauseDB, FaultKillNATS, FaultRestartZK,
	FaultFreezeLeafdKV, FaultFreezeLeafdZK, FaultFreezeNATS, FaultFreezeZK,
	FaultHostsZKNA, FaultHostsKV, FaultHostsZK,
	FaultNetLatencyNATS, FaultNetBlackholeDB, FaultNetResetZK, FaultNetPartitionRoute,
	FaultNetLatencyDB, FaultNetBlackholeZK, FaultNetResetRoute, FaultNetPartitionNATS,
	FaultNetLatencyZK, FaultNetBlackholeRoute, FaultNetResetNATS, FaultNetPartitionDB,
	FaultNetLatencyRoute, FaultNetBlackholeNATS, FaultNetResetDB, FaultNetPartitionZK,
	FaultNetDBReplyLost,
	FaultClockBack1, FaultClockFwd1, FaultClockBack10, FaultClockFwd10, FaultClockSlow, FaultClockFast,
	FaultOpKVKeyDel, FaultOpKVBucket, FaultOpSQLRowDel, FaultOpSQLLowerMax, FaultOpSQLStep, FaultOpZnodeDel, FaultOpSharedData,
	FaultOpKVBucketJoin, FaultOpKVWorkersWipe, FaultOpZKWipeJoin, FaultOpKVWorkersPurge, FaultOpKVBucketRestart,
}

// isOp reports whether fault f runs on the operator track.
func isOp(f string) bool { return strings.HasPrefix(f, "op-") }

// splitFaults splits a schedule into the main track and the operator
// track, each in schedule order.
func splitFaults(faults []string) (main, ops []string) {
	for _, f := range faults {
		if isOp(f) {
			ops = append(ops, f)
		} else {
			main = append(main, f)
		}
	}
	return main, ops
}

// ErrConfig marks a bad Config.
var ErrConfig = errors.New("chaos: config")

func (c *Config) validate() error {
	if c.Duration == 0 {
		c.Duration = 3 * time.Minute
	}
	if c.Rate == 0 {
		c.Rate = 3000
	}
	if c.PoolRate == 0 {
		c.PoolRate = 20
	}
	if c.MaxStep == 0 {
		c.MaxStep = 10_000_000
	}
	if c.Concurrency == 0 {
		c.Concurrency = 64
	}
	if c.Connections == 0 {
		c.Connections = 4
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = 500
	}
	if c.Timeout == 0 {
		c.Timeout = 2 * time.Second
	}
	if len(c.Tags) == 0 {
		c.Tags = []string{"a", "b", "c"}
	}
	if c.Step == 0 {
		c.Step = 1000
	}
	if c.DBPause == 0 {
		c.DBPause = min(max(c.Duration/10, 5*time.Second), 60*time.Second)
	}
	if len(c.Faults) == 0 {
		c.Faults = AllFaults
	}
	if c.Freeze == 0 {
		c.Freeze = 13 * time.Second
	}
	if c.HostsFor == 0 {
		c.HostsFor = 8 * time.Second
	}
	if c.NetFor == 0 {
		c.NetFor = 4 * time.Second
	}
	if c.Seed == 0 {
		c.Seed = time.Now().UnixNano()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.OpPhase == 0 {
		c.OpPhase = 2 * time.Second
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = 10 * time.Second
	}
	switch {
	case c.Regions != 0:
		return fmt.Errorf("%w: regions %d: the many-regions mode is RunRegions", ErrConfig, c.Regions)
	case c.Duration < 30*time.Second:
		return fmt.Errorf("%w: duration %v is under 30s", ErrConfig, c.Duration)
	case c.Rate < 1 || c.Rate > 100_000:
		return fmt.Errorf("%w: rate %d must be 1-100000", ErrConfig, c.Rate)
	case c.Concurrency < 1 || c.Connections < 1:
		return fmt.Errorf("%w: concurrency and connections must be positive", ErrConfig)
	case c.MaxBatch < 2 || c.MaxBatch > 10000:
		return fmt.Errorf("%w: max batch %d must be 2-10000", ErrConfig, c.MaxBatch)
	case c.Timeout < 100*time.Millisecond:
		return fmt.Errorf("%w: timeout %v is under 100ms", ErrConfig, c.Timeout)
	case c.DBPause < 0 || c.DBPause > 10*time.Minute:
		return fmt.Errorf("%w: db pause %v must be 0-10m", ErrConfig, c.DBPause)
	case c.Freeze < time.Second || c.Freeze > 10*time.Minute || c.HostsFor < time.Second || c.NetFor < time.Second:
		return fmt.Errorf("%w: freeze, hosts-for and net-for must be 1s-10m", ErrConfig)
	case c.Goals && c.Overlap:
		return fmt.Errorf("%w: availability goals are judged one fault at a time, not with overlap", ErrConfig)
	case c.OpPhase < 500*time.Millisecond || c.OpPhase > time.Minute:
		return fmt.Errorf("%w: op phase %v must be 500ms-1m", ErrConfig, c.OpPhase)
	case c.Step < 1 || c.Step > segment.MaxStep:
		return fmt.Errorf("%w: step %d", ErrConfig, c.Step)
	case c.MaxStep < 1 || c.MaxStep > segment.MaxStep:
		return fmt.Errorf("%w: max step %d", ErrConfig, c.MaxStep)
	}
	for _, t := range c.Tags {
		if _, err := wire.ParseTag(t); err != nil {
			return fmt.Errorf("%w: tag %q", ErrConfig, t)
		}
	}
	for _, f := range c.Faults {
		if !known(f) {
			return fmt.Errorf("%w: fault %q: want one of %s", ErrConfig, f, strings.Join(AllFaults, ", "))
		}
	}
	return c.resolvePaths()
}

// resolvePaths makes the binaries', the work directory's and the
// checkout's paths absolute, finding the checkout when none was given.
func (c *Config) resolvePaths() error {
	for _, p := range []*string{&c.Leafd, &c.NATSBin, &c.WorkDir, &c.Repo} {
		if *p != "" {
			abs, err := filepath.Abs(*p)
			if err != nil {
				return err
			}
			*p = abs
		}
	}
	if c.Repo == "" {
		repo, err := findRepo()
		if err != nil {
			return err
		}
		c.Repo = repo
	}
	return nil
}

func known(f string) bool {
	for _, k := range AllFaults {
		if f == k {
			return true
		}
	}
	return false
}

// findRepo walks up from the working directory to the leafmq go.mod.
func findRepo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/leafmq/leafmq\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%w: no leafmq checkout above the working directory (set Repo)", ErrConfig)
		}
		dir = parent
	}
}

// Available reports why a run cannot happen on this machine (MariaDB or
// ZooKeeper is not installed), or nil. The scripts would install them with
// apt-get; tests skip instead of installing.
func Available() error {
	var missing []string
	if _, err := lookPath("mariadbd", "/usr/sbin", "/sbin"); err != nil {
		missing = append(missing, "mariadbd")
	}
	if _, err := lookPath("java"); err != nil {
		missing = append(missing, "java")
	}
	if _, err := os.Stat("/usr/share/java/zookeeper.jar"); err != nil {
		missing = append(missing, "/usr/share/java/zookeeper.jar")
	}
	if len(missing) > 0 {
		return fmt.Errorf("chaos: missing %s (scripts/mariadb.sh and scripts/zookeeper.sh install them as root)", strings.Join(missing, ", "))
	}
	return nil
}

// workDir is the run's work directory: cfg.WorkDir, made if need be, or a
// fresh temporary one named from prefix, removed by done unless cfg.Keep.
func workDir(cfg *Config, prefix string) (dir string, done func(), err error) {
	if cfg.WorkDir != "" {
		return cfg.WorkDir, func() {}, os.MkdirAll(cfg.WorkDir, 0o755)
	}
	if dir, err = os.MkdirTemp("", prefix); err != nil {
		return "", nil, err
	}
	if cfg.Keep {
		return dir, func() {}, nil
	}
	return dir, func() { _ = os.RemoveAll(dir) }, nil
}
