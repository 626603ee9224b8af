package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

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
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	if *n < 1 {
		return fmt.Errorf("%w: -n %d must be at least 1", errUsage, *n)
	}
	if _, err := wire.ParseTag(pos[0]); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return c.takeIDs(*asJSON, func(ctx context.Context, cl *client.Client) ([]int64, error) {
		if *monoTag {
			return cl.MonoN(ctx, pos[0], *n)
		}
		return cl.NextN(ctx, pos[0], *n)
	})
}

// takeIDs prints the ids take gets through a Go client without a local
// cache (every id is asked for, in batches of at most 10,000), which asks
// again within --timeout while no node can answer (a monotonic tag between
// leaders, a node starting).
func (c *cli) takeIDs(asJSON bool, take func(context.Context, *client.Client) ([]int64, error), opts ...client.Option) error {
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
	ids, err := take(context.Background(), cl)
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
