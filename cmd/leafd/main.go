package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/leafmq/leafmq/internal/buildinfo"
	"github.com/leafmq/leafmq/node"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

func run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "probe" {
		return probe(args[1:], stderr)
	}
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
	_ = level.UnmarshalText([]byte(cfg.Log.Level)) // validated by Parse
	var handler slog.Handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})
	if cfg.Log.Format == "json" {
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

// probe is "leafd probe URL": exit 0 when URL answers 200 within 3 s, else
// 1 — the healthcheck of an image without a shell or curl.
func probe(args []string, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: leafd probe URL   (e.g. http://127.0.0.1:8080/readyz)")
		return 2
	}
	resp, err := (&http.Client{Timeout: 3 * time.Second}).Get(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "leafd probe: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		fmt.Fprintf(stderr, "leafd probe: %s: %s %s\n", args[0], resp.Status, b)
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
