package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/leafmq/leafmq/cmd/leafchaos/internal/chaos"
)

func TestListFaults(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--list-faults"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	got := strings.Fields(out.String())
	if strings.Join(got, ",") != strings.Join(chaos.AllFaults, ",") {
		t.Errorf("--list-faults = %v, want %v", got, chaos.AllFaults)
	}
}

func TestListRegionFaults(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--regions", "2", "--list-faults"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	got := strings.Fields(out.String())
	if strings.Join(got, ",") != strings.Join(chaos.RegionFaults, ",") {
		t.Errorf("--regions 2 --list-faults = %v, want %v", got, chaos.RegionFaults)
	}
}

func TestBadArguments(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{name: "unknown flag", args: []string{"--meteor"}},
		{name: "unknown fault", args: []string{"--faults", "kill-leafd,meteor"}},
		{name: "freeze too short", args: []string{"--freeze", "1ms"}},
		{name: "argument", args: []string{"extra"}},
		{name: "one region", args: []string{"--regions", "1"}},
		{name: "fault of one region", args: []string{"--regions", "2", "--faults", "kill-leafd"}},
		{name: "region fault without regions", args: []string{"--faults", "region-cut"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(append(tt.args, "--repo", t.TempDir()), &out, &errb); code != 2 {
				t.Errorf("exit %d, want 2 (stderr %q)", code, errb.String())
			}
		})
	}
}
