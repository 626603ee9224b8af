package datadir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/leafmq/leafmq/internal/fsutil"
)

// ErrRegion: the data directory served another region than the one the
// node is started as.
var ErrRegion = errors.New("data directory of another region")

// RegionFileName is the file under the data directory that records the
// region its node serves (Region).
const RegionFileName = "region.json"

// Region is a node's place among the regions: --regions N, --region-id R,
// --region Name. The zero Region is a node without regions.
type Region struct {
	N    int    `json:"regions"`
	R    int    `json:"region_id"`
	Name string `json:"region"`
}

func (r Region) String() string {
	if r.N == 0 {
		return "no regions"
	}
	return fmt.Sprintf("--regions %d --region-id %d --region %s", r.N, r.R, r.Name)
}

// CheckRegion compares the region recorded in dir with want, and records
// want where there is no record and want has regions. The data directory
// keeps this node's floors (segment-floors.json) and snowflake leases:
// local numbers and times of the region it served. With another N or R
// the same local numbers map to other ids, and with another name the
// node serves from another store (the region's bucket or database): each
// repeats ids served before (I5, docs/regions.md), and nothing live may be
// there to compare with when every node restarts at once. So any change
// is refused, but for the one documented move: a directory without a
// record (a node from before regions, or new) with regions is recorded.
func CheckRegion(dir string, want Region) error {
	path := filepath.Join(dir, RegionFileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if want.N == 0 {
			return nil // nothing to record: a record is what a later start with regions compares with
		}
		b, _ := json.Marshal(want)
		if err := fsutil.WriteFile(path, append(b, '\n')); err != nil {
			return fmt.Errorf("data directory %s: recording the region: %w", dir, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("data directory %s: %w", dir, err)
	}
	var had Region
	if err := json.Unmarshal(b, &had); err != nil || had.N < 1 {
		return fmt.Errorf("%w: %s is not a region record (%q, %v): restore it, or name the region it served in it", ErrRegion, path, b, err)
	}
	if had == want {
		return nil
	}
	var why string
	switch {
	case want.N == 0:
		why = "its floors count the region's local numbers, and without --regions they are ids of another mapping: start it with " + had.String()
	case had.N != want.N:
		why = "--regions is fixed for the deployment's life: with another count the same local numbers map to other ids, which repeats ids served before; start it with " + had.String()
	case had.R != want.R:
		why = "a region's id never changes (its store counts the ids of that remainder; two regions swapping ids serve each other's ids); start it with " + had.String()
	default:
		why = "on JetStream KV a renamed region serves from another, empty store (leaf_alloc_<region>): start it with " + had.String() +
			", or rename the region as docs/regions.md says (Retiring or renaming a region), which removes " + path + " with the node stopped"
	}
	return fmt.Errorf("%w: %s served %s, and this node is started with %s: %s", ErrRegion, dir, had, want, why)
}
