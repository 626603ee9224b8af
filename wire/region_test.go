package wire_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/leafmq/leafmq/wire"
)

func TestCheckRegion(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"eu-west_1", true},
		{strings.Repeat("r", wire.MaxRegionLen), true},
		{"", false},
		{"eu.west", false},
		{"eu west", false},
		{"eu*", false},
		{"eu>", false},
		{strings.Repeat("r", wire.MaxRegionLen+1), false},
	} {
		err := wire.CheckRegion(tc.name)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, wire.ErrInvalid)) {
			t.Errorf("CheckRegion(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	if got := wire.RegionSubject(7); got != "leaf.region.7" {
		t.Errorf("RegionSubject(7) = %q", got)
	}
	// The count's subject and a region id's never meet.
	for _, sub := range []string{wire.RegionPrefix + "*", wire.RegionPrefix + ">"} {
		if match(sub, wire.RegionsSubject) {
			t.Errorf("subscription %q hears %q", sub, wire.RegionsSubject)
		}
	}
	if match(wire.RegionsSubject, wire.RegionSubject(7)) {
		t.Errorf("subscription %q hears %q", wire.RegionsSubject, wire.RegionSubject(7))
	}
}
