package main

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/wire"
)

func TestEvents(t *testing.T) {
	url := startLeafd(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--kind", "segment", "--tag", "evt", "--count", "1"}, "segment.loaded [evt] segment [1, "},
		{[]string{"--kind", "segment.loaded", "--json", "--count", "1"}, `"kind":"segment.loaded"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errOut testenv.Buffer
			ready := make(chan struct{})
			c := &cli{stdout: &out, stderr: &errOut, getenv: func(k string) string {
				if k == "LEAF_NATS" {
					return url
				}
				return ""
			},
				ready: func() { close(ready) }}
			done := make(chan int)
			go func() { done <- c.run(append([]string{"events", "--for", "20s"}, tc.args...)) }()
			select {
			case <-ready:
			case code := <-done:
				t.Fatalf("events exited with %d: %s", code, errOut.String())
			}
			nc, err := nats.Connect(url)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			tag := "evt"
			if strings.Contains(strings.Join(tc.args, " "), "json") {
				tag = "evt2"
			}
			if _, err := nc.Request(wire.SegmentPrefix+tag, nil, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			select {
			case code := <-done:
				if code != 0 || !strings.Contains(out.String(), tc.want) {
					t.Fatalf("events = %d\nstdout: %s\nstderr: %s\nwant %q", code, out.String(), errOut.String(), tc.want)
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("no event; stdout: %s", out.String())
			}
		})
	}
	for _, bad := range []string{"a.b.c", "seg*", "..", "x."} {
		if code, _, errOut := leafctl(url, "events", "--kind", bad); code != 2 || !strings.Contains(errOut, "--kind") {
			t.Fatalf("--kind %q: code %d, %s", bad, code, errOut)
		}
	}
	if code, _, _ := leafctl(url, "events", "--count", "-1"); code != 2 {
		t.Fatalf("--count -1: code %d", code)
	}
}
