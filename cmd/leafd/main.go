package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/config"
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
	if len(args) == 1 && args[0] == relayCommand {
		return runRelay()
	}
	for _, a := range args {
		if a == "--version" || a == "-version" {
			fmt.Fprintln(stdout, "leafd", buildinfo.String())
			return 0
		}
	}
	// Under --log-format json every line on stderr is a JSON record, a
	// bad flag's too: the flag package's own message and usage are left
	// out, and the error is logged.
	jsonLog := jsonRequested(args, getenv)
	parseOut := stderr
	if jsonLog && !helpRequested(args) {
		parseOut = io.Discard
	}
	cfg, err := config.Parse(args, getenv, parseOut)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		if jsonLog {
			slog.New(slog.NewJSONHandler(stderr, nil)).Error("leafd: bad configuration (leafd -h lists the flags)", "err", err.Error())
		} else {
			fmt.Fprintf(stderr, "leafd: %v\n", err)
		}
		return 2
	}
	var relayErr error
	if cfg.Log.Format == "json" && stderr == io.Writer(os.Stderr) {
		relayErr = startRelay() // the runtime's own crash output as JSON too
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Log.Level)) // validated by Parse
	var handler slog.Handler = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})
	if cfg.Log.Format == "json" {
		handler = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level})
	}
	log := slog.New(handler)
	// The standard library's log package (net/http's server errors, any
	// library that logs) writes through the same handler.
	slog.SetDefault(log)
	if relayErr != nil {
		log.Warn("a crash's traceback will be written as text", "err", relayErr.Error())
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	n, err := node.Start(ctx, cfg, log)
	if err != nil {
		log.Error("leafd did not start", "err", err.Error())
		return 1
	}
	fmt.Fprint(stdout, banner(cfg, n.ClientURL(), n.HTTPAddr(), leafctlCommand()))
	code := 0
	select {
	case <-ctx.Done():
	case err := <-n.Failed(): // it must not serve on (a region id another region holds)
		log.Error("leafd stops", "err", err.Error())
		code = 1
	}
	stop()
	log.Info("leafd shutting down")
	if err := n.Close(context.Background()); err != nil {
		log.Error("leafd shutdown", "err", err.Error())
		return 1
	}
	return code
}

// jsonRequested reports whether args or LEAF_LOG_FORMAT ask for JSON logs,
// read as config.Parse reads them (the last flag wins over the environment),
// for the errors leafd reports before it has a Config.
func jsonRequested(args []string, getenv func(string) string) bool {
	format := getenv("LEAF_LOG_FORMAT")
	for i, a := range args {
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "log-format" {
			continue
		}
		if !hasValue && i+1 < len(args) {
			value = args[i+1]
		}
		format = value
	}
	return format == "json"
}

// helpRequested reports whether args ask for leafd's usage.
func helpRequested(args []string) bool {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" || a == "--h" {
			return true
		}
	}
	return false
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

// banner is what leafd prints once it serves: how to ask it for an id, in
// commands an operator pastes as they are. The nats CLI and leafctl reach
// nats://127.0.0.1:4222 unless told otherwise, where another leafd may
// serve (and auto-create tags): every command names any other URL. Where
// tags are not created on first use, no command names a tag that may not
// exist.
func banner(cfg config.Config, url, httpAddr, leafctl string) string {
	natsFlag, ctlFlag := "", ""
	if url != nats.DefaultURL {
		show := url
		if u, err := neturl.Parse(url); err == nil && u.User != nil {
			u.User = nil // a redacted password would not connect; credentials go in flags
			show = u.String()
		}
		natsFlag, ctlFlag = " -s "+show, " --nats "+show
	}
	type line struct{ cmd, what string }
	var lines []line
	if cfg.AutoCreates() {
		lines = []line{
			{"nats req leaf.segment.demo ''" + natsFlag, `one id of tag "demo" (created on first use)`},
			{"nats req leaf.segment.demo 1000" + natsFlag, "a batch of 1000"},
		}
	} else {
		lines = []line{
			{leafctl + " tag list" + ctlFlag, "the tags it serves (tags are not created on first use)"},
			{"nats req leaf.segment.TAG ''" + natsFlag, "one id of TAG, a tag of that list"},
		}
	}
	lines = append(lines, line{"nats req leaf.snowflake ''" + natsFlag, "one snowflake id"})
	if cfg.AutoCreates() {
		lines = append(lines, line{leafctl + " next demo -n 10" + ctlFlag, "ten ids"})
		if httpAddr != "" {
			lines = append(lines, line{"curl http://" + httpAddr + "/api/segment/get/demo", "one id from this node (Leaf's HTTP API)"})
		}
	}
	lines = append(lines, line{leafctl + " snowflake -n 3" + ctlFlag, "three snowflake ids (leafctl decode ID splits one)"})
	width := 0
	for _, l := range lines {
		width = max(width, len(l.cmd))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "leafd %s (%s) is serving ids on %s\n\nAsk it for an id:\n", cfg.Name, buildinfo.Version, url)
	for _, l := range lines {
		fmt.Fprintf(&b, "  %-*s  # %s\n", width, l.cmd, l.what)
	}
	fmt.Fprintf(&b, "%s   Stop: Ctrl-C\n", metricsLine(httpAddr))
	return b.String()
}

// leafctlCommand is how the banner runs leafctl: the leafctl beside this
// leafd (bin/leafctl after make build, or an installed pair), else go run
// in a source tree, else leafctl on the PATH.
func leafctlCommand() string {
	exe, _ := os.Executable()
	wd, _ := os.Getwd()
	return leafctlFrom(exe, wd)
}

func leafctlFrom(exe, wd string) string {
	if exe != "" {
		ctl := filepath.Join(filepath.Dir(exe), "leafctl")
		if fi, err := os.Stat(ctl); err == nil && fi.Mode().IsRegular() {
			if p, err := exec.LookPath("leafctl"); err == nil && p == ctl {
				return "leafctl"
			}
			if rel, err := filepath.Rel(wd, ctl); err == nil && wd != "" && !strings.HasPrefix(rel, "..") {
				return rel
			}
			return ctl
		}
	}
	if fi, err := os.Stat(filepath.Join(wd, "cmd", "leafctl")); err == nil && fi.IsDir() {
		return "go run ./cmd/leafctl"
	}
	return "leafctl"
}

func metricsLine(addr string) string {
	if addr == "" {
		return "HTTP: off"
	}
	return "Status page: http://" + addr + "/\nHealth: http://" + addr + "/healthz   Metrics: http://" + addr + "/metrics"
}
