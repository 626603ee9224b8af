package kvstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Reads go to the stream leader through the STREAM.MSG.GET API instead of
// kv.Get. A KV bucket allows "direct get", which any replica answers (and a
// client's own server's replica first): a follower may not have applied the
// latest committed write yet, so kv.Get right after a Create could say "not
// found", and ListKeys (an R1 consumer that may sit on a follower) could
// still list a deleted key. The leader answers only with what it has
// applied, which includes every write it has acknowledged.
//
// Stale reads could never cause duplicates (every write is a
// compare-and-swap on the revision read), only spurious ErrUnknownTag and
// extra conflicts; leader reads remove those.

// msgGetRequest is the body of $JS.API.STREAM.MSG.GET.<stream>.
type msgGetRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	LastFor string `json:"last_by_subj,omitempty"`
	NextFor string `json:"next_by_subj,omitempty"`
}

type msgGetResponse struct {
	Error   *jetstream.APIError `json:"error,omitempty"`
	Message *storedMsg          `json:"message,omitempty"`
}

// storedMsg is a message as STREAM.MSG.GET returns it.
type storedMsg struct {
	Subject  string    `json:"subject"`
	Sequence uint64    `json:"seq"`
	Header   []byte    `json:"hdrs,omitempty"`
	Data     []byte    `json:"data,omitempty"`
	Time     time.Time `json:"time"`
}

// KV headers (nats.go jetstream/kv.go, ADR-8).
const (
	kvOpHeader   = "KV-Operation"
	markerHeader = "Nats-Marker-Reason" // server-written markers (per-key TTL, MaxAge)
)

// deleted reports whether m is a delete or purge marker rather than a value.
func (m *storedMsg) deleted() bool {
	if len(m.Header) == 0 {
		return false
	}
	h, err := nats.DecodeHeadersMsg(m.Header)
	if err != nil {
		return false
	}
	return h.Get(kvOpHeader) != "" || h.Get(markerHeader) != ""
}

// last returns the latest message of tag's key, or nil if there is none.
func (s *Store) last(ctx context.Context, tag string) (*storedMsg, error) {
	return s.msgGet(ctx, msgGetRequest{LastFor: s.keyPre + tag})
}

// msgGet asks the stream leader for one message; nil, nil when there is no
// such message.
func (s *Store) msgGet(ctx context.Context, req msgGetRequest) (*storedMsg, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	msg, err := s.nc.RequestWithContext(ctx, s.getSubj, body)
	if err != nil {
		return nil, err
	}
	var resp msgGetResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, fmt.Errorf("%w: bad STREAM.MSG.GET reply: %v", ErrCorrupt, err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return nil, nil
		}
		return nil, resp.Error
	}
	if resp.Message == nil {
		return nil, fmt.Errorf("%w: empty STREAM.MSG.GET reply", ErrCorrupt)
	}
	return resp.Message, nil
}
