package natsauth_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/leafmq/leafmq/internal/natsauth"
)

func TestLoadContext(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"XDG_CONFIG_HOME": dir}
	getenv := func(k string) string { return env[k] }
	if _, ok, err := natsauth.LoadContext("", getenv); ok || err != nil {
		t.Fatalf("no context: ok %v, %v", ok, err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "nats", "context"), 0o700); err != nil {
		t.Fatal(err)
	}
	body := `{"url":"nats://h:4222","creds":"/x.creds","ca":"/ca.pem","cert":"/c.pem","key":"/k.pem","description":"ignored"}`
	if err := os.WriteFile(filepath.Join(dir, "nats", "context", "a.json"), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	c, ok, err := natsauth.LoadContext("a", getenv)
	if err != nil || !ok || c.URL != "nats://h:4222" || c.Creds != "/x.creds" || c.Name != "a" {
		t.Fatalf("LoadContext(a) = %+v, %v, %v", c, ok, err)
	}
	var cfg natsauth.Config
	cfg.FromContext(c)
	if cfg.Creds != "/x.creds" || cfg.TLSCA != "/ca.pem" || cfg.TLSCert != "/c.pem" || cfg.TLSKey != "/k.pem" {
		t.Fatalf("FromContext: %+v", cfg)
	}
	cfg = natsauth.Config{User: "u", Password: "p"} // set by a flag: the context adds no second way
	cfg.FromContext(c)
	if cfg.Creds != "" || cfg.User != "u" {
		t.Fatalf("FromContext over a user: %+v", cfg)
	}
	for _, bad := range []string{"missing", "../a", "a/b"} {
		if _, _, err := natsauth.LoadContext(bad, getenv); !errors.Is(err, natsauth.ErrContext) {
			t.Errorf("LoadContext(%q) = %v, want ErrContext", bad, err)
		}
	}
	env["NATS_CONTEXT"] = "a"
	if c, ok, _ := natsauth.LoadContext("", getenv); !ok || c.Name != "a" {
		t.Fatalf("NATS_CONTEXT=a: %+v %v", c, ok)
	}
}
