package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/pool"
)

// leafctl batch TAG|snowflake: one ready-made batch from a pool.

// batch takes one batch of a pool: TAG or snowflake.
// batchCmd is leafctl batch.
type batchCmd struct{}

func (batchCmd) Name() string { return "batch" }

func (batchCmd) Synopsis() []synopsisLine {
	return []synopsisLine{{"batch TAG|snowflake [--region NAME] [--wait D] [--json]", "take one ready-made batch from the JetStream pool"}}
}

func (batchCmd) Run(c *cli, args []string) error {
	fs := flag.NewFlagSet("batch", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	wait := fs.Duration("wait", 2*time.Second, "how long to wait for a batch")
	region := fs.String("region", "", "from the pool of this region (leafd --region)")
	pos, err := c.parse(fs, args, 1)
	if err != nil {
		return err
	}
	scope, err := poolScope(*region)
	if err != nil {
		return err
	}
	subject := pool.SnowflakeSubjectIn(scope)
	if pos[0] != "snowflake" {
		subject = pool.SegmentSubjectIn(scope, pos[0])
	}
	nc, err := c.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *wait+c.timeout)
	defer cancel()
	ids, err := pool.Take(ctx, js, subject, *wait)
	if errors.Is(err, pool.ErrInvalid) {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(c, ids)
	}
	b := make([]byte, 0, len(ids)*20)
	for _, id := range ids {
		b = strconv.AppendInt(b, id, 10)
		b = append(b, '\n')
	}
	_, err = c.stdout.Write(b)
	return err
}
