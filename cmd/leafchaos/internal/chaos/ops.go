package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/go-zookeeper/zk"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/segment"
	segmysql "github.com/leafmq/leafmq/segment/mysql"
	"github.com/leafmq/leafmq/wire"
)

// Tracks of a FaultResult.
const (
	trackMain = "main"
	trackOp   = "operator"
)

const (
	opStep    = 100            // step of an operator scenario's tag: many ranges in a short phase
	opZKName  = "leafchaos-op" // the operator track's --zk-name
	opWorkers = 4              // request workers of a phase
	// opRestartLatency is how far (each way) node 1 of op-kv-bucket-restart
	// is from NATS: its restart then takes seconds.
	opRestartLatency = 50 * time.Millisecond
	// opEngineWait bounds the wait for a restarting node's engine.
	opEngineWait = 30 * time.Second
)

// opTrack runs the operator faults, one at a time, on a cluster of its
// own: one nats-server with JetStream, and leafd processes it starts per
// scenario (on MariaDB or on the JetStream KV store of that server; worker
// ids from KV leases or ZooKeeper under opZKName), sharing MariaDB and
// ZooKeeper with the main cluster but no tag or znode. Each scenario:
//
//  1. starts two leafd and takes ids of a fresh tag (and snowflake ids);
//  2. reads the tag's floor (its max_id: every id below was issued);
//  3. does the operator's act;
//  4. takes ids again from the same nodes;
//  5. stops them, starts them again and takes ids a third time: every
//     segment id now must lie at or above the floor (no node has a buffer
//     from before).
//
// Every id goes into the scenario's id spaces (the tag's, and one per
// worker registry for snowflake), checked against every other at the end.
// Errors from the nodes after the act are refusals: the answer the product
// should give.
type opTrack struct {
	c      *cluster
	cfg    *Config
	faults []string
	t0     time.Time
	rng    *rand.Rand

	nats    *proc
	addr    string  // host:port of the track's nats-server
	dsn     string  // database leafop on the main cluster's MariaDB: tags the main nodes do not see
	db      *sql.DB // on dsn
	nc      *nats.Conn
	js      jetstream.JetStream
	n       int    // scenarios so far: names tags and nodes
	proxy   string // host:port of a proxy to the track's nats-server (op-kv-bucket-restart), once made
	spaces  map[string]*idSpace
	results []*FaultResult
}

// run injects each operator fault once, back to back, then again (about
// one every faultSpacing/2) while soft lasts.
func (o *opTrack) run(soft, ctx context.Context) {
	if len(o.faults) == 0 {
		return
	}
	defer o.close()
	o.spaces = map[string]*idSpace{}
	if err := o.start(ctx); err != nil {
		o.c.problem("operator track: %v", err)
		for _, k := range o.faults {
			o.results = append(o.results, &FaultResult{Kind: k, Track: trackOp, Error: err.Error(), at: time.Now(), done: time.Now()})
		}
		return
	}
	sleep(ctx, min(maxWarmup, o.cfg.Duration/10))
	for i := 0; ctx.Err() == nil; i++ {
		if i >= len(o.faults) && soft.Err() != nil {
			break
		}
		kind := o.faults[i%len(o.faults)]
		r := &FaultResult{Kind: kind, Track: trackOp, at: time.Now()}
		o.results = append(o.results, r)
		o.cfg.Logger.Info("chaos: operator fault", "kind", kind, "at", time.Since(o.t0).Round(time.Millisecond))
		if err := o.scenario(ctx, kind, r); err != nil {
			r.Error = err.Error()
			o.c.problem("fault %s: %v", kind, err)
		}
		r.done = time.Now()
		// The first cycle back to back; after it, about one scenario every
		// faultSpacing/2, so that a long soak is not mostly leafd starts.
		pause := time.Second
		if i+1 >= len(o.faults) {
			pause = faultSpacing / 2
		}
		select {
		case <-ctx.Done():
		case <-soft.Done():
			if i+1 < len(o.faults) {
				sleep(ctx, time.Second)
			}
		case <-time.After(pause):
		}
	}
}

// start starts the track's nats-server.
func (o *opTrack) start(ctx context.Context) error {
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	dir := filepath.Join(o.c.dir, "ops", "nats")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	o.addr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	conf := fmt.Sprintf("server_name: \"ops\"\nlisten: %q\njetstream { store_dir: %q }\n", o.addr, filepath.Join(dir, "js"))
	path := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return err
	}
	o.nats = &proc{name: "nats-ops", bin: o.cfg.NATSBin, args: []string{"-c", path}, dir: dir, logPath: filepath.Join(dir, "nats.log")}
	o.nats.onExit = o.c.onExit
	if err := o.nats.start(); err != nil {
		return err
	}
	if err := waitTCP(ctx, o.addr, readyWait); err != nil {
		return err
	}
	if o.nc, err = nats.Connect("nats://"+o.addr, nats.Name("leafchaos-ops"), nats.MaxReconnects(-1)); err != nil {
		return err
	}
	if o.js, err = jetstream.New(o.nc); err != nil {
		return err
	}
	if _, err := o.c.db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS leafop"); err != nil {
		return err
	}
	mc, err := mysql.ParseDSN(o.c.dsn)
	if err != nil {
		return err
	}
	mc.DBName = "leafop"
	o.dsn = mc.FormatDSN()
	o.db, err = sql.Open("mysql", o.dsn)
	return err
}

func (o *opTrack) close() {
	if o.nc != nil {
		o.nc.Close()
	}
	if o.nats != nil {
		o.nats.stop(10 * time.Second)
	}
	if o.db != nil {
		_ = o.db.Close()
	}
}

// opNode is how a scenario's leafd keeps segments and worker ids.
type opNode struct {
	nats       string // host:port the node connects to; "": the track's nats-server
	store      string // kv or mysql
	registry   string // kv or zk
	autoCreate bool
}

func (o *opTrack) space(name string) *idSpace {
	if o.spaces[name] == nil {
		o.spaces[name] = newIDSpace(o.t0.UnixNano(), int64(time.Second))
	}
	return o.spaces[name]
}

// node prepares scenario leafd k.
func (o *opTrack) node(spec opNode, k int) (*leafd, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("op%d-%d", o.n, k)
	dir := filepath.Join(o.c.dir, "ops", name)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	natsAddr := o.addr
	if spec.nats != "" {
		natsAddr = spec.nats
	}
	args := []string{"--name", name, "--nats", "nats://" + natsAddr, "--http", httpAddr, "--data", filepath.Join(dir, "data"),
		"--kv-replicas", "1", "--default-step", strconv.Itoa(opStep)}
	if spec.store == "mysql" {
		args = append(args, "--mysql", o.dsn)
	}
	if spec.autoCreate {
		args = append(args, "--auto-create", "true")
	}
	if spec.registry == "zk" {
		args = append(args, "--worker-registry", "zk", "--zk", o.c.zkAddr, "--zk-name", opZKName,
			"--zk-addr", fmt.Sprintf("127.0.0.1:%d", ports[1]))
	} else {
		args = append(args, "--worker-registry", "kv")
	}
	l := o.c.newExtra(name, dir, httpAddr, args)
	l.registry = spec.registry
	l.tolerant.Store(true)
	return l, nil
}

// phase takes ids of tag (and snowflake) through nc for d. With floor > 0,
// every segment id must be at least floor. after: errors are refusals.
func (o *opTrack) phase(ctx context.Context, nc *nats.Conn, tag, registry string, d time.Duration, floor int64, after bool, r *FaultResult) {
	seg, sf := o.space("segment."+tag), o.space("snowflake."+registry)
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range opWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]int64, 0, 64)
			for j := 0; ctx.Err() == nil; j++ {
				subject, space := wire.SegmentPrefix+tag, seg
				if (w+j)%4 == 3 {
					subject, space = wire.SnowflakeSubject, sf
				}
				n := 1
				if j%2 == 1 {
					n = 2 + (w+j)%49
				}
				reply, err := nc.RequestMsg(wire.NewRequest(subject, n, true), time.Second)
				var ids []int64
				code := ""
				if err == nil {
					var we *wire.Error
					if errors.As(wire.ReplyError(reply), &we) {
						code = we.Code
					} else if ids, err = wire.DecodeIDs(buf[:0], reply.Data, true); err != nil || !positive(ids) {
						code, ids = CodeBadReply, nil
					}
				} else {
					code = CodeTimeout
					sleep(ctx, 50*time.Millisecond)
				}
				now := time.Now().UnixNano()
				mu.Lock()
				r.Sent++
				switch {
				case code == "":
					r.Answered++
					space.add(now, ids)
					if floor > 0 && space == seg {
						for _, id := range ids {
							if id < floor {
								r.FloorViolations++
								if len(r.FloorExamples) < 10 {
									r.FloorExamples = append(r.FloorExamples, fmt.Sprintf("%s: id %d < floor %d", tag, id, floor))
								}
							}
						}
					}
				case after && refusalCodes[code]:
					r.Refusals++
					if r.Errors == nil {
						r.Errors = map[string]int64{}
					}
					r.Errors[code]++
				default:
					if r.Errors == nil {
						r.Errors = map[string]int64{}
					}
					r.Errors[code]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// startAll starts nodes; one that refuses is a refusal (and left stopped).
func (o *opTrack) startAll(ctx context.Context, nodes []*leafd, r *FaultResult) int {
	up := 0
	for _, l := range nodes {
		nr, err := o.c.startExtra(ctx, l, 1)
		if err != nil {
			r.Refusals++
			r.Notes = append(r.Notes, l.name+" refused to start: "+firstLine(err.Error()))
			continue
		}
		if nr != "" {
			r.Notes = append(r.Notes, l.name+" up but not ready: "+nr)
		}
		up++
	}
	return up
}

func stopAll(nodes []*leafd) {
	var wg sync.WaitGroup
	for _, l := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); l.stop(10 * time.Second) }()
	}
	wg.Wait()
}

// scenario runs one operator fault.
func (o *opTrack) scenario(ctx context.Context, kind string, r *FaultResult) error {
	o.n++
	tag := fmt.Sprintf("op%d", o.n)
	if kind == FaultOpSharedData {
		return o.sharedData(ctx, tag, r)
	}
	spec := opNode{store: "kv", registry: "kv"}
	switch kind {
	case FaultOpSQLRowDel:
		spec = opNode{store: "mysql", registry: "kv", autoCreate: true}
	case FaultOpSQLLowerMax, FaultOpSQLStep:
		spec = opNode{store: "mysql", registry: "kv"}
	case FaultOpZnodeDel, FaultOpZKWipeJoin:
		spec.registry = "zk"
	}
	if spec.store == "mysql" {
		err := o.retryDB(ctx, func(ctx context.Context) error {
			st, err := segmysql.Open(ctx, o.dsn, segmysql.Options{CreateTable: true})
			if err != nil {
				return err
			}
			defer st.Close()
			err = st.Create(ctx, segment.Tag{Name: wire.MustTag(tag), MaxID: 1, Step: opStep, Description: "leafchaos operator"})
			if errors.Is(err, segment.ErrTagExists) { // an attempt that timed out went through
				return nil
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("create tag %s: %w", tag, err)
		}
	}
	heal := func() {}
	defer func() { heal() }()
	spec1 := spec
	if kind == FaultOpKVBucketRestart {
		if o.proxy == "" {
			p, err := o.c.net.add("nats-ops", o.addr)
			if err != nil {
				return err
			}
			o.proxy = p
		}
		spec1.nats = o.proxy
	}
	var nodes []*leafd
	for k := 1; k <= 2; k++ {
		s := spec
		if k == 1 {
			s = spec1
		}
		l, err := o.node(s, k)
		if err != nil {
			return err
		}
		nodes = append(nodes, l)
	}
	defer func() { stopAll(nodes) }() // the nodes of the moment: a newcomer joins after the act
	if spec.store == "mysql" {
		// The next scenario's nodes preload every row: a tag left broken
		// by this act would keep them from being ready.
		defer func() {
			stopAll(nodes)
			_ = o.retryDB(context.WithoutCancel(ctx), func(ctx context.Context) error {
				_, err := o.db.ExecContext(ctx, "DELETE FROM leaf_alloc WHERE biz_tag = ?", tag)
				return err
			})
		}()
	}
	r.Target = fmt.Sprintf("tag %s on %s, worker ids from %s, nodes %s", tag, spec.store, spec.registry, nodes[0].name+","+nodes[1].name)
	if o.startAll(ctx, nodes, r) == 0 {
		return errors.New("no node started before the act")
	}
	o.phase(ctx, o.nc, tag, spec.registry, o.cfg.OpPhase, 0, false, r)
	if kind == FaultOpKVBucketRestart {
		// Node 2 leaves: only the restarting node 1 remembers the tag.
		nodes[1].stop(10 * time.Second)
		nodes[0].stop(10 * time.Second)
		undo, err := o.c.net.apply(ctx, []string{"nats-ops"}, latencyToxics(opRestartLatency, opRestartLatency/10))
		if err != nil {
			return err
		}
		heal = func() { undo(); heal = func() {} }
		if err := o.startUnready(ctx, nodes[0], r); err != nil {
			return err
		}
	}
	floor, err := o.floor(ctx, spec.store, tag)
	if err != nil {
		return err
	}
	if err := o.act(ctx, kind, tag); err != nil {
		return fmt.Errorf("act: %w", err)
	}
	if kind == FaultOpKVBucketRestart && ready(ctx, nodes[0].http) {
		r.Notes = append(r.Notes, nodes[0].name+" was ready before the act: its start was too quick for the fault")
	}
	if joinsAfter(kind) {
		l, err := o.node(spec, 3)
		if err != nil {
			return err
		}
		nodes = append(nodes, l)
		o.startAll(ctx, nodes[2:], r)
	}
	o.phase(ctx, o.nc, tag, spec.registry, o.cfg.OpPhase, 0, true, r)
	heal() // the restarts below as in every scenario
	before, berr := o.floor(ctx, spec.store, tag)
	stopAll(nodes)
	// A node that stops gracefully and finds no live peer hands back the
	// unserved top of its last range: max_id goes back, during the stop,
	// to the first id it did not hand out. Those ids were never issued, so
	// the floor comes down with max_id — only for a drop made by the
	// stop itself (an operator's lowering is never trusted), and never
	// below an id the harness saw (below).
	if after, err := o.floor(ctx, spec.store, tag); berr == nil && err == nil && after < before && after < floor {
		r.Notes = append(r.Notes, fmt.Sprintf("%s: max_id %d before the graceful stop, %d after: handed back", tag, before, after))
		floor = after
	}
	if kind == FaultOpSQLStep { // and changed again while they are down
		if err := o.retryDB(ctx, func(ctx context.Context) error {
			_, err := o.db.ExecContext(ctx, "UPDATE leaf_alloc SET step = ? WHERE biz_tag = ?", 100*opStep, tag)
			return err
		}); err != nil {
			return err
		}
	}
	if seen := o.space("segment." + tag).maxSeen(); seen+1 > floor {
		floor = seen + 1 // everything seen was issued too
	}
	r.Notes = append(r.Notes, fmt.Sprintf("floor of %s after the act: %d", tag, floor))
	if o.startAll(ctx, nodes, r) > 0 {
		o.phase(ctx, o.nc, tag, spec.registry, o.cfg.OpPhase, floor, true, r)
	}
	return nil
}

// startUnready starts the stopped l again on its data directory without
// waiting for it to be ready, and returns once its log says its segment
// engine started — the node holds ranges from then on but does not serve
// yet — or after opEngineWait (a note). An exit in between is a refusal.
func (o *opTrack) startUnready(ctx context.Context, l *leafd, r *FaultResult) error {
	var from int64
	if st, err := os.Stat(l.logPath); err == nil {
		from = st.Size()
	}
	l.ever.Store(false)
	l.exited.Store(false)
	t0 := time.Now()
	if err := l.start(); err != nil {
		return err
	}
	l.ever.Store(true) // from here an exit on its own is counted, not ignored
	done := l.doneChan()
	deadline := time.After(opEngineWait)
	for !logHas(l.logPath, from, "segment: engine started") {
		select {
		case <-done:
			r.Refusals++
			r.Notes = append(r.Notes, l.name+" exited during its restart: "+firstLine(l.logTail(1)))
			return nil
		case <-deadline:
			r.Notes = append(r.Notes, fmt.Sprintf("%s: no engine start within %v of its restart", l.name, opEngineWait))
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	r.Notes = append(r.Notes, fmt.Sprintf("%s: engine started %v after its restart", l.name, time.Since(t0).Round(time.Millisecond)))
	return nil
}

// ready reports whether the node at addr answers /readyz with 200 now.
func ready(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// logHas reports whether the file at path holds s past offset from.
func logHas(path string, from int64, s string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, from, 1<<30))
	return err == nil && strings.Contains(string(b), s)
}

// floor reads the max_id of tag from its store (0 if it has none).
func (o *opTrack) floor(ctx context.Context, store, tag string) (int64, error) {
	if store == "mysql" {
		var m int64
		err := o.retryDB(ctx, func(ctx context.Context) error {
			err := o.db.QueryRowContext(ctx, "SELECT max_id FROM leaf_alloc WHERE biz_tag = ?", tag).Scan(&m)
			if errors.Is(err, sql.ErrNoRows) { // deleted by the act: an answer, not a database to wait for
				m, err = 0, nil
			}
			return err
		})
		return m, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	kv, err := o.js.KeyValue(ctx, "leaf_alloc")
	if err != nil {
		return 0, err
	}
	e, err := kv.Get(ctx, tag)
	if err != nil {
		return 0, err
	}
	var v struct {
		MaxID int64 `json:"max_id"`
	}
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		return 0, fmt.Errorf("value of %s: %w", tag, err)
	}
	return v.MaxID, nil
}

// retryDB runs f (each attempt within 5s) until it succeeds, for as long
// as MariaDB may be frozen by the main track (DBPause, Freeze) and then
// some: the operator track's own reads and acts must not fail because a
// fault of the other track holds the database.
func (o *opTrack) retryDB(ctx context.Context, f func(context.Context) error) error {
	deadline := time.Now().Add(max(o.cfg.DBPause, o.cfg.Freeze) + 30*time.Second)
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := f(actx)
		cancel()
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		sleep(ctx, 500*time.Millisecond)
	}
}

// act does the operator's error of kind on tag.
func (o *opTrack) act(ctx context.Context, kind, tag string) error {
	db := o.db
	switch kind {
	case FaultOpSQLRowDel, FaultOpSQLLowerMax, FaultOpSQLStep:
		stmt := map[string]string{
			FaultOpSQLRowDel:   "DELETE FROM leaf_alloc WHERE biz_tag = ?",
			FaultOpSQLLowerMax: "UPDATE leaf_alloc SET max_id = GREATEST(1, max_id - 10 * step) WHERE biz_tag = ?",
			FaultOpSQLStep:     "UPDATE leaf_alloc SET step = 1 WHERE biz_tag = ?",
		}[kind]
		return o.retryDB(ctx, func(ctx context.Context) error {
			_, err := db.ExecContext(ctx, stmt, tag)
			return err
		})
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	switch kind {
	case FaultOpKVKeyDel: // nats kv del leaf_alloc <tag>
		kv, err := o.js.KeyValue(ctx, "leaf_alloc")
		if err != nil {
			return err
		}
		return kv.Delete(ctx, tag)
	case FaultOpKVWorkersWipe: // nats kv rm leaf_workers
		return o.js.DeleteKeyValue(ctx, "leaf_workers")
	case FaultOpKVWorkersPurge: // nats stream purge KV_leaf_workers
		str, err := o.js.Stream(ctx, "KV_leaf_workers")
		if err != nil {
			return err
		}
		return str.Purge(ctx)
	case FaultOpKVBucket, FaultOpKVBucketJoin, FaultOpKVBucketRestart: // nats kv rm leaf_alloc; nats kv add leaf_alloc (same settings)
		kv, err := o.js.KeyValue(ctx, "leaf_alloc")
		if err != nil {
			return err
		}
		st, err := kv.Status(ctx)
		if err != nil {
			return err
		}
		cfg := jetstream.KeyValueConfig{Bucket: "leaf_alloc", History: uint8(max(st.History(), 1)), Storage: jetstream.FileStorage, Replicas: 1}
		if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
			cfg = bs.Config()
		}
		if err := o.js.DeleteKeyValue(ctx, "leaf_alloc"); err != nil {
			return err
		}
		_, err = o.js.CreateKeyValue(ctx, cfg)
		return err
	case FaultOpZnodeDel, FaultOpZKWipeJoin: // rmr /snowflake/<name>
		// As an operator would, it asks again while ZooKeeper is away (a
		// restart-zk or freeze-zk of the other lane may overlap the act),
		// and while live nodes create znodes below as it deletes.
		deadline := time.Now().Add(opZKRetry)
		for {
			err := zkRemove(o.c.zkAddr, "/snowflake/"+opZKName)
			if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
				return err
			}
			sleep(ctx, 250*time.Millisecond)
		}
	}
	return fmt.Errorf("unknown operator fault %q", kind)
}

// opZKRetry bounds how long a ZooKeeper act asks again: past the longest
// ZooKeeper fault of the other lane (freeze-zk, 12 s).
const opZKRetry = 20 * time.Second

// zkRemove connects to ZooKeeper at addr and deletes path and everything
// below it, a few times over while live nodes create znodes below.
func zkRemove(addr, path string) error {
	conn, _, err := zk.Connect([]string{addr}, 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		return err
	}
	defer conn.Close()
	for try := 0; ; try++ {
		err := zkDeleteAll(conn, path)
		if !errors.Is(err, zk.ErrNotEmpty) || try == 9 {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// zkDeleteAll deletes path and everything below it.
func zkDeleteAll(conn *zk.Conn, path string) error {
	children, _, err := conn.Children(path)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, ch := range children {
		if err := zkDeleteAll(conn, path+"/"+ch); err != nil {
			return err
		}
	}
	if err := conn.Delete(path, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return err
	}
	return nil
}

// sharedData starts two leafd with embedded nats-servers on one --data
// directory (each its own ports): the second should refuse. Ids are taken
// from both, then from the first alone after a restart, above the floor.
func (o *opTrack) sharedData(ctx context.Context, tag string, r *FaultResult) error {
	ports, err := freePorts(4)
	if err != nil {
		return err
	}
	data := filepath.Join(o.c.dir, "ops", fmt.Sprintf("shared-%d", o.n))
	var nodes []*leafd
	var urls []string
	for k := range 2 {
		name := fmt.Sprintf("op%d-%d", o.n, k+1)
		httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[2*k])
		listen := fmt.Sprintf("127.0.0.1:%d", ports[2*k+1])
		args := []string{"--name", name, "--nats-listen", listen, "--http", httpAddr, "--data", data,
			"--default-step", strconv.Itoa(opStep)}
		l := o.c.newExtra(name, filepath.Join(o.c.dir, "ops", name), httpAddr, args)
		l.registry = "kv-shared"
		l.tolerant.Store(true)
		nodes = append(nodes, l)
		urls = append(urls, "nats://"+listen)
	}
	defer func() { stopAll(nodes) }() // every node, as the slice ends up
	r.Target = fmt.Sprintf("tag %s, two leafd (embedded NATS) on --data %s", tag, data)
	if nr, err := o.c.startExtra(ctx, nodes[0], 1); err != nil || nr != "" {
		return fmt.Errorf("first node: %v%s", err, nr)
	}
	var conns []*nats.Conn
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	connect := func(url string) *nats.Conn {
		nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
		if err != nil {
			return nil
		}
		conns = append(conns, nc)
		return nc
	}
	nc1 := connect(urls[0])
	if nc1 == nil {
		return errors.New("cannot connect to the first node's NATS")
	}
	o.phase(ctx, nc1, tag, "kv-shared", o.cfg.OpPhase, 0, false, r)
	// The act: a second leafd on the same directory.
	var wg sync.WaitGroup
	if _, err := o.c.startExtra(ctx, nodes[1], 1); err != nil {
		r.Refusals++
		r.Notes = append(r.Notes, nodes[1].name+" refused to start: "+firstLine(err.Error()))
		o.phase(ctx, nc1, tag, "kv-shared", o.cfg.OpPhase, 0, true, r)
	} else if nc2 := connect(urls[1]); nc2 != nil {
		wg.Add(2)
		go func() { defer wg.Done(); o.phase(ctx, nc1, tag, "kv-shared", o.cfg.OpPhase, 0, true, r) }()
		go func() { defer wg.Done(); o.phase(ctx, nc2, tag, "kv-shared", o.cfg.OpPhase, 0, true, r) }()
		wg.Wait()
	}
	stopAll(nodes)
	floor := o.space("segment."+tag).maxSeen() + 1
	r.Notes = append(r.Notes, fmt.Sprintf("floor of %s: %d (the highest id seen)", tag, floor))
	if _, err := o.c.startExtra(ctx, nodes[0], 1); err != nil {
		r.Refusals++
		r.Notes = append(r.Notes, nodes[0].name+" refused to start again: "+firstLine(err.Error()))
		return nil
	}
	o.phase(ctx, nc1, tag, "kv-shared", o.cfg.OpPhase, floor, true, r)
	return nil
}
