package main

import (
	"flag"
	"fmt"

	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/wire"
)

// snowflakeCmd is leafctl snowflake.
type snowflakeCmd struct{}

func (snowflakeCmd) Name() string { return "snowflake" }

func (snowflakeCmd) Synopsis() []synopsisLine {
	return []synopsisLine{{"snowflake [-n N] [--binary] [--key K] [--json]", "take N snowflake ids (leaf.snowflake[.K])"}}
}

func (snowflakeCmd) Run(c *cli, args []string) error {
	fs := flag.NewFlagSet("snowflake", flag.ContinueOnError)
	n := fs.Int("n", 1, "how many ids")
	bin := fs.Bool("binary", false, "ask for binary replies (Leaf-Encoding: binary)")
	key := fs.String("key", "", "ask leaf.snowflake.KEY (a client's shard key) instead of leaf.snowflake")
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if *n < 1 {
		return fmt.Errorf("%w: -n %d must be at least 1", errUsage, *n)
	}
	subject := wire.SnowflakeSubject
	if *key != "" {
		if err := segment.CheckTag(*key); err != nil || *key == "decode" {
			return fmt.Errorf("%w: --key %q must be a tag-like token other than decode", errUsage, *key)
		}
		subject = wire.SnowflakePrefix + *key
	}
	return c.takeIDs(subject, *n, *bin, *asJSON)
}
