package httpapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leafmq/leafmq/httpapi"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/segment/memstore"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/wire"
)

// quiet is the logger of every test.
var quiet = slog.New(slog.DiscardHandler)

// node is one in-process leafmq node as the handler sees it: a real segment
// engine over memstore, a real snowflake Source on a static worker id, and
// the counters a node keeps, behind the functions of httpapi.Config.
type node struct {
	name   string
	store  *memstore.Store
	engine *segment.Engine
	src    *snowflake.Source
	start  time.Time

	mu    sync.Mutex
	taken map[string]uint64 // ids taken per tag
	snow  atomic.Uint64     // snowflake ids taken
	reqs  atomic.Uint64

	// onStatus, if set, runs at the start of every Status call with its
	// 1-based number.
	onStatus func(n int)
	statuses atomic.Int64
}

// newNode starts a node with the given tags (name -> step) in a fresh store.
func newNode(t testing.TB, tags map[string]int) *node {
	t.Helper()
	ctx := context.Background()
	n := &node{name: "node-a", store: memstore.New(), taken: map[string]uint64{}, start: time.Now()}
	for name, step := range tags {
		if err := n.store.Create(ctx, segment.Tag{Name: wire.MustTag(name), Step: step, Description: "test tag " + name}); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	// NegativeTTL 1ns: a tag created during a test is found at once.
	n.engine, err = segment.New(segment.Config{Store: n.store, Logger: quiet, NegativeTTL: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.engine.Close() })
	if err := n.engine.Start(ctx); err != nil {
		t.Fatal(err)
	}
	layout := snowflake.LeafLayout()
	n.src, err = snowflake.StartSource(ctx, snowflake.SourceConfig{
		Open:   func(context.Context) (snowflake.Registry, error) { return snowflake.NewStatic(layout, 7) },
		Layout: layout,
		Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.src.Close() })
	return n
}

// Segment is a Config.Segment: dst filled from the engine, range by range.
func (n *node) Segment(ctx context.Context, tag wire.Tag, dst []int64) error {
	n.reqs.Add(1)
	for i := 0; i < len(dst); {
		first, k, err := n.engine.Reserve(ctx, tag, len(dst)-i)
		if err != nil {
			return err
		}
		for j := range k {
			dst[i+j] = first + int64(j)
		}
		i += k
	}
	n.mu.Lock()
	n.taken[tag.String()] += uint64(len(dst))
	n.mu.Unlock()
	return nil
}

// Snowflake is a Config.Snowflake.
func (n *node) Snowflake(ctx context.Context, dst []int64) error {
	n.reqs.Add(1)
	if err := n.src.Next(ctx, dst); err != nil {
		return err
	}
	n.snow.Add(uint64(len(dst)))
	return nil
}

// Status is a Config.Status: this node's wire.NodeStatus.
func (n *node) Status(context.Context) ([]wire.NodeStatus, error) {
	if f := n.onStatus; f != nil {
		f(int(n.statuses.Add(1)))
	}
	now := time.Now()
	st := wire.NodeStatus{
		Node: n.name, Version: "test", UnixNano: now.UnixNano(), Started: n.start.UnixNano(),
		Store: "memstore", Requests: n.reqs.Load(), Ready: true, Tags: []wire.TagStatus{},
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, t := range n.engine.Tags() {
		tag := t.String()
		s, ok := n.engine.State(tag)
		if !ok {
			continue
		}
		ts := wire.TagStatus{
			Tag: tag, Step: s.Step, MinStep: s.MinStep, Loads: s.Loads, LastError: s.LastError,
			Loading: s.Loading, Current: s.Current, Taken: n.taken[tag], Headroom: s.Headroom,
		}
		if !s.LastLoad.IsZero() {
			ts.LastLoad = s.LastLoad.UnixNano()
		}
		for i, b := range s.Segments {
			ts.Buffers[i] = wire.BufferStatus{Value: b.Value, Max: b.Max, Step: b.Step, Ready: b.Ready}
		}
		st.Tags = append(st.Tags, ts)
	}
	layout := n.src.Layout()
	st.Snow = &wire.SnowflakeStatus{
		State: n.src.State().String(), Worker: n.src.Worker(), Registry: "static",
		Layout: layout.String(), Expires: layout.Expires().UnixNano(),
		LeaseUntil: n.src.Leased().UnixNano(), Joined: true, Taken: n.snow.Load(),
	}
	return []wire.NodeStatus{st}, nil
}

// Ready is a Config.Ready.
func (n *node) Ready() error { return nil }

// config is the Config of a handler over n.
func (n *node) config() httpapi.Config {
	return httpapi.Config{
		Segment:     n.Segment,
		Snowflake:   n.Snowflake,
		Layout:      snowflake.LeafLayout(),
		Status:      n.Status,
		Rows:        httpapi.StoreRows(n.store),
		Ready:       n.Ready,
		StatusCache: -1,
		Logger:      quiet,
	}
}

// serve starts an httptest.Server with the handler of cfg.
func serve(t testing.TB, cfg httpapi.Config) *httptest.Server {
	t.Helper()
	h, err := httpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// response is what a request got.
type response struct {
	code   int
	body   string
	header http.Header
}

// do sends one request; it never follows redirects.
func do(t testing.TB, method, url string, body io.Reader) response {
	t.Helper()
	r, err := doErr(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var noRedirect = &http.Client{
	Timeout:       10 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// doErr is do for goroutines: it returns the error instead of failing.
func doErr(method, url string, body io.Reader) (response, error) {
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		return response{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	res, err := noRedirect.Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return response{}, err
	}
	return response{code: res.StatusCode, body: string(b), header: res.Header}, nil
}

// serveMux starts an httptest.Server with h and returns its URL.
func serveMux(t testing.TB, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}
