package snowflake

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/leafmq/leafmq/wire"
)

// Sentinel errors of the package. Errors returned by the package wrap one of
// them; test with errors.Is.
var (
	// ErrInvalidLayout: a Layout was rejected by Validate.
	ErrInvalidLayout = errors.New("invalid snowflake layout")
	// ErrInvalidConfig: a Generator Config was rejected by New.
	ErrInvalidConfig = errors.New("invalid snowflake config")
	// ErrOutOfRange: a time, worker or sequence does not fit its field of the
	// layout (for example a clock before the layout's epoch).
	ErrOutOfRange = wire.NewCodedError(wire.CodeUnavailable, "value out of range")
	// ErrExpired: the time bits of the layout have run out (see
	// Layout.Expires); no id can be made any more.
	ErrExpired = wire.NewCodedError(wire.CodeUnavailable, "snowflake layout expired")
	// ErrClockBackwards: the clock is behind the last time used (or
	// Config.LastIssued) by more than Config.MaxBackward, or still behind
	// after the wait for a small step. No id was issued.
	ErrClockBackwards = wire.NewCodedError(wire.CodeUnavailable, "clock moved backwards")
	// ErrLeaseFailed: Config.Lease failed, so the generator may not use the
	// time it would need. No id was issued.
	ErrLeaseFailed = wire.NewCodedError(wire.CodeUnavailable, "time lease failed")
)

// Bit widths and epoch of the presets.
const (
	// LeafEpochMilli is Leaf's (and Twitter's) twepoch, 2010-11-04T01:42:54.657Z.
	LeafEpochMilli = 1288834974657
	LeafTimeBits   = 41
	LeafWorkerBits = 10
	LeafSeqBits    = 12
	// LeafDCRegionBits is the datacenter part of Leaf's (Twitter's) worker
	// field in the leaf-dc preset: 5 bits of datacenterId above 5 of
	// workerId.
	LeafDCRegionBits = 5

	UidGenTimeBits   = 28
	UidGenWorkerBits = 22
	UidGenSeqBits    = 13
)

// UidGenEpoch is UidGenerator's default epochStr, 2016-05-20 (taken here as
// midnight UTC; UidGenerator parses it in the JVM's time zone).
var UidGenEpoch = time.Date(2016, 5, 20, 0, 0, 0, 0, time.UTC)

// Layout is the bit layout of a snowflake id: a zero sign bit, then the time
// since Epoch in TimeUnit, the worker field and the sequence within one
// tick. The worker field may be split in two (RegionBits): the region id
// above the worker within the region, as Twitter's datacenterId and
// workerId. The zero value of every field means Leaf's: milliseconds, the
// Twitter epoch, 41+10+12 bits, no region bits. The three bit widths are
// defaulted together (all zero) or not at all.
type Layout struct {
	// TimeUnit is the length of one tick: time.Millisecond (default) or
	// time.Second.
	TimeUnit time.Duration
	// Epoch is time zero of the time field; a whole number of TimeUnit since
	// the Unix epoch. Default: LeafEpochMilli.
	Epoch time.Time
	// TimeBits, WorkerBits and SequenceBits are the widths of the fields;
	// each at least 1, together 63. Default 41, 10 and 12.
	TimeBits, WorkerBits, SequenceBits int
	// RegionBits is how many of the top bits of the worker field are the
	// region id; the other WorkerBits-RegionBits are the worker within
	// the region. An id decodes like Leaf's: its workerId field is
	// region<<(WorkerBits-RegionBits) | worker. 0 (the default): no
	// regions, the whole field is the worker. Less than WorkerBits, so
	// that a region has at least two workers.
	RegionBits int
}

// LeafDCLayout is LeafLayout with the worker field split as Twitter's
// snowflake splits it: 5 bits of datacenter (region) id above 5 bits of
// worker id (the "leaf-dc" preset).
func LeafDCLayout() Layout {
	l := LeafLayout()
	l.RegionBits = LeafDCRegionBits
	return l
}

// LeafLayout is Meituan Leaf-snowflake's layout: 1+41+10+12 bits, ms since
// the Twitter epoch. It decodes like Leaf's /decodeSnowflakeId:
// timestamp = (id>>22)+twepoch, workerId = (id>>12)&1023, sequence = id&4095.
// It expires in 2080.
func LeafLayout() Layout {
	return Layout{
		TimeUnit:     time.Millisecond,
		Epoch:        time.UnixMilli(LeafEpochMilli).UTC(),
		TimeBits:     LeafTimeBits,
		WorkerBits:   LeafWorkerBits,
		SequenceBits: LeafSeqBits,
	}
}

// UidGenLayout is Baidu UidGenerator's default layout: 1+28+22+13 bits,
// seconds since epoch (UidGenEpoch when epoch is zero). 28 bits of seconds
// last about 8.5 years: with the default epoch 2016-05-20 the layout expired
// on 2024-11-20, so pass a recent epoch (and keep it forever after).
func UidGenLayout(epoch time.Time) Layout {
	if epoch.IsZero() {
		epoch = UidGenEpoch
	}
	return Layout{
		TimeUnit:     time.Second,
		Epoch:        epoch,
		TimeBits:     UidGenTimeBits,
		WorkerBits:   UidGenWorkerBits,
		SequenceBits: UidGenSeqBits,
	}
}

// ID is a decoded snowflake id.
type ID struct {
	Time      time.Time // start of the tick, UTC
	Timestamp int64     // time in TimeUnit since the Unix epoch (Leaf's timestamp)
	// Worker is the whole worker field (Leaf's workerId); with region bits
	// it is Region<<(WorkerBits-RegionBits) | LocalWorker.
	Worker int64
	// Region and LocalWorker split Worker by the layout's RegionBits:
	// the region id (0 without region bits) and the worker within the
	// region (Worker itself without region bits).
	Region, LocalWorker int64
	Sequence            int64
}

// spec is a validated layout with everything the hot path needs.
type spec struct {
	l          Layout // defaults filled
	epoch      int64  // Epoch in units since the Unix epoch
	timeShift  uint   // WorkerBits+SequenceBits
	workerBits uint
	seqBits    uint
	localBits  uint  // WorkerBits-RegionBits: the worker within a region
	maxTick    int64 // 1<<TimeBits - 1
	maxWorker  int64 // the whole worker field
	maxLocal   int64 // the worker within a region
	maxRegion  int64
	maxSeq     int64
}

// Validate reports whether l (with its defaults filled) is usable; the error
// wraps ErrInvalidLayout.
func (l Layout) Validate() error {
	_, err := l.spec()
	return err
}

func (l Layout) spec() (spec, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidLayout, fmt.Sprintf(format, args...))
	}
	if l.TimeUnit == 0 {
		l.TimeUnit = time.Millisecond
	}
	if l.TimeUnit != time.Millisecond && l.TimeUnit != time.Second {
		return spec{}, bad("time unit %v must be 1ms or 1s", l.TimeUnit)
	}
	if l.Epoch.IsZero() {
		l.Epoch = time.UnixMilli(LeafEpochMilli).UTC()
	}
	if l.TimeBits == 0 && l.WorkerBits == 0 && l.SequenceBits == 0 {
		l.TimeBits, l.WorkerBits, l.SequenceBits = LeafTimeBits, LeafWorkerBits, LeafSeqBits
	}
	if l.TimeBits < 1 || l.WorkerBits < 1 || l.SequenceBits < 1 {
		return spec{}, bad("bits %d+%d+%d: each field needs at least 1 bit",
			l.TimeBits, l.WorkerBits, l.SequenceBits)
	}
	if sum := l.TimeBits + l.WorkerBits + l.SequenceBits; sum != 63 {
		return spec{}, bad("bits %d+%d+%d sum to %d, want 63",
			l.TimeBits, l.WorkerBits, l.SequenceBits, sum)
	}
	if l.RegionBits < 0 || l.RegionBits >= l.WorkerBits {
		return spec{}, bad("%d region bits of %d worker bits: the worker within a region needs at least 1 bit",
			l.RegionBits, l.WorkerBits)
	}
	s := spec{l: l}
	s.epoch = s.units(l.Epoch)
	if !s.start(s.epoch).Equal(l.Epoch) {
		return spec{}, bad("epoch %v is not a whole number of %v", l.Epoch, l.TimeUnit)
	}
	s.workerBits, s.seqBits = uint(l.WorkerBits), uint(l.SequenceBits)
	s.timeShift = s.workerBits + s.seqBits
	s.maxTick = 1<<uint(l.TimeBits) - 1
	s.maxWorker = 1<<s.workerBits - 1
	s.localBits = s.workerBits - uint(l.RegionBits)
	s.maxLocal = 1<<s.localBits - 1
	s.maxRegion = 1<<uint(l.RegionBits) - 1
	s.maxSeq = 1<<s.seqBits - 1
	if s.epoch > math.MaxInt64-s.maxTick-1 {
		return spec{}, bad("epoch %v is too late for %d time bits", l.Epoch, l.TimeBits)
	}
	return s, nil
}

// units is t in TimeUnit since the Unix epoch, rounded down.
func (s *spec) units(t time.Time) int64 {
	if s.l.TimeUnit == time.Second {
		return t.Unix()
	}
	return t.UnixMilli()
}

// start is the time at u TimeUnit since the Unix epoch, in UTC.
func (s *spec) start(u int64) time.Time {
	if s.l.TimeUnit == time.Second {
		return time.Unix(u, 0).UTC()
	}
	return time.UnixMilli(u).UTC()
}

func (s *spec) expires() time.Time { return s.start(s.epoch + s.maxTick + 1) }

// String is the layout in the form "1+41+10+12 1ms since 2010-11-04T01:42:54.657Z",
// or "1+41+5+5+12 ..." (sign, time, region, worker, sequence) with region
// bits, or the validation error. Layouts that make different ids print
// differently: nodes compare it with each other's and with the one their
// data directory recorded.
func (l Layout) String() string {
	s, err := l.spec()
	if err != nil {
		return err.Error()
	}
	widths := fmt.Sprintf("1+%d+%d+%d", s.l.TimeBits, s.l.WorkerBits, s.l.SequenceBits)
	if s.l.RegionBits > 0 {
		widths = fmt.Sprintf("1+%d+%d+%d+%d", s.l.TimeBits, s.l.RegionBits, s.localBits, s.l.SequenceBits)
	}
	return fmt.Sprintf("%s %v since %s", widths, s.l.TimeUnit, s.l.Epoch.UTC().Format(time.RFC3339Nano))
}

// MaxWorker is the largest worker id within a region (a registry's
// range: 0..MaxWorker); without region bits, of the whole worker field.
// 0 if l is invalid.
func (l Layout) MaxWorker() int64 {
	s, _ := l.spec()
	return s.maxLocal
}

// MaxRegion is the largest region id: 0 without region bits, or if l is
// invalid.
func (l Layout) MaxRegion() int64 {
	s, _ := l.spec()
	return s.maxRegion
}

// MaxWorkerField is the largest value of the whole worker field (region
// and worker within it); MaxWorker without region bits. 0 if l is
// invalid.
func (l Layout) MaxWorkerField() int64 {
	s, _ := l.spec()
	return s.maxWorker
}

// WorkerField is the worker field of the ids of worker (0..MaxWorker) in
// region (0..MaxRegion): region<<(WorkerBits-RegionBits) | worker. The
// error wraps ErrInvalidLayout or ErrOutOfRange.
func (l Layout) WorkerField(region, worker int64) (int64, error) {
	s, err := l.spec()
	if err != nil {
		return 0, err
	}
	return s.field(region, worker)
}

func (s *spec) field(region, worker int64) (int64, error) {
	switch {
	case region < 0 || region > s.maxRegion:
		return 0, fmt.Errorf("%w: region %d is outside 0-%d of layout %s", ErrOutOfRange, region, s.maxRegion, s.l)
	case worker < 0 || worker > s.maxLocal:
		return 0, fmt.Errorf("%w: worker %d is outside 0-%d of layout %s", ErrOutOfRange, worker, s.maxLocal, s.l)
	}
	return region<<s.localBits | worker, nil
}

// SplitWorkerField splits a worker field (a WorkerField, or an ID's
// Worker) into its region and the worker within the region. Without
// region bits the region is 0 and the worker the field.
func (l Layout) SplitWorkerField(field int64) (region, worker int64) {
	s, _ := l.spec()
	field &= s.maxWorker
	return field >> s.localBits, field & s.maxLocal
}

// ForRegions is l for a deployment of n regions (n >= 1): l itself when
// its region bits hold n regions; a layout without region bits takes
// ceil(log2 n) of its worker bits for them (none for n = 1). The error
// wraps ErrInvalidLayout: a layout whose region bits are too few, or
// whose worker bits cannot give up enough.
func (l Layout) ForRegions(n int) (Layout, error) {
	s, err := l.spec()
	if err != nil {
		return Layout{}, err
	}
	if n < 1 {
		return Layout{}, fmt.Errorf("%w: %d regions: want at least 1", ErrInvalidLayout, n)
	}
	need := bits.Len(uint(n - 1)) // ceil(log2 n)
	l = s.l
	if l.RegionBits == 0 {
		if need >= l.WorkerBits {
			return Layout{}, fmt.Errorf("%w: %d regions need %d region bits, and the layout %s has only %d worker bits: "+
				"the worker within a region needs at least 1; use a layout with more worker bits",
				ErrInvalidLayout, n, need, l, l.WorkerBits)
		}
		l.RegionBits = need
		return l, nil
	}
	if l.RegionBits < need {
		return Layout{}, fmt.Errorf("%w: the layout %s has %d region bits, room for %d regions, not %d: "+
			"use a layout with at least %d region bits", ErrInvalidLayout, l, l.RegionBits, 1<<l.RegionBits, n, need)
	}
	return l, nil
}

// MaxSequence is the largest sequence within one tick; 0 if l is invalid.
func (l Layout) MaxSequence() int64 {
	s, _ := l.spec()
	return s.maxSeq
}

// Expires is the first time the time bits cannot hold; zero if l is invalid.
func (l Layout) Expires() time.Time {
	s, err := l.spec()
	if err != nil {
		return time.Time{}
	}
	return s.expires()
}

// Remaining is how long after now the layout can still make ids; 0 once
// expired or if l is invalid.
func (l Layout) Remaining(now time.Time) time.Duration {
	e := l.Expires()
	if e.IsZero() || !now.Before(e) {
		return 0
	}
	return e.Sub(now)
}

// Usable reports whether l can make ids at now: an error wrapping
// ErrInvalidLayout when its epoch is after now (every id would be out of
// range until the epoch comes), ErrExpired when its time bits have run out
// by now, or the layout's own ErrInvalidLayout. A source refuses to start
// on a layout that cannot make ids rather than serve nothing but errors.
func (l Layout) Usable(now time.Time) error {
	s, err := l.spec()
	if err != nil {
		return err
	}
	if tick := s.units(now) - s.epoch; tick < 0 {
		return fmt.Errorf("%w: epoch %s is %v in the future (now %s): no id can be made before it",
			ErrInvalidLayout, s.l.Epoch.UTC().Format(time.RFC3339Nano), s.l.Epoch.Sub(now).Round(s.l.TimeUnit),
			now.UTC().Format(time.RFC3339Nano))
	} else if tick > s.maxTick {
		return fmt.Errorf("%w: the layout %s ran out of time bits at %s (now %s)",
			ErrExpired, l, s.expires().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// Compose makes the id of (t, worker, seq); t is rounded down to its tick.
// worker is the whole worker field, 0..MaxWorkerField (WorkerField makes
// it of a region and a worker within it). The error wraps
// ErrInvalidLayout or ErrOutOfRange.
func (l Layout) Compose(t time.Time, worker, seq int64) (int64, error) {
	s, err := l.spec()
	if err != nil {
		return 0, err
	}
	tick := s.units(t) - s.epoch
	switch {
	case tick < 0 || tick > s.maxTick:
		return 0, fmt.Errorf("%w: time %v is outside [%v, %v)", ErrOutOfRange, t,
			s.l.Epoch, s.expires())
	case worker < 0 || worker > s.maxWorker:
		return 0, fmt.Errorf("%w: worker %d is outside 0-%d", ErrOutOfRange, worker, s.maxWorker)
	case seq < 0 || seq > s.maxSeq:
		return 0, fmt.Errorf("%w: sequence %d is outside 0-%d", ErrOutOfRange, seq, s.maxSeq)
	}
	return tick<<s.timeShift | worker<<s.seqBits | seq, nil
}

// Decompose splits id into its fields; the zero ID if l is invalid. The sign
// bit is ignored.
func (l Layout) Decompose(id int64) ID {
	s, err := l.spec()
	if err != nil {
		return ID{}
	}
	ts := (id>>s.timeShift)&s.maxTick + s.epoch
	w := (id >> s.seqBits) & s.maxWorker
	return ID{
		Time:        s.start(ts),
		Timestamp:   ts,
		Worker:      w,
		Region:      w >> s.localBits,
		LocalWorker: w & s.maxLocal,
		Sequence:    id & s.maxSeq,
	}
}

// DecodeReply splits id by layout into the fields of leaf.snowflake.decode
// (the reply of wire.DecodeSubject).
func DecodeReply(layout Layout, id int64) wire.Decoded {
	d := layout.Decompose(id)
	out := wire.Decoded{
		ID:        id,
		Timestamp: d.Timestamp,
		Time:      d.Time.UTC().Format(time.RFC3339Nano),
		Worker:    d.Worker,
		Sequence:  d.Sequence,
		Layout:    layout.String(),
	}
	if layout.RegionBits > 0 {
		out.Region, out.RegionWorker = &d.Region, &d.LocalWorker
	}
	return out
}
