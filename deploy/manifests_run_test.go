package deploy_test

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/leafmq/leafmq/internal/testenv"
)

// The manifests are run here as their orchestrator runs them: the image's
// ENTRYPOINT and ENV (deploy/Dockerfile), then the manifest's own
// environment, arguments, probes and healthchecks, all read from the files.
// Only the names of the manifest's world change, through a rewrite each
// test spells out: a service's host:port (nats-1:4222, mariadb:3306,
// zookeeper:2181, the container's own 0.0.0.0:8080) becomes the address of
// the server standing in for it on this machine, and a path of the image
// (/usr/local/bin/leafd, /var/lib/leafd) a local one. Every other value is
// the manifest's, and a value that still names a host of that world after
// the rewrite fails the test instead of reaching leafd.

// rewrite maps names of a manifest's world to this machine.
type rewrite map[string]string

// apply replaces every name of r in s, longer names first.
func (r rewrite) apply(s string) string {
	keys := slices.SortedFunc(maps.Keys(r), func(a, b string) int {
		return cmp.Or(cmp.Compare(len(b), len(a)), strings.Compare(a, b))
	})
	var pairs []string
	for _, k := range keys {
		pairs = append(pairs, k, r[k])
	}
	return strings.NewReplacer(pairs...).Replace(s)
}

// add returns r with the entries of more added.
func (r rewrite) add(more rewrite) rewrite {
	out := maps.Clone(r)
	maps.Copy(out, more)
	return out
}

// hostPortRE finds a host:port whose host is a name (only the manifest's
// world resolves those; this machine's servers are given as 127.0.0.1).
var hostPortRE = regexp.MustCompile(`\b[A-Za-z][\w.-]*:\d+\b`)

// loopbackRE finds a loopback host:port.
var loopbackRE = regexp.MustCompile(`\b(127\.0\.0\.1|localhost):\d+\b`)

// mustBeLocal fails t if v, after the rewrite, still names a host of the
// manifest's world, listens on every interface (tests bind loopback only)
// or holds a compose variable.
func mustBeLocal(t *testing.T, what, v string) {
	t.Helper()
	if m := hostPortRE.FindString(v); m != "" {
		t.Fatalf("%s=%q: %s is not mapped to this machine (add it to the test's rewrite)", what, v, m)
	}
	if strings.Contains(v, "0.0.0.0") || strings.Contains(v, "${") {
		t.Fatalf("%s=%q is not mapped to this machine (add it to the test's rewrite)", what, v)
	}
}

// httpRewrite maps leafd's HTTP listen address in the container (its
// LEAF_HTTP, e.g. 0.0.0.0:8080) and the names a probe or a peer reaches it
// by (127.0.0.1, localhost, the host name) to local, a free loopback
// address. Probes, healthchecks and ports that name another port are left
// alone, and so fail.
func httpRewrite(t *testing.T, leafHTTP, hostname, local string) rewrite {
	t.Helper()
	_, port, err := net.SplitHostPort(leafHTTP)
	if err != nil {
		t.Fatalf("LEAF_HTTP=%q: %v", leafHTTP, err)
	}
	r := rewrite{}
	for _, h := range []string{"0.0.0.0", "127.0.0.1", "localhost", hostname} {
		r[net.JoinHostPort(h, port)] = local
	}
	return r
}

// image is what deploy/Dockerfile's final stage gives a container: its
// ENTRYPOINT, ENV and WORKDIR.
type image struct {
	entrypoint []string
	env        map[string]string
	workdir    string
}

func readImage(t *testing.T) image {
	t.Helper()
	img := image{env: readDockerfile(t).env}
	for line := range strings.SplitSeq(string(repoFile(t, "Dockerfile")), "\n") {
		if rest, ok := strings.CutPrefix(line, "WORKDIR "); ok {
			img.workdir = strings.TrimSpace(rest)
		}
		if rest, ok := strings.CutPrefix(line, "ENTRYPOINT "); ok {
			if err := json.Unmarshal([]byte(rest), &img.entrypoint); err != nil {
				t.Fatalf("Dockerfile: ENTRYPOINT %s is not in exec form: %v", rest, err)
			}
		}
	}
	if len(img.entrypoint) == 0 {
		t.Fatal("Dockerfile: no ENTRYPOINT")
	}
	return img
}

// runContainer starts argv in dir with exactly env, as a container gets it
// (none of the test's own environment), after checking that every value is
// local. leafd's log is shown if the test fails, and its exit before the
// test ends fails the test. The returned container is what a wait for it
// checks, to fail at once when it has exited.
func runContainer(t *testing.T, dir string, argv []string, env map[string]string) container {
	t.Helper()
	if !filepath.IsAbs(dir) || !strings.HasPrefix(dir, os.TempDir()) {
		t.Fatalf("working directory %q is not mapped to a temporary one", dir)
	}
	for i, a := range argv {
		mustBeLocal(t, fmt.Sprintf("argument %d", i), a)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = dir, []string{}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		mustBeLocal(t, k, env[k])
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("leafd's output:\n%s", stderr.String())
		}
	})
	t.Cleanup(func() {
		select {
		case err := <-exited:
			exited <- err
			t.Errorf("leafd exited: %v", err)
		default:
		}
	})
	return container{exited: exited}
}

// container is a started container.
type container struct{ exited chan error }

// running fails t if the container has exited; the zero container (a
// server of the test's own) always runs.
func (c container) running(t *testing.T, name string) {
	t.Helper()
	if c.exited == nil {
		return
	}
	select {
	case err := <-c.exited:
		c.exited <- err
		t.Fatalf("%s exited: %v", name, err)
	default:
	}
}

// budget is how long an orchestrator waits for a check: its start period
// plus period × failures.
func budget(start, period time.Duration, failures int) time.Duration {
	return start + period*time.Duration(max(failures, 1))
}

// composeDuration parses a compose duration ("5s"); empty is def.
func composeDuration(t *testing.T, s string, def time.Duration) time.Duration {
	t.Helper()
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("compose duration %q: %v", s, err)
	}
	return d
}

// healthy runs the compose healthcheck hc of service name, its command
// rewritten by r, as compose does (its interval, timeout and retries,
// after its start period) until it passes, and fails t if it never does.
func healthy(t *testing.T, name string, ctr container, hc *composeHealthcheck, r rewrite) {
	t.Helper()
	if hc == nil || len(hc.Test) < 2 || hc.Test[0] != "CMD" {
		t.Fatalf("%s: healthcheck %+v is not [CMD, ...]", name, hc)
	}
	local := slices.Collect(maps.Values(r))
	var argv []string
	for _, a := range hc.Test[1:] {
		a = r.apply(a)
		mustBeLocal(t, name+" healthcheck", a)
		// A port of the container that the test does not map would
		// check whatever listens there on this machine.
		for _, m := range loopbackRE.FindAllString(a, -1) {
			if !slices.Contains(local, m) {
				t.Fatalf("%s: healthcheck %v: %s is not a port the service listens on", name, hc.Test, m)
			}
		}
		argv = append(argv, a)
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		if testenv.Required() {
			t.Fatalf("%s: healthcheck: %v", name, err)
		}
		t.Skipf("%s: healthcheck: %v", name, err)
	}
	interval := composeDuration(t, hc.Interval, 30*time.Second)
	timeout := composeDuration(t, hc.Timeout, 30*time.Second)
	start := composeDuration(t, hc.StartPeriod, 0)
	var out []byte
	testenv.Eventually(t, name+"'s healthcheck "+strings.Join(argv, " "), budget(start, interval, hc.Retries), func() bool {
		ctr.running(t, name)
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		var err error
		if out, err = exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err == nil {
			return true
		}
		time.Sleep(min(interval, 200*time.Millisecond)) // not every 5ms: each try is a process
		return false
	})
	if out := bytes.TrimSpace(out); len(out) > 0 {
		t.Logf("%s: healthcheck passed: %s", name, out)
	}
}

// probeOK is a kubelet's httpGet verdict: 200-399 passes.
func probeOK(url string) bool {
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 400
}

// body is the body of GET url, or "" when it does not answer 200.
func body(url string) string {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return ""
	}
	return string(b)
}

// interpolate expands ${VAR}, ${VAR:?msg}, ${VAR?msg}, ${VAR:-def} and
// ${VAR-def} in s as docker compose does, from the environment (which
// compose fills from deploy/.env; the test sets the variables itself).
func interpolate(t *testing.T, s string) string {
	t.Helper()
	return composeVarRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := composeVarRE.FindStringSubmatch(m)
		v, set := os.LookupEnv(sub[1])
		op, colon := strings.CutPrefix(sub[2], ":")
		missing := !set || (colon && v == "")
		switch {
		case op == "" || !missing:
			return v
		case op[0] == '?':
			t.Fatalf("${%s}: %s", sub[1], op[1:])
		}
		return op[1:] // op[0] == '-'
	})
}

// mariadbLikeImage does on the dev MariaDB what the mariadb image does on
// the first start of compose service svc: the database MARIADB_DATABASE,
// the user MARIADB_USER with MARIADB_PASSWORD and every privilege on it,
// and the initdb scripts the service mounts (schema.sql). The server is
// shared, so the database and the user get names of their own: the
// returned function rewrites a DSN of the compose world to them, after
// checking that it names the service's user, password and database.
func mariadbLikeImage(t *testing.T, svc composeSvc) (addr string, rewriteDSN func(dsn string) string) {
	t.Helper()
	env := map[string]string{}
	for _, k := range []string{"MARIADB_DATABASE", "MARIADB_USER", "MARIADB_PASSWORD"} {
		if env[k] = interpolate(t, svc.Environment[k]); env[k] == "" {
			t.Fatalf("compose mariadb: no %s", k)
		}
	}
	root, err := mysql.ParseDSN(testenv.MySQL(t)) // a fresh database of its own
	if err != nil {
		t.Fatal(err)
	}
	root.MultiStatements = true
	db, err := sql.Open("mysql", root.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	user := testenv.RandomName("leaf_", 6)
	exec := func(q string) {
		t.Helper()
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("MariaDB: %v\n%.300s", err, q)
		}
	}
	exec(fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", user, env["MARIADB_PASSWORD"]))
	t.Cleanup(func() { _, _ = db.Exec(fmt.Sprintf("DROP USER '%s'@'%%'", user)) })
	exec(fmt.Sprintf("GRANT ALL ON `%s`.* TO '%s'@'%%'", root.DBName, user))
	var scripts []string // container path → file, run in name order as the image does
	files := map[string]string{}
	for _, v := range svc.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && strings.HasPrefix(parts[1], "/docker-entrypoint-initdb.d/") && strings.HasSuffix(parts[1], ".sql") {
			scripts = append(scripts, parts[1])
			files[parts[1]] = parts[0]
		}
	}
	slices.Sort(scripts)
	for _, s := range scripts {
		exec(string(repoFile(t, files[s])))
	}
	return root.Addr, func(dsn string) string {
		t.Helper()
		c, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatalf("LEAF_MYSQL: %v", err)
		}
		if c.User != env["MARIADB_USER"] || c.Passwd != env["MARIADB_PASSWORD"] || c.DBName != env["MARIADB_DATABASE"] {
			t.Fatalf("LEAF_MYSQL names user %q, database %q (and a password): the mariadb service makes user %q in database %q",
				c.User, c.DBName, env["MARIADB_USER"], env["MARIADB_DATABASE"])
		}
		c.User, c.DBName = user, root.DBName
		return c.FormatDSN()
	}
}

// podEnv is the environment Kubernetes gives container c of pod: the
// image's ENV, then each envFrom source in order, then env, which wins
// (its $(VAR) references expanded).
func podEnv(t *testing.T, c k8sContainer, pod string, objs map[string]k8sObject, imageEnv map[string]string) map[string]string {
	t.Helper()
	data := func(kind, name string) map[string]string {
		o, ok := objs[kind+"/"+name]
		if !ok {
			t.Fatalf("%s %s is not in the manifests", kind, name)
		}
		if kind != "Secret" {
			return o.Data
		}
		out := map[string]string{}
		for k, v := range o.Data {
			b, err := base64.StdEncoding.DecodeString(v)
			if err != nil {
				t.Fatalf("Secret %s: data %s: %v", name, k, err)
			}
			out[k] = string(b)
		}
		maps.Copy(out, o.StringData)
		return out
	}
	key := func(kind, name, k string) string {
		v, ok := data(kind, name)[k]
		if !ok {
			t.Fatalf("%s %s has no key %s", kind, name, k)
		}
		return v
	}
	env := maps.Clone(imageEnv)
	for _, ef := range c.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil:
			maps.Copy(env, data("ConfigMap", ef.ConfigMapRef.Name))
		case ef.SecretRef != nil:
			maps.Copy(env, data("Secret", ef.SecretRef.Name))
		}
	}
	for _, e := range c.Env {
		switch vf := e.ValueFrom; {
		case vf == nil:
			env[e.Name] = expandK8s(e.Value, env)
		case vf.FieldRef != nil && vf.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = pod
		case vf.SecretKeyRef != nil:
			env[e.Name] = key("Secret", vf.SecretKeyRef.Name, vf.SecretKeyRef.Key)
		case vf.ConfigMapKeyRef != nil:
			env[e.Name] = key("ConfigMap", vf.ConfigMapKeyRef.Name, vf.ConfigMapKeyRef.Key)
		default:
			t.Fatalf("env %s: a valueFrom this test cannot resolve", e.Name)
		}
	}
	return env
}

var k8sVarRE = regexp.MustCompile(`\$\((\w+)\)`)

// expandK8s expands $(VAR) from env as Kubernetes does in command, args
// and env values; an unknown reference stays as it is.
func expandK8s(s string, env map[string]string) string {
	return k8sVarRE.ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := env[m[2:len(m)-1]]; ok {
			return v
		}
		return m
	})
}

// containerPort resolves a probe's port, a name or a number, to the
// container's port number.
func containerPort(t *testing.T, c k8sContainer, port string) int {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == port {
			return p.ContainerPort
		}
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("probe port %q is not a port of the container", port)
	}
	return n
}

// The leafd of docker-compose.yml and of k8s/, started with exactly their
// image, environment and arguments against this machine's NATS cluster
// (the shipped nats/*.conf), MariaDB and ZooKeeper: NATS's healthchecks,
// leafd's healthcheck and each probe answer as the manifest expects, the
// ports line up, auto-create is off, a client cannot create a tag, an
// admin can, and a client then gets its ids.
func TestManifestsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts leafd")
	}
	testenv.MySQL(t) // skip (or, in CI, fail) before building anything
	zkAddr := testenv.ZooKeeper(t)
	setNATSPasswords(t)
	servers := startNATSCluster(t, &violationLog{})
	leafd, leafctl := testenv.Build(t, "cmd/leafd"), testenv.Build(t, "cmd/leafctl")
	img := readImage(t)
	// The image's binaries.
	binaries := rewrite{"/usr/local/bin/leafd": leafd, "/usr/local/bin/leafctl": leafctl}

	ctl := func(user string, args ...string) (string, error) {
		out, err := exec.Command(leafctl, append([]string{"--nats", urlsFor(servers, user)}, args...)...).CombinedOutput()
		return string(out), err
	}
	servesIDs := func(t *testing.T, tag string) {
		t.Helper()
		if out, err := ctl("client", "next", tag); err == nil || !strings.Contains(out, "404") {
			t.Fatalf("next %s before it was created: %v %s (auto-create must be off)", tag, err, out)
		}
		if out, err := ctl("client", "tag", "create", tag); err == nil {
			t.Fatalf("a client created a tag: %s (leaf.admin.> is the admin's)", out)
		}
		if out, err := ctl("admin", "tag", "create", tag); err != nil {
			t.Fatalf("admin tag create %s: %v %s", tag, err, out)
		}
		// Each node serves the segments it loads: increasing, not 1, 2, 3.
		out, err := ctl("client", "next", tag, "-n", "3")
		var ids []int64
		for _, f := range strings.Fields(out) {
			id, err := strconv.ParseInt(f, 10, 64)
			if err != nil || (len(ids) > 0 && id <= ids[len(ids)-1]) || id <= 0 {
				break
			}
			ids = append(ids, id)
		}
		if err != nil || len(ids) != 3 {
			t.Fatalf("client next %s -n 3: %v %q", tag, err, out)
		}
		// A new worker znode waits out a holder that may have stopped a
		// moment before (2.5 s by default, docs/fault-model.md) while the
		// node is ready for its tags: the client asks again meanwhile.
		if out, err := ctl("client", "snowflake", "-n", "2", "--timeout", "10s"); err != nil || len(strings.Fields(out)) != 2 {
			t.Fatalf("client snowflake: %v %q", err, out)
		}
	}

	t.Run("compose", func(t *testing.T) {
		c := loadCompose(t)
		// What compose reads from deploy/.env: the NATS passwords the
		// servers have (setNATSPasswords) and the MariaDB ones.
		t.Setenv("MARIADB_PASSWORD", "mariadb-test-pw")
		t.Setenv("MARIADB_ROOT_PASSWORD", "unused-root-pw")

		var leafds []string // the services of leafd's image
		for _, name := range slices.Sorted(maps.Keys(c.Services)) {
			if c.Services[name].Build.Dockerfile == "deploy/Dockerfile" {
				leafds = append(leafds, name)
			}
		}
		if len(leafds) == 0 {
			t.Fatal("no service is built from deploy/Dockerfile")
		}

		// The compose world: service host names and the ports their
		// images listen on, leafd's included (LEAF_ZK_ADDR names them).
		world := rewrite{"zookeeper:2181": zkAddr}
		for i, s := range servers {
			world[fmt.Sprintf("%s:%d", c.Services[fmt.Sprintf("nats-%d", i+1)].Hostname, parseNATS(t, natsConfigs[i]).Port)] = hostPort(t, s.ClientURL())
		}
		mysqlAddr, rewriteDSN := mariadbLikeImage(t, c.Services["mariadb"])
		world["mariadb:3306"] = mysqlAddr
		own := map[string]rewrite{} // each leafd's HTTP port, from inside its container and by its host name
		for _, name := range leafds {
			svc := c.Services[name]
			leafHTTP := cmp.Or(svc.Environment["LEAF_HTTP"], img.env["LEAF_HTTP"])
			local := freeAddr(t)
			own[name] = httpRewrite(t, leafHTTP, svc.Hostname, local)
			_, port, _ := net.SplitHostPort(leafHTTP)
			world[net.JoinHostPort(svc.Hostname, port)] = local
		}
		// The one value mapped by name: the leafd's namespace on the shared
		// ZooKeeper, so that each run registers workers of its own.
		zkName := testenv.RandomName("compose", 4)

		// depends_on: NATS healthy first, by its own healthcheck (the
		// monitoring port of nats-N.conf, 127.0.0.1:8222 in the container).
		for i, s := range servers {
			name := fmt.Sprintf("nats-%d", i+1)
			t.Run(name+" healthcheck", func(t *testing.T) {
				mon := parseNATS(t, natsConfigs[i]).HTTPPort
				local := s.MonitorAddr().String()
				healthy(t, name, container{}, c.Services[name].Healthcheck, rewrite{
					fmt.Sprintf("127.0.0.1:%d", mon): local,
					fmt.Sprintf("localhost:%d", mon): local,
				})
			})
		}

		ctrs := map[string]container{}
		for _, name := range leafds {
			svc := c.Services[name]
			env := maps.Clone(img.env)
			for k, v := range svc.Environment {
				env[k] = interpolate(t, v)
			}
			r := world.add(binaries).add(own[name]).
				add(rewrite{"/var/lib/leafd": t.TempDir()}) // the image's data directory
			if v, ok := env["LEAF_MYSQL"]; ok {
				env["LEAF_MYSQL"] = rewriteDSN(v)
			}
			for k, v := range env {
				env[k] = r.apply(v)
			}
			if _, ok := env["LEAF_ZK_NAME"]; ok {
				env["LEAF_ZK_NAME"] = zkName
			}
			argv := append(orElse(svc.Entrypoint, img.entrypoint), svc.Command...)
			for i := range argv {
				argv[i] = r.apply(argv[i])
			}
			ctrs[name] = runContainer(t, r.apply(img.workdir), argv, env)
		}
		for _, name := range leafds {
			svc := c.Services[name]
			r := world.add(binaries).add(own[name])
			healthy(t, name, ctrs[name], svc.Healthcheck, r)
			for _, p := range svc.Ports {
				hostIP, rest, _ := strings.Cut(p, ":")
				hostPort, cport, _ := strings.Cut(rest, ":")
				mapped := r.apply("127.0.0.1:" + cport)
				if !slices.Contains(slices.Collect(maps.Values(own[name])), mapped) || !probeOK("http://"+mapped+"/healthz") {
					t.Errorf("%s: ports %q: %s:%s does not reach leafd's HTTP port (LEAF_HTTP %s)", name, p, hostIP, hostPort, svc.Environment["LEAF_HTTP"])
				}
			}
		}
		servesIDs(t, "compose")
	})

	t.Run("k8s", func(t *testing.T) {
		objs := map[string]k8sObject{}
		for _, f := range []string{"configmap.yaml", "secret.example.yaml", "statefulset.yaml"} {
			for _, o := range loadK8s(t, f) {
				objs[o.Kind+"/"+o.Metadata.Name] = o
			}
		}
		sts := readStatefulSet(t)
		c := sts.container
		type podRun struct {
			name, local, leafHTTP string
			ctr                   container
		}
		var pods []podRun
		for i := range sts.replicas {
			pod := fmt.Sprintf("%s-%d", sts.name, i) // a StatefulSet's pod names
			env := podEnv(t, c, pod, objs, img.env)
			run := podRun{name: pod, local: freeAddr(t), leafHTTP: env["LEAF_HTTP"]}
			r := binaries.add(httpRewrite(t, env["LEAF_HTTP"], pod, run.local)).add(rewrite{
				// The NATS Service in front of the cluster.
				"nats.nats.svc.cluster.local:4222": hostPort(t, servers[i%len(servers)].ClientURL()),
				"/var/lib/leafd":                   t.TempDir(), // the pod's data claim
			})
			// secret.example.yaml's placeholder stands for the password the
			// NATS servers have for the URL's user.
			for _, u := range []string{"leafd", "client", "admin"} {
				r[u+":CHANGE_ME@"] = u + ":" + natsPasswords["NATS_"+strings.ToUpper(u)+"_PASSWORD"] + "@"
			}
			argv := orElse(c.Command, img.entrypoint)
			for _, a := range c.Args {
				argv = append(argv, expandK8s(a, env))
			}
			for i := range argv {
				argv[i] = r.apply(argv[i])
			}
			for k, v := range env {
				env[k] = r.apply(v)
			}
			run.ctr = runContainer(t, r.apply(img.workdir), argv, env)
			pods = append(pods, run)
		}

		for _, pod := range pods {
			probe := func(kind string, p *k8sProbe) string {
				t.Helper()
				if p == nil {
					t.Fatalf("no %s probe", kind)
				}
				addr := fmt.Sprintf("127.0.0.1:%d", containerPort(t, c, p.HTTPGet.Port))
				if httpRewrite(t, pod.leafHTTP, pod.name, pod.local).apply(addr) != pod.local {
					t.Fatalf("%s probe port %s (%s) is not leafd's HTTP port (LEAF_HTTP %s)", kind, p.HTTPGet.Port, addr, pod.leafHTTP)
				}
				return "http://" + pod.local + p.HTTPGet.Path
			}
			startup := c.StartupProbe
			if startup == nil {
				t.Fatal("no startup probe")
			}
			// The kubelet's patience with a starting pod (its default period is 10 s).
			within := budget(0, time.Duration(cmp.Or(startup.PeriodSeconds, 10))*time.Second, cmp.Or(startup.FailureThreshold, 3))
			testenv.Eventually(t, pod.name+"'s startup probe", within, func() bool {
				pod.ctr.running(t, pod.name)
				return probeOK(probe("startup", startup))
			})
			testenv.Eventually(t, pod.name+"'s readiness probe", within, func() bool {
				pod.ctr.running(t, pod.name)
				return probeOK(probe("readiness", c.ReadinessProbe))
			})
			if url := probe("liveness", c.LivenessProbe); !probeOK(url) {
				t.Fatalf("%s: liveness probe %s fails on a serving pod", pod.name, url)
			}
			if m := body("http://" + pod.local + "/metrics"); !strings.Contains(m, `node="`+pod.name+`"`) {
				t.Errorf("%s does not carry its pod's name (LEAF_NAME from metadata.name) in leafmq_build_info", pod.name)
			}
		}
		servesIDs(t, "kube")
	})
}

// orElse is a copy of an override (compose's entrypoint, a container's
// command) if the manifest has one, else of the image's.
func orElse(override, image []string) []string {
	if len(override) > 0 {
		return slices.Clone(override)
	}
	return slices.Clone(image)
}

// hostPort is the host:port of a URL such as nats://127.0.0.1:4222.
func hostPort(t *testing.T, u string) string {
	t.Helper()
	_, rest, ok := strings.Cut(u, "://")
	if !ok {
		t.Fatalf("%q is not a URL", u)
	}
	return strings.TrimSuffix(rest, "/")
}

// statefulSet is what the test runs of k8s/statefulset.yaml.
type statefulSet struct {
	name      string
	replicas  int
	container k8sContainer
}

// readStatefulSet reads leafd's StatefulSet (one container) from
// k8s/statefulset.yaml.
func readStatefulSet(t *testing.T) statefulSet {
	t.Helper()
	for _, o := range loadK8s(t, "statefulset.yaml") {
		if o.Kind != "StatefulSet" {
			continue
		}
		var spec struct {
			Replicas *int
			Template struct {
				Spec struct{ Containers []k8sContainer }
			}
		}
		decodeSpec(t, o, &spec)
		if len(spec.Template.Spec.Containers) == 1 {
			replicas := 1 // Kubernetes' default
			if spec.Replicas != nil {
				replicas = *spec.Replicas
			}
			return statefulSet{name: o.Metadata.Name, replicas: replicas, container: spec.Template.Spec.Containers[0]}
		}
	}
	t.Fatal("k8s/statefulset.yaml: no StatefulSet with one container")
	return statefulSet{}
}
