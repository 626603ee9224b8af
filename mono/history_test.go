package mono_test

import (
	"testing"
	"time"

	"github.com/leafmq/leafmq/mono"
)

func TestCheckHistory(t *testing.T) {
	ms := time.Millisecond
	for name, ok := range map[string][]mono.Op{
		"empty":        nil,
		"overlapping":  {{Send: 0, Recv: 2 * ms, ID: 5}, {Send: ms, Recv: 3 * ms, ID: 3}, {Send: 4 * ms, Recv: 5 * ms, ID: 6}},
		"sequential":   {{Send: 0, Recv: ms, ID: 1}, {Send: 2 * ms, Recv: 3 * ms, ID: 9}},
		"same instant": {{Send: 0, Recv: ms, ID: 7}, {Send: ms, Recv: 2 * ms, ID: 3}}, // sent when the first came back: concurrent
	} {
		if err := mono.CheckHistory(ok); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, bad := range map[string][]mono.Op{
		"repeat":            {{Send: 0, Recv: ms, ID: 5}, {Send: 2 * ms, Recv: 3 * ms, ID: 5}},
		"lower":             {{Send: 0, Recv: ms, ID: 5}, {Send: 2 * ms, Recv: 3 * ms, ID: 4}},
		"delayed":           {{Send: 0, Recv: 10 * ms, ID: 9}, {Send: 0, Recv: ms, ID: 7}, {Send: 2 * ms, Recv: 3 * ms, ID: 6}},
		"repeat concurrent": {{Send: 0, Recv: 5 * ms, ID: 5}, {Send: ms, Recv: 3 * ms, ID: 5}},
	} {
		if mono.CheckHistory(bad) == nil {
			t.Errorf("%s: history %v passed", name, bad)
		}
	}
}
