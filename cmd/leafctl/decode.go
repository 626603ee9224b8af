package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/wire"
)

// leafctl decode ID: a snowflake id's time, worker and sequence.

// decodeCmd is leafctl decode.
type decodeCmd struct{}

func (decodeCmd) Name() string { return "decode" }

func (decodeCmd) Synopsis() []synopsisLine {
	return []synopsisLine{{"decode ID [--json] [--local [--layout L] [--unit U] [--epoch E] [--regions N]]", "split a snowflake id into time, worker (region) and sequence (by the nodes' layout, or --local)"}}
}

func (decodeCmd) Run(c *cli, args []string) error {
	fs := flag.NewFlagSet("decode", flag.ContinueOnError)
	local := fs.Bool("local", false, "decode here with --layout, --unit and --epoch instead of asking a node")
	layout := fs.String("layout", "leaf", "with --local: leaf, leaf-dc, uidgen, TIME+WORKER+SEQ or TIME+REGION+WORKER+SEQ bits")
	regions := fs.Int("regions", 0, "with --local: the deployment's --regions (region bits of a layout without them)")
	unit := fs.String("unit", "", "with --local: ms or s (default the layout's)")
	epoch := fs.String("epoch", "", "with --local: the epoch (default the layout's)")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := c.parse(fs, args, 1)
	if err != nil {
		return err
	}
	id, err := strconv.ParseInt(strings.TrimSpace(pos[0]), 10, 64)
	if err != nil || id < 0 {
		return fmt.Errorf("%w: %q is not a snowflake id (a non-negative decimal int64)", errUsage, pos[0])
	}
	var d wire.Decoded
	if *local {
		l, err := snowflake.ParseLayout(*layout, *unit, *epoch)
		if err == nil && *regions > 0 {
			l, err = l.ForRegions(*regions)
		}
		if err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		d = snowflake.DecodeReply(l, id)
	} else {
		nc, err := c.connect()
		if err != nil {
			return err
		}
		defer nc.Close()
		msg := nats.NewMsg(wire.DecodeSubject)
		msg.Data = []byte(strconv.FormatInt(id, 10))
		reply, err := c.request(nc, msg)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(reply.Data, &d); err != nil {
			return fmt.Errorf("decode reply: %w", err)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(d)
	}
	worker := strconv.FormatInt(d.Worker, 10)
	if d.Region != nil && d.RegionWorker != nil {
		worker += fmt.Sprintf(" (region %d, worker %d)", *d.Region, *d.RegionWorker)
	}
	_, err = fmt.Fprintf(c.stdout, "id         %d\ntime       %s\ntimestamp  %d\nworker     %s\nsequence   %d\nlayout     %s\n",
		d.ID, d.Time, d.Timestamp, worker, d.Sequence, d.Layout)
	return err
}
