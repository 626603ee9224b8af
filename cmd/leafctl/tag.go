package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/leafmq/leafmq/client/ask"
	"github.com/leafmq/leafmq/wire"
)

// leafctl tag list|create|set-step|set-max|restart|decode: the admin
// subjects of the tag table.

// tagCmd is leafctl tag.
type tagCmd struct{}

func (tagCmd) Name() string { return "tag" }

func (tagCmd) Synopsis() []synopsisLine {
	return []synopsisLine{{"tag list [--json]", "list every tag with its mode, max_id and step"}, {"tag create TAG [--step S] [--max-id M] [--desc D] [--mode segment|mono|opaque [--width W]]", "create a tag; its mode is fixed for its life"}, {"tag set-step TAG STEP", "change a tag's configured step"}, {"tag set-max TAG MAX", "raise a tag's max_id (never lowers it)"}, {"tag restart TAG --floor N", "start a (deleted) tag over at max_id N; refused below any max_id the store remembers"}, {"tag decode TAG ID", "an opaque id's sequence number (a node with the tag's key answers)"}}
}

func (tagCmd) Run(c *cli, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: tag needs a subcommand: list, create, set-step, set-max, restart, decode", errUsage)
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		return helpError{flag.NewFlagSet("tag", flag.ContinueOnError)}
	}
	fs := flag.NewFlagSet("tag "+args[0], flag.ContinueOnError)
	fs.StringVar(&c.region, "region", "", "with regions: the region whose store the command acts on (its nodes answer, wherever leafctl is connected); default the nearest node's")
	var req wire.AdminRequest
	var subject string
	var pos []string
	var err error
	asJSON := false
	switch args[0] {
	case "list":
		fs.BoolVar(&asJSON, "json", false, "print JSON")
		if _, err = c.parse(fs, args[1:], 0); err != nil {
			return err
		}
		return c.tagList(asJSON)
	case "create":
		fs.IntVar(&req.Step, "step", 0, "the tag's step: ids per range (default 2000)")
		fs.Int64Var(&req.MaxID, "max-id", 0, "the tag's first max_id: its first id (default 1)")
		fs.StringVar(&req.Description, "desc", "", "description of the tag")
		fs.StringVar(&req.Mode, "mode", "segment", "segment (increasing per node), mono (strictly increasing, on leaf.mono.TAG) or opaque (unguessable); fixed for the tag's life")
		fs.IntVar(&req.Width, "width", 0, "bits of an opaque tag's ids, 20-63 (default 53: exact in JavaScript); fixed for the tag's life")
		fs.Func("undeployed-regions", "with regions: region ids, comma-separated, that have no nodes and no store yet: a --mode mono create does not wait for their answer", func(v string) error {
			for f := range strings.SplitSeq(v, ",") {
				id, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil || id < 0 {
					return fmt.Errorf("region id %q is not a number >= 0", f)
				}
				req.Undeployed = append(req.Undeployed, id)
			}
			return nil
		})
		if pos, err = c.parse(fs, args[1:], 1); err != nil {
			return err
		}
		if req.Width != 0 && req.Mode != "opaque" {
			return fmt.Errorf("%w: --width is for --mode opaque", errUsage)
		}
		if req.Mode == "segment" {
			req.Mode = ""
		}
		subject = wire.TagCreateSubject
	case "decode":
		if pos, err = c.parse(fs, args[1:], 2); err != nil {
			return err
		}
		if req.ID, err = strconv.ParseInt(pos[1], 10, 64); err != nil {
			return fmt.Errorf("%w: id %q is not a number", errUsage, pos[1])
		}
		req.Tag = pos[0]
		var d wire.TagDecoded
		if err := c.admin(wire.TagDecodeSubject, req, &d); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "%s id %d is sequence number %d\n", d.Tag, d.ID, d.Sequence)
		return nil
	case "set-step":
		if pos, err = c.parse(fs, args[1:], 2); err != nil {
			return err
		}
		if req.Step, err = strconv.Atoi(pos[1]); err != nil {
			return fmt.Errorf("%w: step %q is not a number", errUsage, pos[1])
		}
		subject = wire.TagStepSubject
	case "set-max":
		if pos, err = c.parse(fs, args[1:], 2); err != nil {
			return err
		}
		if req.MaxID, err = strconv.ParseInt(pos[1], 10, 64); err != nil {
			return fmt.Errorf("%w: max %q is not a number", errUsage, pos[1])
		}
		subject = wire.TagMaxSubject
	case "restart":
		fs.Int64Var(&req.Floor, "floor", 0, "the first id the tag hands out again (required; refused below any max_id the store or a live node remembers)")
		if pos, err = c.parse(fs, args[1:], 1); err != nil {
			return err
		}
		if req.Floor < 1 {
			return fmt.Errorf("%w: tag restart needs --floor N (N >= 1): the first id the tag hands out again", errUsage)
		}
		subject = wire.TagRestartSubject
	default:
		return fmt.Errorf("%w: unknown tag subcommand %q", errUsage, args[0])
	}
	req.Tag = pos[0]
	var row wire.TagRow
	if err := c.admin(subject, req, &row); err != nil {
		return err
	}
	return printRows(c.stdout, []wire.TagRow{row})
}

func (c *cli) tagList(asJSON bool) error {
	var rows []wire.TagRow
	if err := c.admin(wire.TagsSubject, nil, &rows); err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	return printRows(c.stdout, rows)
}

func (c *cli) admin(subject string, req any, out any) error {
	if c.region != "" {
		if err := wire.CheckRegion(c.region); err != nil {
			return fmt.Errorf("%w: --region: %v", errUsage, err)
		}
		subject = wire.Scope(c.region).Subject(subject)
	}
	nc, err := c.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(c.ctx(), c.timeout)
	defer cancel()
	return ask.Admin(ctx, nc, subject, req, out)
}

func printRows(w io.Writer, rows []wire.TagRow) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TAG\tMODE\tMAX_ID\tSTEP\tUPDATED\tDESCRIPTION")
	for _, r := range rows {
		updated := "-"
		if !r.UpdateTime.IsZero() {
			updated = r.UpdateTime.Local().Format(time.DateTime)
		}
		mode := r.Mode
		switch {
		case mode == "":
			mode = "segment"
		case r.Width > 0:
			mode = fmt.Sprintf("%s/%d", mode, r.Width)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", r.Tag, mode, r.MaxID, r.Step, updated, r.Description)
	}
	return tw.Flush()
}
