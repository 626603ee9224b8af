package httpapi

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"sync"

	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/wire"
)

//go:embed ui
var ui embed.FS

// StatusDoc is the answer of /status.json, what the status page polls.
type StatusDoc struct {
	Time   int64             `json:"time"`   // unix nanos of the answering node's clock
	Nodes  []wire.NodeStatus `json:"nodes"`  // sorted by node name
	Rows   []TagRow          `json:"rows"`   // nil when Config.Rows is nil or failed
	Errors []string          `json:"errors"` // why Nodes or Rows are missing
}

// status answers /status.json, from the cache when it is fresh enough.
func (h *handler) status(w http.ResponseWriter, r *http.Request) {
	body := h.statusBody(r.Context())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(body)
}

// statusBody returns a recent /status.json body. The lock is held while
// Status and Rows run, so polls that arrive meanwhile wait and share it.
func (h *handler) statusBody(ctx context.Context) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.cfg.Clock.Now()
	if h.body != nil && h.cfg.StatusCache > 0 && now.Sub(h.bodyTime) < h.cfg.StatusCache && !now.Before(h.bodyTime) {
		return h.body
	}
	// The fetch serves every waiting poll: one that gives up must not
	// cancel it for the others.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.cfg.Timeout)
	defer cancel()
	doc := h.fetchStatus(ctx)
	doc.Time = h.cfg.Clock.Now().UnixNano()
	b, err := json.Marshal(doc)
	if err != nil { // wire and TagRow values always marshal
		b = []byte(`{"nodes":[],"rows":null,"errors":["status: cannot encode"]}`)
	}
	h.body, h.bodyTime = b, now
	return b
}

// fetchStatus calls Status and Rows at once.
func (h *handler) fetchStatus(ctx context.Context) StatusDoc {
	doc := StatusDoc{Nodes: []wire.NodeStatus{}, Errors: []string{}}
	var (
		wg                 sync.WaitGroup
		statusErr, rowsErr error
	)
	if h.cfg.Status != nil {
		wg.Go(func() {
			nodes, err := h.cfg.Status(ctx)
			if nodes != nil {
				doc.Nodes = nodes
			}
			statusErr = err
		})
	}
	if h.cfg.Rows != nil {
		wg.Go(func() {
			doc.Rows, rowsErr = h.cfg.Rows(ctx)
			if rowsErr == nil && doc.Rows == nil {
				doc.Rows = []TagRow{}
			}
		})
	}
	wg.Wait()
	if statusErr != nil {
		doc.Errors = append(doc.Errors, "node status: "+oneLine(statusErr.Error()))
	}
	if rowsErr != nil {
		doc.Rows = nil
		doc.Errors = append(doc.Errors, "store table: "+oneLine(rowsErr.Error()))
	}
	sort.SliceStable(doc.Nodes, func(i, j int) bool { return doc.Nodes[i].Node < doc.Nodes[j].Node })
	return doc
}

// MaxRows bounds the rows StoreRows reads.
const MaxRows = 1000

// StoreRows returns a Config.Rows that reads the rows of store: its tag
// list, then each row (at most MaxRows; a tag deleted meanwhile is
// skipped). Each call costs 1+N store reads; Config.StatusCache keeps that
// to one round per interval however many pages are open.
func StoreRows(store segment.Store) func(ctx context.Context) ([]TagRow, error) {
	return func(ctx context.Context) ([]TagRow, error) {
		tags, err := store.Tags(ctx)
		if err != nil {
			return nil, err
		}
		if len(tags) > MaxRows {
			tags = tags[:MaxRows]
		}
		rows := make([]TagRow, 0, len(tags))
		for _, name := range tags {
			tag, err := wire.ParseTag(name) // a name read from the store
			if err != nil {
				return nil, err
			}
			t, err := store.Get(ctx, tag)
			if errors.Is(err, segment.ErrUnknownTag) {
				continue
			}
			if err != nil {
				return nil, err
			}
			rows = append(rows, TagRow{Tag: t.Name.String(), MaxID: t.MaxID, Step: t.Step,
				Description: t.Description, UpdateTime: t.UpdateTime})
		}
		return rows, nil
	}
}

// asset serves one embedded file of the status page.
func asset(name, contentType string) http.HandlerFunc {
	b, err := ui.ReadFile("ui/" + name)
	if err != nil {
		panic("httpapi: missing embedded ui/" + name) // a build error, caught by any test
	}
	return func(w http.ResponseWriter, _ *http.Request) {
		hd := w.Header()
		hd.Set("Content-Type", contentType)
		hd.Set("Cache-Control", "no-cache")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
		_, _ = w.Write(b)
	}
}
