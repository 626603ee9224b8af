package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/wire"
)

// idMethods are the methods that take an id. Leaf's @RequestMapping names
// no method, so Spring MVC 4.3 (Leaf's Boot 1.5) dispatches all of them but
// OPTIONS, which it answers itself, and TRACE, which Tomcat refuses.
const idMethods = "GET, HEAD, POST, PUT, PATCH, DELETE"

// idMethod answers OPTIONS and refuses methods that take no id; it reports
// whether the request should take one.
func idMethod(w http.ResponseWriter, r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	case http.MethodOptions:
		w.Header().Set("Allow", idMethods+", OPTIONS")
		w.WriteHeader(http.StatusOK)
		return false
	}
	w.Header().Set("Allow", idMethods+", OPTIONS")
	http.Error(w, "method "+r.Method+" not allowed", http.StatusMethodNotAllowed)
	return false
}

// segmentID is Leaf's GET /api/segment/get/{key}: one id of the tag, as
// plain decimal text.
func (h *handler) segmentID(w http.ResponseWriter, r *http.Request) {
	h.tagID(w, r, "segment", h.cfg.Segment)
}

// monoID is GET /api/mono/get/{key}: one id of a monotonic tag, as
// segmentID answers one of a segment tag.
func (h *handler) monoID(w http.ResponseWriter, r *http.Request) {
	h.tagID(w, r, "mono", h.cfg.Mono)
}

// kindOf names an engine's ids in messages.
var kindOf = map[string]string{"segment": "segment", "mono": "monotonic", "snowflake": "snowflake"}

func (h *handler) tagID(w http.ResponseWriter, r *http.Request, engine string, take func(context.Context, wire.Tag, []int64) error) {
	if !idMethod(w, r) {
		return
	}
	start := h.start()
	key := r.PathValue("key")
	if take == nil {
		h.observe(start, engine, "", h.fail(w, r, fmt.Errorf("%s ids are %w", kindOf[engine], errDisabled)), 0)
		return
	}
	tag, err := wire.ParseTag(key)
	if err != nil {
		h.observe(start, engine, "", h.fail(w, r, err), 0)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	var dst [1]int64
	if err := take(ctx, tag, dst[:]); err != nil {
		h.observe(start, engine, tag.String(), h.fail(w, r, err), 0)
		return
	}
	writeID(w, dst[0])
	h.observe(start, engine, tag.String(), http.StatusOK, 1)
}

// snowflakeID is Leaf's GET /api/snowflake/get/{key}. Leaf ignores the key
// (any non-empty one will do), and so does this.
func (h *handler) snowflakeID(w http.ResponseWriter, r *http.Request) {
	if !idMethod(w, r) {
		return
	}
	start := h.start()
	if h.cfg.Snowflake == nil {
		h.observe(start, "snowflake", "", h.fail(w, r, fmt.Errorf("snowflake ids are %w", errDisabled)), 0)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
	defer cancel()
	var dst [1]int64
	if err := h.cfg.Snowflake(ctx, dst[:]); err != nil {
		h.observe(start, "snowflake", "", h.fail(w, r, err), 0)
		return
	}
	writeID(w, dst[0])
	h.observe(start, "snowflake", "", http.StatusOK, 1)
}

// noKey answers /api/{engine}/get/ without a key (Leaf: a bare 404).
func (h *handler) noKey(engine string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := h.start()
		h.observe(start, engine, "", h.fail(w, r, fmt.Errorf("%w: missing key: use %s{key}", errBadRequest, r.URL.Path)), 0)
	}
}

// writeID writes id as Leaf does: the decimal number alone, no newline.
func writeID(w http.ResponseWriter, id int64) {
	hd := w.Header()
	hd.Set("Content-Type", "text/plain; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	var buf [20]byte
	_, _ = w.Write(strconv.AppendInt(buf[:0], id, 10))
}

// LeafDecoded is the answer of /decodeSnowflakeId, field for field Leaf's
// map: every value is a string, timestamp is "ms(yyyy-MM-dd HH:mm:ss.SSS)".
type LeafDecoded struct {
	Timestamp  string `json:"timestamp"`  // "1567733700834(2019-09-06 09:35:00.834)"
	SequenceID string `json:"sequenceId"` // "3448"
	WorkerID   string `json:"workerId"`   // "39"
}

// leafDateFormat is Leaf's SimpleDateFormat("yyyy-MM-dd HH:mm:ss.SSS").
const leafDateFormat = "2006-01-02 15:04:05.000"

// Decode decodes id with layout as Leaf's /decodeSnowflakeId does; loc is
// the zone of the date (nil: time.Local). The timestamp is in milliseconds
// whatever the layout's unit. The sign bit is ignored.
func Decode(layout snowflake.Layout, loc *time.Location, id int64) LeafDecoded {
	d := layout.Decompose(id)
	if loc == nil {
		loc = time.Local
	}
	return LeafDecoded{
		Timestamp:  strconv.FormatInt(d.Time.UnixMilli(), 10) + "(" + d.Time.In(loc).Format(leafDateFormat) + ")",
		SequenceID: strconv.FormatInt(d.Sequence, 10),
		WorkerID:   strconv.FormatInt(d.Worker, 10),
	}
}

// decode is Leaf's /decodeSnowflakeId?snowflakeId=N (any method; the
// parameter may also come in a form body, like Spring's @RequestParam).
func (h *handler) decode(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	s := r.FormValue("snowflakeId")
	if s == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"errorMsg": "missing parameter snowflakeId"})
		return
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{
			"errorMsg": fmt.Sprintf("snowflakeId %q is not a decimal id from 0 to %d", s, int64(1<<63-1)),
		})
		return
	}
	writeJSON(w, http.StatusOK, Decode(h.cfg.Layout, h.cfg.Location, id))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // only our own types, which always marshal
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}
