package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"

	"github.com/leafmq/leafmq/client"
	"github.com/leafmq/leafmq/wire"
)

// leafctl next TAG: ids of a tag.

// nextCmd is leafctl next.
type nextCmd struct{}

func (nextCmd) Name() string { return "next" }

func (nextCmd) Synopsis() []synopsisLine {
	return []synopsisLine{{"next TAG [-n N] [--json] [--mono]", "take N ids (default 1) of TAG; --mono: of a monotonic tag (leaf.mono.TAG)"}}
}

func (nextCmd) Run(c *cli, args []string) error {
	fs := flag.NewFlagSet("next", flag.ContinueOnError)
	n := fs.Int("n", 1, "how many ids")
	asJSON := fs.Bool("json", false, "print JSON")
	monoTag := fs.Bool("mono", false, "a monotonic tag (leaf.mono.TAG): strictly increasing ids, asked again through a leader's switch-over")
	pos, err := c.parse(fs, args, 1)
	if err != nil {
		return err
	}
	if *n < 1 {
		return fmt.Errorf("%w: -n %d must be at least 1", errUsage, *n)
	}
	if _, err := wire.ParseTag(pos[0]); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return c.takeIDs(*n, *asJSON, func(ctx context.Context, cl *client.Client, n int) ([]int64, error) {
		if *monoTag {
			return cl.MonoN(ctx, pos[0], n)
		}
		return cl.NextN(ctx, pos[0], n)
	})
}

// takeIDs prints n ids that take gets through a Go client without a local
// cache, which asks again within --timeout while no node can answer (a
// monotonic tag between leaders, a node starting). The ids come and go out
// in chunks of at most wire.DefaultMaxBatch, each printed before the next is
// asked for: memory stays the same for any n, and `-n 2000000000 | head`
// ends as soon as head has read enough.
func (c *cli) takeIDs(n int, asJSON bool, take func(ctx context.Context, cl *client.Client, n int) ([]int64, error), opts ...client.Option) error {
	nc, err := c.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	cl, err := client.New(nc, append([]client.Option{client.WithoutPrefetch(), client.WithTimeout(c.timeout), client.WithMaxWait(c.timeout)}, opts...)...)
	if errors.Is(err, client.ErrBadOption) {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if err != nil {
		return err
	}
	defer cl.Close()
	w := idWriter{w: bufio.NewWriter(c.stdout), json: asJSON}
	for done := 0; done < n; {
		ids, err := take(context.Background(), cl, min(n-done, wire.DefaultMaxBatch))
		if err == nil {
			err = w.write(ids)
		}
		if err != nil {
			// The ids printed are handed out: they stay readable (a closed
			// JSON array), and the error says how many there are.
			if done > 0 {
				_ = w.close()
				return fmt.Errorf("%d of %d ids printed, then: %w", done, n, err)
			}
			return err
		}
		done += len(ids)
	}
	return w.close()
}

// idWriter prints ids one per line, or as the elements of one JSON array
// laid out as writeJSON lays it out.
type idWriter struct {
	w     *bufio.Writer
	json  bool
	wrote bool // an id (JSON: the array's opening) is out
	buf   []byte
}

// write prints ids and flushes them.
func (w *idWriter) write(ids []int64) error {
	b := w.buf[:0]
	for _, id := range ids {
		if w.json {
			if w.wrote {
				b = append(b, ",\n  "...)
			} else {
				b = append(b, "[\n  "...)
			}
		}
		w.wrote = true
		b = strconv.AppendInt(b, id, 10)
		if !w.json {
			b = append(b, '\n')
		}
	}
	w.buf = b
	if _, err := w.w.Write(b); err != nil {
		return err
	}
	return w.w.Flush()
}

// close ends the JSON array (an empty one when no id was printed).
func (w *idWriter) close() error {
	if w.json {
		if w.wrote {
			_, _ = w.w.WriteString("\n]\n")
		} else {
			_, _ = w.w.WriteString("[]\n")
		}
	}
	return w.w.Flush()
}
