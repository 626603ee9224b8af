package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/wire"
)

// Errors of the package, mapped to HTTP status codes by statusOf.
var (
	// errDisabled: the kind of id asked for is off on this node
	// (Config.Segment or Config.Snowflake is nil). 501.
	errDisabled = errors.New("not enabled on this node")
	// errBadRequest: a missing or malformed key or parameter. 400.
	errBadRequest = errors.New("bad request")
)

// Defaults of Config.
const (
	DefaultTimeout     = 5 * time.Second
	DefaultStatusCache = 500 * time.Millisecond
)

// Config configures the handler. Every function is optional: a nil one
// turns its part of the API off (see each field). The functions are called
// concurrently, from the requests' goroutines.
type Config struct {
	// Segment fills dst with fresh ids of tag: all of them, or an error.
	// Errors wrapping segment.ErrInvalid are answered 400,
	// segment.ErrUnknownTag 404, segment.ErrNotReady, ErrUnavailable and
	// ErrClosed 503. Nil: segment is off on this node (501).
	Segment func(ctx context.Context, tag wire.Tag, dst []int64) error
	// Mono fills dst with strictly increasing ids of a monotonic tag
	// (/api/mono/get/{key}), answered as Segment's. Nil: 501.
	Mono func(ctx context.Context, tag wire.Tag, dst []int64) error
	// Snowflake fills dst with snowflake ids. Errors wrapping
	// snowflake.ErrNotServing, ErrClockBackwards, ErrLeaseFailed, ErrExpired
	// or ErrOutOfRange are answered 503. Nil: snowflake is off on this node
	// (501).
	Snowflake func(ctx context.Context, dst []int64) error
	// Layout decodes ids for /decodeSnowflakeId. The zero value is Leaf's
	// layout (1+41+10+12, ms since the Twitter epoch). It is used even when
	// Snowflake is nil, as Leaf decodes with snowflake disabled.
	Layout snowflake.Layout
	// Location is the time zone of the date in /decodeSnowflakeId's
	// timestamp. Default time.Local (Leaf uses the JVM's default zone).
	Location *time.Location
	// Status returns the status of every live node (leaf.admin.status).
	// Nil: /status.json lists no node.
	Status func(ctx context.Context) ([]wire.NodeStatus, error)
	// Rows returns the store's table rows (Leaf's /db page). Nil: the
	// table is not shown ("rows": null).
	Rows func(ctx context.Context) ([]TagRow, error)
	// Ready returns nil when this node is ready to serve (store and
	// registry reachable, buffers loaded), or why not. Nil: always ready.
	Ready func() error
	// ReadySubject answers /readyz/{subject}: ok false for a subject the
	// node is not set up for (404), else nil when it serves the subject
	// and can answer it, or why not (503). Nil: 404 for every subject.
	ReadySubject func(subject string) (ok bool, err error)
	// Timeout bounds each call of Segment, Snowflake, Status and Rows.
	// Default DefaultTimeout.
	Timeout time.Duration
	// StatusCache is how long one answer of /status.json is reused, so that
	// many open pages cost one Status and one Rows call per interval.
	// Default DefaultStatusCache; negative: every request calls them.
	StatusCache time.Duration
	// Clock is the clock of /status.json's "time" and of StatusCache.
	// Default clock.Real (clock.Or).
	Clock clock.Clock
	// Logger receives 5xx answers (4xx at debug level). Default
	// slog.Default().
	Logger *slog.Logger
	// Observe, if set, is called once per request of an id route when it is
	// answered (OPTIONS and a refused method are not id requests), for
	// metrics; it must not block. Without it no time is taken per request.
	Observe func(Observation)
}

// Observation is one answered request of an id route, reported to
// Config.Observe.
type Observation struct {
	Engine string // "segment", "mono" or "snowflake"
	Tag    string // the tag of a segment or mono request; "" for snowflake and for a malformed key
	Code   int    // the HTTP status answered
	IDs    int    // ids handed out
	Took   time.Duration
}

// TagRow is one row of the store's table (Leaf's leaf_alloc, its /db page).
type TagRow struct {
	Tag         string    `json:"tag"`
	MaxID       int64     `json:"max_id"`
	Step        int       `json:"step"`
	Description string    `json:"description"`
	UpdateTime  time.Time `json:"update_time"` // zero if the store does not keep it
}

// handler serves every route; see New.
type handler struct {
	cfg Config
	log *slog.Logger
	mux *http.ServeMux

	mu       sync.Mutex // guards body and at; held during a status fetch, so concurrent polls share it
	body     []byte     // last /status.json answer
	bodyTime time.Time  // Config.Clock's reading when body was made
}

// New checks cfg and returns the handler of Leaf's HTTP API, /readyz and
// the status page. It serves paths from the root ("/api/segment/get/…");
// mount it on "/" of the node's mux, or under a prefix with
// http.StripPrefix (the page uses relative URLs only).
func New(cfg Config) (http.Handler, error) {
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("httpapi: timeout %v must not be negative", cfg.Timeout)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.StatusCache == 0 {
		cfg.StatusCache = DefaultStatusCache
	}
	if err := cfg.Layout.Validate(); err != nil {
		return nil, fmt.Errorf("httpapi: %w", err)
	}
	if cfg.Location == nil {
		cfg.Location = time.Local
	}
	cfg.Clock = clock.Or(cfg.Clock)
	h := &handler{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux()}
	if h.log == nil {
		h.log = slog.Default()
	}
	h.routes()
	return h, nil
}

func (h *handler) routes() {
	m := h.mux
	// Leaf's LeafController: @RequestMapping without a method.
	m.HandleFunc("/api/segment/get/{key}", h.segmentID)
	m.HandleFunc("/api/segment/get/{key}/{$}", h.segmentID) // Spring's trailing-slash match
	m.HandleFunc("/api/segment/get/{$}", h.noKey("segment"))
	m.HandleFunc("/api/mono/get/{key}", h.monoID)
	m.HandleFunc("/api/mono/get/{key}/{$}", h.monoID)
	m.HandleFunc("/api/mono/get/{$}", h.noKey("mono"))
	m.HandleFunc("/api/snowflake/get/{key}", h.snowflakeID)
	m.HandleFunc("/api/snowflake/get/{key}/{$}", h.snowflakeID)
	m.HandleFunc("/api/snowflake/get/{$}", h.noKey("snowflake"))
	// Leaf's LeafMonitorController.
	m.HandleFunc("/decodeSnowflakeId", h.decode)
	m.HandleFunc("GET /cache", redirect("./#tags"))
	m.HandleFunc("GET /db", redirect("./#table"))

	m.HandleFunc("GET /readyz", h.readyz)
	m.HandleFunc("GET /readyz/{subject}", h.readySubject)
	m.HandleFunc("GET /status.json", h.status)
	m.HandleFunc("GET /{$}", asset("index.html", "text/html; charset=utf-8"))
	m.HandleFunc("GET /app.js", asset("app.js", "text/javascript; charset=utf-8"))
	m.HandleFunc("GET /style.css", asset("style.css", "text/css; charset=utf-8"))
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mux.ServeHTTP(w, r)
}

// statusOf is the one table from errors to HTTP status codes.
func statusOf(err error) int {
	switch {
	case errors.Is(err, errBadRequest):
		return http.StatusBadRequest
	case errors.Is(err, errDisabled):
		return http.StatusNotImplemented
	}
	switch wire.CodeOf(err) {
	case wire.CodeBadRequest:
		return http.StatusBadRequest
	case wire.CodeNotFound:
		return http.StatusNotFound
	case wire.CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// start is the start time of an id request: zero without Config.Observe.
func (h *handler) start() time.Time {
	if h.cfg.Observe == nil {
		return time.Time{}
	}
	return h.cfg.Clock.Now()
}

// observe reports an id request to Config.Observe, if set.
func (h *handler) observe(start time.Time, engine, tag string, code, ids int) {
	if h.cfg.Observe == nil {
		return
	}
	h.cfg.Observe(Observation{Engine: engine, Tag: tag, Code: code, IDs: ids, Took: h.cfg.Clock.Since(start)})
}

// fail answers err as one line of text with its status code, and returns
// the code.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) int {
	code := statusOf(err)
	msg := oneLine(err.Error())
	level := slog.LevelDebug
	if code >= 500 && code != http.StatusNotImplemented {
		level = slog.LevelWarn
	}
	h.log.Log(r.Context(), level, "httpapi: request failed", "path", r.URL.Path, "code", code, "err", msg)
	if code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Error(w, msg, code)
	return code
}

// oneLine folds line breaks so that a message stays one line of text.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func redirect(to string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", to)
		w.WriteHeader(http.StatusFound)
	}
}

// readyz answers 200 "ready" or 503 with Config.Ready's error.
func (h *handler) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if h.cfg.Ready != nil {
		if err := h.cfg.Ready(); err != nil {
			http.Error(w, "not ready: "+oneLine(err.Error()), http.StatusServiceUnavailable)
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ready\n"))
}

// readySubject answers /readyz/{subject}: 200 "ready" when the node serves
// the subject and can answer it, 503 with why not, 404 for a subject the
// node is not set up for. A probe that routes one kind of traffic (the
// HTTP API's segment ids, say) reads the subject it routes, so a node
// that cannot serve another subject stays in service for this one.
func (h *handler) readySubject(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	subject := r.PathValue("subject")
	ok, err := false, error(nil)
	if h.cfg.ReadySubject != nil {
		ok, err = h.cfg.ReadySubject(subject)
	}
	switch {
	case !ok:
		http.Error(w, "not served by this node: "+oneLine(subject), http.StatusNotFound)
	case err != nil:
		http.Error(w, "not ready: "+subject+": "+oneLine(err.Error()), http.StatusServiceUnavailable)
	default:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ready\n"))
	}
}
