package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/leafmq/leafmq/cmd/leafchaos/internal/chaos"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	var cfg chaos.Config
	var jsonPath, tags, faults, logLevel string
	var quiet, list bool
	fs := flag.NewFlagSet("leafchaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&cfg.Duration, "duration", 0, "how long the load and the faults run (default 3m)")
	fs.IntVar(&cfg.Rate, "rate", 0, "requests a second, all clients together (default 3000)")
	fs.IntVar(&cfg.PoolRate, "pool-rate", 0, "pool takes a second; -1 none (default 20)")
	fs.IntVar(&cfg.Concurrency, "concurrency", 0, "request workers (default 64)")
	fs.IntVar(&cfg.Connections, "connections", 0, "client NATS connections (default 4)")
	fs.IntVar(&cfg.MaxBatch, "max-batch", 0, "largest batch asked for; batches are 2..N ids (default 500)")
	fs.DurationVar(&cfg.Timeout, "timeout", 0, "per request and pool take (default 2s)")
	fs.StringVar(&tags, "tags", "", "segment tags, comma-separated; the first also has a pool (default a,b,c)")
	fs.IntVar(&cfg.Step, "step", 0, "step of the tags in leaf_alloc (default 1000)")
	fs.IntVar(&cfg.MaxStep, "max-step", 0, "the leafds' --max-step (default 10000000)")
	fs.DurationVar(&cfg.DBPause, "db-pause", 0, "how long MariaDB is SIGSTOPped (default duration/10, 5s-60s)")
	fs.StringVar(&faults, "faults", "", "faults in schedule order, comma-separated (default "+strings.Join(chaos.AllFaults, ",")+")")
	fs.DurationVar(&cfg.Freeze, "freeze", 0, "how long a freeze-* fault keeps its process SIGSTOPped; past every TTL (default 13s: the KV claim TTL and ZooKeeper session timeout are 10s)")
	fs.DurationVar(&cfg.HostsFor, "hosts-for", 0, "how long the hosts of a hosts-* fault (and a freeze's taker) serve (default 8s)")
	fs.DurationVar(&cfg.NetFor, "net-for", 0, "how long a net-* fault lasts (default 4s)")
	fs.BoolVar(&cfg.Goals, "availability-goals", false, "fail the run when, once a fault's recovery time has passed after its heal, under 99.9% of a class of requests get ids within 1s, or a node says it serves what it does not answer; faults are spaced to judge each; with --regions, each region's clients after each region fault, from claim TTL + lease-ahead (13s) after the heal")
	fs.BoolVar(&cfg.Overlap, "overlap", false, "two lanes of faults at the same time, leafd processes' and the rest: every fault in about half the time, availability figures blended (quick runs; not with --availability-goals)")
	fs.DurationVar(&cfg.OpPhase, "op-phase", 0, "how long each phase of an operator scenario takes ids (default 2s)")
	fs.IntVar(&cfg.Regions, "regions", 0, "2 or 3: the many-regions mode, a NATS cluster per region joined by gateways, its own leafds on KV (no MariaDB, ZooKeeper); faults "+strings.Join(chaos.RegionFaults, ","))
	fs.IntVar(&cfg.LeafdsPerRegion, "leafds-per-region", 0, "with --regions: leafds in each region, 1 or 2 (default 1)")
	fs.IntVar(&cfg.ServersPerRegion, "servers-per-region", 0, "with --regions: nats-servers in each region's cluster, 1 or 3 (default 1); with 3 the leafds keep their buckets with 3 replicas in the region")
	fs.DurationVar(&cfg.GatewayLatency, "gateway-latency", 0, "with --regions: delay on every gateway link, each way (default 30ms: a 60ms round trip across regions)")
	fs.DurationVar(&cfg.RegionFor, "region-for", 0, "with --regions: how long a region fault lasts (default 8s)")
	fs.BoolVar(&list, "list-faults", false, "print every fault, one a line, and exit")
	fs.Int64Var(&cfg.Seed, "seed", 0, "seed of the clients' and faults' randomness (default the time)")
	fs.StringVar(&cfg.WorkDir, "dir", "", "work directory (default a fresh temp dir, removed unless --keep)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the work directory (logs of every process, data)")
	fs.StringVar(&cfg.Leafd, "leafd", "", "leafd binary (default built from ./cmd/leafd)")
	fs.StringVar(&cfg.NATSBin, "nats-server", "", "nats-server binary (default built from the Go module)")
	fs.StringVar(&cfg.Repo, "repo", "", "the leafmq checkout (default found from the working directory up)")
	fs.StringVar(&jsonPath, "json", "", "write the report as JSON to this file")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&quiet, "quiet", false, "no progress lines")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if list {
		all := chaos.AllFaults
		if cfg.Regions != 0 {
			all = chaos.RegionFaults
		}
		for _, f := range all {
			fmt.Fprintln(stdout, f)
		}
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "leafchaos: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if tags != "" {
		cfg.Tags = strings.Split(tags, ",")
	}
	if faults != "" {
		cfg.Faults = strings.Split(faults, ",")
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		fmt.Fprintf(stderr, "leafchaos: --log-level %q\n", logLevel)
		return 2
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if !quiet {
		cfg.Progress = stdout
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.Regions != 0 {
		rep, err := chaos.RunRegions(ctx, cfg)
		return finish(rep, rep != nil && rep.Pass, err, jsonPath, stdout, stderr)
	}
	rep, err := chaos.Run(ctx, cfg)
	return finish(rep, rep != nil && rep.Pass, err, jsonPath, stdout, stderr)
}

// finish writes a run's report (text, and JSON to jsonPath if set) and
// returns leafchaos's exit code: 2 for a bad configuration, 1 for a run
// that could not be made or did not pass.
func finish(rep interface {
	WriteText(io.Writer)
	WriteJSON(string) error
}, pass bool, err error, jsonPath string, stdout, stderr io.Writer) int {
	if errors.Is(err, chaos.ErrConfig) {
		fmt.Fprintf(stderr, "leafchaos: %v\n", err)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "leafchaos: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout)
	rep.WriteText(stdout)
	if jsonPath != "" {
		if err := rep.WriteJSON(jsonPath); err != nil {
			fmt.Fprintf(stderr, "leafchaos: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "report: %s\n", jsonPath)
	}
	if !pass {
		return 1
	}
	return 0
}
