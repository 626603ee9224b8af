package events_test

import (
	"fmt"
	"time"

	"github.com/leafmq/leafmq/events"
	"github.com/leafmq/leafmq/internal/clock"
)

func ExamplePublisher() {
	at := time.Date(2026, 11, 22, 1, 2, 3, 0, time.UTC)
	p := events.New(events.Config{
		Node:    "leafd-a",
		Publish: func(subject string, data []byte) error { fmt.Printf("%s %s\n", subject, data); return nil },
		Clock:   clock.NewFake(at),
	})
	p.Emit(events.Event{Kind: events.SegmentStep, Tag: "orders", Message: "step of orders changed from 2000 to 4000",
		Fields: map[string]any{"step": 4000, "prev_step": 2000, "reason": "dynamic"}})
	// Output:
	// leaf.events.segment.step {"kind":"segment.step","node":"leafd-a","time":"2026-11-22T01:02:03Z","level":"info","tag":"orders","message":"step of orders changed from 2000 to 4000","fields":{"prev_step":2000,"reason":"dynamic","step":4000}}
}
