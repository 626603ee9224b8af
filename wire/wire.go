package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/nats-io/nats.go"
)

// Subjects and headers of the protocol.
const (
	// SegmentPrefix is followed by a tag: leaf.segment.<tag>.
	SegmentPrefix = "leaf.segment."
	// MonoPrefix is followed by a monotonic tag: leaf.mono.<tag>. Only the
	// node that leads the tag subscribes to it.
	MonoPrefix = "leaf.mono."
	// TagChangedPrefix + <tag> tells every node (no reply) that the tag
	// was created or restarted: each forgets having found no such tag (the
	// engine's negative cache), so the tag serves at once on every node,
	// and competes to lead it at once if it is monotonic, instead of at its
	// next listing.
	TagChangedPrefix = "leaf.admin.changed."
	// SnowflakeSubject answers snowflake ids; SnowflakePrefix is followed by
	// a key, accepted and ignored as Leaf does (leaf.snowflake.<key>),
	// except the reserved key "decode".
	SnowflakeSubject = "leaf.snowflake"
	SnowflakePrefix  = "leaf.snowflake."
	// DecodeSubject takes a decimal snowflake id and answers its fields as
	// JSON (Decoded).
	DecodeSubject = "leaf.snowflake.decode"
	// TimeSubject is answered by every node (no queue group) with its clock
	// as JSON (NodeTime); nodes ask it before they serve snowflake ids.
	TimeSubject = "leaf.admin.time"
	// FloorPrefix + <tag> is answered by every node (no queue group) with
	// the highest range end it has received for the tag (NodeFloor): what
	// an operator's tag restart or create must not go below, whatever the
	// store still remembers.
	FloorPrefix = "leaf.admin.floor."
	// FloorAnnouncePrefix + <tag> carries a node's new floor after each
	// load (FloorAnnounce, no reply), on every store: nodes on the same
	// store take no range below any floor they heard, and refuse a tag
	// whose store mode is not the one announced.
	FloorAnnouncePrefix = "leaf.floor."
	// FloorsSubject is answered by every node with a data directory (no
	// queue group) with all its floors and modes (NodeFloors): a starting
	// node learns the floors its peers announced before it came.
	FloorsSubject = "leaf.admin.floors"
	// EncodingHeader selects the reply encoding; EncodingBinary is its only
	// value other than the default decimal text.
	EncodingHeader = "Leaf-Encoding"
	EncodingBinary = "binary"
	// ErrorCodeHeader and ErrorHeader are the NATS micro error headers.
	ErrorCodeHeader = "Nats-Service-Error-Code"
	ErrorHeader     = "Nats-Service-Error"
	// DefaultMaxBatch is the largest count a request may ask for by default.
	DefaultMaxBatch = 10000
	// QueueGroup is the queue group every leafd responder joins.
	QueueGroup = "leaf"
	// SegmentService and SnowflakeService are the names of a node's two
	// NATS micro services (nats micro ls): segment ids and admin, and
	// snowflake ids (which joins and leaves the queue group on its own).
	SegmentService   = "leaf-segment"
	SnowflakeService = "leaf-snowflake"
)

// ServiceNames are the micro services every node runs.
var ServiceNames = []string{SegmentService, SnowflakeService}

// Error codes carried in ErrorCodeHeader.
const (
	CodeBadRequest  = "400"
	CodeNotFound    = "404"
	CodeUnavailable = "503"
	CodeInternal    = "500"
)

// Client-side sentinels for the error codes.
var (
	ErrBadRequest  = errors.New("bad request")
	ErrUnknownTag  = errors.New("unknown tag")
	ErrUnavailable = errors.New("unavailable")
	ErrInternal    = errors.New("internal error")
	ErrBadReply    = errors.New("malformed reply")
)

// ParseCount reads a request body: empty means 1, else a decimal count
// 1..max. The error says what was wrong and is meant for the caller.
func ParseCount(body []byte, max int) (int, error) {
	b := trimSpace(body)
	if len(b) == 0 {
		return 1, nil
	}
	if len(b) > 19 {
		return 0, fmt.Errorf("count %q is not a number from 1 to %d", clip(b), max)
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("count %q is not a number from 1 to %d", clip(b), max)
		}
		n = n*10 + int(c-'0')
	}
	if n < 1 || n > max {
		return 0, fmt.Errorf("count %d is out of range 1 to %d", n, max)
	}
	return n, nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// clip keeps error messages small and printable whatever the request held.
func clip(b []byte) string {
	if len(b) > 32 {
		b = b[:32]
	}
	q := strconv.QuoteToASCII(string(b))
	return q[1 : len(q)-1]
}

// AppendDecimal appends ids as decimal text separated by '\n'.
//
// Ids of a batch are mostly consecutive, so an id that is its predecessor
// plus one is written by copying the predecessor's digits and incrementing
// them in place, which is several times cheaper than formatting it.
func AppendDecimal(dst []byte, ids []int64) []byte {
	dst = slices.Grow(dst, 20*len(ids)) // one allocation at most: 19 digits and a separator per id
	prev := -1                          // where the previous id's digits start in dst
	for i, id := range ids {
		if i > 0 {
			dst = append(dst, '\n')
		}
		start := len(dst)
		if i > 0 && ids[i-1] >= 0 && ids[i-1] < math.MaxInt64 && id == ids[i-1]+1 {
			dst = append(dst, dst[prev:start-1]...)
			j := len(dst) - 1
			for j >= start && dst[j] == '9' {
				dst[j] = '0'
				j--
			}
			if j >= start {
				dst[j]++
			} else { // 99…9 + 1 = 100…0: one digit more
				dst[start] = '1'
				dst = append(dst, '0')
			}
		} else {
			dst = strconv.AppendInt(dst, id, 10)
		}
		prev = start
	}
	return dst
}

// AppendBinary appends ids as packed big-endian uint64s.
func AppendBinary(dst []byte, ids []int64) []byte {
	off := len(dst)
	dst = slices.Grow(dst, 8*len(ids))[:off+8*len(ids)]
	for i, id := range ids {
		binary.BigEndian.PutUint64(dst[off+8*i:], uint64(id))
	}
	return dst
}

// WantsBinary reports whether a request's headers ask for binary replies.
func WantsBinary(h nats.Header) bool {
	return h != nil && h.Get(EncodingHeader) == EncodingBinary
}

// DecodeIDs parses a reply body in the given encoding into dst (appended).
func DecodeIDs(dst []int64, data []byte, binaryEnc bool) ([]int64, error) {
	if binaryEnc {
		if len(data) == 0 || len(data)%8 != 0 {
			return dst, fmt.Errorf("%w: %d bytes is not a whole number of 8-byte ids", ErrBadReply, len(data))
		}
		for i := 0; i < len(data); i += 8 {
			dst = append(dst, int64(binary.BigEndian.Uint64(data[i:])))
		}
		return dst, nil
	}
	if len(data) == 0 {
		return dst, fmt.Errorf("%w: empty reply", ErrBadReply)
	}
	start := 0
	for i := 0; i <= len(data); i++ {
		if i < len(data) && data[i] != '\n' {
			continue
		}
		id, err := strconv.ParseInt(string(data[start:i]), 10, 64)
		if err != nil {
			return dst, fmt.Errorf("%w: %q is not an id", ErrBadReply, clip(data[start:i]))
		}
		dst = append(dst, id)
		start = i + 1
	}
	return dst, nil
}

// Error is an error reply: its code and message as the server sent them.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return "leafmq " + e.Code + ": " + e.Message }

// Unwrap maps the code to a sentinel, so errors.Is(err, ErrUnknownTag) works.
func (e *Error) Unwrap() error {
	switch e.Code {
	case CodeBadRequest:
		return ErrBadRequest
	case CodeNotFound:
		return ErrUnknownTag
	case CodeUnavailable:
		return ErrUnavailable
	default:
		return ErrInternal
	}
}

// ReplyError returns the error a reply carries in its micro headers, or nil.
func ReplyError(msg *nats.Msg) error {
	if msg.Header == nil {
		return nil
	}
	code := msg.Header.Get(ErrorCodeHeader)
	if code == "" {
		return nil
	}
	return &Error{Code: code, Message: msg.Header.Get(ErrorHeader)}
}

// Decoded is the reply of DecodeSubject: the fields of a snowflake id, named
// as in Leaf's /decodeSnowflakeId and UidGenerator's parseUID.
type Decoded struct {
	ID        int64  `json:"id"`
	Timestamp int64  `json:"timestamp"` // ticks since the Unix epoch (ms, or s for second layouts)
	Time      string `json:"time"`      // RFC 3339, UTC
	Worker    int64  `json:"workerId"`  // the whole worker field, as Leaf's workerId
	// Region and RegionWorker split Worker for a layout with region bits
	// (absent without): the region id and the worker within the region.
	Region       *int64 `json:"region,omitempty"`
	RegionWorker *int64 `json:"regionWorker,omitempty"`
	Sequence     int64  `json:"sequence"`
	Layout       string `json:"layout"`
}

// NodeFloor is the reply of FloorPrefix + tag.
type NodeFloor struct {
	Node     string `json:"node"`
	Instance string `json:"instance,omitempty"` // as in NodeStatus
	Tag      string `json:"tag"`
	Floor    int64  `json:"floor"` // 0: this node never received a range of the tag
}

// FloorAnnounce is published on FloorAnnouncePrefix + tag.
type FloorAnnounce struct {
	Node     string `json:"node"`
	Instance string `json:"instance,omitempty"` // as in NodeStatus: tells two processes under one name apart
	Store    string `json:"store"`              // the store's incarnation ("" for a store without one: MySQL): floors of another do not count
	Floor    int64  `json:"floor"`
	// Mode is the tag's mode as the node serves it (segment.Mode's
	// String: "segment", "mono", "opaque/53/<key id>"): a node that never
	// served the tag refuses it when the store reports another mode.
	Mode string `json:"mode,omitempty"`
}

// NodeFloors is the reply of FloorsSubject.
type NodeFloors struct {
	Node     string            `json:"node"`
	Instance string            `json:"instance,omitempty"` // as in NodeStatus
	Store    string            `json:"store"`              // as in FloorAnnounce
	Floors   map[string]int64  `json:"floors"`
	Modes    map[string]string `json:"modes,omitempty"` // as in FloorAnnounce
}

// NodeTime is the reply of TimeSubject.
type NodeTime struct {
	Node     string `json:"node"`
	UnixNano int64  `json:"unix_nano"`
}

// NewRequest is a request for n ids on subject (leaf.segment.<tag>,
// leaf.snowflake): an empty body for one id, decimal n for more, and the
// binary encoding header when binary is set.
func NewRequest(subject string, n int, binary bool) *nats.Msg {
	m := &nats.Msg{Subject: subject}
	if n > 1 {
		m.Data = strconv.AppendInt(nil, int64(n), 10)
	}
	if binary {
		m.Header = nats.Header{EncodingHeader: []string{EncodingBinary}}
	}
	return m
}
