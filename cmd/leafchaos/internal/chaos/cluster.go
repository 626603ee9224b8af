package chaos

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leafmq/leafmq/segment"
	segmysql "github.com/leafmq/leafmq/segment/mysql"
	"github.com/leafmq/leafmq/wire"
)

const (
	numNATS    = 3
	numLeafd   = 3
	zkJar      = "/usr/share/java/zookeeper.jar"
	readyWait  = 90 * time.Second // a leafd or server to come up
	extraWait  = 10 * time.Second // a host or taker, which may refuse
	startTries = 8                // starts of a leafd that exits before it is ready
)

// leafd is one leafd process and what identifies it.
type leafd struct {
	*proc
	http     string      // its HTTP address, for /readyz
	registry string      // zk or kv
	ever     atomic.Bool // it has been ready since its last start
	// tolerant: an exit on its own is a refusal the fault counts (exited),
	// not a problem of the run.
	tolerant atomic.Bool
	exited   atomic.Bool
	// busy is held by the fault acting on a main leafd (pickLeafd), so
	// that two lanes never restart or freeze one process at once.
	busy sync.Mutex
}

// cluster is everything the run starts. Its close stops all of it.
type cluster struct {
	cfg *Config
	log *slog.Logger
	dir string

	nats     []*proc
	urls     []string // the NATS URLs leafd gets: through the proxies
	natsAddr []string // host:port of each nats-server, for the harness's own clients
	natsMon  []string // host:port of each nats-server's monitoring (/connz)
	leafds   []*leafd
	extras   []*leafd // takers and hosts, started and stopped by faults
	dbDir    string
	dbPID    int
	dsn      string  // of database leaf, direct
	db       *sql.DB // on dsn, for the harness's own reads and operator acts
	leafdDSN string  // of database leaf through the proxy
	leafdZK  string  // ZooKeeper through the proxy
	net      *netFaults
	zkDir    string
	zkAddr   string
	zkPID    int
	zkStart  bool // ZooKeeper was started (by the script or by us)
	dbStart  bool

	mu       sync.Mutex
	problems []string // unexpected exits and the like
}

func lookPath(name string, extra ...string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range extra {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

func (c *cluster) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	c.log.Error("chaos: " + msg)
	c.mu.Lock()
	c.problems = append(c.problems, time.Now().Format("15:04:05.000")+" "+msg)
	c.mu.Unlock()
}

// build makes the binaries the run needs that Config does not name.
func (c *cluster) build(ctx context.Context) error {
	bin := filepath.Join(c.dir, "bin")
	if c.cfg.Leafd == "" {
		c.cfg.Leafd = filepath.Join(bin, "leafd")
		if err := goBuild(ctx, c.cfg.Repo, c.cfg.Leafd, "./cmd/leafd"); err != nil {
			return err
		}
	}
	if c.cfg.NATSBin == "" {
		c.cfg.NATSBin = filepath.Join(bin, "nats-server")
		if err := goBuild(ctx, c.cfg.Repo, c.cfg.NATSBin, "github.com/nats-io/nats-server/v2"); err != nil {
			return err
		}
	}
	return nil
}

func goBuild(ctx context.Context, repo, out, pkg string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// startNATS writes the configs of a 3-node JetStream cluster and starts it.
// Each route goes through a proxy of its own (server i to server j), and
// the servers advertise neither their routes (a gossiped route would bypass
// the proxies) nor their client URLs (leafd only knows the proxies).
func (c *cluster) startNATS(ctx context.Context) error {
	ports, err := freePorts(4 * numNATS)
	if err != nil {
		return err
	}
	dead := ports[2*numNATS]
	mon := ports[3*numNATS:] // nothing listens there: the advertised route address
	for i := range numNATS {
		name := fmt.Sprintf("n%d", i+1)
		dir := filepath.Join(c.dir, "nats", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		var routes []string
		for j := range numNATS {
			if j == i {
				continue
			}
			addr, err := c.net.add(routeProxy(i, j), fmt.Sprintf("127.0.0.1:%d", ports[numNATS+j]))
			if err != nil {
				return err
			}
			routes = append(routes, "nats-route://"+addr)
		}
		conf := fmt.Sprintf(`server_name: %q
listen: "127.0.0.1:%d"
http: "127.0.0.1:%d"
jetstream {
  store_dir: %q
  max_memory_store: 256MB
  max_file_store: 2GB
}
cluster {
  name: "leafchaos"
  listen: "127.0.0.1:%d"
  advertise: "127.0.0.1:%d"
  no_advertise: true
  routes: [%s]
  ping_interval: "1s"
  ping_max: 2
  write_deadline: "2s"
  write_timeout: close
}
ping_interval: "5s"
ping_max: 2
`, name, ports[i], mon[i], filepath.Join(dir, "js"), ports[numNATS+i], dead, strings.Join(quoteAll(routes), ", "))
		path := filepath.Join(dir, "nats.conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			return err
		}
		p := &proc{name: "nats-" + name, bin: c.cfg.NATSBin, args: []string{"-c", path}, dir: dir,
			logPath: filepath.Join(dir, "nats.log")}
		p.onExit = c.onExit
		c.nats = append(c.nats, p)
		c.natsAddr = append(c.natsAddr, fmt.Sprintf("127.0.0.1:%d", ports[i]))
		c.natsMon = append(c.natsMon, fmt.Sprintf("127.0.0.1:%d", mon[i]))
		addr, err := c.net.add(fmt.Sprintf("nats-%d", i+1), c.natsAddr[i])
		if err != nil {
			return err
		}
		c.urls = append(c.urls, "nats://"+addr)
		if err := p.start(); err != nil {
			return err
		}
	}
	for i := range c.nats {
		if err := waitTCP(ctx, c.natsAddr[i], readyWait); err != nil {
			return fmt.Errorf("%s: %w\n%s", c.nats[i].name, err, c.nats[i].logTail(20))
		}
	}
	return nil
}

// directURLs are the nats-servers' own client URLs.
func (c *cluster) directURLs() string {
	var u []string
	for _, a := range c.natsAddr {
		u = append(u, "nats://"+a)
	}
	return strings.Join(u, ",")
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = strconv.Quote(v)
	}
	return out
}

func (c *cluster) onExit(p *proc, err error, unexpected bool) {
	if unexpected {
		c.problem("%s exited on its own: %v; last log lines:\n%s", p.name, err, p.logTail(15))
	}
}

// startDB starts MariaDB with scripts/mariadb.sh, creates database leaf and
// Leaf's table with the run's tags.
func (c *cluster) startDB(ctx context.Context) error {
	c.dbDir = filepath.Join(c.dir, "mariadb")
	c.dbStart = true
	env, err := script(ctx, c.cfg.Repo, "mariadb.sh", "start", c.dbDir)
	if err != nil {
		return err
	}
	if c.dbPID, err = pidFrom(env, "LEAF_TEST_MYSQL_PID"); err != nil {
		return err
	}
	mc, err := mysql.ParseDSN(env["LEAF_TEST_MYSQL_DSN"])
	if err != nil {
		return fmt.Errorf("mariadb dsn: %w", err)
	}
	db, err := sql.Open("mysql", mc.FormatDSN())
	if err != nil {
		return err
	}
	_, err = db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS leaf")
	_ = db.Close()
	if err != nil {
		return fmt.Errorf("create database leaf: %w", err)
	}
	mc.DBName = "leaf"
	mc.ParseTime = true
	c.dsn = mc.FormatDSN()
	if c.db, err = sql.Open("mysql", c.dsn); err != nil {
		return err
	}
	proxied := *mc
	if proxied.Addr, err = c.net.add("db", mc.Addr); err != nil {
		return err
	}
	c.leafdDSN = proxied.FormatDSN()
	st, err := segmysql.Open(ctx, c.dsn, segmysql.Options{CreateTable: true})
	if err != nil {
		return err
	}
	defer st.Close()
	for _, tag := range c.cfg.Tags {
		err := st.Create(ctx, segment.Tag{Name: wire.MustTag(tag), MaxID: 1, Step: c.cfg.Step, Description: "leafchaos"})
		if err != nil {
			return fmt.Errorf("create tag %s: %w", tag, err)
		}
	}
	err = st.Create(ctx, segment.Tag{Name: wire.MustTag(MonoTag), MaxID: 1, Step: 1000, Description: "leafchaos monotonic",
		Mode: segment.Mode{Kind: segment.KindMono}})
	if err != nil {
		return fmt.Errorf("create tag %s: %w", MonoTag, err)
	}
	return nil
}

// startZK starts ZooKeeper with scripts/zookeeper.sh.
func (c *cluster) startZK(ctx context.Context) error {
	c.zkDir = filepath.Join(c.dir, "zookeeper")
	c.zkStart = true
	env, err := script(ctx, c.cfg.Repo, "zookeeper.sh", "start", c.zkDir)
	if err != nil {
		return err
	}
	c.zkAddr = env["LEAF_TEST_ZK_ADDR"]
	if c.leafdZK, err = c.net.add("zk", c.zkAddr); err != nil {
		return err
	}
	c.zkPID, err = pidFrom(env, "LEAF_TEST_ZK_PID")
	return err
}

// restartZK kills ZooKeeper with -9 and starts it again on the same port
// and data. (scripts/zookeeper.sh start keeps the data but picks a new
// port, which the leafds would not know.) The command line is the script's.
func (c *cluster) restartZK(ctx context.Context) (time.Duration, error) {
	if alive(c.zkPID) {
		_ = syscall.Kill(c.zkPID, syscall.SIGKILL)
		for i := 0; alive(c.zkPID) && i < 200; i++ {
			time.Sleep(50 * time.Millisecond)
		}
	}
	t0 := time.Now()
	// setsid in a background job of a non-interactive shell execs java in
	// the same pid, as the script does; the server outlives this shell.
	sh := `setsid java -Xmx256m -Dzookeeper.log.dir="$1" -cp "$1:$2" org.apache.zookeeper.server.ZooKeeperServerMain "$1/zoo.cfg" </dev/null >>"$1/zookeeper.log" 2>&1 & echo $!`
	out, err := exec.CommandContext(ctx, "bash", "-c", sh, "zk", c.zkDir, zkJar).Output()
	if err != nil {
		return 0, fmt.Errorf("restart zookeeper: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return 0, fmt.Errorf("restart zookeeper: pid %q", out)
	}
	c.zkPID = pid
	if err := os.WriteFile(filepath.Join(c.zkDir, "zookeeper.pid"), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		return 0, err
	}
	if err := waitZK(ctx, c.zkAddr, readyWait); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// waitZK waits until ZooKeeper says "Mode: standalone" to srvr.
func waitZK(ctx context.Context, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if zkReady(addr) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("zookeeper %s: %w within %v", addr, errNotReady, timeout)
}

func zkReady(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte("srvr")); err != nil {
		return false
	}
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "Mode: standalone") {
			return true
		}
	}
	return false
}

// addLeafds prepares the three leafd processes: segment on MariaDB for all,
// snowflake worker ids from ZooKeeper for two and JetStream KV for one, the
// pool of the first tag and snowflake on each.
func (c *cluster) addLeafds() error {
	ports, err := freePorts(2 * numLeafd)
	if err != nil {
		return err
	}
	for i := range numLeafd {
		name := fmt.Sprintf("chaos-%d", i+1)
		dir := filepath.Join(c.dir, "leafd", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[i])
		args := []string{
			"--name", name,
			"--nats", strings.Join(c.urls, ","),
			"--http", httpAddr,
			"--data", filepath.Join(dir, "data"),
			"--mysql", c.leafdDSN,
			"--kv-replicas", "3",
			"--pool", c.cfg.Tags[0] + ",snowflake",
			"--max-step", strconv.Itoa(c.cfg.MaxStep),
		}
		reg := "zk"
		if i == numLeafd-1 {
			reg = "kv"
			args = append(args, "--worker-registry", "kv")
		} else {
			args = append(args, "--worker-registry", "zk", "--zk", c.leafdZK, "--zk-name", "leafchaos",
				"--zk-addr", fmt.Sprintf("127.0.0.1:%d", ports[numLeafd+i]))
		}
		p := &proc{name: name, bin: c.cfg.Leafd, args: args, dir: dir, logPath: filepath.Join(dir, "leafd.log")}
		l := &leafd{proc: p, http: httpAddr, registry: reg}
		p.onExit = c.leafdExit(l)
		c.leafds = append(c.leafds, l)
	}
	return nil
}

// leafdExit is the onExit of a leafd: an exit on its own after it was
// ready is a problem, unless a fault expects it (tolerant).
func (c *cluster) leafdExit(l *leafd) func(p *proc, err error, unexpected bool) {
	return func(p *proc, err error, unexpected bool) {
		if !unexpected || !l.ever.Load() {
			return
		}
		if l.tolerant.Load() {
			l.exited.Store(true)
			c.log.Warn("chaos: leafd stopped itself during a fault", "node", p.name, "err", err, "log", p.logTail(5))
			return
		}
		c.problem("%s exited on its own after it was ready: %v; last log lines:\n%s", p.name, err, p.logTail(15))
	}
}

// startLeafd starts leafd i with its flags plus extra and waits until its
// /readyz answers 200, starting it again (up to startTries) when it exits
// before that — a node may refuse to start while a peer's clock is off or
// a store is down. It returns how long that took.
func (c *cluster) startLeafd(ctx context.Context, i int, extra ...string) (time.Duration, error) {
	return c.startLeafdTries(ctx, i, 0, extra...)
}

// startLeafdTries is startLeafd with at most tries starts (0: startTries).
func (c *cluster) startLeafdTries(ctx context.Context, i, tries int, extra ...string) (time.Duration, error) {
	return c.startProc(ctx, c.leafds[i], tries, readyWait, extra...)
}

func (c *cluster) startProc(ctx context.Context, l *leafd, tries int, wait time.Duration, extra ...string) (time.Duration, error) {
	if tries <= 0 {
		tries = startTries
	}
	t0 := time.Now()
	var lastErr error
	for try := range tries {
		if try > 0 {
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(time.Second):
			}
		}
		l.ever.Store(false)
		l.exited.Store(false)
		if err := l.start(extra...); err != nil {
			return 0, err
		}
		done := l.doneChan()
		err := waitReady(ctx, l.http, done, wait)
		if err == nil {
			l.ever.Store(true)
			return time.Since(t0), nil
		}
		lastErr = err
		select {
		case <-done:
			c.log.Warn("chaos: leafd exited during start", "node", l.name, "try", try+1)
			continue
		default:
		}
		l.stop(10 * time.Second)
		return 0, fmt.Errorf("%s: %w\n%s", l.name, err, l.logTail(20))
	}
	return 0, fmt.Errorf("%s: exited %d times before it was ready: %v\n%s", l.name, tries, lastErr, l.logTail(20))
}

// newExtra prepares a leafd that a fault starts and stops (a host or a
// taker); close stops it if the fault did not.
func (c *cluster) newExtra(name, dir, httpAddr string, args []string) *leafd {
	_ = os.MkdirAll(dir, 0o755)
	p := &proc{name: name, bin: c.cfg.Leafd, args: args, dir: dir, logPath: filepath.Join(dir, "leafd.log")}
	l := &leafd{proc: p, http: httpAddr}
	p.onExit = c.leafdExit(l)
	c.mu.Lock()
	c.extras = append(c.extras, l)
	c.mu.Unlock()
	return l
}

// startExtra starts an extra leafd, which may refuse: it waits extraWait
// for it to be ready. A node that exits is a refusal (an error); one still
// running but not ready (a store or a tag it cannot serve) is up: it
// serves what it can, and is kept (not an error; notReady says why).
func (c *cluster) startExtra(ctx context.Context, l *leafd, tries int) (notReady string, err error) {
	if tries <= 0 {
		tries = 1
	}
	for try := range tries {
		if try > 0 {
			sleep(ctx, time.Second)
		}
		l.ever.Store(false)
		l.exited.Store(false)
		if err := l.start(); err != nil {
			return "", err
		}
		done := l.doneChan()
		err = waitReady(ctx, l.http, done, extraWait)
		l.ever.Store(true)
		if err == nil {
			return "", nil
		}
		select {
		case <-done:
			err = fmt.Errorf("%s: %w\n%s", l.name, err, l.logTail(10))
			continue
		default:
		}
		return firstLine(err.Error()), nil
	}
	return "", err
}

// newTaker prepares a leafd with l's flags but its own name, HTTP port and
// data directory: for ZooKeeper the same --zk-addr, so the same worker.
func (c *cluster) newTaker(l *leafd) (*leafd, error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	n := len(c.extras)
	c.mu.Unlock()
	name := fmt.Sprintf("%s-taker-%d", l.name, n)
	dir := filepath.Join(c.dir, "leafd", name)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	args := append([]string(nil), l.args...)
	for k := 0; k+1 < len(args); k++ {
		switch args[k] {
		case "--name":
			args[k+1] = name
		case "--http":
			args[k+1] = httpAddr
		case "--data":
			args[k+1] = filepath.Join(dir, "data")
		case "--pool":
			args[k+1] = c.cfg.Tags[0]
		}
	}
	t := c.newExtra(name, dir, httpAddr, args)
	t.registry = l.registry
	t.tolerant.Store(true)
	return t, nil
}

// floors reads each tag's max_id from MariaDB: every id below it has been
// issued, to some node.
func (c *cluster) floors(ctx context.Context, tags []string) (map[string]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out := map[string]int64{}
	for _, tag := range tags {
		var m int64
		if err := c.db.QueryRowContext(ctx, "SELECT max_id FROM leaf_alloc WHERE biz_tag = ?", tag).Scan(&m); err != nil {
			return nil, fmt.Errorf("max_id of %s: %w", tag, err)
		}
		out[tag] = m
	}
	return out, nil
}

func (p *proc) doneChan() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// waitReady polls http://addr/readyz until it answers 200.
func waitReady(ctx context.Context, addr string, exited <-chan struct{}, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-exited:
			return errors.New("exited before it was ready")
		case <-ctx.Done():
			return fmt.Errorf("%w: /readyz: %s", errNotReady, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// close stops everything that was started: leafds (gracefully, then -9),
// nats-servers, ZooKeeper and MariaDB (by their scripts).
func (c *cluster) close() {
	var wg sync.WaitGroup
	c.mu.Lock()
	all := append(append([]*leafd(nil), c.leafds...), c.extras...)
	c.mu.Unlock()
	for _, l := range all {
		wg.Add(1)
		go func() { defer wg.Done(); l.stop(10 * time.Second) }()
	}
	wg.Wait()
	for _, p := range c.nats {
		wg.Add(1)
		go func() { defer wg.Done(); p.stop(10 * time.Second) }()
	}
	wg.Wait()
	c.net.close()
	if c.db != nil {
		_ = c.db.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if c.dbStart {
		if c.dbPID > 0 {
			_ = syscall.Kill(c.dbPID, syscall.SIGCONT)
		}
		if _, err := script(ctx, c.cfg.Repo, "mariadb.sh", "stop", c.dbDir); err != nil {
			c.log.Error("chaos: stop mariadb", "err", err)
		}
	}
	if c.zkStart {
		if c.zkPID > 0 {
			_ = syscall.Kill(c.zkPID, syscall.SIGCONT)
		}
		if _, err := script(ctx, c.cfg.Repo, "zookeeper.sh", "stop", c.zkDir); err != nil {
			c.log.Error("chaos: stop zookeeper", "err", err)
		}
	}
}
