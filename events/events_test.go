package events_test

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leafmq/leafmq/events"
	"github.com/leafmq/leafmq/internal/clock"
)

type sink struct {
	mu   sync.Mutex
	subj []string
	evs  []events.Event
	err  error
}

func (s *sink) publish(subject string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	var ev events.Event
	if err := json.Unmarshal(data, &ev); err != nil {
		return err
	}
	s.subj = append(s.subj, subject)
	s.evs = append(s.evs, ev)
	return nil
}

func TestEmitSchema(t *testing.T) {
	var s sink
	c := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600)))
	p := events.New(events.Config{Node: "n1", Publish: s.publish, Clock: c})
	if !p.Emit(events.Event{Kind: events.StoreError, Tag: "orders", Level: events.Error, Message: "down",
		Fields: map[string]any{"failures": 3}}) {
		t.Fatal("not published")
	}
	if len(s.evs) != 1 || s.subj[0] != "leaf.events.store.error" {
		t.Fatalf("published %v on %v", s.evs, s.subj)
	}
	ev := s.evs[0]
	if ev.Node != "n1" || !ev.Time.Equal(c.Now()) || ev.Time.Location() != time.UTC || ev.Tag != "orders" ||
		ev.Level != events.Error || ev.Message != "down" || ev.Fields["failures"] != float64(3) || ev.Suppressed != 0 {
		t.Fatalf("event %+v", ev)
	}
	p.Emit(events.Event{Kind: events.NodeUp})
	if s.evs[1].Level != events.Info {
		t.Fatalf("default level %q, want info", s.evs[1].Level)
	}
}

func TestRateLimit(t *testing.T) {
	var s sink
	c := clock.NewFake(time.Unix(1000, 0))
	p := events.New(events.Config{Node: "n", Publish: s.publish, Clock: c, Burst: 3, Every: time.Second})
	sent := 0
	for range 10 {
		if p.Emit(events.Event{Kind: events.RingEmpty, Tag: "hot"}) {
			sent++
		}
	}
	if sent != 3 {
		t.Fatalf("%d of a burst of 10 published, want 3", sent)
	}
	// Another tag and another kind have their own budgets.
	if !p.Emit(events.Event{Kind: events.RingEmpty, Tag: "cold"}) || !p.Emit(events.Event{Kind: events.StoreError, Tag: "hot"}) {
		t.Fatal("a different tag or kind was limited")
	}
	c.Advance(1500 * time.Millisecond) // 1.5 tokens back
	if !p.Emit(events.Event{Kind: events.RingEmpty, Tag: "hot"}) {
		t.Fatal("no event after the interval")
	}
	if p.Emit(events.Event{Kind: events.RingEmpty, Tag: "hot"}) {
		t.Fatal("more than the refill")
	}
	last := s.evs[len(s.evs)-1]
	if last.Tag != "hot" || last.Kind != events.RingEmpty || last.Suppressed != 7 {
		t.Fatalf("last event %+v, want 7 suppressed reported", last)
	}
	counts := p.Counts()
	want := []events.Count{{Kind: events.RingEmpty, Published: 5, Suppressed: 8}, {Kind: events.StoreError, Published: 1}}
	if len(counts) != 2 || counts[0] != want[0] || counts[1] != want[1] {
		t.Fatalf("counts %+v, want %+v", counts, want)
	}
}

func TestMaxKeys(t *testing.T) {
	var s sink
	c := clock.NewFake(time.Unix(1000, 0))
	p := events.New(events.Config{Publish: s.publish, Clock: c, Burst: 1, MaxKeys: 2})
	for _, tag := range []string{"a", "b", "c", "a"} {
		c.Advance(time.Millisecond)
		if !p.Emit(events.Event{Kind: events.RingEmpty, Tag: tag}) {
			t.Fatalf("tag %s limited", tag) // a was forgotten when c came: a fresh budget
		}
	}
}

func TestPublishError(t *testing.T) {
	s := sink{err: errors.New("closed")}
	p := events.New(events.Config{Publish: s.publish})
	if p.Emit(events.Event{Kind: events.NodeDown}) {
		t.Fatal("reported published on a failing connection")
	}
	var nilP *events.Publisher
	if nilP.Emit(events.Event{Kind: events.NodeUp}) || nilP.Counts() != nil {
		t.Fatal("a nil Publisher did something")
	}
}

func TestConcurrentEmit(t *testing.T) {
	var s sink
	p := events.New(events.Config{Publish: s.publish, Burst: 1000})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				p.Emit(events.Event{Kind: events.SegmentLoaded, Tag: string(rune('a' + g)), Fields: map[string]any{"i": i}})
			}
		}()
	}
	wg.Wait()
	var total uint64
	for _, c := range p.Counts() {
		total += c.Published + c.Suppressed
	}
	if total != 800 {
		t.Fatalf("counted %d events, want 800", total)
	}
}
