package node_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/wire"
)

// TestRestartPreloadsOnlyServedTags: a node restarted on its data
// directory reserves ranges at start only for the tags it served, not for
// every tag in the store: a rolling restart over many tags wastes none of
// theirs.
func TestRestartPreloadsOnlyServedTags(t *testing.T) {
	t.Parallel()
	srv := natstest.RunServer(t)
	url := srv.ClientURL()
	dir := t.TempDir()
	n := startNode(t, config.Config{Name: "preload", NATS: config.NATSConfig{URL: url}, DataDir: dir})
	nc := natstest.Connect(t, url)
	for i := range 20 {
		admin(t, nc, wire.TagCreateSubject, wire.AdminRequest{Tag: fmt.Sprintf("cold%02d", i), Step: 10})
	}
	admin(t, nc, wire.TagCreateSubject, wire.AdminRequest{Tag: "hot", Step: 10})
	if _, err := takeReady(nc, "hot", 5, false); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	startNode(t, config.Config{Name: "preload", NATS: config.NATSConfig{URL: url}, DataDir: dir})
	rows := tagRows(t, nc)
	for i := range 20 {
		tag := fmt.Sprintf("cold%02d", i)
		if rows[tag] != 1 {
			t.Errorf("%s: max_id %d after a restart, want 1: a range was reserved for a tag the node never served", tag, rows[tag])
		}
	}
	t.Logf("hot: max_id %d after the restart", rows["hot"])
	if rows["hot"] <= 11 {
		t.Errorf("hot: max_id %d, want the restart to have preloaded a range (above 11)", rows["hot"])
	}
}

// tagRows reads every tag's max_id through leaf.admin.tags.
func tagRows(t *testing.T, nc interface {
	Request(string, []byte, time.Duration) (*nats.Msg, error)
}) map[string]int64 {
	t.Helper()
	reply, err := nc.Request(wire.TagsSubject, nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rows []wire.TagRow
	if err := json.Unmarshal(reply.Data, &rows); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, r := range rows {
		out[r.Tag] = r.MaxID
	}
	return out
}
