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
	"syscall"

	"github.com/leafmq/leafmq/internal/buildinfo"
	"github.com/leafmq/leafmq/node"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	for _, a := range args {
		if a == "--version" || a == "-version" {
			fmt.Fprintln(stdout, "leafd", buildinfo.String())
			return 0
		}
	}
	cfg, err := node.Parse(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "leafd: %v\n", err)
		return 2
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel)) // validated by Parse
	var handler slog.Handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})
	if cfg.LogFormat == "json" {
		handler = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level})
	}
	log := slog.New(handler)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	n, err := node.Start(ctx, cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "leafd: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, `leafd %s (%s) is serving ids on %s

Ask it for an id:
  nats req leaf.segment.demo ''            # one id of tag "demo"
  nats req leaf.segment.demo 1000          # a batch of 1000
  nats req leaf.snowflake ''               # one snowflake id
  go run ./cmd/leafctl next demo           # or bin/leafctl next demo -n 10
  go run ./cmd/leafctl snowflake -n 3      # and bin/leafctl decode ID
%s   Stop: Ctrl-C
`, cfg.Name, buildinfo.Version, n.ClientURL(), metricsLine(n.HTTPAddr()))
	<-ctx.Done()
	stop()
	fmt.Fprintln(stderr, "leafd: shutting down")
	if err := n.Close(context.Background()); err != nil {
		fmt.Fprintf(stderr, "leafd: shutdown: %v\n", err)
		return 1
	}
	return 0
}

func metricsLine(addr string) string {
	if addr == "" {
		return "HTTP: off"
	}
	return "Status page: http://" + addr + "/\nHealth: http://" + addr + "/healthz   Metrics: http://" + addr + "/metrics"
}
