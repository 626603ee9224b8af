package snowflake

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseLayout builds a Layout from its text forms, as leafd's flags give
// them. spec is "leaf", "leaf-dc" (LeafDCLayout), "uidgen", the bit widths
// "TIME+WORKER+SEQUENCE" (e.g. "41+10+12") or "TIME+REGION+WORKER+SEQUENCE"
// (e.g. "41+5+5+12": RegionBits 5 of WorkerBits 10); unit is "ms" or "s" (empty: ms, or s for uidgen); epoch
// is a date (2016-05-20), an RFC 3339 time or Unix milliseconds (empty: the
// preset's, or Leaf's epoch for bit widths). The result is validated.
func ParseLayout(spec, unit, epoch string) (Layout, error) {
	bad := func(format string, args ...any) (Layout, error) {
		return Layout{}, fmt.Errorf("%w: %s", ErrInvalidLayout, fmt.Sprintf(format, args...))
	}
	var l Layout
	switch spec {
	case "", "leaf":
		l = LeafLayout()
	case "leaf-dc":
		l = LeafDCLayout()
	case "uidgen":
		l = UidGenLayout(time.Time{})
	default:
		parts := strings.Split(spec, "+")
		if len(parts) != 3 && len(parts) != 4 {
			return bad("layout %q: want leaf, leaf-dc, uidgen, TIME+WORKER+SEQUENCE bits like 41+10+12 "+
				"or TIME+REGION+WORKER+SEQUENCE bits like 41+5+5+12", spec)
		}
		bits := make([]int, len(parts))
		for i, p := range parts {
			v, err := strconv.Atoi(p)
			if err != nil || v < 1 {
				return bad("layout %q: %q is not a number of bits (at least 1)", spec, p)
			}
			bits[i] = v
		}
		l = LeafLayout()
		if len(bits) == 3 {
			l.TimeBits, l.WorkerBits, l.SequenceBits = bits[0], bits[1], bits[2]
		} else {
			l.TimeBits, l.RegionBits, l.WorkerBits, l.SequenceBits = bits[0], bits[1], bits[1]+bits[2], bits[3]
		}
	}
	switch unit {
	case "":
	case "ms":
		l.TimeUnit = time.Millisecond
	case "s":
		l.TimeUnit = time.Second
	default:
		return bad("time unit %q: want ms or s", unit)
	}
	if epoch != "" {
		t, err := parseEpoch(epoch)
		if err != nil {
			return bad("epoch %q: want a date like 2016-05-20, an RFC 3339 time or Unix milliseconds", epoch)
		}
		l.Epoch = t
	}
	if l.TimeUnit == time.Second {
		l.Epoch = l.Epoch.Truncate(time.Second)
	}
	if err := l.Validate(); err != nil {
		return Layout{}, err
	}
	return l, nil
}

func parseEpoch(s string) (time.Time, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.UnixMilli(ms).UTC(), nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Parse(time.RFC3339Nano, s)
}
