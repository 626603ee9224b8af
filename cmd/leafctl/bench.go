package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/leafmq/leafmq/cmd/leafctl/internal/bench"
	"github.com/leafmq/leafmq/pool"
	"github.com/leafmq/leafmq/wire"
	"golang.org/x/term"
)

const benchUsage = `leafctl bench: measure leafmq over NATS

  --tag T          tag to take ids of (default bench; subject leaf.segment.T)
  --subject S      any subject instead of a tag's
  --batch N        ids per request (default 1)
  --binary         ask for binary replies
  --mode M         request (a goroutine per in-flight request), pipelined, or pool (ready-made
                   batches from the JetStream pool of --tag, or of snowflake with --tag snowflake;
                   start leafd with --pool) (default request)
  -c N             concurrent workers (default 8)
  --depth N        requests in flight per worker when pipelined (default 16)
  -d D             duration (default 10s)
  --requests N     stop after N requests (default: no cap)
  --rate R         target requests/s over all workers (default: as fast as possible)
  --warmup D       not recorded (default 1s)
  --baseline       also run the same load against a bare NATS echo responder and print the ratio
  --echo-inprocess run the echo responder inside leafctl instead of a child process
                   (a child process pays for its own process as leafd does: the fair default)
  --versus S       also run the same load against subject S (e.g. leaf.segment.plain beside
                   leaf.mono.ticks) in the same rounds and print the ratio, as --baseline does
  --rounds N       with --baseline or --versus: alternate the runs N times and print the median ratio
                   (the robust figure on a noisy machine; default 1)
  --check          verify every reply and count duplicate ids
  --json           print results as JSON lines
  --quiet          no progress display
`

// benchCmd is leafctl bench.
type benchCmd struct{}

func (benchCmd) Name() string { return "bench" }

func (benchCmd) Synopsis() []synopsisLine {
	return []synopsisLine{{"bench [flags]", "measure throughput and latency (bench -h)"}}
}

func (benchCmd) Run(c *cli, args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var o bench.Options
	tag := fs.String("tag", "bench", "tag to ask (leaf.segment.TAG), unless --subject")
	fs.StringVar(&o.Subject, "subject", "", "subject to ask instead of a tag's, e.g. leaf.snowflake")
	fs.IntVar(&o.Batch, "batch", 1, "ids per request")
	fs.BoolVar(&o.Binary, "binary", false, "ask for binary replies (Leaf-Encoding: binary)")
	fs.StringVar(&o.Mode, "mode", "request", "request (one in flight per worker), pipelined (--depth in flight per worker) or pool (ready-made JetStream batches)")
	fs.IntVar(&o.Concurrency, "c", 8, "concurrent workers")
	fs.IntVar(&o.Depth, "depth", 16, "requests in flight per worker in pipeline mode")
	fs.DurationVar(&o.Duration, "d", 10*time.Second, "how long to measure")
	fs.IntVar(&o.Requests, "requests", 0, "stop after this many requests (0: run for -d)")
	fs.IntVar(&o.Rate, "rate", 0, "open loop: requests a second, latency counted from when each was due (0: closed loop)")
	fs.DurationVar(&o.Warmup, "warmup", time.Second, "time before measuring")
	fs.BoolVar(&o.Baseline, "baseline", false, "also measure a bare NATS echo responder in the same run and print the ratio")
	fs.BoolVar(&o.Check, "check", false, "check every id is unique (costs memory)")
	rounds := fs.Int("rounds", 1, "measure this many times, alternating with the baseline or --versus")
	versus := fs.String("versus", "", "also measure this subject in the same rounds and print the ratio")
	echoInProcess := fs.Bool("echo-inprocess", false, "run the echo responder in this process (default: a leafctl bench-echo child)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	quiet := fs.Bool("quiet", false, "no progress line")
	if _, err := c.parse(fs, args, 0); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(c.stdout, benchUsage)
			return flag.ErrHelp
		}
		return err
	}
	_, tagErr := wire.ParseTag(*tag)
	switch {
	case o.Subject == "" && tagErr != nil:
		return fmt.Errorf("%w: --tag %q is not a valid tag", errUsage, *tag)
	case o.Batch < 1, o.Concurrency < 1, o.Depth < 1, o.Duration <= 0, o.Requests < 0, o.Rate < 0, o.Warmup < 0:
		return fmt.Errorf("%w: --batch, -c, --depth and -d must be positive; --requests, --rate, --warmup not negative", errUsage)
	case *rounds < 1:
		return fmt.Errorf("%w: --rounds %d must be at least 1", errUsage, *rounds)
	case o.Mode != bench.ModeRequest && o.Mode != bench.ModePipelined && o.Mode != bench.ModePool:
		return fmt.Errorf("%w: --mode %q must be request, pipelined or pool", errUsage, o.Mode)
	case o.Mode == bench.ModePool && o.Baseline:
		return fmt.Errorf("%w: --baseline compares request-reply with an echo; not with --mode pool", errUsage)
	case *versus != "" && (o.Baseline || o.Mode == bench.ModePool):
		return fmt.Errorf("%w: --versus compares two subjects by request-reply; not with --baseline or --mode pool", errUsage)
	}
	switch {
	case o.Subject != "":
	case o.Mode == bench.ModePool && *tag == "snowflake":
		o.Subject = pool.SnowflakeSubject
	case o.Mode == bench.ModePool:
		o.Subject = pool.SegmentSubject(*tag)
	default:
		o.Subject = wire.SegmentPrefix + *tag
	}
	o.Timeout = c.timeout
	if o.Baseline && !*echoInProcess {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find leafctl's own binary for the echo process: %w", err)
		}
		o.EchoProcess = []string{self, "bench-echo"}
	}
	if !*quiet && !*asJSON && isTerminal(c.stderr) {
		o.Progress = c.stderr // a \r-rewritten line: only on a terminal, not in a log or a pipe
	}
	nc, err := c.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, stop := signal.NotifyContext(c.ctx(), os.Interrupt)
	defer stop()
	if o.Warmup == 0 {
		o.Warmup = -1 // bench reads 0 as its default; the user asked for none
	}
	var results []bench.Result
	var ratios []float64
	for round := 0; round < *rounds; round++ {
		rs, err := bench.RunAll(ctx, nc, o)
		if err == nil && *versus != "" {
			ov := o
			ov.Subject = *versus
			var r bench.Result
			r, err = bench.Run(ctx, nc, ov)
			rs = append(rs, r)
		}
		results = append(results, rs...)
		if err != nil {
			if errors.Is(err, context.Canceled) && len(results) > 0 {
				break
			}
			return err
		}
		if len(rs) == 2 && rs[1].IDsPerSec > 0 {
			ratios = append(ratios, rs[0].IDsPerSec/rs[1].IDsPerSec)
		}
	}
	if *rounds > 1 && len(ratios) > 0 {
		defer func() {
			slices.Sort(ratios)
			fmt.Fprintf(c.stdout, "median ratio over %d rounds: %.2f (min %.2f, max %.2f)\n",
				len(ratios), ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1])
		}()
	}
	// Interrupted with Ctrl-C: report what was measured so far.
	if *asJSON {
		for _, r := range results {
			fmt.Fprintf(c.stdout, "%s\n", r.JSON())
		}
		return nil
	}
	bench.Report(c.stdout, results...)
	return nil
}

// benchEcho is the hidden "bench-echo URL SUBJECT" command: the baseline's
// echo responder in a process of its own (see bench.Options.EchoProcess).
// benchEchoCmd is the hidden bench-echo: the baseline's echo responder
// in a process of its own.
type benchEchoCmd struct{}

func (benchEchoCmd) Name() string { return "bench-echo" }

func (benchEchoCmd) Synopsis() []synopsisLine { return nil } // hidden

func (benchEchoCmd) Run(c *cli, args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("%w: bench-echo URL SUBJECT (payload on stdin)", errUsage)
	}
	payload, err := io.ReadAll(os.Stdin)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.ctx(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return bench.ServeEcho(ctx, args[0], args[1], payload, func() { fmt.Fprintln(c.stdout, "ready") })
}

// isTerminal reports whether w is a terminal (golang.org/x/term).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
