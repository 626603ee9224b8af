package node_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/node"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A password in the --nats URL never reaches the logs, nor the error of a
// failed connection.
func TestSecretsNotLogged(t *testing.T) {
	const secret = "s3cret-Pa55word"
	s := natstest.RunServer(t, func(o *server.Options) { o.Username, o.Password = "leafd", secret })
	url := strings.Replace(s.ClientURL(), "nats://", "nats://leafd:"+secret+"@", 1)
	var logs syncBuf
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := node.Start(ctx, node.Config{Name: "secret", NATS: url, HTTP: "127.0.0.1:0", DataDir: t.TempDir(),
		LogLevel: "debug"}, log)
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
	_, err = node.Start(ctx, node.Config{Name: "secret2", NATS: bad, HTTP: "off", DataDir: t.TempDir()}, log)
	if err == nil {
		t.Fatal("started with a wrong password")
	}
	for what, text := range map[string]string{"logs": logs.String(), "error": err.Error()} {
		if strings.Contains(text, secret) {
			t.Errorf("the password is in the %s:\n%s", what, text)
		}
	}
}
