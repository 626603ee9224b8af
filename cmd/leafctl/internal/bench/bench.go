package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/leafmq/leafmq/pool"
	"github.com/leafmq/leafmq/wire"
)

// Result is what one run measured. Only recorded requests count (warm-up
// ones do not). Requests counts every recorded request that finished, with
// a reply or with an error; Errors is the failed part of it, by code in
// ErrorsByCode. ReqPerSec, IDsPerSec and the latencies cover successful
// requests only, so a node that answers 503 quickly does not look fast.
// Elapsed runs from the start of recording until the last recorded request
// finished.
type Result struct {
	Name         string
	Requests     int64
	IDs          int64
	Errors       int64
	ErrorsByCode map[string]int64
	Elapsed      time.Duration
	ReqPerSec    float64
	IDsPerSec    float64
	P50          time.Duration
	P90          time.Duration
	P99          time.Duration
	P999         time.Duration
	Max          time.Duration
	Duplicates   int64 // ids seen more than once (Check only)
}

// Names of baseline results.
const baselineName = "echo baseline"

// progressEvery is how often Options.Progress is rewritten.
const progressEvery = 500 * time.Millisecond

// Run puts the load described by o on the responders of o.Subject through nc
// and measures it. It sends one unrecorded request first and fails fast if
// nobody answers. It returns when the run is over (Duration or Requests) and
// every recorded request has finished or timed out; no goroutine of it
// outlives the call. When ctx ends first, Run returns what it has recorded so
// far together with ctx.Err(); in ModeRequest that takes at most Timeout.
func Run(ctx context.Context, nc *nats.Conn, o Options) (Result, error) {
	o, err := o.withDefaults()
	if err != nil {
		return Result{Name: o.Subject}, err
	}
	return run(ctx, nc, o, o.Subject, true)
}

// RunAll runs Run and then, if o.Baseline is set, RunBaseline, and returns
// their results in that order, ready for Report. It stops at the first error,
// returning the results so far.
func RunAll(ctx context.Context, nc *nats.Conn, o Options) ([]Result, error) {
	res, err := Run(ctx, nc, o)
	if err != nil || !o.Baseline {
		return []Result{res}, err
	}
	base, err := RunBaseline(ctx, nc, o)
	return []Result{res, base}, err
}

// RunBaseline runs the load of o against a bare echo responder instead of
// leafd, to measure what the NATS round trip alone costs on this machine and
// server. The echo gets a connection of its own to the server nc is
// connected to (as leafd's responder has its own connection: a request goes
// client connection -> server -> responder connection and back), subscribes
// in the queue group leafd uses to a private subject "_leafbench.echo.<nuid>",
// and answers every request with the same prebuilt bytes: one real reply
// taken from o.Subject before the run, so it has leafd's size and encoding,
// or, if o.Subject does not answer, Batch synthetic 13-digit ids. It is
// stopped and its connection closed before RunBaseline returns.
//
// The echo repeats its ids by design, so Check verifies encoding and count
// but not uniqueness, and Duplicates is always 0.
func RunBaseline(ctx context.Context, nc *nats.Conn, o Options) (Result, error) {
	o, err := o.withDefaults()
	if err != nil {
		return Result{Name: baselineName}, err
	}
	url := nc.ConnectedUrl() // nil-safe
	if url == "" {
		return Result{Name: baselineName}, fmt.Errorf("bench: baseline: %w", ErrNotConnected)
	}
	payload := baselinePayload(nc, o)
	if len(o.EchoProcess) > 0 {
		o.Subject = "_leafbench.echo." + nuid.Next()
		stop, err := startEchoProcess(ctx, o.EchoProcess, url, o.Subject, payload)
		if err != nil {
			return Result{Name: baselineName}, fmt.Errorf("bench: baseline: %w", err)
		}
		defer stop()
		return run(ctx, nc, o, baselineName, false)
	}

	// Copy the client's options so that the echo authenticates the same way
	// (user, token, nkey, creds, TLS), but none of the caller's callbacks
	// fire for it. Opts is not written after connecting unless the caller
	// sets handlers on nc meanwhile.
	eo := nc.Opts
	eo.Url, eo.Servers, eo.Name = url, nil, "leafbench-echo"
	eo.RetryOnFailedConnect = false
	eo.ClosedCB, eo.DisconnectedCB, eo.DisconnectedErrCB = nil, nil, nil
	eo.ConnectedCB, eo.ReconnectedCB, eo.DiscoveredServersCB = nil, nil, nil
	eo.AsyncErrorCB, eo.ReconnectErrCB, eo.LameDuckModeHandler = nil, nil, nil
	echo, err := eo.Connect()
	if err != nil {
		return Result{Name: baselineName}, fmt.Errorf("bench: baseline: connect echo to %s: %w", nc.ConnectedUrlRedacted(), err)
	}
	defer echo.Close()

	o.Subject = "_leafbench.echo." + nuid.Next()
	_, err = echo.QueueSubscribe(o.Subject, wire.QueueGroup, func(m *nats.Msg) {
		_ = m.Respond(payload) // a lost reply is the client's timeout
	})
	if err == nil {
		err = echo.Flush() // the server has the subscription before the load starts
	}
	if err != nil {
		return Result{Name: baselineName}, fmt.Errorf("bench: baseline: subscribe echo: %w", err)
	}
	return run(ctx, nc, o, baselineName, false)
}

// baselinePayload asks o.Subject once for what the echo should answer.
func baselinePayload(nc *nats.Conn, o Options) []byte {
	if m, err := nc.RequestMsg(newRequest(o, o.Subject), o.Timeout); err == nil &&
		wire.ReplyError(m) == nil && len(m.Data) > 0 {
		return bytes.Clone(m.Data)
	}
	ids := make([]int64, o.Batch)
	for i := range ids {
		ids[i] = 1_000_000_000_000 + int64(i)
	}
	if o.Binary {
		return wire.AppendBinary(nil, ids)
	}
	return wire.AppendDecimal(nil, ids)
}

// newRequest builds a request message in the exact wire format: an empty
// body asks for one id, a decimal body for N.
func newRequest(o Options, subject string) *nats.Msg {
	return wire.NewRequest(subject, o.Batch, o.Binary)
}

// runner is one run: the options, the shared schedule and the workers.
type runner struct {
	nc      *nats.Conn
	o       Options
	unique  bool // check ids for duplicates (not for the echo)
	sched   *schedule
	workers []*worker
	cancel  context.CancelFunc
}

func run(parent context.Context, nc *nats.Conn, o Options, name string, unique bool) (Result, error) {
	res := Result{Name: name}
	if nc == nil || nc.ConnectedUrl() == "" {
		return res, fmt.Errorf("bench: %w", ErrNotConnected)
	}
	if err := preflight(nc, o); err != nil {
		return res, err
	}
	if err := parent.Err(); err != nil {
		return res, err
	}
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	r := &runner{
		nc:     nc,
		o:      o,
		unique: unique && o.Check,
		sched:  newSchedule(time.Now, o.Warmup, o.Duration, o.Rate, o.Requests),
		cancel: cancel,
	}
	var wg sync.WaitGroup
	r.workers = make([]*worker, o.Concurrency)
	for i := range r.workers {
		w := &worker{r: r, codes: map[string]int64{}}
		r.workers[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch o.Mode {
			case ModePipelined:
				w.err = w.pipelined(ctx)
			case ModePool:
				w.err = w.pool(ctx)
			default:
				w.request(ctx)
			}
		}()
	}
	stop := make(chan struct{})
	var pwg sync.WaitGroup
	if o.Progress != nil {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			r.progress(stop)
		}()
	}
	wg.Wait()
	close(stop)
	pwg.Wait()

	res = r.result(name)
	for _, w := range r.workers {
		if w.err != nil {
			return res, w.err
		}
	}
	return res, parent.Err()
}

// preflight sends one unrecorded request so that a missing or dead responder
// is an error, not a run full of timeouts. Any reply, even an error reply, is
// fine: the load will count those.
func preflight(nc *nats.Conn, o Options) error {
	if o.Mode == ModePool {
		return nil // an empty pool is counted, not fatal: it may be filling
	}
	_, err := nc.RequestMsg(newRequest(o, o.Subject), o.Timeout)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("bench: nobody answers on %q: %w", o.Subject, err)
	case errors.Is(err, nats.ErrTimeout):
		return fmt.Errorf("bench: no reply on %q within %v: %w", o.Subject, o.Timeout, err)
	case err != nil:
		return fmt.Errorf("bench: request %q: %w", o.Subject, err)
	}
	return nil
}

// result merges the workers' records. Call only after they have stopped.
func (r *runner) result(name string) Result {
	res := Result{Name: name, ErrorsByCode: map[string]int64{}}
	var h histogram
	var set idSet
	var last time.Time
	for _, w := range r.workers {
		res.Requests += w.reqs.Load()
		res.IDs += w.ids.Load()
		res.Errors += w.errs.Load()
		for c, n := range w.codes {
			res.ErrorsByCode[c] += n
		}
		h.merge(&w.hist)
		res.Duplicates += w.dups
		if set.chunks == nil {
			set = w.set // the worker is done with it: adopt rather than copy
		} else {
			res.Duplicates += set.merge(&w.set)
		}
		if w.last.After(last) {
			last = w.last
		}
	}
	if last.After(r.sched.measure) {
		res.Elapsed = last.Sub(r.sched.measure)
		s := res.Elapsed.Seconds()
		res.ReqPerSec = float64(res.Requests-res.Errors) / s
		res.IDsPerSec = float64(res.IDs) / s
	}
	res.P50, res.P90, res.P99, res.P999 = h.quantile(0.50), h.quantile(0.90), h.quantile(0.99), h.quantile(0.999)
	res.Max = h.max()
	return res
}

// worker is one load generator. Its counters are atomics because the
// progress line reads them during the run; everything else is owned by the
// worker's goroutine until the run is over.
type worker struct {
	r    *runner
	reqs atomic.Int64 // recorded requests finished
	ids  atomic.Int64
	errs atomic.Int64

	hist    histogram
	codes   map[string]int64
	set     idSet
	dups    int64
	last    time.Time // when the last recorded request finished
	scratch []int64
	err     error // a failure that ended the worker (pipelined subscribe)
}

// request is ModeRequest: one synchronous request at a time.
func (w *worker) request(ctx context.Context) {
	r := w.r
	msg := newRequest(r.o, r.o.Subject)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for ctx.Err() == nil {
		at, rec, ok := r.sched.next()
		if !ok {
			return
		}
		if at.IsZero() {
			at = time.Now()
		} else if d := time.Until(at); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return
			}
		}
		reply, err := r.nc.RequestMsg(msg, r.o.Timeout)
		w.finish(at, rec, reply, err, time.Now())
	}
}

// flight is a pipelined request waiting for its reply.
type flight struct {
	at   time.Time // latency is measured from here (the slot's due time)
	sent time.Time // the timeout runs from here
	rec  bool
}

// pipelined is ModePipelined: Depth requests in flight on one subscription
// to "<inbox>.*"; each request's reply subject ends in its own token. All
// state is owned by this goroutine: replies arrive on a channel, so there is
// no lock. Requests that get no reply within Timeout are expired by a sweep
// every Timeout/10 (at most 50ms), so a timeout is reported up to that late.
func (w *worker) pipelined(ctx context.Context) error {
	r, depth := w.r, w.r.o.Depth
	inbox := r.nc.NewInbox()
	prefix := inbox + "."
	// Room for every reply in flight plus late ones for expired requests:
	// a full channel would drop replies (slow consumer).
	ch := make(chan *nats.Msg, 4*depth+64)
	sub, err := r.nc.ChanSubscribe(prefix+"*", ch)
	if err != nil {
		r.cancel()
		return fmt.Errorf("bench: subscribe reply inbox: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	msg := newRequest(r.o, r.o.Subject)
	inflight := make(map[uint64]flight, depth)
	var seq uint64
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	sweep := time.NewTicker(min(max(r.o.Timeout/10, time.Millisecond), 50*time.Millisecond))
	defer sweep.Stop()

	var (
		have     bool // a slot taken from the schedule and not yet sent
		slotAt   time.Time
		slotRec  bool
		stopping bool
	)
	for {
		for !stopping && len(inflight) < depth {
			if !have {
				at, rec, ok := r.sched.next()
				if !ok {
					stopping = true
					break
				}
				have, slotAt, slotRec = true, at, rec
			}
			now := time.Now()
			if d := slotAt.Sub(now); !slotAt.IsZero() && d > 0 {
				timer.Reset(d)
				break
			}
			at := slotAt
			if at.IsZero() {
				at = now
			}
			have = false
			seq++
			msg.Reply = prefix + strconv.FormatUint(seq, 36)
			if err := r.nc.PublishMsg(msg); err != nil {
				w.finish(at, slotRec, nil, err, time.Now())
				continue
			}
			inflight[seq] = flight{at: at, sent: now, rec: slotRec}
		}
		if stopping && len(inflight) == 0 {
			return nil
		}
		select {
		case m := <-ch:
			tok, err := strconv.ParseUint(strings.TrimPrefix(m.Subject, prefix), 36, 64)
			f, ok := inflight[tok]
			if err != nil || !ok {
				continue // a late reply to an expired request
			}
			delete(inflight, tok)
			w.finish(f.at, f.rec, m, nil, time.Now())
		case <-timer.C:
		case now := <-sweep.C:
			for tok, f := range inflight {
				if now.Sub(f.sent) >= r.o.Timeout {
					delete(inflight, tok)
					w.finish(f.at, f.rec, nil, nats.ErrTimeout, now)
				}
			}
		case <-ctx.Done():
			return nil // in-flight requests are abandoned, not counted
		}
	}
}

// finish records one request that got reply or err at now.
func (w *worker) finish(at time.Time, rec bool, reply *nats.Msg, err error, now time.Time) {
	if !rec {
		return
	}
	var n int
	var code string
	if err != nil {
		code = clientCode(err)
	} else {
		n, code = w.inspect(reply)
	}
	if now.After(w.last) {
		w.last = now
	}
	if code != "" {
		w.codes[code]++
		w.errs.Add(1)
		w.reqs.Add(1)
		return
	}
	w.hist.record(now.Sub(at))
	w.ids.Add(int64(n))
	w.reqs.Add(1)
}

func clientCode(err error) string {
	switch {
	case errors.Is(err, nats.ErrTimeout):
		return CodeTimeout
	case errors.Is(err, nats.ErrNoResponders):
		return CodeNoResponders
	default:
		return CodeClient
	}
}

// inspect returns how many ids a reply carries, or the error code it stands for.
func (w *worker) inspect(m *nats.Msg) (int, string) {
	o := w.r.o
	var werr *wire.Error
	if errors.As(wire.ReplyError(m), &werr) {
		return 0, clipCode(werr.Code)
	}
	if len(m.Data) == 0 {
		if m.Header.Get("Status") == "503" { // the server's no-responders status
			return 0, CodeNoResponders
		}
		return 0, CodeBadReply
	}
	if !o.Check {
		if o.Binary {
			if len(m.Data)%8 != 0 {
				return 0, CodeBadReply
			}
			return len(m.Data) / 8, ""
		}
		return bytes.Count(m.Data, []byte{'\n'}) + 1, ""
	}
	ids, err := wire.DecodeIDs(w.scratch[:0], m.Data, o.Binary)
	w.scratch = ids[:0]
	if err != nil {
		return 0, CodeBadReply
	}
	if len(ids) != o.Batch {
		return 0, CodeWrongCount
	}
	if w.r.unique {
		for _, id := range ids {
			if !w.set.add(id) {
				w.dups++
			}
		}
	}
	return len(ids), ""
}

// clipCode bounds what a misbehaving server can put into ErrorsByCode.
func clipCode(c string) string {
	if len(c) > 8 {
		return c[:8]
	}
	return c
}

// progress rewrites one line on o.Progress until stop is closed, then clears it.
func (r *runner) progress(stop <-chan struct{}) {
	out := r.o.Progress
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	width := 0
	write := func(line string) {
		pad := max(width-len(line), 0)
		width = len(line)
		_, _ = fmt.Fprintf(out, "\r%s%s", line, strings.Repeat(" ", pad))
	}
	var prevOK, prevIDs int64
	prevAt := r.sched.measure
	for {
		select {
		case <-stop:
			write("")
			_, _ = fmt.Fprint(out, "\r")
			return
		case now := <-t.C:
			if now.Before(r.sched.measure) {
				write(fmt.Sprintf("warming up %.1fs", now.Sub(r.sched.start).Seconds()))
				continue
			}
			var reqs, ids, errs int64
			for _, w := range r.workers {
				reqs += w.reqs.Load()
				ids += w.ids.Load()
				errs += w.errs.Load()
			}
			ok := reqs - errs
			dt := now.Sub(prevAt).Seconds()
			write(fmt.Sprintf("%6.1fs %12.0f req/s %12.0f ids/s %8d errors",
				now.Sub(r.sched.measure).Seconds(), float64(ok-prevOK)/dt, float64(ids-prevIDs)/dt, errs))
			prevOK, prevIDs, prevAt = ok, ids, now
		}
	}
}

// ServeEcho is the echo responder of an EchoProcess: it connects to url,
// answers every request on subject (in leafd's queue group) with payload,
// calls ready once subscribed, and returns when ctx ends.
func ServeEcho(ctx context.Context, url, subject string, payload []byte, ready func()) error {
	nc, err := nats.Connect(url, nats.Name("leafbench-echo"))
	if err != nil {
		return err
	}
	defer nc.Close()
	if _, err := nc.QueueSubscribe(subject, wire.QueueGroup, func(m *nats.Msg) { _ = m.Respond(payload) }); err != nil {
		return err
	}
	if err := nc.Flush(); err != nil {
		return err
	}
	ready()
	<-ctx.Done()
	return nil
}

// startEchoProcess runs cmd with url and subject, feeds it payload and waits
// for its "ready" line. stop kills it and waits for it.
func startEchoProcess(ctx context.Context, cmd []string, url, subject string, payload []byte) (stop func(), err error) {
	c := exec.Command(cmd[0], append(cmd[1:len(cmd):len(cmd)], url, subject)...)
	c.Stdin = bytes.NewReader(payload)
	c.Stderr = os.Stderr
	out, err := c.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("start echo process %q: %w", cmd[0], err)
	}
	stop = func() {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		s.Scan()
		line <- s.Text()
		_, _ = io.Copy(io.Discard, out) // keep the pipe drained
	}()
	select {
	case l := <-line:
		if l != "ready" {
			stop()
			return nil, fmt.Errorf("echo process %q said %q, not ready", cmd[0], l)
		}
	case <-time.After(10 * time.Second):
		stop()
		return nil, fmt.Errorf("echo process %q not ready within 10s", cmd[0])
	case <-ctx.Done():
		stop()
		return nil, ctx.Err()
	}
	return stop, nil
}

// pool is ModePool: one pool.Take at a time.
func (w *worker) pool(ctx context.Context) error {
	r := w.r
	js, err := jetstream.New(r.nc)
	if err != nil {
		return fmt.Errorf("bench: jetstream: %w", err)
	}
	for ctx.Err() == nil {
		at, rec, ok := r.sched.next()
		if !ok {
			return nil
		}
		if at.IsZero() {
			at = time.Now()
		} else if d := time.Until(at); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return nil
			}
		}
		ids, err := pool.Take(ctx, js, r.o.Subject, r.o.Timeout)
		now := time.Now()
		if !rec {
			continue
		}
		if now.After(w.last) {
			w.last = now
		}
		w.reqs.Add(1)
		if err != nil {
			code := CodeClient
			switch {
			case errors.Is(err, pool.ErrEmpty):
				code = CodePoolEmpty
			case errors.Is(err, pool.ErrUsed):
				code = CodePoolUsed
			case ctx.Err() != nil:
				w.reqs.Add(-1) // the run ended mid-fetch
				return nil
			}
			w.codes[code]++
			w.errs.Add(1)
			continue
		}
		if r.unique {
			for _, id := range ids {
				if !w.set.add(id) {
					w.dups++
				}
			}
		}
		w.hist.record(now.Sub(at))
		w.ids.Add(int64(len(ids)))
	}
	return nil
}
