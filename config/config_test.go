package config_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/segment"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParseDefaults(t *testing.T) {
	c, err := config.Parse(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.NATS.URL != "" || c.NATS.Listen != "127.0.0.1:4222" || c.HTTP.Addr != "127.0.0.1:8080" || c.DataDir != "./data" ||
		c.Store.MySQL != "" || c.Store.DefaultStep != 2000 || c.MaxBatch != 10000 || c.Store.KVReplicas != 1 ||
		c.Store.MaxStep != segment.DefaultMaxStep {
		t.Fatalf("defaults = %+v", c)
	}
	if !strings.HasPrefix(c.Name, "leafd-") {
		t.Fatalf("default name %q", c.Name)
	}
}

func TestParseEnvAndFlags(t *testing.T) {
	c, err := config.Parse([]string{"--http", "127.0.0.1:9999", "--name", "flag-name"}, env(map[string]string{
		"LEAF_NATS":         "nats://10.0.0.1:4222",
		"LEAF_HTTP":         "127.0.0.1:1111",
		"LEAF_NAME":         "env-name",
		"LEAF_MYSQL":        "u:p@tcp(db:3306)/leaf",
		"LEAF_DEFAULT_STEP": "5000",
		"LEAF_AUTO_CREATE":  "true",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.NATS.URL != "nats://10.0.0.1:4222" || c.HTTP.Addr != "127.0.0.1:9999" || c.Name != "flag-name" ||
		c.Store.MySQL != "u:p@tcp(db:3306)/leaf" || c.Store.DefaultStep != 5000 || c.Store.AutoCreate != "true" {
		t.Fatalf("config = %+v (flags must win over env)", c)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"bad flag", []string{"--nope"}, nil, "flag provided but not defined"},
		{"extra arg", []string{"serve"}, nil, "unexpected argument"},
		{"bad env int", nil, map[string]string{"LEAF_DEFAULT_STEP": "lots"}, "LEAF_DEFAULT_STEP"},
		{"step zero", []string{"--default-step", "-1"}, nil, "default-step"},
		{"bad listen", []string{"--nats-listen", "4222"}, nil, "nats-listen"},
		{"bad http", []string{"--http", "localhost"}, nil, "http"},
		{"bad auto", []string{"--auto-create", "maybe"}, nil, "auto-create"},
		{"bad replicas", []string{"--kv-replicas", "7"}, nil, "kv-replicas"},
		{"bad batch", []string{"--max-batch", "-5"}, nil, "max-batch"},
		{"bad max step", []string{"--max-step", "-1"}, nil, "max-step"},
		{"max step too big", nil, map[string]string{"LEAF_MAX_STEP": "3000000000"}, "max-step"},
		{"bad level", []string{"--log-level", "loud"}, nil, "log-level"},
		{"bad name", []string{"--name", "a b"}, nil, "name"},
		{"bad registry", []string{"--worker-registry", "etcd"}, nil, "worker-registry"},
		{"zk without servers", []string{"--worker-registry", "zk"}, nil, "--zk"},
		{"zk bad addr", []string{"--worker-registry", "zk", "--zk", "127.0.0.1:2181", "--zk-addr", "me"}, nil, "zk-addr"},
		{"zk name slash", []string{"--worker-registry", "zk", "--zk", "127.0.0.1:2181", "--zk-name", "a/b"}, nil, "zk-name"},
		{"mysql registry without dsn", []string{"--worker-registry", "mysql"}, nil, "worker-mysql"},
		{"static worker too big", []string{"--worker-registry", "static", "--worker-id", "1024"}, nil, "worker-id"},
		{"bad layout", []string{"--snowflake-layout", "40+10+12"}, nil, "layout"},
		{"bad layout name", []string{"--snowflake-layout", "twitter"}, nil, "layout"},
		{"bad unit", []string{"--snowflake-unit", "ns"}, nil, "unit"},
		{"bad epoch", []string{"--snowflake-epoch", "yesterday"}, nil, "epoch"},
		{"short lease", []string{"--lease-ahead", "1ms"}, nil, "lease-ahead"},
		{"bad ring", []string{"--snowflake-ring", "1"}, nil, "snowflake-ring"},
		{"bad step", []string{"--fault-clock-step", "-10s"}, nil, "fault-clock-step"},
		{"bad env duration", nil, map[string]string{"LEAF_MAX_BACKWARD": "soon"}, "LEAF_MAX_BACKWARD"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse(tc.args, env(tc.env), io.Discard)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
	_, err := config.Parse([]string{"--kv-replicas", "9"}, env(nil), io.Discard)
	if !errors.Is(err, config.ErrConfig) {
		t.Fatalf("validation error %v does not wrap ErrConfig", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("--http", "127.0.0.1:1", "LEAF_DEFAULT_STEP", "10")
	f.Add("--nats-listen", "[::1]:4222", "LEAF_MAX_BATCH", "-1")
	f.Add("--name", "x", "LEAF_AUTO_CREATE", "false")
	f.Fuzz(func(t *testing.T, flagName, flagVal, envName, envVal string) {
		c, err := config.Parse([]string{flagName, flagVal}, env(map[string]string{envName: envVal}), io.Discard)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that Validate rejects: %v", err)
		}
	})
}

func TestParseSnowflake(t *testing.T) {
	c, err := config.Parse([]string{"--snowflake-layout", "uidgen", "--snowflake-epoch", "2025-01-01",
		"--worker-registry", "static", "--worker-id", "4000000"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Registry.Kind != config.RegistryStatic || c.Registry.WorkerID != 4000000 {
		t.Fatalf("config = %+v", c)
	}
	c, err = config.Parse(nil, env(map[string]string{"LEAF_MYSQL": "u:p@tcp(db:3306)/leaf"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Registry.Kind != config.RegistryMySQL || c.Registry.WorkerMySQL != c.Store.MySQL {
		t.Fatalf("with --mysql the default registry is %q on %q, want mysql on the same DSN", c.Registry.Kind, c.Registry.WorkerMySQL)
	}
	c, err = config.Parse(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Registry.Kind != config.RegistryKV || c.Registry.ZKAddr != "127.0.0.1:8080" {
		t.Fatalf("defaults: registry %q, zk-addr %q", c.Registry.Kind, c.Registry.ZKAddr)
	}
}
