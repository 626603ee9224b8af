package kvlease_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/mono"
	"github.com/leafmq/leafmq/mono/kvlease"
	"github.com/leafmq/leafmq/mono/leasetest"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/memstore"
	"github.com/leafmq/leafmq/wire"
)

func TestConformance(t *testing.T) {
	s := natstest.RunServer(t)
	n := 0
	leasetest.Run(t, time.Second, func(t *testing.T, ttl time.Duration) mono.Lease {
		js, err := jetstream.New(natstest.Connect(t, s.ClientURL()))
		if err != nil {
			t.Fatal(err)
		}
		n++
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		l, err := kvlease.Open(ctx, js, kvlease.Options{Bucket: "mono" + string(rune('a'+n)), TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
}

// TestAcquireAfterHandDeleteWaits: a lease freed by its holder's Release
// is taken at once; one deleted or purged by hand (`nats kv del leaf_mono
// TAG`), or with no trace at all (its markers erased too, a key never
// written), is taken with a Wait that ends a TTL after the last record of
// the key the Lease saw (or after it began to watch the bucket), because a
// holder may still be serving until its fence passes. One the server
// expired is taken once the watch has seen the marker, at once.
func TestAcquireAfterHandDeleteWaits(t *testing.T) {
	s := natstest.RunServer(t)
	js, err := jetstream.New(natstest.Connect(t, s.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const ttl = time.Second
	sent := time.Now() // before the watch began: no holder can serve past sent+TTL
	l, err := kvlease.Open(ctx, js, kvlease.Options{Bucket: "waits", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "waits")
	if err != nil {
		t.Fatal(err)
	}
	// acquire takes t for n: at once (Wait 0), or serving no sooner than a
	// TTL after the last acquire was sent.
	acquire := func(atOnce bool, why string) mono.Grant {
		t.Helper()
		before := time.Now()
		g, err := l.Acquire(ctx, "t", "n")
		if err != nil {
			t.Fatalf("%s: %v", why, err)
		}
		switch serves := before.Add(g.Wait); {
		case atOnce && g.Wait != 0:
			t.Fatalf("%s: Acquire = %+v; want Wait 0", why, g)
		case !atOnce && serves.Before(sent.Add(ttl)):
			t.Fatalf("%s: Acquire = %+v: serves %v before the last holder's lease ran out", why, g, sent.Add(ttl).Sub(serves))
		}
		sent = before
		return g
	}
	g := acquire(false, "a key with no message")
	if err := l.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	acquire(true, "after a Release")
	if err := kv.Delete(ctx, "t"); err != nil { // the operator
		t.Fatal(err)
	}
	acquire(false, "after nats kv del")
	if err := kv.Purge(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	g = acquire(false, "after nats kv purge")
	if err := l.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	acquire(true, "after a Release")
	if err := kv.Purge(ctx, "t"); err != nil { // the operator, then every marker erased
		t.Fatal(err)
	}
	if err := kv.PurgeDeletes(ctx, jetstream.DeleteMarkersOlderThan(-1)); err != nil {
		t.Fatal(err)
	}
	acquire(false, "after a purge and its marker erased")
	// Not renewed: the server expires the key after its TTL.
	deadline := time.Now().Add(10 * time.Second)
	for {
		g, err = l.Acquire(ctx, "t", "n")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the key did not expire: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if g.Wait > ttl/2 {
		t.Fatalf("Acquire after the TTL ran out = %+v, want (almost) no wait", g)
	}
}

// TestAcquireAfterForgedFreeWaits: a lease looks freed by its
// holder or its TTL only when the bucket shows it. An operator's value put
// with a short TTL over a live lease (`nats kv put` with a per-message
// TTL), whose expiry the server marks as any other; a release marker
// written by hand: each leaves a holder that still serves, and Acquire must wait a TTL.
// Both break order unless the bucket keeps the record behind a marker.
func TestAcquireAfterForgedFreeWaits(t *testing.T) {
	s := natstest.RunServer(t)
	js, err := jetstream.New(natstest.Connect(t, s.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const ttl = 3 * time.Second
	l, err := kvlease.Open(ctx, js, kvlease.Options{Bucket: "forged", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	// live makes n1 the holder of tag, renewed; renewed is when the
	// renewal was sent: n1 may serve until renewed+TTL.
	var renewed time.Time
	live := func(tag string) mono.Grant {
		t.Helper()
		g, err := l.Acquire(ctx, tag, "n1")
		if err != nil {
			t.Fatal(err)
		}
		renewed = time.Now()
		if g, err = l.Renew(ctx, g); err != nil {
			t.Fatal(err)
		}
		return g
	}
	// next has n2 take tag as soon as it can, and checks that it serves
	// (after the grant's Wait) no sooner than n1's lease ran out.
	next := func(tag, why string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			asked := time.Now() // the caller counts Wait from its send
			g, err := l.Acquire(ctx, tag, "n2")
			if err == nil {
				if serves := asked.Add(g.Wait); serves.Before(renewed.Add(ttl)) {
					t.Fatalf("%s: Acquire = %+v: n2 serves %v before n1's lease runs out", why, g, renewed.Add(ttl).Sub(serves))
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %v", why, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	live("put")
	if _, err := js.Publish(ctx, "$KV.forged.put", []byte(`{"holder":"op","at":0}`), jetstream.WithMsgTTL(time.Second)); err != nil {
		t.Fatal(err)
	}
	next("put", "a value with a 1s TTL put over a live lease, expired")

	for i, h := range []func(g mono.Grant) nats.Header{
		func(mono.Grant) nats.Header { return nats.Header{"KV-Operation": {"DEL"}, "Leaf-Released": {"n9"}} },
		func(mono.Grant) nats.Header { return nats.Header{"KV-Operation": {"DEL"}, "Leaf-Released": {"n1"}} },
		func(g mono.Grant) nats.Header {
			return nats.Header{"KV-Operation": {"DEL"}, "Leaf-Released": {"n1"}, "Leaf-Released-Rev": {strconv.FormatUint(g.Rev-1, 10)}}
		},
	} {
		tag := fmt.Sprintf("rel%d", i)
		msg := &nats.Msg{Subject: "$KV.forged." + tag, Header: h(live(tag))}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
		next(tag, fmt.Sprintf("a release marker by hand %v", msg.Header))
	}

	// The server's TTL marker forged: two of them push the holder's record
	// out of the key's history; one with a rollup clears it.
	for i, forged := range []nats.Header{
		{"Nats-Marker-Reason": {"MaxAge"}},
		{"Nats-Marker-Reason": {"MaxAge"}, "Nats-Rollup": {"sub"}},
	} {
		tag := fmt.Sprintf("mark%d", i)
		live(tag)
		for range 2 - i {
			if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: "$KV.forged." + tag, Header: forged}); err != nil {
				t.Fatal(err)
			}
		}
		next(tag, fmt.Sprintf("the server's TTL marker by hand %v", forged))
	}

	// The holder's own Release is still taken at once.
	g := live("own")
	if err := l.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if g, err := l.Acquire(ctx, "own", "n2"); err != nil || g.Wait != 0 {
		t.Fatalf("Acquire after the holder's Release = %+v, %v; want Wait 0", g, err)
	}
}

// TestOpenKeepsHistory: a bucket made by an older leafd keeps one message
// per key; Open raises it to two, so that a release marker can be checked
// against the record it released.
func TestOpenKeepsHistory(t *testing.T) {
	s := natstest.RunServer(t)
	js, err := jetstream.New(natstest.Connect(t, s.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "older", History: 1, LimitMarkerTTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := kvlease.Open(ctx, js, kvlease.Options{Bucket: "older", TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "older")
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil || st.History() != 2 {
		t.Fatalf("history of the bucket after Open = %v, %v; want 2", st, err)
	}
}

// TestMaxAgeBucketRefused: a bucket with a max age (`nats kv
// add leaf_mono --ttl 1s`, made again under running nodes) expires a lease
// while its holder serves, and the server's marker looks like the
// holder's own expiry. Open refuses such a bucket, and so does Acquire in
// one made again under a running Lease, or order breaks.
func TestMaxAgeBucketRefused(t *testing.T) {
	s := natstest.RunServer(t)
	js, err := jetstream.New(natstest.Connect(t, s.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	aged := jetstream.KeyValueConfig{Bucket: "aged", History: 2, TTL: time.Second, LimitMarkerTTL: 5 * time.Second}
	if _, err := js.CreateKeyValue(ctx, aged); err != nil {
		t.Fatal(err)
	}
	if _, err := kvlease.Open(ctx, js, kvlease.Options{Bucket: "aged", TTL: 5 * time.Second}); !errors.Is(err, segment.ErrInvalid) || !strings.Contains(err.Error(), "max age") {
		t.Fatalf("Open of a bucket with a max age = %v, want ErrInvalid naming the max age", err)
	}

	// Made again under a running Lease.
	l, err := kvlease.Open(ctx, js, kvlease.Options{Bucket: "remade", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(ctx, "remade"); err != nil {
		t.Fatal(err)
	}
	aged.Bucket = "remade"
	remakeKV(ctx, t, js, aged)
	if _, err := l.Acquire(ctx, "t", "n1"); !errors.Is(err, segment.ErrInvalid) || !strings.Contains(err.Error(), "max age") {
		t.Fatalf("Acquire in a bucket made again with a max age = %v, want ErrInvalid naming the max age", err)
	}
}

// TestStreamEditWaits: an operator edits the bucket's stream
// under running nodes, then puts values with a 1s TTL over a live lease.
// Cut back to one message per key (`nats kv edit leaf_mono --history 1`),
// one put leaves nothing but its own expiry marker; with the marker TTL
// lowered below the lease's (`--marker-ttl 1s`), two puts push the
// holder's record out and expire before its lease. Acquire trusts a TTL
// marker only while the bucket keeps two messages per key and a marker TTL
// of at least the lease's.
func TestStreamEditWaits(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*jetstream.StreamConfig)
		puts int
	}{
		{"history 1", func(c *jetstream.StreamConfig) { c.MaxMsgsPerSubject = 1 }, 1},
		{"marker ttl 1s", func(c *jetstream.StreamConfig) { c.SubjectDeleteMarkerTTL = time.Second }, 2},
	} {
		for _, restore := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/restored=%v", tc.name, restore), func(t *testing.T) { streamEditWaits(t, tc.edit, tc.puts, restore) })
		}
	}
}

// streamEditWaits edits the stream, puts over a live lease, and with
// restore puts the settings back before the next Acquire: the settings
// that count are those in force when the puts were stored, not when the
// next leader acquires.
func streamEditWaits(t *testing.T, edit func(*jetstream.StreamConfig), puts int, restore bool) {
	s := natstest.RunServer(t)
	js, err := jetstream.New(natstest.Connect(t, s.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const ttl = 3 * time.Second
	l, err := kvlease.Open(ctx, js, kvlease.Options{Bucket: "edit", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	str, err := js.Stream(ctx, "KV_edit")
	if err != nil {
		t.Fatal(err)
	}
	cfg := str.CachedInfo().Config
	edit(&cfg)
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	g, err := l.Acquire(ctx, "t", "n1")
	if err != nil {
		t.Fatal(err)
	}
	renewed := time.Now()
	if _, err := l.Renew(ctx, g); err != nil {
		t.Fatal(err)
	}
	for range puts {
		if _, err := js.Publish(ctx, "$KV.edit.t", []byte(`{"holder":"op","at":0}`), jetstream.WithMsgTTL(time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if restore {
		if _, err := js.UpdateStream(ctx, str.CachedInfo().Config); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		asked := time.Now()
		g, err := l.Acquire(ctx, "t", "n2")
		if err == nil {
			if serves := asked.Add(g.Wait); serves.Before(renewed.Add(ttl)) {
				t.Fatalf("Acquire = %+v: n2 serves %v before n1's lease runs out", g, renewed.Add(ttl).Sub(serves))
			}
			return
		}
		if !errors.Is(err, mono.ErrHeld) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBucketMadeAgainWaits: the bucket deleted and made again under a
// running Lease (`nats kv del leaf_mono`, then a node makes it again). Its
// watch follows the old stream; a holder on the new one, whose key is then
// deleted by hand, is waited out, and the Lease follows the new bucket.
func TestBucketMadeAgainWaits(t *testing.T) {
	s := natstest.RunServer(t)
	ctx := t.Context()
	open := func() (*kvlease.Lease, jetstream.JetStream) {
		js, err := jetstream.New(natstest.Connect(t, s.ClientURL()))
		if err != nil {
			t.Fatal(err)
		}
		l, err := kvlease.Open(ctx, js, kvlease.Options{Bucket: "again", TTL: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l, js
	}
	old, js := open()
	g, err := old.Acquire(ctx, "t", "n0")
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(ctx, "again"); err != nil {
		t.Fatal(err)
	}
	fresh, _ := open() // makes the bucket again
	if _, err := fresh.Acquire(ctx, "t", "n1"); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	g, err = fresh.Acquire(ctx, "u", "n1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.Renew(ctx, g); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "again")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"t", "u"} {
		if err := kv.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range []string{"t", "u"} {
		asked := time.Now()
		g, err := old.Acquire(ctx, key, "n2")
		if err != nil {
			t.Fatal(err)
		}
		if serves := asked.Add(g.Wait); serves.Before(sent.Add(2 * time.Second)) {
			t.Fatalf("%s: Acquire = %+v through the old bucket's watch: n2 serves %v before n1's lease runs out", key, g, sent.Add(2*time.Second).Sub(serves))
		}
	}
}

// TestFollowerAwayWaits: a follower stops hearing the
// bucket (cut off from NATS) while the holder renews; the key is then
// purged with its renewals (`nats stream purge KV_leaf_mono --subject
// '$KV.leaf_mono.TAG'`, no marker). What the follower saw last is older
// than the holder's last renewal: it must wait out the renewals it missed,
// not trust what it had seen.
func TestFollowerAwayWaits(t *testing.T) {
	s := natstest.RunServer(t)
	ctx := t.Context()
	const ttl = 2 * time.Second
	open := func() (*kvlease.Lease, jetstream.JetStream) {
		js, err := jetstream.New(natstest.Connect(t, s.ClientURL()))
		if err != nil {
			t.Fatal(err)
		}
		l, err := kvlease.Open(ctx, js, kvlease.Options{Bucket: "away", TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l, js
	}
	holder, js := open()
	follower, _ := open()
	time.Sleep(ttl) // the follower's watch has run for a TTL
	g, err := holder.Acquire(ctx, "t", "h")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the follower sees the acquire
	kvlease.StopWatch(follower)
	var sent time.Time
	for range 3 {
		time.Sleep(ttl / 3)
		sent = time.Now()
		if g, err = holder.Renew(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	str, err := js.Stream(ctx, "KV_away")
	if err != nil {
		t.Fatal(err)
	}
	if err := str.Purge(ctx, jetstream.WithPurgeSubject("$KV.away.t")); err != nil {
		t.Fatal(err)
	}
	asked := time.Now() // the caller counts Wait from its send
	ng, err := follower.Acquire(ctx, "t", "f")
	if err != nil {
		t.Fatal(err)
	}
	if serves := asked.Add(ng.Wait); serves.Before(sent.Add(ttl)) {
		t.Fatalf("Acquire = %+v: the follower serves %v before the holder's last renewal runs out", ng, sent.Add(ttl).Sub(serves))
	}
}

// TestBucketDeletedMadeAgain: the bucket deleted by hand while a holder
// leads (`nats kv del --bucket leaf_mono`) and nobody makes it again: the
// next Acquire makes it and waits a whole TTL, and the old holder loses
// its lease at its next renewal. Without it the tag had no leader until a
// node restarted.
func TestBucketDeletedMadeAgain(t *testing.T) {
	s := natstest.RunServer(t)
	ctx := t.Context()
	js, err := jetstream.New(natstest.Connect(t, s.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second
	open := func() *kvlease.Lease {
		l, err := kvlease.Open(ctx, js, kvlease.Options{Bucket: "gone", TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	holder, other := open(), open()
	g, err := holder.Acquire(ctx, "t", "n0")
	if err != nil {
		t.Fatal(err)
	}
	renewed := time.Now()
	if g, err = holder.Renew(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	asked := time.Now()
	ng, err := other.Acquire(ctx, "t", "n1")
	for tries := 0; err != nil && tries < 20 && strings.Contains(err.Error(), "10049"); tries++ {
		// The server still removes the deleted stream's store; a leader
		// asks again (the wait is still judged from the first ask).
		time.Sleep(50 * time.Millisecond)
		ng, err = other.Acquire(ctx, "t", "n1")
	}
	if err != nil {
		t.Fatalf("Acquire after the bucket was deleted: %v", err)
	}
	if serves := asked.Add(ng.Wait); serves.Before(renewed.Add(ttl)) {
		t.Fatalf("Acquire = %+v: n1 serves %v before n0's lease runs out", ng, renewed.Add(ttl).Sub(serves))
	}
	if _, err := holder.Renew(ctx, g); !errors.Is(err, mono.ErrLost) {
		t.Fatalf("the old holder's renewal in the new bucket: %v, want ErrLost", err)
	}
}

// TestBucketMadeAgainWithoutTTLs: the bucket deleted and made again by
// hand without per-key TTLs under a running holder (`nats kv del leaf_mono
// -f; nats kv add leaf_mono --history 2`): every grant there fails (the
// stream refuses a message with a TTL) and the tag has no leader for good.
// Acquire turns the TTLs on and grants, with a whole TTL's wait as in any
// bucket made again; the old holder loses its lease at its next renewal;
// a Lease opened on such a bucket turns them on too.
func TestBucketMadeAgainWithoutTTLs(t *testing.T) {
	s := natstest.RunServer(t)
	ctx := t.Context()
	js, err := jetstream.New(natstest.Connect(t, s.ClientURL()))
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 2 * time.Second
	open := func(bucket string) *kvlease.Lease {
		l, err := kvlease.Open(ctx, js, kvlease.Options{Bucket: bucket, TTL: ttl})
		if err != nil {
			t.Fatalf("Open %s: %v", bucket, err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	}
	holder, other := open("nottl"), open("nottl")
	g, err := holder.Acquire(ctx, "t", "n0")
	if err != nil {
		t.Fatal(err)
	}
	renewed := time.Now()
	if g, err = holder.Renew(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(ctx, "nottl"); err != nil {
		t.Fatal(err)
	}
	remakeKV(ctx, t, js, jetstream.KeyValueConfig{Bucket: "nottl", History: 2})
	asked := time.Now()
	ng, err := other.Acquire(ctx, "t", "n1")
	if err != nil {
		t.Fatalf("Acquire in the bucket made again without TTLs: %v", err)
	}
	if serves := asked.Add(ng.Wait); serves.Before(renewed.Add(ttl)) {
		t.Fatalf("Acquire = %+v: n1 serves %v before n0's lease runs out", ng, renewed.Add(ttl).Sub(serves))
	}
	if _, err := holder.Renew(ctx, g); !errors.Is(err, mono.ErrLost) {
		t.Fatalf("the old holder's renewal in the new bucket: %v, want ErrLost", err)
	}
	if _, err := other.Renew(ctx, ng); err != nil {
		t.Fatalf("the new holder's renewal: %v", err)
	}
	str, err := js.Stream(ctx, "KV_nottl")
	if err != nil {
		t.Fatal(err)
	}
	if c := str.CachedInfo().Config; !c.AllowMsgTTL || c.SubjectDeleteMarkerTTL != ttl {
		t.Fatalf("stream after Acquire: AllowMsgTTL %v, marker TTL %v; want on, %v", c.AllowMsgTTL, c.SubjectDeleteMarkerTTL, ttl)
	}

	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "bare", History: 2}); err != nil {
		t.Fatal(err)
	}
	l := open("bare")
	asked = time.Now()
	if g, err = l.Acquire(ctx, "t", "n2"); err != nil {
		t.Fatalf("Acquire in a bucket opened without TTLs: %v", err)
	}
	if g.Wait < ttl-time.Since(asked) {
		t.Fatalf("Acquire = %+v in a bucket just opened: want a whole TTL's wait", g)
	}
}

// TestLeadersResumeAfterBucketWithoutTTLs: two leaders of a tag on the
// bucket, which is then made again by hand without per-key TTLs. A leader
// leads again within a few TTLs (the old one steps down at its next
// renewal, the new one waits a whole TTL), and never are two leading at
// once.
func TestLeadersResumeAfterBucketWithoutTTLs(t *testing.T) {
	s := natstest.RunServer(t)
	ctx := t.Context()
	const ttl = 2 * time.Second
	store := memstore.New()
	if err := store.Create(ctx, segment.Tag{Name: wire.MustTag("m"), Step: 10}); err != nil {
		t.Fatal(err)
	}
	var js jetstream.JetStream
	var leaders []*mono.Leader
	for _, node := range []string{"a", "b"} {
		var err error
		if js, err = jetstream.New(natstest.Connect(t, s.ClientURL())); err != nil {
			t.Fatal(err)
		}
		l, err := kvlease.Open(ctx, js, kvlease.Options{Bucket: "live", TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		ld, err := mono.NewLeader(mono.Config{Tag: wire.MustTag("m"), Node: node, Lease: l, Step: 10,
			Ranges: &segment.Reserver{Store: store, Logger: slog.New(slog.DiscardHandler)}, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		go ld.Run(context.Background())
		t.Cleanup(ld.Close)
		leaders = append(leaders, ld)
	}
	// leading counts the leaders leading now, failing the test at two.
	leading := func() int {
		n := 0
		for _, ld := range leaders {
			if ld.Leading() {
				n++
			}
		}
		if n > 1 {
			t.Fatal("two leaders at once")
		}
		return n
	}
	for deadline := time.Now().Add(3 * ttl); leading() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no leader at first")
		}
	}
	if err := js.DeleteKeyValue(ctx, "live"); err != nil {
		t.Fatal(err)
	}
	remakeKV(ctx, t, js, jetstream.KeyValueConfig{Bucket: "live", History: 2})
	remade := time.Now()
	// The old leader stops within a TTL; then a whole TTL's wait, and a
	// retry or two.
	for left := 0; left < 2; time.Sleep(10 * time.Millisecond) {
		switch n := leading(); {
		case n == 0:
			left = 1
		case left == 1:
			left = 2
		}
		if time.Since(remade) > 4*ttl {
			t.Fatalf("no leader %v after the bucket was made again without TTLs", 4*ttl)
		}
	}
	t.Logf("leading again %v after the bucket was made again", time.Since(remade).Round(time.Millisecond))
}

// remakeKV makes a bucket again right after it was deleted, as an
// operator would, trying again while the server still removes the old
// stream's store (err_code 10049, "error creating store for stream").
func remakeKV(ctx context.Context, t *testing.T, js jetstream.JetStream, cfg jetstream.KeyValueConfig) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := js.CreateKeyValue(ctx, cfg)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("make bucket %s again: %v", cfg.Bucket, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
