package kvstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/kvstore"
	"github.com/leafmq/leafmq/wire"
)

// filled is what fill left in a bucket: the live tags and their modes.
type filled struct {
	tags  []string
	modes map[string]segment.Mode
}

// fill writes n tags straight to bucket's stream, in published batches,
// with the history a walk has to get right: mode keys, second revisions,
// delete and purge markers, tags written again after their marker, and
// keys that are not this package's.
func fill(t testing.TB, js jetstream.JetStream, bucket string, n int) filled {
	t.Helper()
	ctx := testCtx(t)
	rows := map[string]bool{} // tag: live
	modes := map[string]segment.Mode{}
	var msgs []*nats.Msg
	put := func(key string, v any, op string) {
		m := nats.NewMsg("$KV." + bucket + "." + key)
		if op != "" {
			m.Header.Set("KV-Operation", op)
			if op == "PURGE" {
				m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
			}
		} else {
			var err error
			if m.Data, err = json.Marshal(v); err != nil {
				t.Fatal(err)
			}
		}
		msgs = append(msgs, m)
	}
	row := func(maxID int64) map[string]any { return map[string]any{"max_id": maxID, "step": 1000} }
	mono := segment.Mode{Kind: segment.KindMono}
	tag := func(i int) string { return fmt.Sprintf("w%05d", i) }
	for i := range n {
		if i%10 == 0 {
			put("mode."+tag(i), mono, "")
			modes[tag(i)] = mono
		}
		put(tag(i), row(1000), "")
		rows[tag(i)] = true
	}
	put("not.a.tag", row(1), "")
	for i := range n {
		switch {
		case i%7 == 0 && i%11 == 0:
			put(tag(i), nil, "DEL")
			put(tag(i), row(5000), "") // restarted after its marker
		case i%7 == 0:
			put(tag(i), nil, "DEL")
			rows[tag(i)] = false
		case i%11 == 0:
			put(tag(i), nil, "PURGE")
			rows[tag(i)] = false
		case i%3 == 0:
			put(tag(i), row(2000), "")
		}
	}
	put("mode."+tag(20), nil, "DEL") // a mode key gone: the row's own mode counts
	modes[tag(20)] = segment.Mode{Kind: segment.KindSegment}
	for chunk := range slices.Chunk(msgs, 1000) {
		for _, m := range chunk {
			if _, err := js.PublishMsgAsync(m); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			t.Fatal("publishing the bucket: ", ctx.Err())
		}
	}
	var f filled
	f.modes = map[string]segment.Mode{}
	for k, live := range rows {
		if !live {
			continue
		}
		f.tags = append(f.tags, k)
		md, ok := modes[k]
		if !ok {
			md = segment.Mode{Kind: segment.KindSegment}
		}
		f.modes[k] = md
	}
	slices.Sort(f.tags)
	return f
}

// check compares s's Tags and Modes with what fill left.
func (f filled) check(t testing.TB, s *kvstore.Store) {
	t.Helper()
	ctx := testCtx(t)
	tags, err := s.Tags(ctx)
	if err != nil {
		t.Fatalf("Tags: %v", err)
	}
	if !slices.Equal(tags, f.tags) {
		t.Fatalf("Tags: %d tags, want %d (first %q, want %q)", len(tags), len(f.tags), first(tags), first(f.tags))
	}
	modes, err := s.Modes(ctx)
	if err != nil {
		t.Fatalf("Modes: %v", err)
	}
	if !maps.EqualFunc(modes, f.modes, segment.Mode.Equal) {
		for k, want := range f.modes {
			if got := modes[k]; !got.Equal(want) {
				t.Fatalf("Modes: %d tags, want %d; %q is %v, want %v", len(modes), len(f.modes), k, got, want)
			}
		}
		t.Fatalf("Modes: %d tags, want %d", len(modes), len(f.modes))
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// TestWalkBigBucket: Tags and Modes over a bucket far bigger than one
// request per message can read within the store's timeout. The timeout
// bounds each step of the walk, not the walk.
func TestWalkBigBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("20,000 tags in -short mode")
	}
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	s := open(t, js, kvstore.Options{Bucket: "big", Timeout: time.Second})
	f := fill(t, js, "big", 20_000)
	f.check(t, s)
}

// TestWalkWithoutDirect: a bucket whose stream does not allow direct gets
// is walked through the leader alone, with the same answer.
func TestWalkWithoutDirect(t *testing.T) {
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	s := open(t, js, kvstore.Options{Bucket: "nodirect"})
	ctx := testCtx(t)
	st, err := js.Stream(ctx, "KV_nodirect")
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.AllowDirect = false
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	f := fill(t, js, "nodirect", 300)
	f.check(t, s)
}

// TestWalkCluster: on an R3 bucket, a store on each server walks the same
// bucket to the same answer, and a tag created through one server is in
// the Tags of a store on another right after its Create returns, whichever
// replica answers the batches.
func TestWalkCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test in -short mode")
	}
	servers := natstest.RunCluster(t, 3)
	stores := make([]*kvstore.Store, len(servers))
	var js0 jetstream.JetStream
	for i, srv := range servers {
		js := newJS(t, srv.ClientURL())
		if i == 0 {
			js0 = js
		}
		stores[i] = open(t, js, kvstore.Options{Bucket: "walk3", Replicas: 3, Timeout: 5 * time.Second})
	}
	f := fill(t, js0, "walk3", 3000)
	for _, s := range stores {
		f.check(t, s)
	}
	ctx := testCtx(t)
	for i := range 30 {
		name := fmt.Sprintf("fresh%d", i)
		if err := stores[i%3].Create(ctx, segment.Tag{Name: wire.MustTag(name), Step: 10}); err != nil {
			t.Fatal(err)
		}
		tags, err := stores[(i+1)%3].Tags(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := slices.BinarySearch(tags, name); !ok {
			t.Fatalf("Tags through server %d right after Create through server %d: no %q", (i+1)%3, i%3, name)
		}
	}
}

// BenchmarkTags walks a bucket of 10,000 tags (about 16,000 messages).
func BenchmarkTags(b *testing.B) {
	srv := natstest.RunServer(b)
	js := newJS(b, srv.ClientURL())
	s := open(b, js, kvstore.Options{Bucket: "bench", Timeout: time.Minute})
	f := fill(b, js, "bench", 10_000)
	ctx := context.Background()
	for b.Loop() {
		tags, err := s.Tags(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(tags) != len(f.tags) {
			b.Fatalf("%d tags, want %d", len(tags), len(f.tags))
		}
	}
}

// lagging answers the direct gets of bucket's stream on nc as a replica
// that has applied nothing after sequence upTo would: it reads the
// leader's messages and stops at upTo.
func lagging(t testing.TB, nc *nats.Conn, bucket string, upTo uint64) {
	t.Helper()
	type stored struct {
		Subject string `json:"subject"`
		Seq     uint64 `json:"seq"`
		Header  []byte `json:"hdrs"`
		Data    []byte `json:"data"`
	}
	sub, err := nc.Subscribe("$JS.API.DIRECT.GET.KV_"+bucket, func(req *nats.Msg) {
		var r struct {
			Seq     uint64 `json:"seq"`
			NextFor string `json:"next_by_subj"`
			Batch   int    `json:"batch"`
		}
		if json.Unmarshal(req.Data, &r) != nil {
			return
		}
		sent := 0
		for ; sent < r.Batch; sent++ {
			body, _ := json.Marshal(map[string]any{"seq": r.Seq, "next_by_subj": r.NextFor})
			reply, err := nc.Request("$JS.API.STREAM.MSG.GET.KV_"+bucket, body, 5*time.Second)
			if err != nil {
				return
			}
			var got struct{ Message *stored }
			if json.Unmarshal(reply.Data, &got) != nil || got.Message == nil || got.Message.Seq > upTo {
				break
			}
			m := nats.NewMsg(req.Reply)
			if len(got.Message.Header) > 0 {
				if m.Header, err = nats.DecodeHeadersMsg(got.Message.Header); err != nil {
					return
				}
			}
			m.Header.Set("Nats-Subject", got.Message.Subject)
			m.Header.Set("Nats-Sequence", fmt.Sprint(got.Message.Seq))
			m.Header.Set("Nats-Num-Pending", "1")
			m.Data = got.Message.Data
			_ = nc.PublishMsg(m)
			r.Seq = got.Message.Seq + 1
		}
		end := nats.NewMsg(req.Reply)
		if sent == 0 {
			end.Header.Set("Status", "404")
		} else {
			end.Header.Set("Status", "204")
			end.Header.Set("Nats-Num-Pending", fmt.Sprint(min(sent/r.Batch, 1)))
		}
		_ = nc.PublishMsg(end)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestWalkLaggingReplica: a replica whose batches stop short of the
// writes the leader acknowledged does not hide them: the walk reads them
// from the leader.
func TestWalkLaggingReplica(t *testing.T) {
	srv := natstest.RunServer(t)
	js := newJS(t, srv.ClientURL())
	s := open(t, js, kvstore.Options{Bucket: "lag"})
	ctx := testCtx(t)
	st, err := js.Stream(ctx, "KV_lag")
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.AllowDirect = false // the only answers are lagging's
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	f := fill(t, js, "lag", 1500)
	lagging(t, natstest.Connect(t, srv.ClientURL()), "lag", 1200)
	f.check(t, s)
}
