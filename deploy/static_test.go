package deploy_test

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/leafmq/leafmq/config"
)

// leafdFlags returns leafd's flag names and their LEAF_* variables.
func leafdFlags(t *testing.T) (flags, envs map[string]bool) {
	t.Helper()
	flags, envs = map[string]bool{}, map[string]bool{}
	(&config.Config{}).FlagSet(io.Discard).VisitAll(func(f *flag.Flag) {
		flags[f.Name] = true
		envs["LEAF_"+strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))] = true
	})
	if !flags["nats"] || !envs["LEAF_NATS"] {
		t.Fatalf("leafd flags %v lack nats", flags)
	}
	return flags, envs
}

var leafEnvRE = regexp.MustCompile(`\bLEAF_[A-Z0-9_]+`)

// Every LEAF_* variable any deploy file names is one leafd reads.
func TestLeafEnvNamesExist(t *testing.T) {
	_, envs := leafdFlags(t)
	n := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, v := range leafEnvRE.FindAllString(string(b), -1) {
			n++
			// LEAF_WORKER_LEASE and LEAF_WORKER_REGION are tables; LEAF_POOL_ begins a region's pool stream (LEAF_POOL_<region>)
			if !envs[v] && !strings.HasPrefix(v, "LEAF_TEST_") && v != "LEAF_WORKER_LEASE" && v != "LEAF_WORKER_REGION" && v != "LEAF_POOL_" {
				t.Errorf("%s: %s is not a leafd variable", path, v)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 20 {
		t.Fatalf("found only %d LEAF_* names under deploy/", n)
	}
}

type composeFile struct {
	Name     string
	Services map[string]composeSvc
	Volumes  map[string]any
}

type composeSvc struct {
	Image       string
	Build       struct{ Context, Dockerfile string }
	Hostname    string
	Entrypoint  []string
	Command     []string
	Environment map[string]string
	Volumes     []string
	Ports       []string
	DependsOn   any                 `yaml:"depends_on"`
	Healthcheck *composeHealthcheck `yaml:"healthcheck"`
}

// composeHealthcheck is a service's healthcheck: Test is ["CMD", argv...].
type composeHealthcheck struct {
	Test              []string
	Interval, Timeout string
	StartPeriod       string `yaml:"start_period"`
	Retries           int
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	var c composeFile
	if err := yaml.Unmarshal(repoFile(t, "docker-compose.yml"), &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return c
}

func composeService(t *testing.T, name string) composeSvc {
	t.Helper()
	s, ok := loadCompose(t).Services[name]
	if !ok {
		t.Fatalf("docker-compose.yml has no service %s", name)
	}
	return s
}

// pinnedImageRE is an image pinned to one release: name:[v]MAJOR.MINOR.PATCH[-variant].
var pinnedImageRE = regexp.MustCompile(`^[\w./-]+:v?\d+\.\d+\.\d+(-[\w.]+)?$`)

// The NATS servers of compose are the release the tests run: the
// nats-server module of go.mod, which every NATS test here embeds.
func TestComposeNATSIsTestedRelease(t *testing.T) {
	m := regexp.MustCompile(`(?m)^\s*github\.com/nats-io/nats-server/v2 v(\S+)`).FindSubmatch(repoFile(t, "../go.mod"))
	if m == nil {
		t.Fatal("go.mod: no github.com/nats-io/nats-server/v2")
	}
	for name, svc := range loadCompose(t).Services {
		if repo, tag, _ := strings.Cut(svc.Image, ":"); repo == "nats" {
			if v, _, _ := strings.Cut(tag, "-"); v != string(m[1]) {
				t.Errorf("service %s: image %s, but the tests run nats-server %s (go.mod): pin nats:%s-alpine", name, svc.Image, m[1], m[1])
			}
		}
	}
}

var composeVarRE = regexp.MustCompile(`\$\{([A-Z0-9_]+)(:?[?-][^}]*)?\}`)

func TestCompose(t *testing.T) {
	c := loadCompose(t)
	_, envs := leafdFlags(t)
	want := []string{"nats-1", "nats-2", "nats-3", "mariadb", "zookeeper", "leafd-1", "leafd-2", "leafd-3", "prometheus", "grafana"}
	for _, name := range want {
		svc, ok := c.Services[name]
		switch {
		case !ok:
			t.Errorf("no service %s", name)
		case svc.Healthcheck == nil || len(svc.Healthcheck.Test) < 2:
			t.Errorf("service %s has no healthcheck", name)
		case strings.HasSuffix(svc.Image, ":latest") || !strings.Contains(svc.Image, ":"):
			t.Errorf("service %s: image %q is not pinned", name, svc.Image)
		case svc.Build.Dockerfile == "" && !pinnedImageRE.MatchString(svc.Image):
			t.Errorf("service %s: image %q is not pinned to a release (MAJOR.MINOR.PATCH): a floating tag changes under a restart", name, svc.Image)
		}
		if strings.HasPrefix(name, "leafd-") {
			if v := svc.Environment["LEAF_AUTO_CREATE"]; v != "false" {
				t.Errorf("%s: LEAF_AUTO_CREATE=%q; production creates tags explicitly (false)", name, v)
			}
			if hc := svc.Healthcheck; hc != nil && !slices.Contains(hc.Test, "probe") {
				t.Errorf("%s: the healthcheck %v is not leafd probe (distroless has no shell or wget)", name, hc.Test)
			}
		}
	}
	// Every ${VAR} the file uses has a line in .env.example.
	example := string(repoFile(t, ".env.example"))
	for _, m := range composeVarRE.FindAllStringSubmatch(string(repoFile(t, "docker-compose.yml")), -1) {
		if !regexp.MustCompile(`(?m)^` + m[1] + `=`).MatchString(example) {
			t.Errorf("${%s} is not in .env.example", m[1])
		}
	}
	named := map[string]bool{}
	for v := range c.Volumes {
		named[v] = true
	}
	for name, s := range c.Services {
		if s.Image == "" {
			t.Errorf("%s: no image", name)
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			switch {
			case strings.HasPrefix(src, "./"):
				if _, err := os.Stat(src); err != nil {
					t.Errorf("%s: volume %s: %v", name, v, err)
				}
			case !named[src]:
				t.Errorf("%s: volume %s is not declared", name, v)
			}
		}
		for k := range s.Environment {
			if strings.HasPrefix(k, "LEAF_") && !envs[k] {
				t.Errorf("%s: %s is not a leafd variable", name, k)
			}
		}
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s: port %s is published beyond loopback", name, p)
			}
		}
	}
	for i := 1; i <= 3; i++ {
		n := c.Services["nats-"+string(rune('0'+i))]
		conf := "/etc/nats/nats-" + string(rune('0'+i)) + ".conf"
		if !slices.Equal(n.Command, []string{"-c", conf}) || !slices.Contains(n.Volumes, "./nats:/etc/nats:ro") {
			t.Errorf("nats-%d: command %v volumes %v", i, n.Command, n.Volumes)
		}
		for v := range natsPasswords {
			if n.Environment[v] == "" {
				t.Errorf("nats-%d: %s not passed to the server", i, v)
			}
		}

		name := "leafd-" + string(rune('0'+i))
		l := c.Services[name]
		if l.Build.Dockerfile != "deploy/Dockerfile" || l.Build.Context != ".." {
			t.Errorf("%s: build %+v", name, l.Build)
		}
		env := l.Environment
		if env["LEAF_NAME"] != name || env["LEAF_HTTP"] != "0.0.0.0:8080" || env["LEAF_ZK_ADDR"] != name+":8080" {
			t.Errorf("%s: environment %v", name, env)
		}
		for j := 1; j <= 3; j++ {
			if !strings.Contains(env["LEAF_NATS"], "nats://leafd:${NATS_LEAFD_PASSWORD}@nats-"+string(rune('0'+j))+":4222") {
				t.Errorf("%s: LEAF_NATS %q does not name nats-%d as user leafd", name, env["LEAF_NATS"], j)
			}
		}
		if !strings.Contains(env["LEAF_MYSQL"], "@tcp(mariadb:3306)/leaf") || !strings.HasPrefix(env["LEAF_ZK"], "zookeeper:") {
			t.Errorf("%s: LEAF_MYSQL %q LEAF_ZK %q", name, env["LEAF_MYSQL"], env["LEAF_ZK"])
		}
	}
	if _, err := os.Stat(filepath.Join(c.Services["leafd-1"].Build.Context, c.Services["leafd-1"].Build.Dockerfile)); err != nil {
		t.Error(err)
	}
	if m := c.Services["mariadb"]; !slices.Contains(m.Volumes, "./schema.sql:/docker-entrypoint-initdb.d/01-schema.sql:ro") ||
		m.Environment["MARIADB_DATABASE"] != "leaf" {
		t.Errorf("mariadb: volumes %v environment %v", m.Volumes, m.Environment)
	}
	// zkServer.sh status, the zookeeper healthcheck, asks the server srvr.
	if z := c.Services["zookeeper"]; z.Healthcheck != nil && slices.Contains(z.Healthcheck.Test, "zkServer.sh") &&
		!slices.Contains(strings.Split(z.Environment["ZOO_4LW_COMMANDS_WHITELIST"], ","), "srvr") {
		t.Errorf("zookeeper: the healthcheck zkServer.sh status needs srvr in ZOO_4LW_COMMANDS_WHITELIST (%q)", z.Environment["ZOO_4LW_COMMANDS_WHITELIST"])
	}
	if p := c.Services["prometheus"]; !slices.Contains(p.Volumes, "./prometheus:/etc/prometheus:ro") ||
		!slices.Contains(p.Command, "--config.file=/etc/prometheus/prometheus.yml") {
		t.Errorf("prometheus: volumes %v command %v", p.Volumes, p.Command)
	}
	// Prometheus scrapes the compose leafd services on their LEAF_HTTP port.
	var prom struct {
		ScrapeConfigs []struct {
			JobName       string                       `yaml:"job_name"`
			StaticConfigs []struct{ Targets []string } `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(repoFile(t, "prometheus/prometheus.yml"), &prom); err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, sc := range prom.ScrapeConfigs {
		if sc.JobName == "leafd" {
			for _, st := range sc.StaticConfigs {
				targets = append(targets, st.Targets...)
			}
		}
	}
	if want := []string{"leafd-1:8080", "leafd-2:8080", "leafd-3:8080"}; !slices.Equal(targets, want) {
		t.Errorf("prometheus.yml leafd targets %v, want %v", targets, want)
	}
}

// k8sObject is the part of a manifest the checks read.
type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string
	Metadata   struct {
		Name, Namespace string
		Labels          map[string]string
	}
	Data       map[string]string
	StringData map[string]string `yaml:"stringData"`
	Spec       yaml.Node
}

func loadK8s(t *testing.T, file string) []k8sObject {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(repoFile(t, "k8s/"+file)))
	var objs []k8sObject
	for {
		var o k8sObject
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("k8s/%s: %v", file, err)
		}
		if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
			t.Errorf("k8s/%s: object without apiVersion, kind or name: %+v", file, o)
		}
		objs = append(objs, o)
	}
	return objs
}

func decodeSpec(t *testing.T, o k8sObject, v any) {
	t.Helper()
	if err := o.Spec.Decode(v); err != nil {
		t.Fatalf("%s %s: spec: %v", o.Kind, o.Metadata.Name, err)
	}
}

type k8sContainer struct {
	Name    string
	Image   string
	Command []string
	Args    []string
	EnvFrom []struct {
		ConfigMapRef *struct{ Name string } `yaml:"configMapRef"`
		SecretRef    *struct{ Name string } `yaml:"secretRef"`
	} `yaml:"envFrom"`
	Env []struct {
		Name      string
		Value     string
		ValueFrom *struct {
			FieldRef *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
			SecretKeyRef    *struct{ Name, Key string } `yaml:"secretKeyRef"`
			ConfigMapKeyRef *struct{ Name, Key string } `yaml:"configMapKeyRef"`
		} `yaml:"valueFrom"`
	}
	Ports []struct {
		Name          string
		ContainerPort int `yaml:"containerPort"`
	}
	StartupProbe   *k8sProbe `yaml:"startupProbe"`
	ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
	LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
	VolumeMounts   []struct {
		Name      string
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

func TestKubernetes(t *testing.T) {
	flags, envs := leafdFlags(t)
	var kust struct {
		Namespace string
		Resources []string
	}
	if err := yaml.Unmarshal(repoFile(t, "k8s/kustomization.yaml"), &kust); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("k8s/*.yaml")
	for _, f := range files {
		base := filepath.Base(f)
		if base != "kustomization.yaml" && base != "secret.example.yaml" && !slices.Contains(kust.Resources, base) {
			t.Errorf("k8s/%s is not in kustomization.yaml", base)
		}
	}
	objs := map[string]k8sObject{} // kind/name
	for _, file := range append(slices.Clone(kust.Resources), "secret.example.yaml") {
		for _, o := range loadK8s(t, file) {
			if o.Kind != "Namespace" && o.Metadata.Namespace != kust.Namespace {
				t.Errorf("k8s/%s: %s %s in namespace %q, want %q", file, o.Kind, o.Metadata.Name, o.Metadata.Namespace, kust.Namespace)
			}
			objs[o.Kind+"/"+o.Metadata.Name] = o
		}
	}
	for _, want := range []string{"Namespace/leafmq", "ConfigMap/leafd-config", "Secret/leafd-secrets",
		"StatefulSet/leafd", "Service/leafd", "Service/leafd-metrics", "PodDisruptionBudget/leafd"} {
		if _, ok := objs[want]; !ok {
			t.Errorf("no %s", want)
		}
	}
	for k := range objs["ConfigMap/leafd-config"].Data {
		if !envs[k] {
			t.Errorf("ConfigMap leafd-config: %s is not a leafd variable", k)
		}
	}
	secret := objs["Secret/leafd-secrets"].StringData

	var sts struct {
		ServiceName string `yaml:"serviceName"`
		Replicas    int
		Selector    struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		}
		Template struct {
			Metadata struct{ Labels map[string]string }
			Spec     struct {
				Containers []k8sContainer
				Volumes    []struct {
					Name     string
					EmptyDir any `yaml:"emptyDir"`
				}
			}
		}
		VolumeClaimTemplates []struct {
			Metadata struct{ Name string }
			Spec     struct {
				AccessModes []string `yaml:"accessModes"`
				Resources   struct {
					Requests map[string]string
				}
			}
		} `yaml:"volumeClaimTemplates"`
		Retention struct {
			WhenDeleted string `yaml:"whenDeleted"`
			WhenScaled  string `yaml:"whenScaled"`
		} `yaml:"persistentVolumeClaimRetentionPolicy"`
	}
	so := objs["StatefulSet/leafd"]
	decodeSpec(t, so, &sts)
	podLabels := sts.Template.Metadata.Labels
	matches := func(sel map[string]string) bool {
		for k, v := range sel {
			if podLabels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	if sts.Replicas != 3 || !matches(sts.Selector.MatchLabels) {
		t.Errorf("StatefulSet: replicas %d, selector %v, pod labels %v", sts.Replicas, sts.Selector.MatchLabels, podLabels)
	}
	var headless struct {
		ClusterIP string `yaml:"clusterIP"`
		Selector  map[string]string
	}
	decodeSpec(t, objs["Service/"+sts.ServiceName], &headless)
	if headless.ClusterIP != "None" || !matches(headless.Selector) {
		t.Errorf("Service %s (serviceName): clusterIP %q selector %v", sts.ServiceName, headless.ClusterIP, headless.Selector)
	}
	var metrics struct {
		Selector map[string]string
		Ports    []struct {
			Name       string
			TargetPort string `yaml:"targetPort"`
		}
	}
	decodeSpec(t, objs["Service/leafd-metrics"], &metrics)
	if !matches(metrics.Selector) || len(metrics.Ports) != 1 {
		t.Errorf("Service leafd-metrics: %+v", metrics)
	}
	var pdb struct {
		MaxUnavailable int `yaml:"maxUnavailable"`
		Selector       struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		}
	}
	decodeSpec(t, objs["PodDisruptionBudget/leafd"], &pdb)
	if pdb.MaxUnavailable != 1 || !matches(pdb.Selector.MatchLabels) {
		t.Errorf("PodDisruptionBudget: %+v", pdb)
	}

	if len(sts.Template.Spec.Containers) != 1 {
		t.Fatalf("StatefulSet: %d containers", len(sts.Template.Spec.Containers))
	}
	c := sts.Template.Spec.Containers[0]
	envNames := map[string]bool{}
	for _, e := range c.Env {
		envNames[e.Name] = true
		if strings.HasPrefix(e.Name, "LEAF_") && !envs[e.Name] {
			t.Errorf("container env %s is not a leafd variable", e.Name)
		}
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			if ref := e.ValueFrom.SecretKeyRef; ref.Name != "leafd-secrets" || secret[ref.Key] == "" {
				t.Errorf("env %s: secret %s key %s is not in secret.example.yaml", e.Name, ref.Name, ref.Key)
			}
		}
	}
	if !envNames["LEAF_NAME"] {
		t.Error("pods do not get LEAF_NAME (their pod name)")
	}
	sawNATS := false
	for _, a := range c.Args {
		name, value, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || !flags[name] {
			t.Errorf("container arg %q is not a leafd flag", a)
		}
		for _, ref := range regexp.MustCompile(`\$\(([A-Z0-9_]+)\)`).FindAllStringSubmatch(value, -1) {
			if !envNames[ref[1]] {
				t.Errorf("arg %q: $(%s) is not in the container's env", a, ref[1])
			}
		}
		sawNATS = sawNATS || name == "nats"
	}
	if !sawNATS || !strings.HasPrefix(secret["NATS_URL"], "nats://leafd:") {
		t.Errorf("leafd does not get --nats with user leafd: args %v, secret %v", c.Args, secret)
	}
	for _, ef := range c.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil && objs["ConfigMap/"+ef.ConfigMapRef.Name].Kind == "":
			t.Errorf("envFrom ConfigMap %s does not exist", ef.ConfigMapRef.Name)
		case ef.SecretRef != nil && objs["Secret/"+ef.SecretRef.Name].Kind == "":
			t.Errorf("envFrom Secret %s does not exist", ef.SecretRef.Name)
		}
	}
	ports := map[string]bool{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort == 8080
	}
	if cm := objs["ConfigMap/leafd-config"].Data; cm["LEAF_AUTO_CREATE"] != "false" {
		t.Errorf("LEAF_AUTO_CREATE %q: production creates tags explicitly (false)", cm["LEAF_AUTO_CREATE"])
	}
	if cm := objs["ConfigMap/leafd-config"].Data; cm["LEAF_HTTP"] != "0.0.0.0:8080" {
		t.Errorf("LEAF_HTTP %q: pods must serve /healthz and /metrics on 0.0.0.0:8080", cm["LEAF_HTTP"])
	}
	// Readiness is /readyz (serving), liveness /healthz (alive: it answers
	// while leafd waits for its backends at start).
	for _, p := range [][2]string{{"readiness", probePort(c.ReadinessProbe, "/readyz")}, {"liveness", probePort(c.LivenessProbe, "/healthz")}, {"metrics service", metrics.Ports[0].TargetPort}} {
		if !ports[p[1]] {
			t.Errorf("%s port %q is not the container's 8080 port", p[0], p[1])
		}
	}
	vols := map[string]string{} // name -> "claim", "emptyDir" or "other"
	for _, v := range sts.Template.Spec.Volumes {
		vols[v.Name] = "other"
		if v.EmptyDir != nil {
			vols[v.Name] = "emptyDir"
		}
	}
	for _, vc := range sts.VolumeClaimTemplates {
		vols[vc.Metadata.Name] = "claim"
		if !slices.Equal(vc.Spec.AccessModes, []string{"ReadWriteOnce"}) || vc.Spec.Resources.Requests["storage"] == "" {
			t.Errorf("volumeClaimTemplate %s: access modes %v, storage %q: want ReadWriteOnce and a size",
				vc.Metadata.Name, vc.Spec.AccessModes, vc.Spec.Resources.Requests["storage"])
		}
	}
	// The data directory holds the floors and the past time leases that
	// keep a restarted pod from serving ids again: it must outlive the pod.
	dataDir := "/var/lib/leafd"
	if d := objs["ConfigMap/leafd-config"].Data["LEAF_DATA"]; d != "" {
		dataDir = d
	}
	sawData := false
	for _, m := range c.VolumeMounts {
		kind, ok := vols[m.Name]
		if !ok {
			t.Errorf("volumeMount %s has no volume", m.Name)
		}
		if m.MountPath == dataDir {
			sawData = true
			if kind != "claim" {
				t.Errorf("the data directory %s is on volume %s (%s), not a volumeClaimTemplate: its floors and leases would not outlive the pod", dataDir, m.Name, kind)
			}
		}
	}
	if !sawData {
		t.Errorf("no volume is mounted on the data directory %s", dataDir)
	}
	if sts.Retention.WhenDeleted != "Retain" || sts.Retention.WhenScaled != "Retain" {
		t.Errorf("persistentVolumeClaimRetentionPolicy %+v: the data claims must be retained when the StatefulSet is deleted or scaled down", sts.Retention)
	}
}

// k8sProbe is an httpGet probe; Port is a container port's name or number.
type k8sProbe struct {
	HTTPGet          struct{ Path, Port string } `yaml:"httpGet"`
	PeriodSeconds    int                         `yaml:"periodSeconds"`
	FailureThreshold int                         `yaml:"failureThreshold"`
}

func probePort(p *k8sProbe, path string) string {
	if p == nil || p.HTTPGet.Path != path {
		return ""
	}
	return p.HTTPGet.Port
}

// unitKeys reads a systemd unit into section.key -> values.
func unitKeys(t *testing.T, text string) map[string][]string {
	t.Helper()
	keys := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("unit line %q", line)
			}
			keys[section+"."+k] = append(keys[section+"."+k], v)
		}
	}
	return keys
}

func TestSystemdUnit(t *testing.T) {
	text := string(repoFile(t, "systemd/leafd.service"))
	keys := unitKeys(t, text)
	for k, want := range map[string]string{
		"Service.ExecStart":       "/usr/local/bin/leafd",
		"Service.EnvironmentFile": "/etc/leafd/env",
		"Service.StateDirectory":  "leafd",
		"Service.ProtectSystem":   "strict",
		"Service.Restart":         "on-failure",
		"Service.NoNewPrivileges": "yes",
		"Service.Environment":     "LEAF_DATA=/var/lib/leafd",
		"Install.WantedBy":        "multi-user.target",
	} {
		if !slices.Contains(keys[k], want) {
			t.Errorf("%s = %v, want %q", k, keys[k], want)
		}
	}
	if !slices.Contains(keys["Service.DynamicUser"], "yes") && len(keys["Service.User"]) == 0 {
		t.Error("neither DynamicUser=yes nor User=")
	}
	_, envs := leafdFlags(t)
	autoCreate := ""
	for _, line := range strings.Split(string(repoFile(t, "systemd/env.example")), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if ok && !strings.HasPrefix(line, "#") && !envs[k] {
			t.Errorf("env.example: %s is not a leafd variable", k)
		}
		if ok && k == "LEAF_AUTO_CREATE" {
			autoCreate = v
		}
	}
	if autoCreate != "false" {
		t.Errorf("env.example: LEAF_AUTO_CREATE=%q; production creates tags explicitly (false)", autoCreate)
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not found; static checks only")
	}
	// verify wants ExecStart to exist: point it at an executable that does
	// (this test binary) in a copy; every other line is verified as written.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	unit := filepath.Join(dir, "leafd.service")
	if err := os.WriteFile(unit, []byte(strings.Replace(text, "ExecStart=/usr/local/bin/leafd", "ExecStart="+self, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(analyze, "verify", unit)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

func TestDockerfile(t *testing.T) {
	text := string(repoFile(t, "Dockerfile"))
	gomod := string(repoFile(t, "../go.mod"))
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(gomod)
	if goVersion == nil {
		t.Fatal("no go line in go.mod")
	}
	var froms []string
	for _, m := range regexp.MustCompile(`(?m)^FROM (\S+)`).FindAllStringSubmatch(text, -1) {
		froms = append(froms, m[1])
	}
	if len(froms) != 2 || froms[0] != "golang:"+goVersion[1] || !strings.HasPrefix(froms[1], "gcr.io/distroless/static") {
		t.Errorf("FROM %v: want golang:%s then distroless/static", froms, goVersion[1])
	}
	for _, pkg := range []string{"./cmd/leafd", "./cmd/leafctl"} {
		if !strings.Contains(string(repoFile(t, "../scripts/build.sh")), "leafd leafctl") {
			t.Errorf("scripts/build.sh does not build %s", pkg)
		}
		if _, err := os.Stat(filepath.Join("..", pkg, "main.go")); err != nil {
			t.Error(err)
		}
	}
	// One place stamps the version: scripts/build.sh, called by the
	// Dockerfile and the Makefile; the variables it stamps exist.
	if !strings.Contains(text, "./scripts/build.sh /out") {
		t.Error("the Dockerfile does not build with scripts/build.sh")
	}
	if !strings.Contains(string(repoFile(t, "../Makefile")), "scripts/build.sh") {
		t.Error("the Makefile does not build with scripts/build.sh")
	}
	build := string(repoFile(t, "../scripts/build.sh"))
	for _, v := range []string{"Version", "Revision"} {
		if !strings.Contains(build, "$pkg."+v+"=") || !grepDir(t, "../internal/buildinfo", "\t"+v+" ") {
			t.Errorf("scripts/build.sh does not stamp buildinfo.%s, or internal/buildinfo has no such variable", v)
		}
	}
	if !strings.Contains(text, "CGO_ENABLED=0") {
		t.Error("a static image needs CGO_ENABLED=0")
	}
	// LEAF_HTTP must leave the container.
	if !strings.Contains(text, "LEAF_HTTP=0.0.0.0:8080") {
		t.Error("the image does not serve HTTP beyond loopback")
	}
}

func grepDir(t *testing.T, dir, s string) bool {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if bytes.Contains(b, []byte(s)) {
			return true
		}
	}
	return false
}

// README.md names every file under deploy/ an operator uses.
func TestReadmeCoversFiles(t *testing.T) {
	readme := string(repoFile(t, "README.md"))
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, "_test.go") || path == "README.md" || path == "doc.go" { // doc.go: the package comment
			return err
		}
		if !strings.Contains(readme, filepath.ToSlash(path)) && !strings.Contains(readme, "`"+filepath.Base(path)+"`") {
			t.Errorf("README.md does not mention %s", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestZooKeeperConfig checks zoo.cfg's keys, then runs it in a real
// ZooKeeper when the Debian package is there (a copy with a free port and a
// temp data directory) until it answers srvr with "Mode: standalone".
func TestZooKeeperConfig(t *testing.T) {
	kv := map[string]string{}
	for _, line := range strings.Split(string(repoFile(t, "zookeeper/zoo.cfg")), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("zoo.cfg line %q", line)
		}
		kv[k] = v
	}
	for k, want := range map[string]string{
		"clientPort": "2181", "clientPortAddress": "127.0.0.1", "admin.enableServer": "false",
		"tickTime": "2000",
	} {
		if kv[k] != want {
			t.Errorf("%s=%q, want %q", k, kv[k], want)
		}
	}
	if !strings.Contains(kv["4lw.commands.whitelist"], "srvr") || kv["dataDir"] == "" {
		t.Errorf("4lw.commands.whitelist %q dataDir %q", kv["4lw.commands.whitelist"], kv["dataDir"])
	}
	for k := range kv {
		if strings.HasPrefix(k, "server.") {
			t.Errorf("%s: zoo.cfg is the standalone config", k)
		}
	}
	runZooKeeper(t, kv)
}

const zkJar = "/usr/share/java/zookeeper.jar"

func runZooKeeper(t *testing.T, kv map[string]string) {
	java, err := exec.LookPath("java")
	if _, jerr := os.Stat(zkJar); err != nil || jerr != nil {
		t.Skip("no java or " + zkJar + "; keys checked only")
	}
	if testing.Short() {
		t.Skip("starts a JVM")
	}
	dir := t.TempDir()
	port := freePorts(t, 1)[0]
	text := string(repoFile(t, "zookeeper/zoo.cfg"))
	text = strings.Replace(text, "dataDir="+kv["dataDir"], "dataDir="+filepath.Join(dir, "data"), 1)
	text = strings.Replace(text, "clientPort=2181", "clientPort="+strconv.Itoa(port), 1)
	cfg := filepath.Join(dir, "zoo.cfg")
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "zk.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(java, "-Xmx128m", "-Dzookeeper.log.dir="+dir, "-cp", dir+":"+zkJar,
		"org.apache.zookeeper.server.ZooKeeperServerMain", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(60 * time.Second)
	for {
		if out := fourLetter(addr, "srvr"); strings.Contains(out, "Mode: standalone") {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("ZooKeeper on zoo.cfg did not answer srvr on %s within 60s:\n%s", addr, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fourLetter sends a ZooKeeper four-letter command and returns the answer.
func fourLetter(addr, cmd string) string {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(cmd)); err != nil {
		return ""
	}
	b, _ := io.ReadAll(c)
	return string(b)
}

// The PrometheusRule carries exactly the groups of prometheus/alerts.yml
// (promtool-tested), and the ServiceMonitor scrapes the leafd-metrics
// Service by its labels and port name.
func TestPrometheusOperator(t *testing.T) {
	var alerts, rule struct {
		Groups any
		Spec   struct{ Groups any }
	}
	if err := yaml.Unmarshal(repoFile(t, "prometheus/alerts.yml"), &alerts); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(repoFile(t, "k8s/prometheusrule.yaml"), &rule); err != nil {
		t.Fatal(err)
	}
	if alerts.Groups == nil || !reflect.DeepEqual(alerts.Groups, rule.Spec.Groups) {
		t.Error("k8s/prometheusrule.yaml's groups differ from prometheus/alerts.yml's: copy them over")
	}
	var sm struct {
		Kind string
		Spec struct {
			Selector  struct{ MatchLabels map[string]string } `yaml:"selector"`
			Endpoints []struct{ Port, Path string }
		}
	}
	if err := yaml.Unmarshal(repoFile(t, "k8s/servicemonitor.yaml"), &sm); err != nil {
		t.Fatal(err)
	}
	var svc k8sObject
	for _, o := range loadK8s(t, "service.yaml") {
		if o.Metadata.Name == "leafd-metrics" {
			svc = o
		}
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Metadata.Labels[k] != v {
			t.Errorf("ServiceMonitor selects %s=%s, which the leafd-metrics Service does not carry", k, v)
		}
	}
	if sm.Kind != "ServiceMonitor" || len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoints %+v: want port metrics, path /metrics", sm.Spec.Endpoints)
	}
}

// Every alert rule has promtool cases: one where it fires (listed in
// exp_alerts) in prometheus/alerts_test.yml. (Cases where it does not are
// the series beside: promtool fails on any alert not listed.)
func TestEveryAlertTested(t *testing.T) {
	rules := regexp.MustCompile(`(?m)^\s*- alert: (\w+)`).FindAllStringSubmatch(string(repoFile(t, "prometheus/alerts.yml")), -1)
	tests := string(repoFile(t, "prometheus/alerts_test.yml"))
	for _, r := range rules {
		fires := regexp.MustCompile(`alertname: ` + r[1] + `\s+exp_alerts:\s+- exp_labels`)
		if !fires.MatchString(tests) {
			t.Errorf("alert %s has no promtool case where it fires", r[1])
		}
	}
	if len(rules) < 10 {
		t.Fatalf("found %d rules: has alerts.yml's shape changed?", len(rules))
	}
}
