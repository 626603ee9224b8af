package kvlease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/snowflake"
)

// Reads that must see this node's own writes (the lease key before a CAS)
// go to the stream leader through STREAM.MSG.GET, not kv.Get: on an R>1
// bucket a direct get may be answered by a follower that has not applied
// the latest write (see segment/kvstore).

type msgGetRequest struct {
	LastFor string `json:"last_by_subj,omitempty"`
}

type msgGetResponse struct {
	Error   *jetstream.APIError `json:"error,omitempty"`
	Message *storedMsg          `json:"message,omitempty"`
}

type storedMsg struct {
	Subject  string `json:"subject"`
	Sequence uint64 `json:"seq"`
	Header   []byte `json:"hdrs,omitempty"`
	Data     []byte `json:"data,omitempty"`
}

// deleted reports whether m is a delete, purge or server marker.
func (m *storedMsg) deleted() bool {
	if len(m.Header) == 0 {
		return false
	}
	h, err := nats.DecodeHeadersMsg(m.Header)
	if err != nil {
		return false
	}
	return h.Get("KV-Operation") != "" || h.Get(jetstream.MarkerReasonHeader) != ""
}

// msgGet asks the stream leader for the last message on subject; nil, nil
// when there is none.
func (r *Registry) msgGet(ctx context.Context, subject string) (*storedMsg, error) {
	body, err := json.Marshal(msgGetRequest{LastFor: subject})
	if err != nil {
		return nil, err
	}
	msg, err := r.nc.RequestWithContext(ctx, r.getSubj, body)
	if err != nil {
		return nil, err
	}
	var resp msgGetResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, fmt.Errorf("kvlease: bad STREAM.MSG.GET reply: %v", err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return nil, nil
		}
		return nil, resp.Error
	}
	if resp.Message == nil {
		return nil, errors.New("kvlease: empty STREAM.MSG.GET reply")
	}
	return resp.Message, nil
}

func apiPrefix(o jetstream.JetStreamOptions) string {
	switch {
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	default:
		return jetstream.DefaultAPIPrefix
	}
}

// retry calls f until it succeeds or says not to retry, pausing a
// jittered, growing while (1ms doubling to 64ms), until ctx ends. It
// returns f's last error.
func retry(ctx context.Context, f func() (again bool, err error)) error {
	for attempt := 0; ; attempt++ {
		again, err := f()
		if err == nil || !again {
			return err
		}
		d := time.Millisecond << min(attempt, 6)
		d = d/2 + rand.N(d)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

// fail maps err of op to the error callers see. ctx is the caller's
// context, cctx the call's (ctx bounded by Timeout).
func fail(ctx, cctx context.Context, op string, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("kvlease: %s: %w (%v)", op, ctx.Err(), err)
	case cctx.Err() != nil:
		return fmt.Errorf("%w: kvlease: %s: no answer in time: %v", snowflake.ErrRegistryUnavailable, op, err)
	case unavailable(err):
		return fmt.Errorf("%w: kvlease: %s: %w", snowflake.ErrRegistryUnavailable, op, err)
	default:
		return fmt.Errorf("kvlease: %s: %w", op, err)
	}
}

// conflict reports whether err is a compare-and-swap conflict (10071, or
// 10164 from clustered streams).
func conflict(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// transient reports whether err may go away by itself soon (a leader
// election, a reconnect).
func transient(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrStaleConnection) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.Code == 503 &&
		apiErr.ErrorCode != jetstream.JSErrCodeJetStreamNotEnabled &&
		apiErr.ErrorCode != jetstream.JSErrCodeJetStreamNotEnabledForAccount
}

// unavailable reports whether err means JetStream cannot be reached.
func unavailable(err error) bool {
	for _, target := range []error{
		nats.ErrNoResponders, nats.ErrTimeout, nats.ErrConnectionClosed,
		nats.ErrConnectionDraining, nats.ErrConnectionReconnecting,
		nats.ErrDisconnected, nats.ErrNoServers, nats.ErrStaleConnection,
		jetstream.ErrNoStreamResponse, jetstream.ErrConnectionClosed,
		jetstream.ErrServerShutdown, jetstream.ErrJetStreamNotEnabled,
		jetstream.ErrJetStreamNotEnabledForAccount, jetstream.ErrBucketNotFound,
		jetstream.ErrStreamNotFound, context.DeadlineExceeded,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.Code == 503 || apiErr.Code == 504 || apiErr.Code == 408)
}
