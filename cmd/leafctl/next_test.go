package main

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/leafmq/leafmq/internal/testenv"
)

// leafctl next -n 2000000000 (and snowflake) streams its ids in batches:
// the built binary, held to 4 GiB of address space, prints the first
// 25,000 ids at once instead of asking for 16 GB first and crashing. (A Go
// process reserves more address space than it uses, more threads' stacks
// on a busy machine: 1 GiB was too tight under make test.)
func TestHugeCountStreams(t *testing.T) {
	url := startLeafd(t)
	bin := testenv.Build(t, "cmd/leafctl")
	for _, args := range [][]string{{"next", "big"}, {"snowflake"}} {
		t.Run(args[0], func(t *testing.T) {
			line := append([]string{"-c", `ulimit -v 4194304 && exec "$0" "$@"`, bin, "--nats", url}, args...)
			cmd := exec.Command("bash", append(line, "-n", "2000000000")...)
			var errOut testenv.Buffer
			cmd.Stderr = &errOut
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			sc := bufio.NewScanner(out)
			last := int64(-1)
			for i := 0; i < 25_000; i++ {
				if !sc.Scan() {
					t.Fatalf("output ended after %d ids (%v); stderr:\n%.2000s", i, sc.Err(), errOut.String())
				}
				id, err := strconv.ParseInt(sc.Text(), 10, 64)
				if err != nil || id <= last {
					t.Fatalf("line %d is %q after %d", i, sc.Text(), last)
				}
				last = id
			}
		})
	}
}

// --json beyond one batch is still one JSON array, without a repeat.
func TestJSONBeyondABatch(t *testing.T) {
	url := startLeafd(t)
	code, out, errOut := leafctl(url, "next", "demo", "-n", "25000", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var ids []int64
	if err := json.Unmarshal([]byte(out), &ids); err != nil || len(ids) != 25000 {
		t.Fatalf("%d ids, %v: %.200s", len(ids), err, out)
	}
	seen := map[int64]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("id %d twice", id)
		}
		seen[id] = true
	}
	if !strings.HasSuffix(out, "\n]\n") {
		t.Fatalf("array not ended as writeJSON ends it: %q", out[len(out)-20:])
	}
}
