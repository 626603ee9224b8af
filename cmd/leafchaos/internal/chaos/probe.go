package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/wire"
)

// probeEvery is how often the prober asks each node.
const probeEvery = time.Second

// prober asks each main leafd, one by one, whether it says it serves and
// whether it does: its /readyz, its leaf.admin.status answer over NATS,
// one segment and one snowflake id from its own engines (Leaf's HTTP API),
// and — from every nats-server's /connz — the queue subscriptions its
// connections hold. A request on a queue subject goes to one subscription
// of the group, so a node holding a subscription that nothing answers
// (one left from before a reconnect, say) swallows a share of the requests
// while it says it is ready: the queue-group load alone cannot say which
// node does it.
type prober struct {
	c      *cluster
	l      *load
	cfg    *Config
	spaces map[string]*idSpace
	http   *http.Client

	mu     sync.Mutex
	rounds map[string][]probeRound // by node name
}

// probeRound is what one node said and did in one round.
type probeRound struct {
	at      int64  // unix ns
	ready   bool   // /readyz answered 200
	status  bool   // answered leaf.admin.status
	joined  bool   // its status: in the snowflake queue group
	seg     string // "" an id; else the failure
	sf      string // "" an id; else the failure
	dupSubs string // queue subscriptions it holds more than once, "" none
}

func newProber(c *cluster, l *load, cfg *Config, spaces map[string]*idSpace) *prober {
	return &prober{c: c, l: l, cfg: cfg, spaces: spaces, rounds: map[string][]probeRound{},
		http: &http.Client{Timeout: cfg.Timeout}}
}

// run probes every probeEvery until ctx ends.
func (p *prober) run(ctx context.Context) {
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		p.round(ctx, p.cfg.Tags[n%len(p.cfg.Tags)])
	}
}

func (p *prober) round(ctx context.Context, tag string) {
	at := time.Now().UnixNano()
	var wg sync.WaitGroup
	var statuses map[string]wire.NodeStatus
	var subs map[string]string
	wg.Add(2)
	go func() { defer wg.Done(); statuses = gatherStatus(p.l.conns[0], p.cfg.Timeout) }()
	go func() { defer wg.Done(); subs = p.dupSubs(ctx) }()
	res := make([]probeRound, len(p.c.leafds))
	for i, l := range p.c.leafds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := probeRound{at: at, ready: ready(ctx, l.http)}
			var id int64
			var err error
			if id, err = p.httpGet(ctx, l.http, "/api/segment/get/"+tag); err == nil {
				p.spaces["segment."+tag].add(time.Now().UnixNano(), []int64{id})
			} else {
				r.seg = err.Error()
			}
			if id, err = p.httpGet(ctx, l.http, "/api/snowflake/get/leafchaos"); err == nil {
				p.spaces["snowflake"].add(time.Now().UnixNano(), []int64{id})
			} else {
				r.sf = err.Error()
			}
			res[i] = r
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return // stopped under way: the questions were cut short by the harness, not unanswered
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, l := range p.c.leafds {
		r := res[i]
		if st, ok := statuses[l.name]; ok {
			r.status = true
			r.joined = st.Snow != nil && st.Snow.Joined
		}
		r.dupSubs = subs[l.name]
		p.rounds[l.name] = append(p.rounds[l.name], r)
	}
}

// httpGet asks a node's Leaf HTTP API for one id.
func (p *prober) httpGet(ctx context.Context, addr, path string) (int64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	resp, err := p.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("no answer: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}
	id, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err == nil && id <= 0 {
		err = fmt.Errorf("id %d", id)
	}
	return id, err
}

// gatherStatus asks leaf.admin.status (every node answers) and collects
// the answers that arrive within wait, by node name.
func gatherStatus(nc *nats.Conn, wait time.Duration) map[string]wire.NodeStatus {
	out := map[string]wire.NodeStatus{}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return out
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(wire.StatusSubject, inbox, nil); err != nil {
		return out
	}
	deadline := time.Now().Add(wait)
	for {
		msg, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			return out
		}
		var st wire.NodeStatus
		if json.Unmarshal(msg.Data, &st) == nil && st.Node != "" {
			out[st.Node] = st
		}
	}
}

// connz is the part of a nats-server's /connz?subs=detail the prober reads.
type connz struct {
	Conns []struct {
		Cid  uint64 `json:"cid"`
		Name string `json:"name"`
		Subs []struct {
			Subject string `json:"subject"`
			Queue   string `json:"qgroup"`
		} `json:"subscriptions_list_detail"`
	} `json:"connections"`
}

// dupSubs reads every nats-server's connections and returns, by client
// name, the queue subscriptions (subject and group) that name holds more
// than once across the cluster. A server that does not answer (killed,
// frozen) is skipped.
func (p *prober) dupSubs(ctx context.Context) map[string]string {
	type key struct{ node, subject, queue string }
	count := map[key][]string{}
	for i, mon := range p.c.natsMon {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+mon+"/connz?subs=detail&limit=4096", nil)
		resp, err := p.http.Do(req)
		if err != nil {
			continue
		}
		var cz connz
		err = json.NewDecoder(resp.Body).Decode(&cz)
		_ = resp.Body.Close()
		if err != nil {
			continue
		}
		for _, cn := range cz.Conns {
			for _, s := range cn.Subs {
				if s.Queue == "" {
					continue
				}
				k := key{cn.Name, s.Subject, s.Queue}
				count[k] = append(count[k], fmt.Sprintf("%s cid %d", p.c.nats[i].name, cn.Cid))
			}
		}
	}
	out := map[string]string{}
	for _, k := range slices.SortedFunc(maps.Keys(count), func(a, b key) int { return strings.Compare(a.subject, b.subject) }) {
		if where := count[k]; len(where) > 1 {
			if out[k.node] != "" {
				out[k.node] += "; "
			}
			out[k.node] += fmt.Sprintf("%s (queue %s) ×%d: %s", k.subject, k.queue, len(where), strings.Join(where, ", "))
		}
	}
	return out
}

// NodeReport is what the prober found of one node. A lie is a round in
// which the node said it serves a subject and did not answer it: ready
// (/readyz 200) with no segment id or no leaf.admin.status answer, in the
// snowflake queue group with no snowflake id, or a queue subscription held
// twice. Lies in a fault's window or its recovery time are counted apart
// from those when every fault had healed; a persistent lie is one seen by
// two rounds in a row, outside every fault.
type NodeReport struct {
	Node        string `json:"node"`
	Rounds      int    `json:"rounds"`
	ReadyRounds int    `json:"ready_rounds"`
	// By check: segment, snowflake, status, dup-subscription.
	LiesInFaults map[string]int `json:"lies_in_faults,omitempty"`
	LiesHealed   map[string]int `json:"lies_healed,omitempty"`
	Persistent   map[string]int `json:"persistent_lies,omitempty"`
	Examples     []string       `json:"examples,omitempty"`
}

// report classifies the rounds: inFault tells whether unix ns t lies in a
// fault's window or its recovery time.
func (p *prober) report(t0 time.Time, inFault func(t int64) bool) []NodeReport {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []NodeReport
	for _, name := range slices.Sorted(maps.Keys(p.rounds)) {
		nr := NodeReport{Node: name, LiesInFaults: map[string]int{}, LiesHealed: map[string]int{}, Persistent: map[string]int{}}
		prev := map[string]bool{} // the check lied in the previous round, outside faults
		for _, r := range p.rounds[name] {
			nr.Rounds++
			if r.ready {
				nr.ReadyRounds++
			}
			lies := map[string]string{}
			if r.ready && r.seg != "" {
				lies["segment"] = r.seg
			}
			if r.ready && !r.status {
				lies["status"] = "no leaf.admin.status answer over NATS"
			}
			if r.joined && r.sf != "" {
				lies["snowflake"] = r.sf
			}
			if r.dupSubs != "" {
				lies["dup-subscription"] = r.dupSubs
			}
			fault := inFault(r.at)
			now := map[string]bool{}
			for check, why := range lies {
				if fault {
					if nr.LiesInFaults[check] == 0 && len(nr.Examples) < 10 {
						nr.Examples = append(nr.Examples, fmt.Sprintf("%.1fs %s (in a fault): %s", time.Unix(0, r.at).Sub(t0).Seconds(), check, firstLine(why)))
					}
					nr.LiesInFaults[check]++
					continue
				}
				nr.LiesHealed[check]++
				now[check] = true
				if prev[check] {
					nr.Persistent[check]++
					if len(nr.Examples) < 10 {
						nr.Examples = append(nr.Examples, fmt.Sprintf("%.1fs %s: %s", time.Unix(0, r.at).Sub(t0).Seconds(), check, firstLine(why)))
					}
				}
			}
			prev = now
		}
		out = append(out, nr)
	}
	return out
}
