package node_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/node"
)

// A password in the --nats URL never reaches the logs, nor the error of a
// failed connection.
func TestSecretsNotLogged(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-Pa55word"
	s := natstest.RunServer(t, func(o *server.Options) { o.Username, o.Password = "leafd", secret })
	url := strings.Replace(s.ClientURL(), "nats://", "nats://leafd:"+secret+"@", 1)
	var logs testenv.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := node.Start(ctx, config.Config{
		Name:    "secret",
		NATS:    config.NATSConfig{URL: url},
		HTTP:    config.HTTPConfig{Addr: "127.0.0.1:0"},
		DataDir: t.TempDir(),
		Log:     config.LogConfig{Level: "debug"},
	}, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "leafd started") {
		t.Fatalf("no start log:\n%s", logs.String())
	}
	bad := strings.Replace(url, secret, secret+"-wrong", 1)
	_, err = node.Start(ctx, config.Config{Name: "secret2", NATS: config.NATSConfig{URL: bad}, HTTP: config.HTTPConfig{Addr: "off"}, DataDir: t.TempDir()}, log)
	if err == nil {
		t.Fatal("started with a wrong password")
	}
	for what, text := range map[string]string{"logs": logs.String(), "error": err.Error()} {
		if strings.Contains(text, secret) {
			t.Errorf("the password is in the %s:\n%s", what, text)
		}
	}
}

// leafd authenticates with the --nats-* settings (here a user and a
// password file), and a config that cannot work is refused up front.
func TestNATSAuthSettings(t *testing.T) {
	t.Parallel()
	const secret = "file-Pa55word"
	s := natstest.RunServer(t, func(o *server.Options) { o.Username, o.Password = "leafd", secret })
	pwFile := t.TempDir() + "/pw"
	if err := os.WriteFile(pwFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs testenv.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	cfg, err := config.Parse([]string{"--nats", s.ClientURL(), "--http", "off", "--data", t.TempDir(), "--name", "authd",
		"--nats-user", "leafd"}, func(k string) string {
		if k == "LEAF_NATS_PASSWORD_FILE" {
			return pwFile
		}
		return ""
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := node.Start(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), secret) || strings.Contains(fmt.Sprintf("%+v", cfg), secret) {
		t.Fatal("the password leaked into the logs or the printed config")
	}
	for _, args := range [][]string{
		{"--nats-user", "u"},                                      // no --nats
		{"--nats", s.ClientURL(), "--nats-password", "p"},         // password without user
		{"--nats", s.ClientURL(), "--nats-creds", "/nonexistent"}, // unreadable file
		{"--nats", s.ClientURL(), "--nats-tls-cert", pwFile},      // cert without key
	} {
		if _, err := config.Parse(args, func(string) string { return "" }, io.Discard); !errors.Is(err, config.ErrConfig) {
			t.Errorf("%v: %v, want a config error", args, err)
		}
	}
}

// The opaque key never reaches the logs, /status.json or an error: only
// its id does; a malformed key is refused at start without printing it.
func TestOpaqueKeyNotLogged(t *testing.T) {
	t.Parallel()
	const key = "00112233445566778899aabbccddeeff"
	var logs testenv.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := node.Start(ctx, config.Config{
		Name:    "keyed",
		NATS:    config.NATSConfig{Listen: "127.0.0.1:-1"},
		HTTP:    config.HTTPConfig{Addr: "127.0.0.1:0"},
		DataDir: t.TempDir(),
		Log:     config.LogConfig{Level: "debug"},
		Store:   config.StoreConfig{OpaqueKey: key},
	}, log)
	if err != nil {
		t.Fatal(err)
	}
	status := httpBody(t, "http://"+n.HTTPAddr()+"/status.json")
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "key_id=") {
		t.Fatalf("no key id in the logs:\n%s", logs.String())
	}
	cfg := config.Config{Store: config.StoreConfig{OpaqueKey: key[:30] + "zz"}}
	err = cfg.Validate()
	for what, text := range map[string]string{"logs": logs.String(), "status": status, "error": fmt.Sprint(err)} {
		if strings.Contains(text, key) || strings.Contains(text, key[:30]) {
			t.Errorf("the key is in the %s:\n%s", what, text)
		}
	}
	if err == nil {
		t.Fatal("a malformed key was accepted")
	}
}

func httpBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
