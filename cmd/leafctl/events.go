package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/events"
)

// kinds is a repeatable --kind flag.
type kinds []string

func (k *kinds) String() string     { return strings.Join(*k, ",") }
func (k *kinds) Set(v string) error { *k = append(*k, strings.Split(v, ",")...); return nil }

// eventSubject is the subscription of a --kind value: an area (segment)
// is every kind of it, a kind (segment.loaded) just that one.
func eventSubject(kind string) (string, error) {
	parts := strings.Split(kind, ".")
	if len(parts) > 2 {
		return "", fmt.Errorf("%w: --kind %q: want an area like segment or a kind like segment.loaded", errUsage, kind)
	}
	for _, p := range parts {
		if p == "" || strings.ContainsAny(p, " *>\t") {
			return "", fmt.Errorf("%w: --kind %q: want an area like segment or a kind like segment.loaded", errUsage, kind)
		}
	}
	if len(parts) == 1 {
		return events.Prefix + kind + ".>", nil
	}
	return events.Subject(kind), nil
}

// eventsCmd is leafctl events.
type eventsCmd struct{}

func (eventsCmd) Name() string { return "events" }

func (eventsCmd) Synopsis() []synopsisLine {
	return []synopsisLine{{"events [--kind K]... [--tag T] [--json] [--count N] [--for D]", "tail monitoring events (K: an area like segment, or a kind like store.error)"}}
}

func (eventsCmd) Run(c *cli, args []string) error {
	fs := flag.NewFlagSet("events", flag.ContinueOnError)
	var ks kinds
	fs.Var(&ks, "kind", "an event kind (store.error) or area (segment); repeat for more; default all")
	tag := fs.String("tag", "", "only events of this tag")
	asJSON := fs.Bool("json", false, "print each event as JSON")
	count := fs.Int("count", 0, "stop after this many events (0: no limit)")
	dur := fs.Duration("for", 0, "stop after this long (0: until Ctrl-C)")
	if _, err := c.parse(fs, args, 0); err != nil {
		return err
	}
	if *count < 0 || *dur < 0 {
		return fmt.Errorf("%w: --count and --for must not be negative", errUsage)
	}
	subjects := []string{events.Prefix + ">"}
	if len(ks) > 0 {
		subjects = subjects[:0]
		for _, k := range ks {
			s, err := eventSubject(k)
			if err != nil {
				return err
			}
			subjects = append(subjects, s)
		}
		sort.Strings(subjects)
	}
	nc, err := c.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	ch := make(chan *nats.Msg, 1024)
	for _, s := range subjects {
		if _, err := nc.ChanSubscribe(s, ch); err != nil {
			return fmt.Errorf("subscribe %s: %w", s, err)
		}
	}
	if err := nc.FlushTimeout(c.timeout); err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *dur > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *dur)
		defer cancel()
	}
	if c.ready != nil {
		c.ready()
	}
	seen := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-ch:
			var ev events.Event
			if err := json.Unmarshal(m.Data, &ev); err != nil {
				fmt.Fprintf(c.stderr, "leafctl: %s: not an event: %v\n", m.Subject, err)
				continue
			}
			if *tag != "" && ev.Tag != *tag {
				continue
			}
			if *asJSON {
				fmt.Fprintf(c.stdout, "%s\n", m.Data)
			} else {
				fmt.Fprintln(c.stdout, formatEvent(ev))
			}
			seen++
			if *count > 0 && seen >= *count {
				return nil
			}
		}
	}
}

// formatEvent is one line: time, level, node, kind, tag, message, fields.
func formatEvent(ev events.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-5s %s %s", ev.Time.Local().Format(time.TimeOnly+".000"), ev.Level, ev.Node, ev.Kind)
	if ev.Tag != "" {
		fmt.Fprintf(&b, " [%s]", ev.Tag)
	}
	fmt.Fprintf(&b, " %s", ev.Message)
	if ev.Suppressed > 0 {
		fmt.Fprintf(&b, " (+%d suppressed)", ev.Suppressed)
	}
	return b.String()
}
