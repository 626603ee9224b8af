package jskv_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/jskv"
	"github.com/leafmq/leafmq/internal/natstest"
)

// TestDirectLast: every key's last message, with its sequence and time;
// current only where the answer reaches the sequence asked for (a
// replica behind it is not), also once a newer write replaced the message
// at that sequence (a bucket keeping one message a key).
func TestDirectLast(t *testing.T) {
	srv := natstest.RunServer(t)
	nc := natstest.Connect(t, srv.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "dl", History: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "a"} {
		if _, err := kv.PutString(ctx, k, k+"-value"); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	subject := jskv.DirectSubject(js, "dl")
	read := func(seq uint64) (map[string]*jskv.StoredMsg, bool) {
		t.Helper()
		got := map[string]*jskv.StoredMsg{}
		current, err := jskv.DirectLast(ctx, nc, subject, "$KV.dl.>", seq, func(m *jskv.StoredMsg) error {
			got[m.Subject] = m
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return got, current
	}
	got, current := read(4)
	a, b := got["$KV.dl.a"], got["$KV.dl.b"]
	if !current || len(got) != 2 || a == nil || b == nil || a.Sequence != 3 || string(a.Data) != "a-value" || !b.Deleted() || b.Sequence != 4 {
		t.Fatalf("DirectLast(4) = %v, current %v; want a at 3, b's delete marker at 4, current", got, current)
	}
	if time.Since(a.Time) > time.Minute || a.Time.After(time.Now()) {
		t.Fatalf("a's time %v, want its write's", a.Time)
	}
	if _, current := read(5); current {
		t.Fatal("DirectLast(5) on a stream at 4: current, want behind")
	}
	if _, err := kv.PutString(ctx, "b", "again"); err != nil { // replaces sequence 4
		t.Fatal(err)
	}
	if _, current := read(4); !current {
		t.Fatal("DirectLast(4) after sequence 4 was replaced by 5: behind, want current")
	}
}
