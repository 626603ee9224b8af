package snowflake_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leafmq/leafmq/snowflake"
)

// sameLayout compares layouts with Epoch by instant, not location.
func sameLayout(a, b snowflake.Layout) bool {
	return a.TimeUnit == b.TimeUnit && a.Epoch.Equal(b.Epoch) &&
		a.TimeBits == b.TimeBits && a.WorkerBits == b.WorkerBits && a.SequenceBits == b.SequenceBits && a.RegionBits == b.RegionBits
}

func TestParseLayout(t *testing.T) {
	leafSeconds := snowflake.LeafLayout()
	leafSeconds.TimeUnit = time.Second
	leafSeconds.Epoch = time.Unix(1288834974, 0) // the 657ms dropped
	uidgenMs := snowflake.UidGenLayout(time.Time{})
	uidgenMs.TimeUnit = time.Millisecond
	y2020 := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	leaf2020 := snowflake.LeafLayout()
	leaf2020.Epoch = y2020
	tests := []struct {
		name              string
		spec, unit, epoch string
		want              snowflake.Layout
	}{
		{name: "empty", want: snowflake.LeafLayout()},
		{name: "leaf", spec: "leaf", want: snowflake.LeafLayout()},
		{name: "leaf ms", spec: "leaf", unit: "ms", want: snowflake.LeafLayout()},
		{name: "leaf in seconds truncates the epoch", spec: "leaf", unit: "s", want: leafSeconds},
		{name: "uidgen", spec: "uidgen", want: snowflake.UidGenLayout(time.Time{})},
		{name: "uidgen s", spec: "uidgen", unit: "s", want: snowflake.UidGenLayout(time.Time{})},
		{name: "uidgen ms", spec: "uidgen", unit: "ms", want: uidgenMs},
		{name: "uidgen epoch", spec: "uidgen", epoch: "2020-01-01", want: snowflake.UidGenLayout(y2020)},
		{name: "bits", spec: "41+10+12", want: snowflake.LeafLayout()},
		{name: "bits in seconds with a date", spec: "28+22+13", unit: "s", epoch: "2016-05-20", want: snowflake.UidGenLayout(time.Time{})},
		{name: "other bits", spec: "39+8+16", want: snowflake.Layout{TimeUnit: time.Millisecond, Epoch: snowflake.LeafLayout().Epoch, TimeBits: 39, WorkerBits: 8, SequenceBits: 16}},
		{name: "unix ms", spec: "leaf", epoch: "1577836800000", want: leaf2020},
		{name: "leaf epoch in unix ms", epoch: "1288834974657", want: snowflake.LeafLayout()},
		{name: "RFC 3339", epoch: "2020-01-01T00:00:00Z", want: leaf2020},
		{name: "RFC 3339 with offset", epoch: "2020-01-01T08:00:00+08:00", want: leaf2020},
		{name: "RFC 3339 whole ms", epoch: "2020-01-01T00:00:00.000Z", want: leaf2020},
		{name: "seconds truncate a given epoch", spec: "uidgen", epoch: "2020-01-01T00:00:00.5Z", want: snowflake.UidGenLayout(y2020)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := snowflake.ParseLayout(tc.spec, tc.unit, tc.epoch)
			if err != nil {
				t.Fatalf("ParseLayout(%q, %q, %q): %v", tc.spec, tc.unit, tc.epoch, err)
			}
			if !sameLayout(got, tc.want) {
				t.Errorf("ParseLayout(%q, %q, %q) = %v, want %v", tc.spec, tc.unit, tc.epoch, got, tc.want)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("result does not validate: %v", err)
			}
		})
	}
}

func TestParseLayoutInvalid(t *testing.T) {
	tests := []struct {
		name              string
		spec, unit, epoch string
	}{
		{name: "unknown preset", spec: "sonyflake"},
		{name: "preset case", spec: "Leaf"},
		{name: "two fields", spec: "41+22"},
		{name: "four fields", spec: "41+10+12+0"},
		{name: "not a number", spec: "41+ten+12"},
		{name: "spaces", spec: "41 + 10 + 12"},
		{name: "empty field", spec: "41++22"},
		{name: "sum 62", spec: "41+10+11"},
		{name: "sum 64", spec: "41+10+13"},
		{name: "zero bits", spec: "0+41+22"},
		{name: "negative bits", spec: "-1+32+32"},
		{name: "unit", unit: "us"},
		{name: "unit case", unit: "MS"},
		{name: "unit duration", unit: "1ms"},
		{name: "epoch words", epoch: "yesterday"},
		{name: "epoch date without day", epoch: "2020-01"},
		{name: "epoch not a whole ms", epoch: "2020-01-01T00:00:00.0005Z"},
		{name: "epoch float", epoch: "1.5e12"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := snowflake.ParseLayout(tc.spec, tc.unit, tc.epoch)
			if !errors.Is(err, snowflake.ErrInvalidLayout) {
				t.Fatalf("ParseLayout(%q, %q, %q) = %v, %v, want ErrInvalidLayout", tc.spec, tc.unit, tc.epoch, l, err)
			}
			if l != (snowflake.Layout{}) {
				t.Errorf("layout %v returned with the error", l)
			}
		})
	}
}

// FuzzParseLayout: whatever the input, ParseLayout either fails with
// ErrInvalidLayout or returns a valid layout whose ids round-trip.
func FuzzParseLayout(f *testing.F) {
	for _, seed := range [][3]string{
		{"", "", ""},
		{"leaf", "s", ""},
		{"uidgen", "ms", "2016-05-20"},
		{"41+10+12", "ms", "1288834974657"},
		{"1+1+61", "s", "2020-01-01T00:00:00Z"},
		{"61+1+1", "", "-1"},
		{"63+0+0", "s", "9999-12-31"},
		{"28+22+13", "s", "2016-05-20T00:00:00.999+14:00"},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	f.Fuzz(func(t *testing.T, spec, unit, epoch string) {
		l, err := snowflake.ParseLayout(spec, unit, epoch)
		if err != nil {
			if !errors.Is(err, snowflake.ErrInvalidLayout) {
				t.Fatalf("ParseLayout(%q, %q, %q): %v, not ErrInvalidLayout", spec, unit, epoch, err)
			}
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("ParseLayout(%q, %q, %q) = %v, which does not validate: %v", spec, unit, epoch, l, err)
		}
		id, err := l.Compose(l.Epoch, l.MaxWorker(), l.MaxSequence())
		if err != nil {
			t.Fatalf("Compose at the epoch of %v: %v", l, err)
		}
		if d := l.Decompose(id); !d.Time.Equal(l.Epoch) || d.Worker != l.MaxWorker() || d.Sequence != l.MaxSequence() {
			t.Fatalf("layout %v: id %d decomposes to %+v", l, id, d)
		}
	})
}
