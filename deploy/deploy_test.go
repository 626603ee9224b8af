// Package deploy_test checks the files under deploy/ with the tools that run
// here: the NATS configs with nats-server's own parser and a real 3-node
// cluster, the Prometheus files with promtool and a real Prometheus, the
// ZooKeeper config with a real ZooKeeper, and the rest (compose, Kubernetes,
// systemd, Dockerfile, Grafana) statically against leafd's flags and the
// metrics it exports. Docker is not available on the test machines, so the
// images themselves are never built here.
package deploy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/freeport"
	"github.com/leafmq/leafmq/node"
	"github.com/leafmq/leafmq/pool"
	"github.com/leafmq/leafmq/wire"
)

// natsPasswords are the environment variables accounts.conf reads, with the
// values the tests give them.
var natsPasswords = map[string]string{
	"NATS_LEAFD_PASSWORD":  "leafd-test-pw",
	"NATS_CLIENT_PASSWORD": "client-test-pw",
	"NATS_ADMIN_PASSWORD":  "admin-test-pw",
	"NATS_SYS_PASSWORD":    "sys-test-pw",
}

var natsConfigs = []string{"nats/nats-1.conf", "nats/nats-2.conf", "nats/nats-3.conf"}

func setNATSPasswords(t *testing.T) {
	for k, v := range natsPasswords {
		t.Setenv(k, v)
	}
}

// parseNATS parses one of deploy/nats/*.conf with nats-server's own loader.
func parseNATS(t *testing.T, file string) *server.Options {
	t.Helper()
	o, err := server.ProcessConfigFile(file)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return o
}

// userPerms returns the permissions of user in o, or fails.
func userPerms(t *testing.T, o *server.Options, user string) (account string, perms *server.Permissions, password string) {
	t.Helper()
	for _, u := range o.Users {
		if u.Username == user {
			if u.Account == nil {
				t.Fatalf("user %s has no account", user)
			}
			return u.Account.Name, u.Permissions, u.Password
		}
	}
	t.Fatalf("no user %s", user)
	return "", nil, ""
}

func TestNATSConfigsParse(t *testing.T) {
	setNATSPasswords(t)
	for i, file := range natsConfigs {
		t.Run(file, func(t *testing.T) {
			o := parseNATS(t, file)
			if want := fmt.Sprintf("nats-%d", i+1); o.ServerName != want {
				t.Errorf("server_name %q, want %q", o.ServerName, want)
			}
			if !o.JetStream || o.StoreDir == "" {
				t.Errorf("jetstream %v, store_dir %q: want JetStream with a store", o.JetStream, o.StoreDir)
			}
			if o.Cluster.Name != "leafmq" || o.Cluster.Port != 6222 || o.Port != 4222 {
				t.Errorf("cluster %q port %d, client port %d", o.Cluster.Name, o.Cluster.Port, o.Port)
			}
			var routes []string
			for _, r := range o.Routes {
				routes = append(routes, r.Host)
			}
			if want := []string{"nats-1:6222", "nats-2:6222", "nats-3:6222"}; !slices.Equal(routes, want) {
				t.Errorf("routes %v, want %v", routes, want)
			}
			if o.SystemAccount != "SYS" {
				t.Errorf("system_account %q", o.SystemAccount)
			}
			// A frozen server's routes are given up within ~3 s
			// (docs/fault-model.md, "A server freezes").
			if c := o.Cluster; c.PingInterval != time.Second || c.MaxPingsOut != 2 || c.WriteDeadline != 2*time.Second ||
				c.WriteTimeout != server.WriteTimeoutPolicyClose {
				t.Errorf("cluster ping_interval %v, ping_max %d, write_deadline %v, write_timeout %v: want 1s, 2, 2s, close",
					c.PingInterval, c.MaxPingsOut, c.WriteDeadline, c.WriteTimeout)
			}
			for _, u := range []string{"leafd", "client", "admin"} {
				acc, perms, pw := userPerms(t, o, u)
				if acc != "LEAF" || perms == nil || perms.Publish == nil || perms.Subscribe == nil {
					t.Errorf("user %s: account %q, permissions %+v", u, acc, perms)
				}
				if want := natsPasswords["NATS_"+strings.ToUpper(u)+"_PASSWORD"]; pw != want {
					t.Errorf("user %s: password %q, want %q from the environment", u, pw, want)
				}
			}
		})
	}
	// The configs of the three servers differ only in the server number.
	norm := func(i int) string {
		b := string(repoFile(t, natsConfigs[i]))
		return strings.NewReplacer(
			fmt.Sprintf("server_name: nats-%d", i+1), "server_name: nats-N",
			fmt.Sprintf("server %d of 3", i+1), "server N of 3",
			fmt.Sprintf("nats-%d.conf", i+1), "nats-N.conf",
			fmt.Sprintf("nats-%d.nats.", i), "nats-M.nats.",
		).Replace(b)
	}
	for i := 1; i < len(natsConfigs); i++ {
		if a, b := norm(0), norm(i); a != b {
			t.Errorf("%s differs from %s by more than the server number", natsConfigs[i], natsConfigs[0])
		}
	}
}

// A password left unset must stop the server, not start it without one.
func TestNATSConfigNeedsPasswords(t *testing.T) {
	setNATSPasswords(t)
	os.Unsetenv("NATS_CLIENT_PASSWORD") // t.Setenv restores it
	if _, err := server.ProcessConfigFile(natsConfigs[0]); err == nil || !strings.Contains(err.Error(), "NATS_CLIENT_PASSWORD") {
		t.Fatalf("config parsed without NATS_CLIENT_PASSWORD: %v", err)
	}
}

// violationLog keeps the servers' "Permissions Violation" errors.
type violationLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *violationLog) Errorf(format string, v ...any) {
	if s := fmt.Sprintf(format, v...); strings.Contains(s, "Violation") {
		l.mu.Lock()
		l.lines = append(l.lines, s)
		l.mu.Unlock()
	}
}
func (l *violationLog) Noticef(string, ...any) {}
func (l *violationLog) Warnf(string, ...any)   {}
func (l *violationLog) Fatalf(string, ...any)  {}
func (l *violationLog) Debugf(string, ...any)  {}
func (l *violationLog) Tracef(string, ...any)  {}

func (l *violationLog) matching(sub string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.lines {
		if strings.Contains(s, sub) {
			out = append(out, s)
		}
	}
	return out
}

// startNATSCluster starts the three servers of deploy/nats from their own
// configs, moved to free 127.0.0.1 ports (clients, routes and, where the
// config has it, monitoring) and a temp store, and waits until they route
// to each other and JetStream has a meta leader.
func startNATSCluster(t *testing.T, log *violationLog) []*server.Server {
	t.Helper()
	ports := freePorts(t, 9)
	var routes []*url.URL
	for i := range natsConfigs {
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", ports[3+i])})
	}
	var servers []*server.Server
	for i, file := range natsConfigs {
		o := parseNATS(t, file)
		o.Host, o.Port = "127.0.0.1", ports[i]
		if o.HTTPPort != 0 {
			o.HTTPHost, o.HTTPPort = "127.0.0.1", ports[6+i]
		}
		o.StoreDir = t.TempDir()
		o.Cluster.Host, o.Cluster.Port = "127.0.0.1", ports[3+i]
		o.Routes = routes
		o.NoSigs = true
		o.LameDuckDuration, o.LameDuckGracePeriod = 0, 0
		ns, err := server.NewServer(o)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		ns.SetLoggerV2(log, false, false, false)
		t.Cleanup(func() {
			ns.Shutdown()
			ns.WaitForShutdown()
		})
		go ns.Start()
		if !ns.ReadyForConnections(10 * time.Second) {
			t.Fatalf("%s: not ready", file)
		}
		servers = append(servers, ns)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !clusterReady(servers) {
		if time.Now().After(deadline) {
			t.Fatal("the 3-node cluster did not form with a JetStream meta leader within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return servers
}

func clusterReady(servers []*server.Server) bool {
	leaders := 0
	for _, s := range servers {
		if s.NumRoutes() < len(servers)-1 || !s.JetStreamIsCurrent() || !s.JetStreamIsClustered() {
			return false
		}
		if s.JetStreamIsLeader() {
			leaders++
			if len(s.JetStreamClusterPeers()) != len(servers) {
				return false
			}
		}
	}
	return leaders == 1
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports, err := freeport.Take(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// urlsFor returns the cluster's client URLs with user's credentials in them,
// the way leafd takes them in --nats.
func urlsFor(servers []*server.Server, user string) string {
	var urls []string
	for _, s := range servers {
		u, _ := url.Parse(s.ClientURL())
		u.User = url.UserPassword(user, natsPasswords["NATS_"+strings.ToUpper(user)+"_PASSWORD"])
		urls = append(urls, u.String())
	}
	return strings.Join(urls, ",")
}

// connectAs connects as user and returns the connection and a channel of its
// asynchronous errors (permission violations arrive there).
func connectAs(t *testing.T, servers []*server.Server, user string) (*nats.Conn, <-chan error) {
	t.Helper()
	errs := make(chan error, 16)
	nc, err := nats.Connect(urlsFor(servers, user), nats.Name("deploy-test-"+user),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

// wantViolation waits for a permissions violation naming subject.
func wantViolation(t *testing.T, errs <-chan error, subject string) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case err := <-errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), subject) {
				return
			}
			t.Logf("other async error: %v", err)
		case <-timeout:
			t.Fatalf("no permissions violation for %q", subject)
		}
	}
}

func request(nc *nats.Conn, subject string, body []byte) ([]byte, error) {
	reply, err := nc.Request(subject, body, 10*time.Second)
	if err != nil {
		return nil, err
	}
	if err := wire.ReplyError(reply); err != nil {
		return nil, err
	}
	return reply.Data, nil
}

// TestNATSClusterPermissions runs deploy/nats as a real 3-node JetStream
// cluster, puts a real leafd on it as user leafd (3 KV replicas), and checks
// each user gets what accounts.conf promises, and nothing more.
func TestNATSClusterPermissions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	setNATSPasswords(t)
	log := &violationLog{}
	servers := startNATSCluster(t, log)

	const nodeName = "deploy-leafd"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, err := node.Start(ctx, config.Config{
		Name:    nodeName,
		NATS:    config.NATSConfig{URL: urlsFor(servers, "leafd")},
		Store:   config.StoreConfig{KVReplicas: 3},
		HTTP:    config.HTTPConfig{Addr: "off"},
		DataDir: t.TempDir(),
		Pool:    config.PoolConfig{Tags: "demo,snowflake", Depth: 4, Batch: 10},
	}, nil)
	if err != nil {
		t.Fatalf("leafd as user leafd: %v", err)
	}
	t.Cleanup(func() { _ = n.Close(context.Background()) })

	client, clientErrs := connectAs(t, servers, "client")
	admin, adminErrs := connectAs(t, servers, "admin")

	t.Run("client takes ids", func(t *testing.T) {
		for _, subj := range []string{wire.SegmentPrefix + "demo", "leaf.snowflake", "leaf.snowflake.orders"} {
			var data []byte
			var err error
			// The snowflake source may still be waiting for its first lease.
			for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				if data, err = request(client, subj, []byte("3")); err == nil || time.Now().After(deadline) {
					break
				}
			}
			if err != nil {
				t.Fatalf("client %s: %v", subj, err)
			}
			if ids, err := wire.DecodeIDs(nil, data, false); err != nil || len(ids) != 3 {
				t.Fatalf("client %s: %q: %v", subj, data, err)
			}
		}
		if _, err := client.Subscribe("leaf.events.>", func(*nats.Msg) {}); err != nil {
			t.Fatal(err)
		}
		if err := client.Flush(); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("client takes batches from the pool", func(t *testing.T) {
		js, err := jetstream.New(client)
		if err != nil {
			t.Fatal(err)
		}
		for _, subject := range []string{pool.SegmentSubject("demo"), pool.SnowflakeSubject} {
			ids, err := pool.Take(context.Background(), js, subject, 10*time.Second)
			if err != nil || len(ids) != 10 {
				t.Fatalf("client pool %s: %v, %v", subject, ids, err)
			}
		}
	})

	t.Run("client denied admin", func(t *testing.T) {
		body, _ := json.Marshal(wire.AdminRequest{Tag: "sneaky", Step: 10})
		if _, err := client.Request("leaf.admin.tag.create", body, 500*time.Millisecond); err == nil {
			t.Fatal("client created a tag")
		}
		wantViolation(t, clientErrs, "leaf.admin.tag.create")
	})

	// Every admin subject of the protocol: the server refuses each to a
	// client and lets the admin through (the admin's violations are
	// checked at the end).
	adminSubjects := []string{wire.TagsSubject, wire.TagCreateSubject, wire.TagStepSubject, wire.TagMaxSubject,
		wire.TagRestartSubject, wire.TagDecodeSubject, wire.StatusSubject, wire.TimeSubject, wire.FloorsSubject, wire.FloorPrefix + "demo",
		wire.TagChangedPrefix + "demo"}
	t.Run("client denied every admin subject", func(t *testing.T) {
		for _, subj := range adminSubjects {
			if err := client.Publish(subj, nil); err != nil {
				t.Fatal(err)
			}
			wantViolation(t, clientErrs, subj)
		}
	})
	t.Run("admin reaches every admin subject", func(t *testing.T) {
		for _, subj := range adminSubjects {
			if err := admin.Publish(subj, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := admin.Flush(); err != nil {
			t.Fatal(err)
		}
		if _, err := request(admin, wire.TagsSubject, nil); err != nil {
			t.Fatalf("admin %s: %v", wire.TagsSubject, err)
		}
	})

	t.Run("client takes ids of a monotonic tag", func(t *testing.T) {
		// leafd leads the tag through the leaf_mono bucket (user leafd's
		// $KV.leaf_mono.>) and answers leaf.mono.<tag> to a client.
		body, _ := json.Marshal(wire.AdminRequest{Tag: "ticks", Mode: "mono"})
		if _, err := request(admin, wire.TagCreateSubject, body); err != nil {
			t.Fatalf("admin creates a mono tag: %v", err)
		}
		var data []byte
		var err error
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if data, err = request(client, wire.MonoPrefix+"ticks", []byte("3")); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Fatalf("client %sticks: %v", wire.MonoPrefix, err)
		}
		if ids, err := wire.DecodeIDs(nil, data, false); err != nil || len(ids) != 3 || ids[0] >= ids[1] || ids[1] >= ids[2] {
			t.Fatalf("client %sticks: %q: %v", wire.MonoPrefix, data, err)
		}
	})

	t.Run("client denied the KV store", func(t *testing.T) {
		if err := client.Publish("$KV.leaf_alloc.demo", []byte("{}")); err != nil {
			t.Fatal(err)
		}
		wantViolation(t, clientErrs, "$KV.leaf_alloc.demo")
		if _, err := client.Request("$JS.API.INFO", nil, 500*time.Millisecond); err == nil {
			t.Fatal("client reached the JetStream API")
		}
		wantViolation(t, clientErrs, "$JS.API.INFO")
	})

	t.Run("client denied snooping requests", func(t *testing.T) {
		if _, err := client.Subscribe("leaf.segment.>", func(*nats.Msg) {}); err != nil {
			t.Fatal(err)
		}
		wantViolation(t, clientErrs, "leaf.segment.>")
	})

	t.Run("admin creates a tag", func(t *testing.T) {
		body, _ := json.Marshal(wire.AdminRequest{Tag: "orders", Step: 100, MaxID: 1000})
		data, err := request(admin, "leaf.admin.tag.create", body)
		if err != nil {
			t.Fatalf("admin tag create: %v", err)
		}
		var row wire.TagRow
		if err := json.Unmarshal(data, &row); err != nil || row.Tag != "orders" || row.Step != 100 {
			t.Fatalf("row %s: %v", data, err)
		}
		got, err := request(client, wire.SegmentPrefix+"orders", nil)
		if err != nil || string(got) != "1000" {
			t.Fatalf("client's first id of the new tag: %q, %v; want 1000", got, err)
		}
		// nats micro ls: $SRV.PING answered by the leafd node.
		if _, err := admin.Request("$SRV.PING", nil, 5*time.Second); err != nil {
			t.Fatalf("admin $SRV.PING: %v", err)
		}
		select {
		case err := <-adminErrs:
			t.Fatalf("admin got an async error: %v", err)
		default:
		}
	})

	if lines := log.matching(nodeName); len(lines) > 0 {
		t.Fatalf("leafd ran into permissions it lacks:\n%s", strings.Join(lines, "\n"))
	}
	if lines := log.matching("deploy-test-admin"); len(lines) > 0 {
		t.Fatalf("admin ran into permissions it lacks:\n%s", strings.Join(lines, "\n"))
	}
	if lines, want := log.matching("deploy-test-client"), 4+len(adminSubjects); len(lines) != want {
		t.Errorf("client violations: %d, want the %d provoked:\n%s", len(lines), want, strings.Join(lines, "\n"))
	}
}

// repoFile reads a file relative to deploy/.
func repoFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.FromSlash(path))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
