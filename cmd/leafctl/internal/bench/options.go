package bench

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Load modes.
const (
	// ModeRequest: each worker is one goroutine calling nc.RequestMsg in a
	// loop, one request in flight per worker (how most services call leafd).
	ModeRequest = "request"
	// ModePipelined: each worker keeps Depth requests in flight on one reply
	// subscription, publishing with per-request reply tokens.
	ModePipelined = "pipelined"
	// ModePool: each worker takes ready-made batches from the JetStream
	// pool of Subject (leaf.pool.segment.<tag> or leaf.pool.snowflake), one
	// fetch at a time, with the single-use checks of package pool.
	ModePool = "pool"
)

// Keys of Result.ErrorsByCode besides the server's own codes ("400", "404",
// "503", "500" from the Nats-Service-Error-Code header).
const (
	CodeTimeout      = "timeout"       // no reply within Options.Timeout
	CodeNoResponders = "no-responders" // nobody subscribed to the subject
	CodeBadReply     = "bad-reply"     // a success reply that is not ids in the asked encoding
	CodeWrongCount   = "wrong-count"   // Check: a success reply with other than Batch ids
	CodeClient       = "client"        // the client failed: connection closed, publish error
	CodePoolEmpty    = "pool-empty"    // ModePool: no batch within Timeout
	CodePoolUsed     = "pool-used"     // ModePool: a batch thrown away, not confirmed for single use
)

var (
	// ErrOptions is wrapped by every Options validation error.
	ErrOptions = errors.New("invalid bench options")
	// ErrNotConnected: the connection given to Run is closed or reconnecting.
	ErrNotConnected = errors.New("not connected")
)

// Options configures a run. Zero values mean the defaults in the comments.
type Options struct {
	Subject     string        // default "leaf.segment.bench"
	Batch       int           // ids per request; default 1 (empty body); >1 sends decimal N
	Binary      bool          // ask for binary replies (header Leaf-Encoding: binary)
	Concurrency int           // workers; default 8
	Mode        string        // ModeRequest or ModePipelined; default ModeRequest
	Depth       int           // in flight per worker in ModePipelined; default 16
	Duration    time.Duration // recorded part of the run; default 10s
	Requests    int           // at most this many recorded requests; 0: no cap (Duration still ends the run)
	Rate        int           // target req/s over all workers; 0: as fast as possible
	Timeout     time.Duration // per request; default 2s
	Warmup      time.Duration // load before recording starts; default 1s, negative: none
	Baseline    bool          // for the caller: also run RunBaseline and Report the ratio
	Check       bool          // parse every reply, check it has Batch ids, count duplicates
	Progress    io.Writer     // if non-nil, a one-line progress display rewritten every ~500ms
	// EchoProcess, if set, runs the baseline's echo responder in a child
	// process instead of this one, so that it pays for its own process as
	// leafd does (on a 2-core machine three busy processes share the cores
	// less well than two). The command gets the server URL and the subject
	// as two more arguments and the payload on standard input; it must
	// print a line "ready" once subscribed (ServeEcho does all that), and is
	// killed after the run. Credentials are not passed on.
	EchoProcess []string
}

// withDefaults fills in defaults and validates.
func (o Options) withDefaults() (Options, error) {
	if o.Subject == "" {
		o.Subject = "leaf.segment.bench"
	}
	if o.Batch == 0 {
		o.Batch = 1
	}
	if o.Concurrency == 0 {
		o.Concurrency = 8
	}
	if o.Mode == "" {
		o.Mode = ModeRequest
	}
	if o.Depth == 0 {
		o.Depth = 16
	}
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Second
	}
	switch {
	case o.Warmup == 0:
		o.Warmup = time.Second
	case o.Warmup < 0:
		o.Warmup = 0
	}
	var bad []string
	if strings.ContainsAny(o.Subject, " \t\r\n*>") || strings.HasPrefix(o.Subject, ".") ||
		strings.HasSuffix(o.Subject, ".") || strings.Contains(o.Subject, "..") {
		bad = append(bad, fmt.Sprintf("subject %q is not a literal NATS subject", o.Subject))
	}
	if o.Mode != ModeRequest && o.Mode != ModePipelined && o.Mode != ModePool {
		bad = append(bad, fmt.Sprintf("mode %q is not %q, %q or %q", o.Mode, ModeRequest, ModePipelined, ModePool))
	}
	if o.Mode == ModePool && !strings.HasPrefix(o.Subject, "leaf.pool.") {
		bad = append(bad, fmt.Sprintf("mode pool needs a pool subject (leaf.pool.segment.<tag> or leaf.pool.snowflake), not %q", o.Subject))
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"batch", int64(o.Batch)},
		{"concurrency", int64(o.Concurrency)},
		{"depth", int64(o.Depth)},
		{"duration", int64(o.Duration)},
		{"timeout", int64(o.Timeout)},
	} {
		if f.v < 1 {
			bad = append(bad, fmt.Sprintf("%s must be positive", f.name))
		}
	}
	if o.Requests < 0 {
		bad = append(bad, "requests must not be negative")
	}
	if o.Rate < 0 {
		bad = append(bad, "rate must not be negative")
	}
	if len(bad) > 0 {
		return o, fmt.Errorf("bench: %w: %s", ErrOptions, strings.Join(bad, "; "))
	}
	return o, nil
}
