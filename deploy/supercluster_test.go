package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.yaml.in/yaml/v3"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/node"
	"github.com/leafmq/leafmq/pool"
	"github.com/leafmq/leafmq/wire"
)

// superConfigs are the example supercluster's servers, one per region.
var superConfigs = []string{"nats/supercluster/r0.conf", "nats/supercluster/r1.conf"}

// superPasswords are the supercluster accounts' variables beyond natsPasswords.
var superPasswords = map[string]string{
	"NATS_LEAFD_R0_PASSWORD": "leafd-r0-test-pw",
	"NATS_LEAFD_R1_PASSWORD": "leafd-r1-test-pw",
}

func setSuperPasswords(t *testing.T) {
	setNATSPasswords(t)
	for k, v := range superPasswords {
		t.Setenv(k, v)
	}
}

func TestSuperClusterConfigsParse(t *testing.T) {
	setSuperPasswords(t)
	for i, file := range superConfigs {
		region := fmt.Sprintf("r%d", i)
		o := parseNATS(t, file)
		if o.ServerName != region+"-nats-1" || !o.JetStream || o.StoreDir == "" {
			t.Errorf("%s: server_name %q, jetstream %v, store_dir %q", file, o.ServerName, o.JetStream, o.StoreDir)
		}
		if o.Cluster.Name != region || o.Gateway.Name != region || o.Gateway.Port != 7222 {
			t.Errorf("%s: cluster %q, gateway %q port %d: want both named %s", file, o.Cluster.Name, o.Gateway.Name, o.Gateway.Port, region)
		}
		var gws []string
		for _, g := range o.Gateway.Gateways {
			gws = append(gws, g.Name)
		}
		if !slices.Equal(gws, []string{"r0", "r1"}) {
			t.Errorf("%s: gateways %v, want every region's", file, gws)
		}
		for _, u := range []string{"leafd_r0", "leafd_r1", "client", "admin"} {
			if acc, perms, pw := userPerms(t, o, u); acc != "LEAF" || perms == nil || pw == "" {
				t.Errorf("%s: user %s: account %q, permissions %+v", file, u, acc, perms)
			}
		}
	}
	// The regions' files differ only in the region's name (the gateways'
	// lines, one per region, in any order).
	norm := func(i int) string {
		b := strings.NewReplacer(fmt.Sprintf("r%d", i), "rX", fmt.Sprintf("r%d", 1-i), "rY").Replace(string(repoFile(t, superConfigs[i])))
		lines := strings.Split(b, "\n")
		slices.Sort(lines)
		return strings.Join(lines, "\n")
	}
	if norm(0) != norm(1) {
		t.Errorf("%s and %s differ by more than the region", superConfigs[0], superConfigs[1])
	}
}

// startSuperCluster starts deploy/nats/supercluster's servers from their
// own configs, one server per region, moved to free 127.0.0.1 ports
// (clients, monitoring, the route to itself a lone server of a
// supercluster needs for JetStream, the gateway and the gateways' URLs),
// and waits until each has a gateway to the other and JetStream has a
// meta leader that sees both.
func startSuperCluster(t *testing.T, log *violationLog) []*server.Server {
	t.Helper()
	n := len(superConfigs)
	ports := freePorts(t, 4*n) // client, route, gateway, monitoring
	gwURL := func(i int) *url.URL { return &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*n+i])} }
	var servers []*server.Server
	for i, file := range superConfigs {
		o := parseNATS(t, file)
		o.Host, o.Port = "127.0.0.1", ports[i]
		o.HTTPHost, o.HTTPPort = "127.0.0.1", ports[3*n+i]
		o.StoreDir = t.TempDir()
		o.Cluster.Host, o.Cluster.Port = "127.0.0.1", ports[n+i]
		o.Routes = []*url.URL{{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", ports[n+i])}}
		o.Gateway.Host, o.Gateway.Port = "127.0.0.1", ports[2*n+i]
		for _, g := range o.Gateway.Gateways {
			var r int
			if _, err := fmt.Sscanf(g.Name, "r%d", &r); err != nil || r >= n {
				t.Fatalf("%s: gateway %q", file, g.Name)
			}
			g.URLs = []*url.URL{gwURL(r)}
		}
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
	ready := func() bool {
		var leader *server.Server
		for _, s := range servers {
			if s.NumOutboundGateways() < n-1 || !s.JetStreamIsCurrent() {
				return false
			}
			if s.JetStreamIsLeader() {
				leader = s
			}
		}
		return leader != nil && len(leader.JetStreamClusterPeers()) == n
	}
	for deadline := time.Now().Add(30 * time.Second); !ready(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the supercluster did not form with a JetStream meta leader within 30s")
		}
	}
	return servers
}

// userURL is s's client URL with user's credentials in it.
func userURL(s *server.Server, user string) string {
	u, _ := url.Parse(s.ClientURL())
	pw := natsPasswords["NATS_"+strings.ToUpper(user)+"_PASSWORD"]
	if p, ok := superPasswords["NATS_"+strings.ToUpper(user)+"_PASSWORD"]; ok {
		pw = p
	}
	u.User = url.UserPassword(user, pw)
	return u.String()
}

// TestSuperClusterPermissions runs deploy/nats/supercluster as two
// regions of one server each, puts a leafd on each region as its region's
// user (--regions 2, KV store, worker ids and a pool in the region's
// buckets), and checks that each serves ids of its region and fills its
// region's pool without a permission it lacks, and that a region's user
// is refused the other region's buckets, stream and subjects.
func TestSuperClusterPermissions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a supercluster of two regions")
	}
	setSuperPasswords(t)
	log := &violationLog{}
	servers := startSuperCluster(t, log)
	for i, s := range servers {
		region := fmt.Sprintf("r%d", i)
		cfg := config.Config{
			Name:     "deploy-leafd-" + region,
			NATS:     config.NATSConfig{URL: userURL(s, "leafd_"+region)},
			Registry: config.RegistryConfig{Kind: config.RegistryKV},
			HTTP:     config.HTTPConfig{Addr: "off"},
			DataDir:  t.TempDir(),
			Pool:     config.PoolConfig{Tags: "demo,snowflake", Depth: 4, Batch: 10},
		}
		cfg.Region.Count, cfg.Region.Name = 2, region
		cfg.Region.SetID(i)
		cfg.Store.AutoCreate = "true" // a deployment that starts with its regions
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		n, err := node.Start(ctx, cfg, nil)
		cancel()
		if err != nil {
			t.Fatalf("leafd of %s as user leafd_%s: %v", region, region, err)
		}
		t.Cleanup(func() { _ = n.Close(context.Background()) })
	}

	for i, s := range servers {
		region := fmt.Sprintf("r%d", i)
		client, err := nats.Connect(userURL(s, "client"), nats.Name("deploy-test-client-"+region))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(client.Close)
		var data []byte
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if data, err = request(client, wire.SegmentPrefix+"demo", []byte("3")); err == nil || time.Now().After(deadline) {
				break
			}
		}
		ids, derr := wire.DecodeIDs(nil, data, false)
		if err != nil || derr != nil || len(ids) != 3 {
			t.Fatalf("client in %s: %q, %v, %v", region, data, err, derr)
		}
		for _, id := range ids {
			if id%2 != int64(i) {
				t.Errorf("client in %s: id %d of another region (the queue group answers from the caller's cluster first)", region, id)
			}
		}
		js, err := jetstream.New(client)
		if err != nil {
			t.Fatal(err)
		}
		for _, subject := range []string{pool.SegmentSubjectIn(wire.Scope(region), "demo"), pool.SnowflakeSubjectIn(wire.Scope(region))} {
			ids, err := pool.Take(context.Background(), js, subject, 10*time.Second)
			if err != nil || len(ids) != 10 {
				t.Fatalf("client in %s: pool %s: %v, %v", region, subject, ids, err)
			}
		}
	}

	// An operator connected to one region hears every region's nodes on
	// leaf.regions.
	admin, err := nats.Connect(userURL(servers[0], "admin"), nats.Name("deploy-test-admin"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	inbox := admin.NewRespInbox()
	replies, err := admin.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.PublishRequest(wire.RegionsSubject, inbox, nil); err != nil {
		t.Fatal(err)
	}
	regions := map[string]bool{}
	for len(regions) < len(servers) {
		m, err := replies.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("leaf.regions: %v after %v", err, regions)
		}
		var r struct{ Region string }
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatal(err)
		}
		regions[r.Region] = true
	}
	if !regions["r0"] || !regions["r1"] {
		t.Errorf("leaf.regions answered by %v, want r0 and r1", regions)
	}
	// … and reads each region's pool's levels (leafctl pool --region).
	ajs, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, region := range []string{"r0", "r1"} {
		if _, err := ajs.Stream(context.Background(), pool.StreamIn(wire.Scope(region))); err != nil {
			t.Errorf("admin: stream %s: %v", pool.StreamIn(wire.Scope(region)), err)
		}
	}

	// … and names the region whose store a tag command acts on (leafctl
	// tag --region): a monotonic tag made in r1 is refused in r0, which
	// asks r1 across the gateway (leaf.region.1.tag.<tag>).
	create := func(region string) error {
		body, _ := json.Marshal(wire.AdminRequest{Tag: "ticks", Mode: "mono"})
		reply, err := admin.Request(wire.Scope(region).Subject(wire.TagCreateSubject), body, 10*time.Second)
		if err != nil {
			return err
		}
		return wire.ReplyError(reply)
	}
	if err := create("r1"); err != nil {
		t.Fatalf("admin: create a monotonic tag in r1: %v", err)
	}
	if err := create("r0"); err == nil || !strings.Contains(err.Error(), "lives in one region") {
		t.Errorf("admin: the same monotonic tag in r0: %v, want refused", err)
	}

	// leafd_r0 reaches its region's state, and is refused r1's.
	errs := make(chan error, 16)
	r0, err := nats.Connect(userURL(servers[0], "leafd_r0"), nats.Name("deploy-test-leafd-r0"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r0.Close)
	if _, err := r0.Request("$JS.API.STREAM.INFO.KV_leaf_alloc_r0", nil, 5*time.Second); err != nil {
		t.Fatalf("leafd_r0: the info of its own bucket: %v", err)
	}
	for _, subject := range []string{"$KV.leaf_alloc_r1.demo", "$KV.leaf_workers_r1.x", "leaf.in.r1.admin.floors"} {
		if err := r0.Publish(subject, []byte("{}")); err != nil {
			t.Fatal(err)
		}
		wantViolation(t, errs, subject)
	}
	for _, subject := range []string{"$JS.API.STREAM.INFO.KV_leaf_alloc_r1", "$JS.API.STREAM.MSG.GET.KV_leaf_alloc_r1",
		"$JS.API.DIRECT.GET.KV_leaf_alloc_r1.$KV.leaf_alloc_r1.demo", "$JS.API.STREAM.INFO.LEAF_POOL_r1", "$JS.API.STREAM.CREATE.KV_leaf_alloc"} {
		if _, err := r0.Request(subject, nil, 500*time.Millisecond); err == nil {
			t.Errorf("leafd_r0 reached %s", subject)
		}
		wantViolation(t, errs, subject)
	}
	if _, err := r0.Subscribe("leaf.in.r1.>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	wantViolation(t, errs, "leaf.in.r1.>")

	for i := range servers {
		if lines := log.matching(fmt.Sprintf("deploy-leafd-r%d", i)); len(lines) > 0 {
			t.Errorf("leafd of r%d ran into permissions it lacks:\n%s", i, strings.Join(lines, "\n"))
		}
		if lines := append(log.matching(fmt.Sprintf("deploy-test-client-r%d", i)), log.matching("deploy-test-admin")...); len(lines) > 0 {
			t.Errorf("client in r%d ran into permissions it lacks:\n%s", i, strings.Join(lines, "\n"))
		}
	}
}

// TestKubernetesRegions builds each region's overlay (k8s-regions/r<i>)
// with kubectl kustomize: the base's objects with the region's settings in
// leafd-config, its name the name of the region's NATS cluster in the
// supercluster example, and leafd's settings from that ConfigMap valid.
func TestKubernetesRegions(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("no kubectl to build the overlays")
	}
	setSuperPasswords(t)
	var base map[string]string
	for _, o := range loadK8s(t, "configmap.yaml") {
		base = o.Data
	}
	for i, file := range superConfigs {
		dir := fmt.Sprintf("k8s-regions/r%d", i)
		out, err := exec.Command(kubectl, "kustomize", dir).Output()
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v", dir, err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(out))
		var data map[string]string
		kinds := map[string]bool{}
		for {
			var o k8sObject
			if err := dec.Decode(&o); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", dir, err)
			}
			kinds[o.Kind] = true
			if o.Kind == "ConfigMap" && o.Metadata.Name == "leafd-config" {
				data = o.Data
			}
		}
		if !kinds["StatefulSet"] || data == nil {
			t.Fatalf("%s: kinds %v, leafd-config %v: want the base's objects", dir, kinds, data)
		}
		want := map[string]string{"LEAF_REGIONS": "2", "LEAF_REGION_ID": strconv.Itoa(i), "LEAF_REGION": parseNATS(t, file).Cluster.Name}
		for k, v := range data {
			if w, ok := want[k]; ok && v != w || !ok && v != base[k] {
				t.Errorf("%s: %s=%q, want %q", dir, k, v, w+base[k])
			}
		}
		cfg, err := config.Parse(nil, func(k string) string {
			if k == "LEAF_NATS" {
				return "nats://leafd:pw@127.0.0.1:4222"
			}
			return data[k]
		}, io.Discard)
		if err == nil {
			err = cfg.Validate()
		}
		if err != nil || cfg.Region.Count != 2 || cfg.Region.Name != want["LEAF_REGION"] {
			t.Errorf("%s: leafd's settings: %+v, %v", dir, cfg.Region, err)
		}
	}
}
