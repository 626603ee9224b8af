package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/leafmq/leafmq/client"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/wire"
)

// leafctl next TAG: ids of a tag.

// nextCmd is leafctl next.
type nextCmd struct{}

func (nextCmd) Name() string { return "next" }

func (nextCmd) Synopsis() []synopsisLine {
	return []synopsisLine{{"next TAG [-n N] [--binary] [--json] [--mono]", "take N ids (default 1) of TAG; --mono: of a monotonic tag (leaf.mono.TAG)"}}
}

func (nextCmd) Run(c *cli, args []string) error {
	fs := flag.NewFlagSet("next", flag.ContinueOnError)
	n := fs.Int("n", 1, "how many ids")
	bin := fs.Bool("binary", false, "ask for binary replies (Leaf-Encoding: binary)")
	asJSON := fs.Bool("json", false, "print JSON")
	monoTag := fs.Bool("mono", false, "a monotonic tag (leaf.mono.TAG): strictly increasing ids, asked again through a leader's switch-over")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	if *n < 1 {
		return fmt.Errorf("%w: -n %d must be at least 1", errUsage, *n)
	}
	if err := segment.CheckTag(pos[0]); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *monoTag {
		return c.monoIDs(pos[0], *n, *asJSON)
	}
	return c.takeIDs(wire.SegmentPrefix+pos[0], *n, *bin, *asJSON)
}

// monoIDs takes n ids of a monotonic tag through the Go client, which asks
// again while the tag has no leader (within --timeout).
func (c *cli) monoIDs(tag string, n int, asJSON bool) error {
	nc, err := c.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	cl, err := client.New(nc, client.WithMaxWait(c.timeout))
	if err != nil {
		return err
	}
	defer cl.Close()
	ids, err := cl.MonoN(context.Background(), tag, n)
	if err != nil {
		return err
	}
	return c.printIDs(ids, asJSON)
}

// takeIDs asks subject for n ids and prints them, one per line (or as a
// JSON array).
func (c *cli) takeIDs(subject string, n int, bin, asJSON bool) error {
	nc, err := c.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	msg := wire.NewRequest(subject, n, bin)
	reply, err := c.request(nc, msg)
	if err != nil {
		return err
	}
	ids, err := wire.DecodeIDs(nil, reply.Data, bin)
	if err != nil {
		return err
	}
	return c.printIDs(ids, asJSON)
}

// printIDs prints ids one per line, or as a JSON array.
func (c *cli) printIDs(ids []int64, asJSON bool) error {
	if asJSON {
		return writeJSON(c, ids)
	}
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(strconv.FormatInt(id, 10))
		b.WriteByte('\n')
	}
	_, err := io.WriteString(c.stdout, b.String())
	return err
}
