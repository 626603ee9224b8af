package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Refusal codes: the product's answer to a fault it cannot serve through
// is a clear error, never a repeat. These wire codes count as refusals.
var refusalCodes = map[string]bool{"400": true, "404": true, "409": true, "500": true, "501": true, "503": true}

// probes is how many ids restartChecked asks a restarted node for, per tag.
const probes = 3

// restartChecked starts leafd i (with extra flags; tries starts at most,
// 0: startTries) and checks the floor: every segment id the restarted node
// then hands out must lie at or above the max_id its tag had in MariaDB
// before the start — the node has no buffer yet, so a lower id is a range
// issued again. It asks the node itself (its Leaf HTTP API) for probes ids
// of each tag; they go into the id spaces like any other.
func (f *faulter) restartChecked(ctx context.Context, i int, r *FaultResult, tries int, extra ...string) error {
	c := f.c
	floors, ferr := c.floors(ctx, f.cfg.Tags)
	took, err := c.startLeafdTries(ctx, i, tries, extra...)
	r.Recovery = took.Seconds()
	if err != nil {
		return err
	}
	if ferr != nil {
		r.Notes = append(r.Notes, "floor not read: "+ferr.Error())
		return nil
	}
	f.probeFloors(ctx, c.leafds[i], floors, r)
	return nil
}

// probeFloors asks l over HTTP for probes ids of each tag and counts those
// under the tag's floor.
func (f *faulter) probeFloors(ctx context.Context, l *leafd, floors map[string]int64, r *FaultResult) {
	for _, tag := range f.cfg.Tags {
		for range probes {
			id, code, err := httpID(ctx, l.http, tag)
			if err != nil {
				if code != "" {
					r.Refusals++
				}
				continue
			}
			now := time.Now().UnixNano()
			f.spaces["segment."+tag].add(now, []int64{id})
			r.FloorChecked++
			if id < floors[tag] {
				r.FloorViolations++
				if len(r.FloorExamples) < 10 {
					r.FloorExamples = append(r.FloorExamples, fmt.Sprintf("%s: id %d < floor %d (%s after restart)", tag, id, floors[tag], l.name))
				}
			}
		}
	}
}

// httpID asks the node at addr for one id of tag (Leaf's HTTP API). code
// is the HTTP status of a refusal ("" for a transport error).
func httpID(ctx context.Context, addr, tag string) (int64, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/segment/get/"+tag, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return 0, strconv.Itoa(resp.StatusCode), fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	id, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return id, "", err
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// injectMore injects the freeze, hosts and network faults.
func (f *faulter) injectMore(ctx context.Context, kind string, r *FaultResult) error {
	c := f.c
	switch kind {
	case FaultFreezeLeafdKV, FaultFreezeLeafdZK:
		return f.freezeLeafd(ctx, kind, r)
	case FaultFreezeNATS:
		i := f.intN(len(c.nats))
		r.Target = fmt.Sprintf("%s for %v", c.nats[i].name, f.cfg.Freeze)
		pid := c.nats[i].pid()
		if pid == 0 {
			return errors.New(c.nats[i].name + " not running")
		}
		return freeze(ctx, -pid, f.cfg.Freeze, r)
	case FaultFreezeZK:
		r.Target = fmt.Sprintf("zookeeper pid %d for %v", c.zkPID, f.cfg.Freeze)
		return freeze(ctx, c.zkPID, f.cfg.Freeze, r)
	case FaultHostsKV, FaultHostsZK, FaultHostsZKNA:
		return f.hosts(ctx, kind, r)
	}
	if strings.HasPrefix(kind, "net-") {
		return f.net(ctx, kind, r)
	}
	return fmt.Errorf("unknown fault %q", kind)
}

// freeze SIGSTOPs pid (a negative pid: a process group) for d, then
// SIGCONTs it.
func freeze(ctx context.Context, pid int, d time.Duration, r *FaultResult) error {
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return err
	}
	r.pauseFrom = time.Now()
	sleep(ctx, d)
	r.pauseTo = time.Now()
	return syscall.Kill(pid, syscall.SIGCONT)
}

// freezeLeafd stops a leafd (the KV-lease one, or a ZooKeeper one) past
// every TTL; while it is stopped a new leafd with the same registry flags
// (for ZooKeeper the same --zk-addr: the same worker znode) starts and takes
// what the frozen one held; then the frozen one wakes, and both serve for
// HostsFor. A node that wakes believing it still owns its worker id and
// serves from it repeats ids; the fenced answer is to refuse.
func (f *faulter) freezeLeafd(ctx context.Context, kind string, r *FaultResult) error {
	c := f.c
	want := "kv"
	if kind == FaultFreezeLeafdZK {
		want = "zk"
	}
	var cand []int
	for i, l := range c.leafds {
		if l.registry == want {
			cand = append(cand, i)
		}
	}
	if len(cand) == 0 {
		return fmt.Errorf("no leafd on registry %s", want)
	}
	i := f.pickLeafd(ctx, cand)
	defer c.leafds[i].busy.Unlock()
	l := c.leafds[i]
	pid := l.pid()
	if pid == 0 {
		return errors.New(l.name + " not running")
	}
	r.Target = fmt.Sprintf("%s (%s) for %v, then a taker with its registry flags", l.name, l.registry, f.cfg.Freeze)
	l.tolerant.Store(true)
	defer l.tolerant.Store(false)
	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil {
		return err
	}
	r.pauseFrom = time.Now()
	sleep(ctx, f.cfg.Freeze)
	var unfill func()
	if want == "kv" {
		// kvworker claims the first free id from a random start: leave the
		// taker no other choice than the frozen node's worker.
		var note string
		unfill, note = f.fillWorkers(ctx, l)
		r.Notes = append(r.Notes, note)
	}
	taker, err := c.newTaker(l)
	var tookErr error
	if err == nil {
		floors, ferr := c.floors(ctx, f.cfg.Tags)
		var nr string
		nr, tookErr = c.startExtra(ctx, taker, 1)
		if nr != "" {
			r.Notes = append(r.Notes, "taker up but not ready: "+nr)
		}
		if tookErr == nil && ferr == nil {
			f.probeFloors(ctx, taker, floors, r)
		}
	}
	if unfill != nil {
		unfill()
	}
	r.pauseTo = time.Now()
	if err := syscall.Kill(-pid, syscall.SIGCONT); err != nil {
		return err
	}
	if err != nil {
		return err
	}
	if tookErr != nil { // the taker refused: the frozen node's claim still held
		r.Refusals++
		r.Notes = append(r.Notes, "taker refused to start: "+firstLine(tookErr.Error()))
	}
	sleep(ctx, f.cfg.HostsFor)
	taker.stop(10 * time.Second)
	if l.exited.Swap(false) {
		// The woken node stopped itself (a lost claim): a refusal. Start
		// it again for the rest of the run.
		r.Refusals++
		r.Notes = append(r.Notes, l.name+" stopped after it woke")
		return f.restartChecked(ctx, i, r, 0)
	}
	return nil
}

// lastWorker is the worker id leafd l last logged it registered, or -1.
func lastWorker(l *leafd) int64 {
	b, err := os.ReadFile(l.logPath)
	if err != nil {
		return -1
	}
	m := workerRE.FindAllSubmatch(b, -1)
	if len(m) == 0 {
		return -1
	}
	w, err := strconv.ParseInt(string(m[len(m)-1][1]), 10, 64)
	if err != nil {
		return -1
	}
	return w
}

var workerRE = regexp.MustCompile(`msg="snowflake worker registered" node=\S+ worker=(\d+)`)

// fillWorkers claims, in the KV-lease bucket, every worker id but the one
// frozen leafd l held (expired by now), the way kvworker does (a key w<id>
// with a per-key TTL), so that the next node to register gets l's worker.
// The returned func purges those claims again.
func (f *faulter) fillWorkers(ctx context.Context, l *leafd) (func(), string) {
	w := lastWorker(l)
	if w < 0 {
		return nil, "worker of " + l.name + " not found in its log: the taker takes any free worker"
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	kv, err := f.l.jss[0].KeyValue(ctx, kvworkerBucket)
	if err != nil {
		return nil, "kv lease bucket: " + err.Error()
	}
	var filled []string
	for id := range int64(kvworkerWorkers) {
		if id == w {
			continue
		}
		key := "w" + strconv.FormatInt(id, 10)
		if _, err := kv.Create(ctx, key, []byte(`{"node":"leafchaos-filler"}`), jetstream.KeyTTL(30*time.Second)); err == nil {
			filled = append(filled, key)
		}
	}
	return func() {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		for _, key := range filled {
			_ = kv.Purge(pctx, key)
		}
	}, fmt.Sprintf("%d other worker ids claimed by the harness: the taker can only take worker %d of %s", len(filled), w, l.name)
}

// The KV-lease registry's bucket and worker ids (Leaf's layout: 10 bits).
const (
	kvworkerBucket  = "leaf_workers"
	kvworkerWorkers = 1024
)

// hosts starts two more leafd "hosts" on 127.0.0.2 and 127.0.0.3 with
// identical flags and ports, lets them serve for HostsFor under the load,
// and stops them. A host that refuses to start, or stops itself, is a
// refusal.
func (f *faulter) hosts(ctx context.Context, kind string, r *FaultResult) error {
	c := f.c
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	port := ports[0]
	var hs []*leafd
	for h := 2; h <= 3; h++ {
		host := fmt.Sprintf("127.0.0.%d", h)
		args := []string{
			"--nats", strings.Join(c.urls, ","),
			"--http", fmt.Sprintf("%s:%d", host, port),
			"--data", "data",
			"--mysql", c.leafdDSN,
			"--kv-replicas", "3",
			"--max-step", strconv.Itoa(f.cfg.MaxStep),
		}
		switch kind {
		case FaultHostsKV:
			args = append(args, "--worker-registry", "kv")
		case FaultHostsZK:
			args = append(args, "--worker-registry", "zk", "--zk", c.leafdZK, "--zk-name", "leafchaos",
				"--zk-addr", fmt.Sprintf("%s:%d", host, ports[1]))
		case FaultHostsZKNA:
			args = append(args, "--worker-registry", "zk", "--zk", c.leafdZK, "--zk-name", "leafchaos")
		}
		dir := filepath.Join(c.dir, "hosts", fmt.Sprintf("%s-%d-%s", kind, f.count(kind), host))
		hs = append(hs, c.newExtra(fmt.Sprintf("host-%s", host), dir, fmt.Sprintf("%s:%d", host, port), args))
	}
	r.Target = fmt.Sprintf("leafd on 127.0.0.2 and 127.0.0.3, --http <host>:%d, identical flags (%s)", port, strings.TrimPrefix(kind, "hosts-"))
	for _, h := range hs {
		h.tolerant.Store(true)
		floors, ferr := c.floors(ctx, f.cfg.Tags)
		nr, err := c.startExtra(ctx, h, 1)
		if err != nil {
			r.Refusals++
			r.Notes = append(r.Notes, h.name+" refused to start: "+firstLine(err.Error()))
			continue
		}
		if nr != "" {
			r.Notes = append(r.Notes, h.name+" up but not ready: "+nr)
		}
		if ferr == nil { // a new node has no buffer: the floor holds for it too
			f.probeFloors(ctx, h, floors, r)
		}
	}
	sleep(ctx, f.cfg.HostsFor)
	for _, h := range hs {
		if h.exited.Load() {
			r.Refusals++
			r.Notes = append(r.Notes, h.name+" stopped itself")
		}
		h.stop(10 * time.Second)
	}
	return nil
}
