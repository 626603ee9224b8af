package datadir_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/leafmq/leafmq/internal/datadir"
)

// TestCheckRegion: a directory without a record takes the first region it
// serves (a directory from before regions among them) and refuses every
// other region, and no regions, from then on; a node without regions
// records nothing.
func TestCheckRegion(t *testing.T) {
	dir := t.TempDir()
	east := datadir.Region{N: 2, R: 0, Name: "east"}
	if err := datadir.CheckRegion(dir, datadir.Region{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, datadir.RegionFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a node without regions recorded something: %v", err)
	}
	for range 2 {
		if err := datadir.CheckRegion(dir, east); err != nil {
			t.Fatal(err)
		}
	}
	for _, other := range []datadir.Region{{N: 2, R: 1, Name: "east"}, {N: 3, R: 0, Name: "east"}, {N: 2, R: 0, Name: "west"}, {}} {
		if err := datadir.CheckRegion(dir, other); !errors.Is(err, datadir.ErrRegion) {
			t.Fatalf("CheckRegion(%+v) on a directory of %+v: %v; want ErrRegion", other, east, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, datadir.RegionFileName), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := datadir.CheckRegion(dir, east); !errors.Is(err, datadir.ErrRegion) {
		t.Fatalf("CheckRegion on an unreadable record: %v; want ErrRegion", err)
	}
}
