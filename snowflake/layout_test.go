package snowflake_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leafmq/leafmq/snowflake"
)

// leafID is the Leaf id of 2020-01-01T00:00:00Z, worker 7, sequence 42:
// (1577836800000-1288834974657)<<22 | 7<<12 | 42.
const leafID = 1212161512043474986

func TestLayoutValidate(t *testing.T) {
	twitter := time.UnixMilli(snowflake.LeafEpochMilli)
	tests := []struct {
		name    string
		layout  snowflake.Layout
		wantErr bool
	}{
		{name: "zero is Leaf", layout: snowflake.Layout{}},
		{name: "Leaf", layout: snowflake.LeafLayout()},
		{name: "UidGen", layout: snowflake.UidGenLayout(time.Time{})},
		{name: "61+1+1", layout: snowflake.Layout{TimeBits: 61, WorkerBits: 1, SequenceBits: 1}},
		{name: "unit 2ms", layout: snowflake.Layout{TimeUnit: 2 * time.Millisecond}, wantErr: true},
		{name: "unit negative", layout: snowflake.Layout{TimeUnit: -time.Second}, wantErr: true},
		{name: "sum 62", layout: snowflake.Layout{TimeBits: 41, WorkerBits: 10, SequenceBits: 11}, wantErr: true},
		{name: "sum 64", layout: snowflake.Layout{TimeBits: 42, WorkerBits: 10, SequenceBits: 12}, wantErr: true},
		{name: "no worker bits", layout: snowflake.Layout{TimeBits: 51, SequenceBits: 12}, wantErr: true},
		{name: "negative bits", layout: snowflake.Layout{TimeBits: 64, WorkerBits: -1, SequenceBits: 0}, wantErr: true},
		{name: "seconds with Twitter epoch", layout: snowflake.Layout{TimeUnit: time.Second}, wantErr: true},
		{name: "seconds with whole epoch", layout: snowflake.Layout{TimeUnit: time.Second, Epoch: twitter.Truncate(time.Second)}},
		{name: "sub-ms epoch", layout: snowflake.Layout{Epoch: twitter.Add(time.Microsecond)}, wantErr: true},
		{name: "epoch too late", layout: snowflake.Layout{Epoch: time.Unix(1<<63-1000, 0), TimeUnit: time.Second}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.layout.Validate()
			if tt.wantErr {
				if !errors.Is(err, snowflake.ErrInvalidLayout) {
					t.Fatalf("Validate = %v, want ErrInvalidLayout", err)
				}
				if tt.layout.MaxWorker() != 0 || !tt.layout.Expires().IsZero() || tt.layout.Decompose(leafID) != (snowflake.ID{}) {
					t.Errorf("invalid layout gives non-zero results")
				}
				if _, err := tt.layout.Compose(time.Now(), 0, 0); !errors.Is(err, snowflake.ErrInvalidLayout) {
					t.Errorf("Compose = %v, want ErrInvalidLayout", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate = %v", err)
			}
		})
	}
}

func TestLeafCompatible(t *testing.T) {
	when := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, l := range []snowflake.Layout{{}, snowflake.LeafLayout()} {
		id, err := l.Compose(when, 7, 42)
		if err != nil {
			t.Fatalf("Compose: %v", err)
		}
		if id != leafID {
			t.Fatalf("Compose = %d, want %d", id, int64(leafID))
		}
		// Leaf's /decodeSnowflakeId.
		if ts := (id >> 22) + snowflake.LeafEpochMilli; ts != when.UnixMilli() {
			t.Errorf("Leaf timestamp = %d, want %d", ts, when.UnixMilli())
		}
		if w := (id >> 12) & 1023; w != 7 {
			t.Errorf("Leaf workerId = %d, want 7", w)
		}
		if s := id & 4095; s != 42 {
			t.Errorf("Leaf sequence = %d, want 42", s)
		}
		want := snowflake.ID{Time: when, Timestamp: when.UnixMilli(), Worker: 7, LocalWorker: 7, Sequence: 42}
		if got := l.Decompose(id); got != want {
			t.Errorf("Decompose = %+v, want %+v", got, want)
		}
		if l.MaxWorker() != 1023 || l.MaxSequence() != 4095 {
			t.Errorf("MaxWorker, MaxSequence = %d, %d, want 1023, 4095", l.MaxWorker(), l.MaxSequence())
		}
		if y := l.Expires().Year(); y != 2080 {
			t.Errorf("Expires year = %d, want 2080", y)
		}
	}
}

func TestUidGenExpires(t *testing.T) {
	l := snowflake.UidGenLayout(time.Date(2016, 5, 20, 0, 0, 0, 0, time.UTC))
	want := time.Date(2024, 11, 20, 0, 0, 0, 0, time.UTC)
	got := l.Expires()
	if d := got.Sub(want); d < -24*time.Hour || d > 24*time.Hour {
		t.Errorf("Expires = %v, want %v ±1 day", got, want)
	}
	if l.MaxWorker() != 1<<22-1 || l.MaxSequence() != 8191 {
		t.Errorf("MaxWorker, MaxSequence = %d, %d", l.MaxWorker(), l.MaxSequence())
	}
	if r := l.Remaining(want.Add(-48 * time.Hour)); r < 24*time.Hour || r > 72*time.Hour {
		t.Errorf("Remaining two days before = %v", r)
	}
	if r := l.Remaining(want.AddDate(0, 0, 2)); r != 0 {
		t.Errorf("Remaining after expiry = %v, want 0", r)
	}
	if _, err := l.Compose(want.AddDate(0, 0, 2), 0, 0); !errors.Is(err, snowflake.ErrOutOfRange) {
		t.Errorf("Compose after expiry = %v, want ErrOutOfRange", err)
	}
	if !snowflake.UidGenLayout(time.Time{}).Epoch.Equal(snowflake.UidGenEpoch) {
		t.Errorf("zero epoch is not UidGenEpoch")
	}
}

func TestComposeOutOfRange(t *testing.T) {
	l := snowflake.LeafLayout()
	now := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name        string
		t           time.Time
		worker, seq int64
	}{
		{name: "before epoch", t: l.Epoch.Add(-time.Millisecond), worker: 0, seq: 0},
		{name: "at expiry", t: l.Expires(), worker: 0, seq: 0},
		{name: "worker negative", t: now, worker: -1, seq: 0},
		{name: "worker too big", t: now, worker: 1024, seq: 0},
		{name: "seq negative", t: now, worker: 0, seq: -1},
		{name: "seq too big", t: now, worker: 0, seq: 4096},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := l.Compose(tt.t, tt.worker, tt.seq); !errors.Is(err, snowflake.ErrOutOfRange) {
				t.Errorf("Compose = %v, want ErrOutOfRange", err)
			}
		})
	}
	if id, err := l.Compose(l.Expires().Add(-time.Millisecond), 1023, 4095); err != nil || id != 1<<63-1 {
		t.Errorf("Compose(last) = %d, %v, want MaxInt64", id, err)
	}
}

func FuzzDecompose(f *testing.F) {
	for _, id := range []int64{0, 1, leafID, 1<<63 - 1, 1 << 22, 4095} {
		f.Add(id, uint8(0))
		f.Add(id, uint8(1))
		f.Add(id, uint8(2))
	}
	layouts := []snowflake.Layout{
		snowflake.LeafLayout(),
		snowflake.UidGenLayout(time.Time{}),
		{TimeBits: 61, WorkerBits: 1, SequenceBits: 1, TimeUnit: time.Second, Epoch: time.Unix(-1e9, 0)},
	}
	f.Fuzz(func(t *testing.T, id int64, which uint8) {
		if id < 0 {
			id = -(id + 1)
		}
		l := layouts[int(which)%len(layouts)]
		d := l.Decompose(id)
		got, err := l.Compose(d.Time, d.Worker, d.Sequence)
		if err != nil {
			t.Fatalf("Compose(Decompose(%d) = %+v): %v", id, d, err)
		}
		if got != id {
			t.Fatalf("Compose(Decompose(%d)) = %d", id, got)
		}
		if d.Time.Before(l.Epoch) || !d.Time.Before(l.Expires()) {
			t.Fatalf("Decompose(%d).Time = %v outside the layout", id, d.Time)
		}
	})
}

// A layout can make ids from its epoch up to its expiry; before the epoch
// and from the expiry on, Usable says why not.
func TestUsable(t *testing.T) {
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := snowflake.Layout{TimeBits: 20, WorkerBits: 10, SequenceBits: 33, Epoch: epoch} // 2^20 ms: 17m28.576s
	sec := snowflake.UidGenLayout(epoch)
	tests := []struct {
		name   string
		layout snowflake.Layout
		now    time.Time
		want   error // nil: usable
	}{
		{"at the epoch", ms, epoch, nil},
		{"last tick", ms, ms.Expires().Add(-time.Millisecond), nil},
		{"a tick before the epoch", ms, epoch.Add(-time.Millisecond), snowflake.ErrInvalidLayout},
		{"under a tick before the epoch", ms, epoch.Add(-time.Microsecond), snowflake.ErrInvalidLayout},
		{"a year before the epoch", ms, epoch.AddDate(-1, 0, 0), snowflake.ErrInvalidLayout},
		{"at expiry", ms, ms.Expires(), snowflake.ErrExpired},
		{"after expiry", ms, ms.Expires().Add(time.Hour), snowflake.ErrExpired},
		{"seconds: within the epoch's second", sec, epoch.Add(999 * time.Millisecond), nil},
		{"seconds: before the epoch", sec, epoch.Add(-time.Millisecond), snowflake.ErrInvalidLayout},
		{"seconds: expired", sec, sec.Expires(), snowflake.ErrExpired},
		{"invalid layout", snowflake.Layout{TimeBits: 40, WorkerBits: 10, SequenceBits: 12}, epoch, snowflake.ErrInvalidLayout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.layout.Usable(tt.now)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Usable = %v, want nil", err)
				}
				if _, err := tt.layout.Compose(tt.now, 0, 0); err != nil {
					t.Fatalf("usable, yet Compose = %v", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Usable = %v, want %v", err, tt.want)
			}
			if tt.want == snowflake.ErrInvalidLayout && tt.layout.Validate() == nil && !strings.Contains(err.Error(), "in the future") {
				t.Errorf("Usable = %q, does not say the epoch is in the future", err)
			}
		})
	}
}
