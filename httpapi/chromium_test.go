package httpapi_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/wire"
)

// chromium runs a headless Chromium with args then url and returns its
// stdout. Its whole process group is killed if it outlives the timeout.
func chromium(t *testing.T, bin string, url string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args = append(append(testenv.HeadlessFlags(t), args...), url)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	// Chromium's helpers (zygote, GPU, network service) share its group;
	// make sure none is left behind once it has exited.
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, tail(stderr.String(), 2000))
	}
	return stdout.Bytes()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// The status page, loaded in a real browser, shows the node, its tags and
// the store's rows, and keeps updating: a tag created and used after the
// page loaded appears on a later poll, with a rate computed from two polls.
func TestStatusPageInChromium(t *testing.T) {
	bin := testenv.Chromium(t)
	n := newNode(t, map[string]int{"order": 100, "user": 1000})
	ctx := context.Background()
	take := func(tag string, k int) {
		if err := n.Segment(ctx, wire.MustTag(tag), make([]int64, k)); err != nil {
			t.Error(err)
		}
	}
	// Runs in the status handler, once per poll of the page (the cache is
	// off): ids keep being taken, and at the third poll a new tag appears.
	n.onStatus = func(i int) {
		take("order", 37)
		if i == 3 {
			if err := n.store.Create(ctx, segment.Tag{Name: wire.MustTag("late-tag"), Step: 500, Description: "made after the page loaded"}); err != nil {
				t.Error(err)
			}
			take("late-tag", 3)
		}
	}
	// A second node, not ready, shows the page's failure states, and a
	// region nearly out of worker ids.
	workersFree := int64(40)
	cfg := n.config()
	cfg.Status = func(ctx context.Context) ([]wire.NodeStatus, error) {
		nodes, err := n.Status(ctx)
		now := time.Now().UnixNano()
		return append(nodes, wire.NodeStatus{
			Node: "node-b", Version: "test", UnixNano: now, Started: now - int64(time.Hour), Store: "memstore",
			Problems: []string{"segment store: store unavailable: connection refused"},
			Snow: &wire.SnowflakeStatus{State: "serving", Worker: 7, Registry: "kv", Layout: "1+41+10+12",
				WorkersFree: &workersFree, WorkersCap: 1024},
			Tags: []wire.TagStatus{{Tag: "order", Step: 100, MinStep: 100, Loads: 1, Current: 1, Headroom: -1,
				LastError: "store unavailable: connection refused",
				Buffers:   [2]wire.BufferStatus{{Value: 101, Max: 101, Step: 100}, {Value: 1601, Max: 1601, Step: 100}}}},
		}), err
	}
	srv := serve(t, cfg)
	take("order", 250)
	take("user", 10)
	if r := do(t, "GET", srv.URL+"/api/snowflake/get/x", nil); r.code != 200 {
		t.Fatalf("snowflake: %d %q", r.code, r.body)
	}

	// Virtual time runs the page's timers without waiting for them: about
	// five polls, one per virtual second, each fetch completed before time
	// moves on.
	dom := string(chromium(t, bin, srv.URL+"/", "--virtual-time-budget=5500", "--dump-dom"))
	polls := 0
	if m := regexp.MustCompile(`data-polls="(\d+)"`).FindStringSubmatch(dom); m != nil {
		polls, _ = strconv.Atoi(m[1])
	}
	if polls < 4 {
		t.Fatalf("the page polled %d times in 5.5 virtual seconds:\n%s", polls, tail(dom, 4000))
	}
	for _, want := range []string{
		`data-node="node-a"`, `data-tag="order"`, `data-tag="user"`, `data-row="order"`, // first poll
		`data-tag="late-tag"`, `data-row="late-tag"`, "made after the page loaded", // a later one
		`class="pill ok">live<`, "serving", "1+41+10+12",
		`data-node="node-b"`, "not ready", "load failed", "connection refused", // the other node
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the page does not show %s:\n%s", want, tail(dom, 4000))
		}
	}
	// order's row: the rate cell holds a number of ids/s, not "—".
	row := regexp.MustCompile(`<tr data-tag="order".*?</tr>`).FindString(dom)
	if !regexp.MustCompile(`class="num rate">[0-9][0-9,.]*/s<`).MatchString(row) {
		t.Errorf("no ids/s for order after %d polls: %s", polls, row)
	}
	// Its runway: the ids left before its domain ends, and how long they
	// last at that rate.
	if !regexp.MustCompile(`class="num runway"[^>]*>[0-9][0-9,]*<div class="small muted">(100y\+|[0-9])`).MatchString(row) {
		t.Errorf("no runway for order: %s", row)
	}

	// node-b's free worker ids, under a tenth of the region's: warned.
	snowB := regexp.MustCompile(`<tr data-node="node-b"><td>node-b</td><td><span class="badge ok">serving.*?</tr>`).FindString(dom)
	if !strings.Contains(snowB, `class="num workers warn" title="worker ids of the region a new node can still get">40<div class="small muted">of 1,024</div>`) {
		t.Errorf("no warned free worker ids for node-b: %q", snowB)
	}

	// A screenshot for humans.
	png := filepath.Join(testenv.ArtifactDir(t), "httpapi-status-page.png")
	_ = os.Remove(png)
	chromium(t, bin, srv.URL+"/", "--virtual-time-budget=2500", "--window-size=1440,1100", "--screenshot="+png)
	b, err := os.ReadFile(png)
	if errors.Is(err, os.ErrNotExist) {
		t.Fatal("chromium wrote no screenshot")
	}
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("screenshot %s: %v", png, err)
	}
	t.Logf("screenshot: %s (%d bytes)", png, len(b))
}
