package bench

import (
	"bytes"
	"context"
	"errors"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/internal/natstest"
	"github.com/leafmq/leafmq/wire"
)

const testSubject = "leaf.segment.bench"

// fakeLeaf is a tiny leafd: a queue subscriber on its own connection that
// answers sequential ids in the wire format, or an error, and checks that
// requests are in the exact wire format.
type fakeLeaf struct {
	next     atomic.Int64 // last id handed out
	served   atomic.Int64 // requests seen
	badBody  atomic.Int64 // requests whose body is not the exact format
	wantBody []byte       // the exact body requests must carry
	errCode  string       // if set, answer every request with this error code
	dropNth  int64        // if > 0, do not answer every dropNth request (after the first)
}

func startFake(t testing.TB, url string, f *fakeLeaf) {
	t.Helper()
	nc := natstest.Connect(t, url, nats.Name("fake-leafd"))
	sub, err := nc.QueueSubscribe(testSubject, wire.QueueGroup, f.handle)
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatalf("pending limits: %v", err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

func (f *fakeLeaf) handle(m *nats.Msg) {
	k := f.served.Add(1)
	if !bytes.Equal(m.Data, f.wantBody) {
		f.badBody.Add(1)
	}
	if f.dropNth > 0 && k > 1 && k%f.dropNth == 0 {
		return
	}
	if f.errCode != "" {
		h := nats.Header{}
		h.Set(wire.ErrorCodeHeader, f.errCode)
		h.Set(wire.ErrorHeader, "store down")
		_ = m.RespondMsg(&nats.Msg{Header: h})
		return
	}
	n, err := wire.ParseCount(m.Data, wire.DefaultMaxBatch)
	if err != nil {
		h := nats.Header{}
		h.Set(wire.ErrorCodeHeader, wire.CodeBadRequest)
		_ = m.RespondMsg(&nats.Msg{Header: h})
		return
	}
	first := f.next.Add(int64(n)) - int64(n) + 1
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = first + int64(i)
	}
	if wire.WantsBinary(m.Header) {
		_ = m.Respond(wire.AppendBinary(nil, ids))
	} else {
		_ = m.Respond(wire.AppendDecimal(nil, ids))
	}
}

func bodyFor(batch int) []byte {
	if batch <= 1 {
		return nil
	}
	return []byte(strconv.Itoa(batch))
}

// setup starts a server, a fake leafd and a client connection that has made
// one request already (so its shared request subscription exists before any
// goroutine count is taken).
func setup(t *testing.T, f *fakeLeaf) *nats.Conn {
	t.Helper()
	srv := natstest.RunServer(t, func(o *server.Options) { o.JetStream = false })
	if f != nil {
		startFake(t, srv.ClientURL(), f)
	}
	nc := natstest.Connect(t, srv.ClientURL(), nats.Name("bench-client"))
	_, _ = nc.Request("_warm.up", nil, 10*time.Millisecond)
	return nc
}

// noLeaks snapshots the goroutine count and returns a check that waits for
// it to come back down, so no run may leave a goroutine behind.
func noLeaks(t *testing.T) func() {
	t.Helper()
	before := runtime.NumGoroutine()
	return func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				t.Fatalf("goroutines: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func short(o Options) Options {
	if o.Duration == 0 {
		o.Duration = 300 * time.Millisecond
	}
	if o.Warmup == 0 {
		o.Warmup = 50 * time.Millisecond
	}
	if o.Concurrency == 0 {
		o.Concurrency = 4
	}
	return o
}

func TestRunModes(t *testing.T) {
	tests := []struct {
		name string
		o    Options
	}{
		{"request single decimal", Options{Mode: ModeRequest}},
		{"request batch binary", Options{Mode: ModeRequest, Batch: 10, Binary: true}},
		{"request batch decimal", Options{Mode: ModeRequest, Batch: 100}},
		{"pipelined single decimal", Options{Mode: ModePipelined}},
		{"pipelined batch binary", Options{Mode: ModePipelined, Batch: 25, Binary: true, Depth: 4}},
		{"pipelined batch decimal", Options{Mode: ModePipelined, Batch: 7, Concurrency: 1, Depth: 32}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeLeaf{wantBody: bodyFor(tc.o.Batch)}
			nc := setup(t, f)
			check := noLeaks(t)
			o := short(tc.o)
			o.Check = true
			res, err := Run(context.Background(), nc, o)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			check()
			batch := int64(max(tc.o.Batch, 1))
			if res.Requests == 0 || res.Errors != 0 || len(res.ErrorsByCode) != 0 || res.Duplicates != 0 {
				t.Fatalf("requests %d errors %d %v duplicates %d", res.Requests, res.Errors, res.ErrorsByCode, res.Duplicates)
			}
			if res.IDs != res.Requests*batch {
				t.Errorf("ids %d, want requests %d × batch %d", res.IDs, res.Requests, batch)
			}
			if n := f.badBody.Load(); n != 0 {
				t.Errorf("%d requests were not in the wire format (want body %q)", n, f.wantBody)
			}
			if res.Name != testSubject {
				t.Errorf("name %q", res.Name)
			}
			if want := res.ReqPerSec * float64(batch); res.ReqPerSec <= 0 || math.Abs(res.IDsPerSec-want) > 1e-9*want {
				t.Errorf("req/s %v ids/s %v", res.ReqPerSec, res.IDsPerSec)
			}
			if res.Elapsed < o.Duration || res.Elapsed > o.Duration+time.Second {
				t.Errorf("elapsed %v for a %v run", res.Elapsed, o.Duration)
			}
			if !(0 < res.P50 && res.P50 <= res.P90 && res.P90 <= res.P99 && res.P99 <= res.P999 && res.P999 <= res.Max) {
				t.Errorf("percentiles out of order: %v %v %v %v %v", res.P50, res.P90, res.P99, res.P999, res.Max)
			}
		})
	}
}

func TestRunCountsDuplicates(t *testing.T) {
	f := &fakeLeaf{}
	nc := setup(t, f)
	// A second fake in the same queue group hands out the same ids again.
	startFake(t, nc.ConnectedUrl(), &fakeLeaf{})
	res, err := Run(context.Background(), nc, short(Options{Check: true, Mode: ModePipelined}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Duplicates == 0 {
		t.Fatalf("no duplicates found with two fakes handing out the same ids (%d requests)", res.Requests)
	}
}

func TestRunErrorReplies(t *testing.T) {
	for _, mode := range []string{ModeRequest, ModePipelined} {
		t.Run(mode, func(t *testing.T) {
			nc := setup(t, &fakeLeaf{errCode: wire.CodeUnavailable})
			check := noLeaks(t)
			res, err := Run(context.Background(), nc, short(Options{Mode: mode, Check: true}))
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			check()
			if res.Requests == 0 || res.Errors != res.Requests || res.ErrorsByCode["503"] != res.Errors || len(res.ErrorsByCode) != 1 {
				t.Fatalf("requests %d errors %d by code %v", res.Requests, res.Errors, res.ErrorsByCode)
			}
			if res.IDs != 0 || res.ReqPerSec != 0 || res.P50 != 0 {
				t.Errorf("error replies counted as ids: %+v", res)
			}
		})
	}
}

func TestRunTimeouts(t *testing.T) {
	for _, mode := range []string{ModeRequest, ModePipelined} {
		t.Run(mode, func(t *testing.T) {
			nc := setup(t, &fakeLeaf{dropNth: 10})
			check := noLeaks(t)
			res, err := Run(context.Background(), nc, short(Options{Mode: mode, Timeout: 20 * time.Millisecond}))
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			check()
			if res.ErrorsByCode[CodeTimeout] == 0 || res.ErrorsByCode[CodeTimeout] != res.Errors {
				t.Fatalf("errors %d by code %v", res.Errors, res.ErrorsByCode)
			}
			if res.IDs != res.Requests-res.Errors {
				t.Errorf("ids %d, requests %d, errors %d", res.IDs, res.Requests, res.Errors)
			}
		})
	}
}

func TestRunNoResponders(t *testing.T) {
	nc := setup(t, nil)
	start := time.Now()
	_, err := Run(context.Background(), nc, short(Options{}))
	if !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("err %v, want ErrNoResponders", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("took %v to notice", d)
	}
}

func TestRunRequestCap(t *testing.T) {
	for _, mode := range []string{ModeRequest, ModePipelined} {
		t.Run(mode, func(t *testing.T) {
			f := &fakeLeaf{}
			nc := setup(t, f)
			start := time.Now()
			res, err := Run(context.Background(), nc, Options{Mode: mode, Requests: 500, Warmup: -1, Duration: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if res.Requests != 500 || res.IDs != 500 {
				t.Errorf("requests %d ids %d, want 500", res.Requests, res.IDs)
			}
			if n := f.served.Load(); n != 501 { // and the preflight
				t.Errorf("fake served %d requests, want 501", n)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("a 500-request run took %v", d)
			}
		})
	}
}

func TestRunRate(t *testing.T) {
	for _, mode := range []string{ModeRequest, ModePipelined} {
		t.Run(mode, func(t *testing.T) {
			nc := setup(t, &fakeLeaf{})
			res, err := Run(context.Background(), nc, Options{
				Mode: mode, Rate: 2000, Duration: 500 * time.Millisecond, Warmup: 100 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			// The pacer must not run ahead of Rate; a busy machine may fall
			// behind it (CI with other loads: 634), which the schedule's
			// own tests (TestSchedule*, on an injected clock) cover.
			if res.Requests == 0 || res.Requests > 1300 {
				t.Errorf("%d requests at 2000/s for 500ms, want some and at most about 1000", res.Requests)
			}
			if res.ReqPerSec > 2400 { // slower is the machine, faster is the pacer
				t.Errorf("%.0f req/s with Rate 2000", res.ReqPerSec)
			}
		})
	}
}

func TestRunCancel(t *testing.T) {
	for _, mode := range []string{ModeRequest, ModePipelined} {
		t.Run(mode, func(t *testing.T) {
			nc := setup(t, &fakeLeaf{})
			check := noLeaks(t)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			res, err := Run(ctx, nc, Options{Mode: mode, Duration: time.Minute, Warmup: 50 * time.Millisecond})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err %v, want deadline exceeded", err)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("Run returned %v after its context ended", d)
			}
			if res.Requests == 0 {
				t.Errorf("no partial result")
			}
			check()
		})
	}
}

func TestRunBadOptions(t *testing.T) {
	nc := setup(t, &fakeLeaf{})
	tests := []struct {
		name string
		o    Options
	}{
		{"mode", Options{Mode: "async"}},
		{"wildcard subject", Options{Subject: "leaf.segment.*"}},
		{"negative batch", Options{Batch: -1}},
		{"negative rate", Options{Rate: -5}},
		{"negative requests", Options{Requests: -1}},
		{"negative timeout", Options{Timeout: -time.Second}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Run(context.Background(), nc, tc.o); !errors.Is(err, ErrOptions) {
				t.Errorf("Run: %v, want ErrOptions", err)
			}
			if _, err := RunBaseline(context.Background(), nc, tc.o); !errors.Is(err, ErrOptions) {
				t.Errorf("RunBaseline: %v, want ErrOptions", err)
			}
		})
	}
}

func TestRunClosedConn(t *testing.T) {
	nc := setup(t, &fakeLeaf{})
	nc.Close()
	if _, err := Run(context.Background(), nc, short(Options{})); !errors.Is(err, ErrNotConnected) {
		t.Errorf("Run: %v", err)
	}
	if _, err := RunBaseline(context.Background(), nc, short(Options{})); !errors.Is(err, ErrNotConnected) {
		t.Errorf("RunBaseline: %v", err)
	}
}

func TestRunBaseline(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"request decimal", Options{Batch: 10}},
		{"pipelined binary", Options{Mode: ModePipelined, Batch: 3, Binary: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := setup(t, &fakeLeaf{})
			check := noLeaks(t) // the echo's connection must be gone too
			o := short(tc.o)
			o.Check = true
			res, err := RunBaseline(context.Background(), nc, o)
			if err != nil {
				t.Fatalf("RunBaseline: %v", err)
			}
			check()
			if res.Name != baselineName || res.Requests == 0 || res.Errors != 0 || res.Duplicates != 0 {
				t.Fatalf("%+v", res)
			}
			if res.IDs != res.Requests*int64(o.Batch) {
				t.Errorf("ids %d, requests %d", res.IDs, res.Requests)
			}
		})
	}
}

func TestBaselinePayload(t *testing.T) {
	nc := setup(t, &fakeLeaf{})
	o, _ := Options{Batch: 3}.withDefaults()
	if got := string(baselinePayload(nc, o)); got != "1\n2\n3" {
		t.Errorf("payload %q, want the fake's own reply", got)
	}
	// Without a leafd the echo answers synthetic ids of the right count and encoding.
	o.Subject, o.Binary = "leaf.segment.nobody", true
	if got := baselinePayload(nc, o); len(got) != 3*8 {
		t.Errorf("synthetic binary payload is %d bytes", len(got))
	}
	o.Binary = false
	ids, err := wire.DecodeIDs(nil, baselinePayload(nc, o), false)
	if err != nil || len(ids) != 3 {
		t.Errorf("synthetic decimal payload: %v %v", ids, err)
	}
}

func TestRunAllAndReport(t *testing.T) {
	nc := setup(t, &fakeLeaf{})
	var progress bytes.Buffer
	o := short(Options{Baseline: true, Duration: 700 * time.Millisecond, Progress: &progress})
	results, err := RunAll(context.Background(), nc, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 || results[0].Name != testSubject || results[1].Name != baselineName {
		t.Fatalf("results %+v", results)
	}
	if !strings.Contains(progress.String(), "req/s") || !strings.Contains(progress.String(), "\r") {
		t.Errorf("progress %q", progress.String())
	}
	var out bytes.Buffer
	Report(&out, results...)
	t.Logf("\n%s", out.String())
	if !strings.Contains(out.String(), "ratio "+testSubject+"/"+baselineName+": req/s ") {
		t.Errorf("no ratio line in\n%s", out.String())
	}
}
