// Command starttime measures how long a built leafd takes from exec to its
// first answered id on leaf.segment.demo and on leaf.snowflake: a lone
// zero-setup node (embedded nats-server, JetStream KV), started fresh, then
// again on its data directory after a graceful stop (SIGTERM), then after
// a crash (SIGKILL). Each start runs on a new temp data directory and free
// loopback ports.
//
//	./scripts/build.sh bin && go run ./scripts/starttime -bin bin/leafd -runs 5
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/internal/freeport"
)

func main() {
	bin := flag.String("bin", "bin/leafd", "the leafd to start")
	runs := flag.Int("runs", 5, "starts of each kind")
	flag.Parse()
	if err := run(*bin, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "starttime:", err)
		os.Exit(1)
	}
}

// kinds of start, in the order each run makes them on one data directory.
var kinds = []string{"fresh", "graceful restart", "crash restart"}

func run(bin string, runs int) error {
	seg := map[string][]time.Duration{}
	snow := map[string][]time.Duration{}
	for r := range runs {
		dir, err := os.MkdirTemp("", "leafd-starttime-")
		if err != nil {
			return err
		}
		for _, kind := range kinds {
			s, f, err := startOnce(bin, dir, kind == "graceful restart")
			if err != nil {
				_ = os.RemoveAll(dir)
				return fmt.Errorf("run %d, %s: %w", r+1, kind, err)
			}
			seg[kind] = append(seg[kind], s)
			snow[kind] = append(snow[kind], f)
		}
		_ = os.RemoveAll(dir)
	}
	fmt.Printf("%s, %d runs: exec to first id (median, min-max)\n", bin, runs)
	for _, kind := range kinds {
		fmt.Printf("  %-17s leaf.segment.demo %s   leaf.snowflake %s\n", kind, summary(seg[kind]), summary(snow[kind]))
	}
	return nil
}

func summary(d []time.Duration) string {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	ms := func(x time.Duration) string { return strconv.FormatInt(x.Milliseconds(), 10) }
	return fmt.Sprintf("%5s ms (%s-%s)", ms(d[len(d)/2]), ms(d[0]), ms(d[len(d)-1]))
}

// startOnce starts leafd on dir, times its first segment and snowflake
// ids, and stops it: with SIGKILL if crash (the next start is a crash
// restart), else with SIGTERM (a graceful restart).
func startOnce(bin, dir string, crash bool) (seg, snow time.Duration, err error) {
	natsPort, err := freePort()
	if err != nil {
		return 0, 0, err
	}
	httpPort, err := freePort()
	if err != nil {
		return 0, 0, err
	}
	natsAddr := "127.0.0.1:" + strconv.Itoa(natsPort)
	cmd := exec.Command(bin, "--data", dir, "--name", "starttime", "--nats-listen", natsAddr,
		"--http", "127.0.0.1:"+strconv.Itoa(httpPort))
	out, err := os.CreateTemp("", "leafd-starttime-log-")
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = os.Remove(out.Name()) }()
	defer func() { _ = out.Close() }()
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if crash {
			_ = cmd.Process.Kill()
		} else {
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if err != nil {
			b, _ := os.ReadFile(out.Name())
			err = fmt.Errorf("%w\nleafd's output:\n%s", err, b)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, err := connect(ctx, "nats://"+natsAddr, exited)
	if err != nil {
		return 0, 0, err
	}
	defer nc.Close()
	type first struct {
		d   time.Duration
		err error
	}
	segc, snowc := make(chan first, 1), make(chan first, 1)
	for _, q := range []struct {
		subject string
		to      chan first
	}{{"leaf.segment.demo", segc}, {"leaf.snowflake", snowc}} {
		go func() {
			err := firstID(ctx, nc, q.subject)
			q.to <- first{time.Since(start), err}
		}()
	}
	s, f := <-segc, <-snowc
	if err := errors.Join(s.err, f.err); err != nil {
		return 0, 0, err
	}
	return s.d, f.d, nil
}

// connect dials NATS until the embedded server listens.
func connect(ctx context.Context, url string, exited <-chan error) (*nats.Conn, error) {
	for {
		nc, err := nats.Connect(url, nats.Timeout(time.Second), nats.NoReconnect())
		if err == nil {
			return nc, nil
		}
		select {
		case err := <-exited:
			return nil, fmt.Errorf("leafd exited: %v", err)
		case <-ctx.Done():
			return nil, fmt.Errorf("connect %s: %w", url, err)
		case <-time.After(time.Millisecond):
		}
	}
}

// firstID asks subject until an id comes back.
func firstID(ctx context.Context, nc *nats.Conn, subject string) error {
	for {
		rctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		m, err := nc.RequestWithContext(rctx, subject, nil)
		cancel()
		if err == nil && m.Header.Get("Nats-Service-Error-Code") == "" {
			if _, perr := strconv.ParseInt(string(m.Data), 10, 64); perr == nil {
				return nil
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: no id: %v", subject, err)
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			time.Sleep(time.Millisecond) // no responders yet
		}
	}
}

func freePort() (int, error) {
	p, err := freeport.Take(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}
