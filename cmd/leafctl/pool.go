package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sort"
	"text/tabwriter"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leafmq/leafmq/pool"
	"github.com/leafmq/leafmq/wire"
)

// leafctl pool: batches in each JetStream pool.

// poolRow is one pool subject.
type poolRow struct {
	Subject string `json:"subject"`
	Batches uint64 `json:"batches"`
}

// poolCmd is leafctl pool.
type poolCmd struct{}

func (poolCmd) Name() string { return "pool" }

func (poolCmd) Synopsis() []synopsisLine {
	return []synopsisLine{{"pool [--region NAME] [--json]", "batches in each JetStream pool"}}
}

func (poolCmd) Run(c *cli, args []string) error {
	fs := flag.NewFlagSet("pool", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	region := fs.String("region", "", "the pool of this region (leafd --region): LEAF_POOL_<region>")
	if _, err := c.parse(fs, args, 0); err != nil {
		return err
	}
	scope, err := poolScope(*region)
	if err != nil {
		return err
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
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	st, err := js.Stream(ctx, pool.StreamIn(scope))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("no pool %s: start leafd with --pool TAGS[,snowflake] (with regions, name the region: --region)", pool.StreamIn(scope))
	}
	if err != nil {
		return fmt.Errorf("pool stream: %w", err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(pool.PrefixIn(scope)+">"))
	if err != nil {
		return fmt.Errorf("pool stream: %w", err)
	}
	rows := []poolRow{}
	for s, n := range info.State.Subjects {
		rows = append(rows, poolRow{Subject: s, Batches: n})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Subject < rows[j].Subject })
	if *asJSON {
		return writeJSON(c, rows)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "SUBJECT\tBATCHES (of %d)\n", info.Config.MaxMsgsPerSubject)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\n", r.Subject, r.Batches)
	}
	return tw.Flush()
}

// poolScope is the scope of --region: "" for none.
func poolScope(region string) (wire.Scope, error) {
	if region == "" {
		return "", nil
	}
	if err := wire.CheckRegion(region); err != nil {
		return "", fmt.Errorf("%w: --region: %v", errUsage, err)
	}
	return wire.Scope(region), nil
}
