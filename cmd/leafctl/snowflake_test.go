package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leafmq/leafmq/snowflake"
)

func TestSnowflakeCommands(t *testing.T) {
	url := startLeafd(t)
	code, out, errOut := leafctl(url, "snowflake", "-n", "3")
	lines := strings.Fields(out)
	if code != 0 || len(lines) != 3 {
		t.Fatalf("snowflake -n 3 = %d\n%s\n%s", code, out, errOut)
	}
	prev := int64(0)
	for _, l := range lines {
		id, err := strconv.ParseInt(l, 10, 64)
		if err != nil || id <= prev {
			t.Fatalf("ids %v are not increasing positive integers", lines)
		}
		prev = id
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	id, err := snowflake.LeafLayout().Compose(at, 5, 7)
	if err != nil {
		t.Fatal(err)
	}
	uid, err := snowflake.UidGenLayout(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)).Compose(at, 4000000, 8000)
	if err != nil {
		t.Fatal(err)
	}
	decoded := "time       2026-01-02T03:04:05Z\ntimestamp  1767323045000\nworker     5\nsequence   7\n"
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"key", []string{"snowflake", "--key", "orders", "-n", "2"}, 0, "\n", ""},
		{"bad key", []string{"snowflake", "--key", "a.b"}, 2, "", "snowflake key \"a.b\""},
		{"key decode", []string{"snowflake", "--key", "decode"}, 2, "", "other than decode"},
		{"bad n", []string{"snowflake", "-n", "0"}, 2, "", "at least 1"},
		{"beyond a batch", []string{"snowflake", "-n", "20000", "--json"}, 0, "]", ""},
		{"decode", []string{"decode", strconv.FormatInt(id, 10)}, 0, decoded, ""},
		{"decode local", []string{"decode", "--local", strconv.FormatInt(id, 10)}, 0, decoded, ""},
		{"decode json", []string{"decode", "--json", strconv.FormatInt(id, 10)}, 0, `"workerId": 5`, ""},
		{"decode uidgen", []string{"decode", "--local", "--layout", "uidgen", "--epoch", "2025-01-01", strconv.FormatInt(uid, 10)},
			0, "worker     4000000\nsequence   8000\n", ""},
		// id's worker field 5 is region 0, worker 5 of leaf-dc; with 4
		// regions on leaf's bits (2 region bits), region 0, worker 5 too.
		{"decode leaf-dc", []string{"decode", "--local", "--layout", "leaf-dc", strconv.FormatInt(id, 10)},
			0, "worker     5 (region 0, worker 5)\nsequence   7\nlayout     1+41+5+5+12 ", ""},
		{"decode regions", []string{"decode", "--local", "--regions", "4", strconv.FormatInt(id|3<<20, 10)},
			0, "worker     773 (region 3, worker 5)\nsequence   7\nlayout     1+41+2+8+12 ", ""},
		{"decode too many regions", []string{"decode", "--local", "--layout", "leaf-dc", "--regions", "40", "5"}, 2, "", "room for 32 regions"},
		{"decode bad id", []string{"decode", "12x"}, 2, "", "not a snowflake id"},
		{"decode negative", []string{"decode", "--", "-5"}, 2, "", "not a snowflake id"},
		{"decode bad layout", []string{"decode", "--local", "--layout", "1+2+3", "5"}, 2, "", "layout"},
		{"decode no id", []string{"decode"}, 2, "", "wants 1 argument"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := leafctl(url, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.stdout) || !strings.Contains(errOut, tc.stderr) {
				t.Fatalf("leafctl %v = %d\nstdout: %s\nstderr: %s\nwant code %d, stdout with %q, stderr with %q",
					tc.args, code, out, errOut, tc.code, tc.stdout, tc.stderr)
			}
		})
	}
}
