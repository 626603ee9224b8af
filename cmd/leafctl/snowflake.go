package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/leafmq/leafmq/client"
)

// snowflakeCmd is leafctl snowflake.
type snowflakeCmd struct{}

func (snowflakeCmd) Name() string { return "snowflake" }

func (snowflakeCmd) Synopsis() []synopsisLine {
	return []synopsisLine{{"snowflake [-n N] [--key K] [--json]", "take N snowflake ids (leaf.snowflake[.K])"}}
}

func (snowflakeCmd) Run(c *cli, args []string) error {
	fs := flag.NewFlagSet("snowflake", flag.ContinueOnError)
	n := fs.Int("n", 1, "how many ids")
	key := fs.String("key", "", "ask leaf.snowflake.KEY (a client's shard key) instead of leaf.snowflake")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := c.parse(fs, args, 0); err != nil {
		return err
	}
	if *n < 1 {
		return fmt.Errorf("%w: -n %d must be at least 1", errUsage, *n)
	}
	var opts []client.Option
	if *key != "" {
		opts = append(opts, client.WithSnowflakeKey(*key))
	}
	return c.takeIDs(*n, *asJSON, func(ctx context.Context, cl *client.Client, n int) ([]int64, error) {
		return cl.SnowflakeN(ctx, n)
	}, opts...)
}
