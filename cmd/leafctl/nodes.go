package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leafmq/leafmq/client/ask"
	"github.com/leafmq/leafmq/wire"
)

// gather collects the replies to a request on subject within window.
func gather(nc *nats.Conn, subject string, window time.Duration) ([]*nats.Msg, error) {
	var out []*nats.Msg
	err := ask.Gather(context.Background(), nc, subject, window, func(m *nats.Msg) { out = append(out, m) })
	return out, err
}

// nodeRow is one micro service instance of leafmq.
type nodeRow struct {
	Node    string `json:"node"`
	ID      string `json:"id"`
	Service string `json:"service"` // the micro service: leaf-segment or leaf-snowflake
	// Engine is what the instance answers: "segment" or "snowflake" (each
	// a queue group membership of its own, left by a slow node), or
	// "admin" (the node's admin subjects, and segment ids too when the
	// node keeps no separate segment membership).
	Engine   string        `json:"engine"`
	Version  string        `json:"version"`
	Started  time.Time     `json:"started"`
	Requests int           `json:"requests"`
	Errors   int           `json:"errors"`
	AvgTime  time.Duration `json:"average_processing_time"`
	RTT      time.Duration `json:"rtt"`
}

// nodesCmd is leafctl nodes.
type nodesCmd struct{}

func (nodesCmd) Name() string { return "nodes" }

func (nodesCmd) Synopsis() []synopsisLine {
	return []synopsisLine{{"nodes [--json] [--wait D]", "every leafd's micro services: requests, errors, times"}}
}

func (nodesCmd) Run(c *cli, args []string) error {
	fs := flag.NewFlagSet("nodes", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	window := fs.Duration("wait", 500*time.Millisecond, "how long to wait for the nodes' answers")
	if _, err := c.parse(fs, args, 0); err != nil {
		return err
	}
	nc, err := c.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	start := time.Now()
	pings, err := gatherServices(nc, micro.PingVerb, *window)
	if err != nil {
		return err
	}
	rtt := map[string]time.Duration{}
	for _, m := range pings {
		var p micro.Ping
		if json.Unmarshal(m.Data, &p) == nil {
			rtt[p.ID] = time.Since(start) // upper bound: arrival within the window
		}
	}
	stats, err := gatherServices(nc, micro.StatsVerb, *window)
	if err != nil {
		return err
	}
	infos, err := gatherServices(nc, micro.InfoVerb, *window)
	if err != nil {
		return err
	}
	meta := map[string]map[string]string{}
	for _, m := range infos {
		var in micro.Info
		if json.Unmarshal(m.Data, &in) == nil {
			meta[in.ID] = in.Metadata
		}
	}
	var rows []nodeRow
	for _, m := range stats {
		var st micro.Stats
		if json.Unmarshal(m.Data, &st) != nil {
			continue
		}
		r := nodeRow{ID: st.ID, Service: st.Name, Version: st.Version, Started: st.Started, RTT: rtt[st.ID], Engine: "admin", Node: "?"}
		if md := meta[st.ID]; md != nil {
			r.Node = md["node"]
			if md["engine"] != "" {
				r.Engine = md["engine"]
			}
		}
		var total time.Duration
		for _, e := range st.Endpoints {
			r.Requests += e.NumRequests
			r.Errors += e.NumErrors
			total += e.ProcessingTime
		}
		if r.Requests > 0 {
			r.AvgTime = total / time.Duration(r.Requests)
		}
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Node != rows[j].Node {
			return rows[i].Node < rows[j].Node
		}
		if rows[i].Service != rows[j].Service {
			return rows[i].Service < rows[j].Service
		}
		return rows[i].Engine < rows[j].Engine
	})
	if *asJSON {
		return writeJSON(c, rows)
	}
	if len(rows) == 0 {
		return errors.New("no leafd answered (is one running?)")
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSERVICE\tENGINE\tVERSION\tUP\tREQUESTS\tERRORS\tAVG TIME\tID")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", r.Node, r.Service, r.Engine, r.Version,
			time.Since(r.Started).Round(time.Second), r.Requests, r.Errors, r.AvgTime.Round(time.Microsecond), r.ID)
	}
	return tw.Flush()
}

func writeJSON(c *cli, v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// gatherServices gathers the replies of every node's micro services
// (wire.ServiceNames) to $SRV.<verb>.<name>.
func gatherServices(nc *nats.Conn, verb micro.Verb, window time.Duration) ([]*nats.Msg, error) {
	var all []*nats.Msg
	for _, name := range wire.ServiceNames {
		subject, err := wire.ServiceSubject(verb, name)
		if err != nil {
			return nil, err
		}
		msgs, err := gather(nc, subject, window)
		if err != nil {
			return nil, err
		}
		all = append(all, msgs...)
	}
	return all, nil
}
