package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leafmq/leafmq/httpapi"
	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/wire"
)

// The id routes answer every method Leaf's @RequestMapping dispatches with
// the id alone as text, as Leaf's clients read it.
func TestLeafMethods(t *testing.T) {
	n := newNode(t, map[string]int{"leaf-segment-test": 1000})
	srv := serve(t, n.config())

	var last int64
	for _, method := range []string{"GET", "POST", "PUT", "PATCH", "DELETE", "GET"} {
		for _, path := range []string{"/api/segment/get/leaf-segment-test", "/api/segment/get/leaf-segment-test/"} {
			t.Run(method+path, func(t *testing.T) {
				r := do(t, method, srv.URL+path, nil)
				if r.code != http.StatusOK {
					t.Fatalf("%s %s: %d %q", method, path, r.code, r.body)
				}
				if ct := r.header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
					t.Errorf("Content-Type %q", ct)
				}
				id, err := strconv.ParseInt(r.body, 10, 64)
				if err != nil {
					t.Fatalf("body %q is not a bare decimal id: %v", r.body, err)
				}
				if id != last+1 {
					t.Errorf("id %d after %d: a segment tag's ids are consecutive on one node", id, last)
				}
				last = id
			})
		}
	}

	t.Run("HEAD takes an id like GET, without a body", func(t *testing.T) {
		r := do(t, "HEAD", srv.URL+"/api/segment/get/leaf-segment-test", nil)
		if r.code != http.StatusOK || r.body != "" {
			t.Fatalf("HEAD: %d %q", r.code, r.body)
		}
		r = do(t, "GET", srv.URL+"/api/segment/get/leaf-segment-test", nil)
		if r.body != strconv.FormatInt(last+2, 10) {
			t.Errorf("GET after HEAD after %d: %q", last, r.body)
		}
		last += 2
	})
	t.Run("OPTIONS takes no id", func(t *testing.T) {
		r := do(t, "OPTIONS", srv.URL+"/api/segment/get/leaf-segment-test", nil)
		if r.code != http.StatusOK || !strings.Contains(r.header.Get("Allow"), "POST") {
			t.Fatalf("OPTIONS: %d Allow %q", r.code, r.header.Get("Allow"))
		}
		r = do(t, "TRACE", srv.URL+"/api/segment/get/leaf-segment-test", nil)
		if r.code != http.StatusMethodNotAllowed {
			t.Fatalf("TRACE: %d", r.code)
		}
		r = do(t, "GET", srv.URL+"/api/segment/get/leaf-segment-test", nil)
		if r.body != strconv.FormatInt(last+1, 10) {
			t.Errorf("GET after OPTIONS and TRACE after %d: %q", last, r.body)
		}
	})

	t.Run("snowflake", func(t *testing.T) {
		layout := snowflake.LeafLayout()
		for _, method := range []string{"GET", "POST"} {
			for _, key := range []string{"leaf-snowflake-test", "anything.at:all"} {
				r := do(t, method, srv.URL+"/api/snowflake/get/"+key, nil)
				if r.code != http.StatusOK {
					t.Fatalf("%s %s: %d %q", method, key, r.code, r.body)
				}
				id, err := strconv.ParseInt(r.body, 10, 64)
				if err != nil {
					t.Fatalf("body %q: %v", r.body, err)
				}
				d := layout.Decompose(id)
				if d.Worker != 7 || time.Since(d.Time).Abs() > time.Minute {
					t.Errorf("id %d decodes to worker %d at %v", id, d.Worker, d.Time)
				}
			}
		}
	})
}

// Every failure has its own status code and one line of text, where Leaf
// answers a bare 500 (or id 0 with 200 for a disabled mode).
func TestErrors(t *testing.T) {
	n := newNode(t, map[string]int{"order": 100})
	live := serve(t, n.config())

	fails := func(err error) httpapi.Config {
		return httpapi.Config{
			Segment:   func(context.Context, wire.Tag, []int64) error { return err },
			Snowflake: func(context.Context, []int64) error { return err },
			Logger:    quiet,
		}
	}
	blocks := httpapi.Config{
		Segment:   func(ctx context.Context, _ wire.Tag, _ []int64) error { <-ctx.Done(); return ctx.Err() },
		Snowflake: func(ctx context.Context, _ []int64) error { <-ctx.Done(); return ctx.Err() },
		Timeout:   20 * time.Millisecond,
		Logger:    quiet,
	}
	off := serve(t, httpapi.Config{Logger: quiet})

	tests := []struct {
		name string
		srv  string // base URL
		path string
		code int
		body string // a part of the message
	}{
		{"unknown tag", live.URL, "/api/segment/get/nope", 404, `unknown tag: "nope"`},
		{"bad key", live.URL, "/api/segment/get/a.b", 400, "invalid argument"},
		{"key too long", live.URL, "/api/segment/get/" + strings.Repeat("x", 129), 400, "invalid argument"},
		{"escaped slash", live.URL, "/api/segment/get/a%2Fb", 400, "invalid argument"},
		{"empty key", live.URL, "/api/segment/get/", 400, "missing key"},
		{"empty snowflake key", live.URL, "/api/snowflake/get/", 400, "missing key"},
		{"two segments", live.URL, "/api/segment/get/a/b", 404, "not found"},
		{"segment off", off.URL, "/api/segment/get/order", 501, "segment ids are not enabled on this node"},
		{"snowflake off", off.URL, "/api/snowflake/get/x", 501, "snowflake ids are not enabled on this node"},
		{"not ready", serve(t, fails(fmt.Errorf("%w: tag \"order\": both segments empty", segment.ErrNotReady))).URL,
			"/api/segment/get/order", 503, "not ready"},
		{"store down", serve(t, fails(fmt.Errorf("%w: connection refused", segment.ErrUnavailable))).URL,
			"/api/segment/get/order", 503, "store unavailable"},
		{"closed", serve(t, fails(segment.ErrClosed)).URL, "/api/segment/get/order", 503, "closed"},
		{"engine says invalid", serve(t, fails(fmt.Errorf("%w: tag \"order\" has run out", segment.ErrInvalid))).URL,
			"/api/segment/get/order", 400, "run out"},
		{"not serving", serve(t, fails(fmt.Errorf("%w: waiting\nfor the clock", snowflake.ErrNotServing))).URL,
			"/api/snowflake/get/x", 503, "waiting for the clock"},
		{"clock backwards", serve(t, fails(fmt.Errorf("%w (%w)", snowflake.ErrNotServing, snowflake.ErrClockBackwards))).URL,
			"/api/snowflake/get/x", 503, "clock moved backwards"},
		{"lease failed", serve(t, fails(snowflake.ErrLeaseFailed)).URL, "/api/snowflake/get/x", 503, "lease"},
		{"expired", serve(t, fails(snowflake.ErrExpired)).URL, "/api/snowflake/get/x", 503, "expired"},
		{"segment timeout", serve(t, blocks).URL, "/api/segment/get/order", 503, "deadline exceeded"},
		{"snowflake timeout", serve(t, blocks).URL, "/api/snowflake/get/x", 503, "deadline exceeded"},
		{"other error", serve(t, fails(errors.New("disk on fire"))).URL, "/api/segment/get/order", 500, "disk on fire"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := do(t, "GET", tt.srv+tt.path, nil)
			if r.code != tt.code {
				t.Fatalf("%s: %d %q, want %d", tt.path, r.code, r.body, tt.code)
			}
			if !strings.Contains(r.body, tt.body) {
				t.Errorf("body %q does not say %q", r.body, tt.body)
			}
			if strings.Count(r.body, "\n") != 1 || !strings.HasSuffix(r.body, "\n") {
				t.Errorf("body %q is not one line", r.body)
			}
			if tt.code == 503 && r.header.Get("Retry-After") == "" {
				t.Error("503 without Retry-After")
			}
		})
	}
}

// 10k ids over concurrent HTTP calls, the way Leaf's users call it (plain
// GETs and POSTs on keep-alive connections), are unique; segment ids span
// many segments (step 100) so that loads race with takes.
func TestUniqueOverHTTP(t *testing.T) {
	n := newNode(t, map[string]int{"order": 100})
	srv := serve(t, n.config())
	const total, clients = 10000, 32

	for _, kind := range []string{"segment", "snowflake"} {
		t.Run(kind, func(t *testing.T) {
			url := srv.URL + "/api/segment/get/order"
			if kind == "snowflake" {
				url = srv.URL + "/api/snowflake/get/order"
			}
			ids := make(chan int64, total)
			errs := make(chan error, clients)
			var next atomic.Int64
			var wg sync.WaitGroup
			for c := range clients {
				wg.Go(func() {
					method := "GET"
					if c%2 == 1 {
						method = "POST"
					}
					for next.Add(1) <= total {
						r, err := doErr(method, url, nil)
						if err == nil && r.code != http.StatusOK {
							err = fmt.Errorf("%s %s: %d %q", method, url, r.code, r.body)
						}
						var id int64
						if err == nil {
							id, err = strconv.ParseInt(r.body, 10, 64)
						}
						if err != nil {
							errs <- err
							return
						}
						ids <- id
					}
				})
			}
			wg.Wait()
			close(ids)
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			seen := make(map[int64]bool, total)
			for id := range ids {
				if seen[id] {
					t.Fatalf("id %d handed out twice", id)
				}
				seen[id] = true
			}
			if len(seen) != total {
				t.Fatalf("%d ids, want %d", len(seen), total)
			}
		})
	}
}

// leafDecode is Leaf's LeafMonitorController.decodeSnowflakeId, line for
// line (Java's >> on long is Go's >> on int64).
func leafDecode(id int64, loc *time.Location) map[string]string {
	originTimestamp := (id >> 22) + 1288834974657
	date := time.UnixMilli(originTimestamp).In(loc).Format("2006-01-02 15:04:05.000")
	workerID := (id >> 12) ^ (id >> 22 << 10)
	sequence := id ^ (id >> 12 << 12)
	return map[string]string{
		"timestamp":  strconv.FormatInt(originTimestamp, 10) + "(" + date + ")",
		"workerId":   strconv.FormatInt(workerID, 10),
		"sequenceId": strconv.FormatInt(sequence, 10),
	}
}

func TestDecodeSnowflakeID(t *testing.T) {
	shanghai := time.FixedZone("CST", 8*3600) // Leaf's JVMs: Asia/Shanghai
	layout := snowflake.LeafLayout()
	srv := serve(t, httpapi.Config{Layout: layout, Location: shanghai, Logger: quiet})

	// The example in Leaf's source comment.
	id, err := layout.Compose(time.UnixMilli(1567733700834), 39, 3448)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"timestamp":"1567733700834(2019-09-06 09:35:00.834)","sequenceId":"3448","workerId":"39"}`
	for _, method := range []string{"GET", "POST"} {
		r := do(t, method, srv.URL+"/decodeSnowflakeId?snowflakeId="+strconv.FormatInt(id, 10), nil)
		if r.code != 200 || r.body != want {
			t.Fatalf("%s decode %d: %d %s\nwant %s", method, id, r.code, r.body, want)
		}
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
	}
	t.Run("form body", func(t *testing.T) {
		r := do(t, "POST", srv.URL+"/decodeSnowflakeId", strings.NewReader("snowflakeId="+strconv.FormatInt(id, 10)))
		if r.code != 200 || r.body != want {
			t.Fatalf("%d %s", r.code, r.body)
		}
	})

	t.Run("same as Leaf's arithmetic", func(t *testing.T) {
		ids := []int64{0, 1, 4095, 4096, 1 << 22, id, 1212161512043474986, 1<<63 - 1}
		for i := range int64(50) {
			ids = append(ids, (i*0x1e3779b97f4a7c15+12345)&(1<<63-1))
		}
		for _, id := range ids {
			r := do(t, "GET", srv.URL+"/decodeSnowflakeId?snowflakeId="+strconv.FormatInt(id, 10), nil)
			var got map[string]string
			if err := json.Unmarshal([]byte(r.body), &got); err != nil {
				t.Fatalf("%d: %s: %v", id, r.body, err)
			}
			if w := leafDecode(id, shanghai); fmt.Sprint(got) != fmt.Sprint(w) {
				t.Errorf("decode %d:\n got %v\nLeaf %v", id, got, w)
			}
		}
	})

	for _, tt := range []struct{ name, query string }{
		{"missing", ""},
		{"empty", "?snowflakeId="},
		{"not a number", "?snowflakeId=abc"},
		{"negative", "?snowflakeId=-1"},
		{"too large", "?snowflakeId=9223372036854775808"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := do(t, "GET", srv.URL+"/decodeSnowflakeId"+tt.query, nil)
			var got map[string]string
			if err := json.Unmarshal([]byte(r.body), &got); err != nil {
				t.Fatalf("%d %q: %v", r.code, r.body, err)
			}
			if r.code != 400 || got["errorMsg"] == "" || len(got) != 1 {
				t.Fatalf("%d %q, want 400 and Leaf's errorMsg field alone", r.code, r.body)
			}
		})
	}
}

func TestReadyz(t *testing.T) {
	var notReady atomic.Pointer[error]
	srv := serve(t, httpapi.Config{Logger: quiet, Ready: func() error {
		if p := notReady.Load(); p != nil {
			return *p
		}
		return nil
	}})
	if r := do(t, "GET", srv.URL+"/readyz", nil); r.code != 200 || r.body != "ready\n" {
		t.Fatalf("ready: %d %q", r.code, r.body)
	}
	err := fmt.Errorf("%w: segment store: dial tcp 127.0.0.1:3306: connection refused", segment.ErrUnavailable)
	notReady.Store(&err)
	r := do(t, "GET", srv.URL+"/readyz", nil)
	if r.code != 503 || r.body != "not ready: store unavailable: segment store: dial tcp 127.0.0.1:3306: connection refused\n" {
		t.Fatalf("not ready: %d %q", r.code, r.body)
	}
	notReady.Store(nil)
	if r := do(t, "HEAD", srv.URL+"/readyz", nil); r.code != 200 {
		t.Fatalf("HEAD ready again: %d", r.code)
	}

	t.Run("no Ready func means ready", func(t *testing.T) {
		srv := serve(t, httpapi.Config{Logger: quiet})
		if r := do(t, "GET", srv.URL+"/readyz", nil); r.code != 200 {
			t.Fatalf("%d %q", r.code, r.body)
		}
	})
}

func TestStatusJSON(t *testing.T) {
	n := newNode(t, map[string]int{"order": 100, "user": 50})
	srv := serve(t, n.config())
	for range 150 {
		do(t, "GET", srv.URL+"/api/segment/get/order", nil)
	}
	do(t, "GET", srv.URL+"/api/snowflake/get/x", nil)

	var doc httpapi.StatusDoc
	r := do(t, "GET", srv.URL+"/status.json", nil)
	if r.code != 200 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s", r.code, r.header.Get("Content-Type"))
	}
	if err := json.Unmarshal([]byte(r.body), &doc); err != nil {
		t.Fatal(err)
	}
	if time.Since(time.Unix(0, doc.Time)).Abs() > time.Minute || len(doc.Errors) != 0 {
		t.Errorf("time %d errors %q", doc.Time, doc.Errors)
	}
	if len(doc.Nodes) != 1 || doc.Nodes[0].Snow == nil || doc.Nodes[0].Snow.Taken != 1 {
		t.Fatalf("nodes %+v", doc.Nodes)
	}
	var order *wire.TagStatus
	for i := range doc.Nodes[0].Tags {
		if doc.Nodes[0].Tags[i].Tag == "order" {
			order = &doc.Nodes[0].Tags[i]
		}
	}
	if order == nil || order.Taken != 150 || order.Loads < 2 {
		t.Fatalf("order: %+v", order)
	}
	rows := map[string]httpapi.TagRow{}
	for _, row := range doc.Rows {
		rows[row.Tag] = row
	}
	if o := rows["order"]; o.Step != 100 || o.MaxID < 151 || o.Description != "test tag order" || o.UpdateTime.IsZero() {
		t.Errorf("row order: %+v", o)
	}
	if u := rows["user"]; u.Step != 50 || len(rows) != 2 {
		t.Errorf("rows: %+v", doc.Rows)
	}

	t.Run("failures are reported, not fatal", func(t *testing.T) {
		srv := serve(t, httpapi.Config{Logger: quiet,
			Status: func(context.Context) ([]wire.NodeStatus, error) { return nil, errors.New("no responders") },
			Rows:   func(context.Context) ([]httpapi.TagRow, error) { return nil, segment.ErrUnavailable },
		})
		r := do(t, "GET", srv.URL+"/status.json", nil)
		if r.code != 200 || !strings.Contains(r.body, `"nodes":[]`) || !strings.Contains(r.body, `"rows":null`) ||
			!strings.Contains(r.body, `"node status: no responders"`) || !strings.Contains(r.body, `"store table: store unavailable"`) {
			t.Fatalf("%d %s", r.code, r.body)
		}
	})
	t.Run("nothing configured", func(t *testing.T) {
		srv := serve(t, httpapi.Config{Logger: quiet})
		r := do(t, "GET", srv.URL+"/status.json", nil)
		if !strings.Contains(r.body, `"nodes":[],"rows":null,"errors":[]`) {
			t.Fatalf("%s", r.body)
		}
	})
}

// Many pages polling at once cost one Status call per StatusCache.
func TestStatusCache(t *testing.T) {
	var calls atomic.Int64
	now := clock.NewFake(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	srv := serve(t, httpapi.Config{
		Logger:      quiet,
		StatusCache: time.Second,
		Clock:       now,
		Status: func(context.Context) ([]wire.NodeStatus, error) {
			c := calls.Add(1)
			time.Sleep(10 * time.Millisecond) // polls arrive while it runs
			return []wire.NodeStatus{{Node: "n", Requests: uint64(c)}}, nil
		},
	})
	poll := func() string {
		var wg sync.WaitGroup
		bodies := make([]string, 8)
		for i := range bodies {
			wg.Go(func() {
				r, err := doErr("GET", srv.URL+"/status.json", nil)
				if err == nil {
					bodies[i] = r.body
				}
			})
		}
		wg.Wait()
		for _, b := range bodies[1:] {
			if b != bodies[0] {
				t.Fatalf("concurrent polls got different answers:\n%s\n%s", bodies[0], b)
			}
		}
		return bodies[0]
	}
	first := poll()
	if calls.Load() != 1 || !strings.Contains(first, `"requests":1`) {
		t.Fatalf("%d calls for 8 concurrent polls: %s", calls.Load(), first)
	}
	if want := fmt.Sprintf(`"time":%d`, now.Now().UnixNano()); !strings.Contains(first, want) {
		t.Fatalf("status %s, want %s (Config.Clock)", first, want)
	}
	now.Advance(999 * time.Millisecond)
	if poll() != first || calls.Load() != 1 {
		t.Fatalf("%d calls within the cache time", calls.Load())
	}
	now.Advance(time.Millisecond)
	if b := poll(); calls.Load() != 2 || !strings.Contains(b, `"requests":2`) {
		t.Fatalf("%d calls after the cache time: %s", calls.Load(), b)
	}
	now.Advance(-time.Hour) // the clock stepped back: do not trust the cache
	poll()
	if calls.Load() != 3 {
		t.Fatalf("%d calls after the clock stepped back", calls.Load())
	}
}

func TestPageAndRedirects(t *testing.T) {
	srv := serve(t, httpapi.Config{Logger: quiet})
	for _, tt := range []struct{ path, ctype, has string }{
		{"/", "text/html; charset=utf-8", `<script src="app.js"`},
		{"/app.js", "text/javascript; charset=utf-8", "status.json"},
		{"/style.css", "text/css; charset=utf-8", ".grid"},
	} {
		r := do(t, "GET", srv.URL+tt.path, nil)
		if r.code != 200 || r.header.Get("Content-Type") != tt.ctype || !strings.Contains(r.body, tt.has) {
			t.Errorf("%s: %d %q", tt.path, r.code, r.header.Get("Content-Type"))
		}
		if r.header.Get("Content-Security-Policy") == "" {
			t.Errorf("%s: no Content-Security-Policy", tt.path)
		}
	}
	for path, to := range map[string]string{"/cache": "./#tags", "/db": "./#table"} {
		r := do(t, "GET", srv.URL+path, nil)
		if r.code != http.StatusFound || r.header.Get("Location") != to {
			t.Errorf("%s: %d to %q", path, r.code, r.header.Get("Location"))
		}
	}
	if r := do(t, "GET", srv.URL+"/nope", nil); r.code != 404 {
		t.Errorf("/nope: %d", r.code)
	}
	if r := do(t, "POST", srv.URL+"/status.json", nil); r.code != http.StatusMethodNotAllowed {
		t.Errorf("POST /status.json: %d", r.code)
	}

	t.Run("under a prefix", func(t *testing.T) {
		h, err := httpapi.New(httpapi.Config{Logger: quiet, Segment: func(_ context.Context, _ wire.Tag, dst []int64) error {
			dst[0] = 42
			return nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.Handle("/leaf/", http.StripPrefix("/leaf", h))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
		srv := serveMux(t, mux)
		for path, want := range map[string]string{"/leaf/api/segment/get/x": "42", "/leaf/readyz": "ready\n", "/healthz": "ok\n"} {
			if r := do(t, "GET", srv+path, nil); r.code != 200 || r.body != want {
				t.Errorf("%s: %d %q", path, r.code, r.body)
			}
		}
	})
}

func TestNewRejects(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  httpapi.Config
	}{
		{"negative timeout", httpapi.Config{Timeout: -time.Second}},
		{"bad layout", httpapi.Config{Layout: snowflake.Layout{TimeBits: 40, WorkerBits: 10, SequenceBits: 12}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := httpapi.New(tt.cfg); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	_, err := httpapi.New(httpapi.Config{Layout: snowflake.Layout{TimeUnit: time.Minute}})
	if !errors.Is(err, snowflake.ErrInvalidLayout) {
		t.Fatalf("%v does not wrap ErrInvalidLayout", err)
	}
}

// /readyz/{subject} answers for one subject: 200 when it is served and
// ready, 503 with why not, 404 for a subject the node does not have.
func TestReadySubject(t *testing.T) {
	srv := serve(t, httpapi.Config{Logger: quiet, ReadySubject: func(subject string) (bool, error) {
		switch subject {
		case "segment":
			return true, nil
		case "snowflake":
			return true, errors.New("snowflake: lost: no worker id")
		}
		return false, nil
	}})
	for _, c := range []struct {
		path string
		code int
		body string
	}{
		{"/readyz/segment", 200, "ready\n"},
		{"/readyz/snowflake", 503, "not ready: snowflake: snowflake: lost: no worker id\n"},
		{"/readyz/mono", 404, "not served by this node: mono\n"},
	} {
		if r := do(t, "GET", srv.URL+c.path, nil); r.code != c.code || r.body != c.body {
			t.Errorf("GET %s = %d %q, want %d %q", c.path, r.code, r.body, c.code, c.body)
		}
	}
	none := serve(t, httpapi.Config{Logger: quiet})
	if r := do(t, "GET", none.URL+"/readyz/segment", nil); r.code != 404 {
		t.Errorf("without ReadySubject: %d %q, want 404", r.code, r.body)
	}
}

// Every answered request of an id route reaches Config.Observe once, with
// its engine, tag, status and ids, so HTTP clients show in the node's
// request metrics; OPTIONS and refused methods are not id requests.
func TestObserve(t *testing.T) {
	n := newNode(t, map[string]int{"order": 100})
	var mu sync.Mutex
	var got []httpapi.Observation
	cfg := n.config()
	cfg.Mono = func(context.Context, wire.Tag, []int64) error { return segment.ErrNotReady }
	cfg.Observe = func(o httpapi.Observation) {
		if o.Took < 0 {
			t.Errorf("%+v: negative time", o)
		}
		o.Took = 0
		mu.Lock()
		got = append(got, o)
		mu.Unlock()
	}
	srv := serve(t, cfg)
	for _, req := range []struct{ method, path string }{
		{"GET", "/api/segment/get/order"},
		{"POST", "/api/segment/get/order/"},
		{"GET", "/api/segment/get/nope"},
		{"GET", "/api/segment/get/a.b"},
		{"GET", "/api/segment/get/"},
		{"GET", "/api/snowflake/get/x"},
		{"GET", "/api/mono/get/m"},
		{"OPTIONS", "/api/segment/get/order"},
		{"TRACE", "/api/segment/get/order"},
		{"GET", "/decodeSnowflakeId?snowflakeId=1"},
	} {
		do(t, req.method, srv.URL+req.path, nil)
	}
	off := httpapi.Config{Logger: quiet, Observe: cfg.Observe}
	do(t, "GET", serve(t, off).URL+"/api/snowflake/get/x", nil)
	want := []httpapi.Observation{
		{Engine: "segment", Tag: "order", Code: 200, IDs: 1},
		{Engine: "segment", Tag: "order", Code: 200, IDs: 1},
		{Engine: "segment", Tag: "nope", Code: 404},
		{Engine: "segment", Code: 400},
		{Engine: "segment", Code: 400},
		{Engine: "snowflake", Code: 200, IDs: 1},
		{Engine: "mono", Tag: "m", Code: 503},
		{Engine: "snowflake", Code: 501},
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, want) {
		t.Fatalf("observed\n%+v\nwant\n%+v", got, want)
	}
}
