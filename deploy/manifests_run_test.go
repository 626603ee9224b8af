package deploy_test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leafmq/leafmq/internal/testenv"
)

// manifestRun starts leafd the way a manifest does — its environment and
// arguments, taken from the file — after map rewrote the values that name
// hosts of the manifest's world (nats-1, mariadb, zookeeper, pod names, the
// 0.0.0.0:8080 of a container) to this machine's servers; it returns the
// loopback address of leafd's HTTP port.
func manifestRun(t *testing.T, bin string, env map[string]string, args []string, mapping func(k, v string) string) string {
	t.Helper()
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1)[0])
	cmd := exec.Command(bin)
	data := t.TempDir()
	cmd.Env = append(os.Environ(), "LEAF_DATA="+data) // the image's LEAF_DATA (a volume)
	vars := map[string]string{}
	for k, v := range env {
		v = mapping(k, v)
		switch k {
		case "LEAF_HTTP":
			v = httpAddr
		case "LEAF_DATA": // a volume in the manifest
			v = data
		}
		vars[k] = v
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	for _, a := range args { // Kubernetes expands $(VAR) in args
		cmd.Args = append(cmd.Args, regexp.MustCompile(`\$\((\w+)\)`).ReplaceAllStringFunc(a, func(m string) string {
			return vars[m[2:len(m)-1]]
		}))
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("leafd's log:\n%s", stderr.String())
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
	return httpAddr
}

// get answers the status of GET url (0 when nothing answers).
func get(url string) int {
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// The leafd of docker-compose.yml and of k8s/, started with exactly their
// environment and arguments against this machine's NATS cluster (the
// shipped nats/*.conf), MariaDB and ZooKeeper: each probe answers as the
// manifest expects, auto-create is off, an admin creates a tag and a client
// gets its ids.
func TestManifestsRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts leafd")
	}
	dsn, zkAddr := testenv.MySQL(t), testenv.ZooKeeper(t)
	setNATSPasswords(t)
	servers := startNATSCluster(t, &violationLog{})
	leafd, leafctl := testenv.Build(t, "cmd/leafd"), testenv.Build(t, "cmd/leafctl")
	ctl := func(user string, args ...string) (string, error) {
		out, err := exec.Command(leafctl, append([]string{"--nats", urlsFor(servers, user)}, args...)...).CombinedOutput()
		return string(out), err
	}
	servesTag := func(t *testing.T, tag string) {
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
		if out, err := ctl("client", "next", tag, "-n", "3"); err != nil || out != "1\n2\n3\n" {
			t.Fatalf("client next %s: %v %q", tag, err, out)
		}
	}

	t.Run("compose", func(t *testing.T) {
		svc := composeService(t, "leafd-1")
		zkName := testenv.RandomName("compose", 4)
		addr := manifestRun(t, leafd, svc.Environment, svc.Command, func(k, v string) string {
			switch k {
			case "LEAF_NATS":
				return urlsFor(servers, "leafd")
			case "LEAF_MYSQL":
				return dsn
			case "LEAF_ZK":
				return zkAddr
			case "LEAF_ZK_NAME":
				return zkName
			case "LEAF_ZK_ADDR":
				return strings.Replace(v, "leafd-1", "127.0.0.1", 1)
			}
			if strings.Contains(v, "${") {
				t.Fatalf("compose %s=%q is not mapped", k, v)
			}
			return v
		})
		// The healthcheck, as compose runs it, on this leafd and port.
		hc := slicesClone(svc.Healthcheck.Test[1:])
		hc[0] = leafd
		hc[len(hc)-1] = strings.Replace(hc[len(hc)-1], "127.0.0.1:8080", addr, 1)
		testenv.Eventually(t, "the compose healthcheck", 60*time.Second, func() bool {
			return exec.Command(hc[0], hc[1:]...).Run() == nil
		})
		servesTag(t, "compose")
	})

	t.Run("k8s", func(t *testing.T) {
		objs := map[string]k8sObject{}
		for _, f := range []string{"configmap.yaml", "secret.example.yaml"} {
			for _, o := range loadK8s(t, f) {
				objs[o.Kind] = o
			}
		}
		env := map[string]string{"LEAF_NAME": "leafd-0"} // fieldRef metadata.name of the first pod
		for k, v := range objs["ConfigMap"].Data {
			env[k] = v
		}
		for k, v := range objs["Secret"].StringData {
			env[k] = v
		}
		c := statefulSetContainer(t)
		addr := manifestRun(t, leafd, env, c.Args, func(k, v string) string {
			if k == "NATS_URL" {
				return urlsFor(servers, "leafd")
			}
			return v
		})
		probe := func(p *struct {
			HTTPGet struct{ Path, Port string } `yaml:"httpGet"`
		}) string {
			return "http://" + addr + p.HTTPGet.Path
		}
		testenv.Eventually(t, "the startup probe", 60*time.Second, func() bool { return get(probe(c.StartupProbe)) == 200 })
		testenv.Eventually(t, "the readiness probe", 60*time.Second, func() bool { return get(probe(c.ReadinessProbe)) == 200 })
		if code := get(probe(c.LivenessProbe)); code != 200 {
			t.Fatalf("liveness probe: %d", code)
		}
		servesTag(t, "kube")
	})
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

// statefulSetContainer is leafd's container in k8s/statefulset.yaml.
func statefulSetContainer(t *testing.T) k8sContainer {
	t.Helper()
	for _, o := range loadK8s(t, "statefulset.yaml") {
		if o.Kind != "StatefulSet" {
			continue
		}
		var sts struct {
			Template struct {
				Spec struct{ Containers []k8sContainer }
			}
		}
		decodeSpec(t, o, &sts)
		if len(sts.Template.Spec.Containers) == 1 {
			return sts.Template.Spec.Containers[0]
		}
	}
	t.Fatal("k8s/statefulset.yaml: no StatefulSet with one container")
	return k8sContainer{}
}
