package jskv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrBadReply: STREAM.MSG.GET answered something that is not a message.
var ErrBadReply = errors.New("bad STREAM.MSG.GET reply")

// GetSubject is the STREAM.MSG.GET subject of a KV bucket's stream, with the
// API prefix (or domain) js uses.
func GetSubject(js jetstream.JetStream, bucket string) string {
	return APISubject(js, "STREAM.MSG.GET.KV_"+bucket)
}

// APISubject is the JetStream API subject api (e.g. "STREAM.MSG.DELETE.S")
// with the API prefix (or domain) js uses.
func APISubject(js jetstream.JetStream, api string) string {
	o := js.Options()
	prefix := jetstream.DefaultAPIPrefix
	switch {
	case o.APIPrefix != "":
		prefix = strings.TrimSuffix(o.APIPrefix, ".") + "."
	case o.Domain != "":
		prefix = "$JS." + o.Domain + ".API."
	}
	return prefix + api
}

// DirectSubject is the DIRECT.GET subject of a KV bucket's stream, with the
// API prefix (or domain) js uses.
func DirectSubject(js jetstream.JetStream, bucket string) string {
	return APISubject(js, "DIRECT.GET.KV_"+bucket)
}

// MsgGetRequest is the body of $JS.API.STREAM.MSG.GET.<stream> and of
// $JS.API.DIRECT.GET.<stream>. Batch and MaxBytes are for DIRECT.GET only:
// the leader's STREAM.MSG.GET refuses them.
type MsgGetRequest struct {
	Seq       uint64   `json:"seq,omitempty"`
	LastFor   string   `json:"last_by_subj,omitempty"`
	NextFor   string   `json:"next_by_subj,omitempty"`
	Batch     int      `json:"batch,omitempty"`
	MaxBytes  int      `json:"max_bytes,omitempty"`
	MultiLast []string `json:"multi_last,omitempty"`
}

type msgGetResponse struct {
	Error   *jetstream.APIError `json:"error,omitempty"`
	Message *StoredMsg          `json:"message,omitempty"`
}

// StoredMsg is a message as STREAM.MSG.GET returns it.
type StoredMsg struct {
	Subject  string    `json:"subject"`
	Sequence uint64    `json:"seq"`
	Header   []byte    `json:"hdrs,omitempty"`
	Data     []byte    `json:"data,omitempty"`
	Time     time.Time `json:"time"`

	// hdr is the decoded header of a message DirectBatch read, which
	// arrives decoded; Header is then empty.
	hdr nats.Header
}

// Deleted reports whether m is a delete or purge marker (KV-Operation) or a
// server-written marker (per-key TTL, MaxAge) rather than a value.
func (m *StoredMsg) Deleted() bool {
	h := m.hdr
	if h == nil {
		if len(m.Header) == 0 {
			return false
		}
		var err error
		if h, err = nats.DecodeHeadersMsg(m.Header); err != nil {
			return false
		}
	}
	return h.Get("KV-Operation") != "" || h.Get(jetstream.MarkerReasonHeader) != ""
}

// MsgGet asks the stream leader (on subject, see GetSubject) for one
// message; nil, nil when there is no such message.
func MsgGet(ctx context.Context, nc *nats.Conn, subject string, req MsgGetRequest) (*StoredMsg, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	msg, err := nc.RequestWithContext(ctx, subject, body)
	if err != nil {
		return nil, err
	}
	var resp msgGetResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadReply, err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return nil, nil
		}
		return nil, resp.Error
	}
	if resp.Message == nil {
		return nil, fmt.Errorf("%w: no message", ErrBadReply)
	}
	return resp.Message, nil
}

// ErrNoBatch: the stream does not answer batched direct gets (the stream
// does not allow direct gets, or its servers do not know batches). The
// reader should ask the leader instead.
var ErrNoBatch = errors.New("no batched direct get")

// numPendingHeader is the header of a batched direct get's replies that
// counts the matching messages after the one it carries.
const numPendingHeader = "Nats-Num-Pending"

// DirectBatch asks any replica of the stream (on subject, see
// DirectSubject) for up to batch messages whose subjects match filter, from
// sequence seq on, and calls f on each, in sequence order. A replica
// answers from what it has applied, which on a follower may lag the
// leader's acknowledged writes: a reader that needs those confirms the end
// with the leader (MsgGet). more reports that the replica holds further
// messages after the last one f saw; false with a nil error also when it
// holds none from seq on. An error from f ends the batch and is returned
// as it is. ctx bounds the whole batch.
func DirectBatch(ctx context.Context, nc *nats.Conn, subject string, seq uint64, filter string, batch, maxBytes int, f func(*StoredMsg) error) (more bool, err error) {
	err = directReplies(ctx, nc, subject, MsgGetRequest{Seq: seq, NextFor: filter, Batch: batch, MaxBytes: maxBytes}, func(msg *nats.Msg, status string) (bool, error) {
		switch status {
		case "":
		case "204": // end of batch
			more = msg.Header.Get(numPendingHeader) != "0"
			return true, nil
		case "404": // nothing matches from seq on
			return true, nil
		default: // 503: no responders (direct gets not allowed); 408 and others: a request it does not take
			return true, fmt.Errorf("%w: status %s %s", ErrNoBatch, status, msg.Header.Get("Description"))
		}
		// A server that ignores batch answers one message without the
		// batch headers.
		if msg.Header.Get(numPendingHeader) == "" {
			return true, fmt.Errorf("%w: a reply without %s", ErrNoBatch, numPendingHeader)
		}
		m, err := directMsg(msg)
		if err != nil {
			return true, err
		}
		if m.Sequence < seq {
			return true, fmt.Errorf("%w: direct get: sequence %d before %d", ErrBadReply, m.Sequence, seq)
		}
		seq = m.Sequence + 1
		return false, f(m)
	})
	return more && err == nil, err
}

// DirectLast asks any replica of the stream (on subject, see
// DirectSubject) for the last message of every subject matching filter,
// and calls f on each. It reports whether the answer shows the replica
// has applied the stream's sequence seq: a message at or after it. A
// replica applies the stream in order, so with seq the stream's last
// sequence as its leader told it (stream info), and every message of the
// stream matching filter, current is true only for an answer that holds
// every subject's last message as the leader had it then, or newer. An
// error from f ends the read and is returned as it is.
func DirectLast(ctx context.Context, nc *nats.Conn, subject, filter string, seq uint64, f func(*StoredMsg) error) (current bool, err error) {
	err = directReplies(ctx, nc, subject, MsgGetRequest{MultiLast: []string{filter}}, func(msg *nats.Msg, status string) (bool, error) {
		switch status {
		case "":
		case "204": // end of the answer
			return true, nil
		case "404": // nothing matches
			current = seq == 0
			return true, nil
		default:
			return true, fmt.Errorf("%w: status %s %s", ErrNoBatch, status, msg.Header.Get("Description"))
		}
		m, err := directMsg(msg)
		if err != nil {
			return true, err
		}
		current = current || m.Sequence >= seq
		return false, f(m)
	})
	return current && err == nil, err
}

// directReplies sends req to subject and calls each on every reply, with
// its status header, until each says done or fails (its error is
// returned), or ctx ends. An inbox of its own per request: the replies of
// one given up on cannot be read as another's.
func directReplies(ctx context.Context, nc *nats.Conn, subject string, req MsgGetRequest, each func(msg *nats.Msg, status string) (done bool, err error)) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(subject, inbox, body); err != nil {
		return err
	}
	for {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return err
		}
		if done, err := each(msg, msg.Header.Get("Status")); done || err != nil {
			return err
		}
	}
}

// Conflict reports whether err is a compare-and-swap conflict. Clustered
// (R>1) streams answer code 10164 instead of 10071; nats.go maps both to
// ErrKeyRevisionMismatch for Update, and the code check keeps us right if a
// path does not.
func Conflict(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) &&
		(apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// Transient reports whether err may go away by itself soon (a stream or
// meta leader election, a reconnect, a stream create racing the cleanup
// after the stream's deletion), so a call retries it within its timeout.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, nats.ErrStaleConnection) {
		return true
	}
	var apiErr *jetstream.APIError
	return storeRace(err) || errors.As(err, &apiErr) && apiErr.Code == 503 &&
		apiErr.ErrorCode != jetstream.JSErrCodeJetStreamNotEnabled &&
		apiErr.ErrorCode != jetstream.JSErrCodeJetStreamNotEnabledForAccount
}

// Unavailable reports whether err means JetStream (or the bucket) cannot be
// reached or answered nothing in time.
func Unavailable(err error) bool {
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

// ErrNoKeyTTL: an existing bucket has no LimitMarkerTTL, so its per-key
// TTLs are off.
var ErrNoKeyTTL = errors.New("bucket without per-key TTLs (LimitMarkerTTL)")

// OpenOrCreate returns the KV bucket cfg.Bucket, creating it with cfg when
// it does not exist (one created by another process meanwhile is used). With
// cfg.LimitMarkerTTL set, an existing bucket without per-key TTLs is an
// error wrapping ErrNoKeyTTL.
func OpenOrCreate(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		for wait := 20 * time.Millisecond; ; wait *= 2 {
			kv, err = js.CreateKeyValue(ctx, cfg)
			if !storeRace(err) || wait > time.Second {
				break
			}
			select {
			case <-ctx.Done():
				return nil, err
			case <-time.After(wait):
			}
		}
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, cfg.Bucket)
		}
	}
	if err != nil || cfg.LimitMarkerTTL == 0 {
		return kv, err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, err
	}
	if s, ok := st.(*jetstream.KeyValueBucketStatus); ok && s.LimitMarkerTTL() == 0 {
		return nil, fmt.Errorf("%w: bucket %q", ErrNoKeyTTL, cfg.Bucket)
	}
	return kv, nil
}

// storeRace reports whether err is a server's "error creating store for
// stream": a server that has just deleted a stream (a bucket deleted by
// hand, `nats kv del`) removes the account's emptied directories from a
// goroutine of its own, which can remove them under the new stream's
// directory as it is made. Creating again succeeds.
func storeRace(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeStreamCreate &&
		apiErr.Description == "error creating store for stream"
}

// errCodeStreamCreate is the API error code of a failed stream create
// whose cause has no code of its own.
const errCodeStreamCreate = 10049

// StreamReplicas is a stream and the replicas its configuration asks for.
type StreamReplicas struct {
	Stream   string
	Replicas int
}

// Unreplicated returns those of streams configured with one replica (or
// none given: JetStream's default is one), in the order given. A stream
// that cannot be read within 3 s (not created yet, not this account's to
// see) is left out.
func Unreplicated(ctx context.Context, js jetstream.JetStream, streams ...string) []StreamReplicas {
	var out []StreamReplicas
	for _, name := range streams {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		s, err := js.Stream(cctx, name)
		cancel()
		if err != nil {
			continue
		}
		if r := s.CachedInfo().Config.Replicas; r <= 1 {
			out = append(out, StreamReplicas{name, r})
		}
	}
	return out
}

// errCodeClusterNotAvail is the API error a server answers while it sees
// no JetStream meta leader ("JetStream system temporarily unavailable"),
// STREAM.MSG.GET included, although the stream's own leader may be up: in
// a super-cluster the meta group spans every cluster, so a region cut off
// from the others' majority gets it for every read from its own buckets.
const errCodeClusterNotAvail = 10008

// NoMetaLeader reports whether err is that answer.
func NoMetaLeader(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeClusterNotAvail
}

// DirectGet asks any replica of the stream (on subject, see DirectSubject)
// for one message, as MsgGet asks the leader; nil, nil when there is none.
// A replica answers from what it has applied, which on a follower may lag
// the leader's acknowledged writes: what a caller decides on it must be
// confirmed by a write's compare-and-swap on the revision it read.
func DirectGet(ctx context.Context, nc *nats.Conn, subject string, req MsgGetRequest) (*StoredMsg, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	msg, err := nc.RequestWithContext(ctx, subject, body)
	if err != nil {
		return nil, err
	}
	switch status := msg.Header.Get("Status"); status {
	case "":
	case "404":
		return nil, nil
	case "503":
		return nil, fmt.Errorf("%w: direct get: %s", nats.ErrNoResponders, msg.Header.Get("Description"))
	default:
		return nil, fmt.Errorf("jskv: direct get: status %s %s", status, msg.Header.Get("Description"))
	}
	return directMsg(msg)
}

// directMsg is the message a direct get's reply carries, its subject and
// sequence in headers.
func directMsg(msg *nats.Msg) (*StoredMsg, error) {
	m := &StoredMsg{Subject: msg.Header.Get(jetstream.SubjectHeader), Data: msg.Data, hdr: msg.Header}
	var err error
	if m.Sequence, err = strconv.ParseUint(msg.Header.Get(jetstream.SequenceHeader), 10, 64); err != nil {
		return nil, fmt.Errorf("%w: direct get: sequence %q", ErrBadReply, msg.Header.Get(jetstream.SequenceHeader))
	}
	if ts := msg.Header.Get(jetstream.TimeStampHeaer); ts != "" {
		if m.Time, err = time.Parse(time.RFC3339Nano, ts); err != nil {
			return nil, fmt.Errorf("%w: direct get: time stamp %q", ErrBadReply, ts)
		}
	}
	return m, nil
}

// replicaReads is the context key of WithReplicaReads.
type replicaReads struct{}

// WithReplicaReads lets Get read from any replica when the stream
// leader's read is refused for want of a meta leader (NoMetaLeader), and
// sets *used when it did. Only a caller whose every decision on the read
// is confirmed by a write's compare-and-swap on the revision read may
// allow it: a replica's copy may be older than the latest write.
func WithReplicaReads(ctx context.Context, used *bool) context.Context {
	return context.WithValue(ctx, replicaReads{}, used)
}

// Get is MsgGet from the stream leader (on getSubj), or, where ctx allows
// it (WithReplicaReads) and the leader's read is refused for want of a
// meta leader, DirectGet from any replica (on dirSubj).
func Get(ctx context.Context, nc *nats.Conn, getSubj, dirSubj string, req MsgGetRequest) (*StoredMsg, error) {
	m, err := MsgGet(ctx, nc, getSubj, req)
	if used, ok := ctx.Value(replicaReads{}).(*bool); ok && NoMetaLeader(err) {
		*used = true
		m, err = DirectGet(ctx, nc, dirSubj, req)
	}
	return m, err
}
