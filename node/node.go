package node

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leafmq/leafmq/config"
	"github.com/leafmq/leafmq/events"
	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/datadir"
	"github.com/leafmq/leafmq/internal/natsconn"
	"github.com/leafmq/leafmq/internal/progress"
	"github.com/leafmq/leafmq/metrics"
	"github.com/leafmq/leafmq/mono"
	"github.com/leafmq/leafmq/opaque"
	"github.com/leafmq/leafmq/peers"
	"github.com/leafmq/leafmq/pool"
	"github.com/leafmq/leafmq/producer"
	"github.com/leafmq/leafmq/region"
	"github.com/leafmq/leafmq/responder"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/snownode"
)

// timeouts used when building the node.
const (
	startTimeout = 30 * time.Second
	stopTimeout  = 10 * time.Second
)

// Node is one running leafd.
type Node struct {
	cfg    config.Config
	log    *slog.Logger
	clock  clock.Clock       // config.Config.Clock
	start  progress.Starting // when Start began, and what it waits for, on /readyz
	met    *metrics.Live     // request metrics (Node.collector reads the rest)
	events *events.Publisher
	life   life
	conn   *natsconn.Conn // the node's NATS, and its round trip
	// peers is this node among the live nodes: its membership, the
	// floors it hears and answers, the checks against the others.
	peers *peers.Set
	web   web // HTTP: /healthz, /metrics, the API once started
	seg   segments
	serve serving
}

// life is what holds the node's data directory and stops it.
type life struct {
	lock   *datadir.Lock // DataDir/leafd.lock, held while the node runs
	stops  stops         // what Close runs: pushed by Start, one subsystem at a time
	mu     sync.Mutex
	closed bool // by Close, under mu
	// failed delivers why the node must stop (fail); region checks the
	// region count, and the region id with --regions, while the node runs.
	failed    chan error
	stopStart context.CancelCauseFunc
	region    *region.Guard
}

// segments is what serves segment ids.
type segments struct {
	store  segment.Store
	health segment.LoadHealth // the tags whose loads fail now (onLoad)
	steps  *segment.StepFile
	floors segment.Floors // the engine's, shared with the monotonic leaders
	opaque *opaque.Key    // of opaque tags; nil: refused
	engine *segment.Engine
	prod   *producer.Producer
	pool   *pool.Filler
	mono   atomic.Pointer[mono.Server] // leaders of the monotonic tags; nil until started
}

// serving is what answers on NATS besides the segments.
type serving struct {
	sf      *snownode.Server // snowflake ids; nil with --worker-registry off
	resp    *responder.Responder
	yield   *responder.SlowYield     // a slow node out of the queue groups while a faster one serves
	segKeep *responder.SegmentKeeper // yield applied to segment; nil without --max-nats-rtt
	// probe sends the self-probes; set once before the HTTP API is served.
	probe *responder.Prober
}

// web is the node's HTTP server.
type web struct {
	srv *http.Server
	ln  net.Listener
	wg  sync.WaitGroup
	off sync.Once
	api atomic.Pointer[http.Handler] // the HTTP API, once started
	reg *prometheus.Registry         // /metrics
}

// boot is the node while Start runs, with what one phase hands the next.
type boot struct {
	*Node
	instance string // this process among the live nodes (peers.NewInstance)
	prev     string // the dead instance that ran on the data directory, or ""
	// The floor file's floors and modes, nil with floors kept in memory.
	own      func() map[string]int64
	ownModes func() map[string]string
}

// ClientURL is the NATS URL the node is connected to.
func (n *Node) ClientURL() string { return n.conn.ClientURL() }

// HTTPAddr is the address the HTTP port listens on, or "".
func (n *Node) HTTPAddr() string {
	if n.web.ln == nil {
		return ""
	}
	return n.web.ln.Addr().String()
}

// Server is the embedded nats-server, or nil.
func (n *Node) Server() *server.Server { return n.conn.Server() }

// Name is the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// SegmentFloor is the highest range end this node received for tag (what
// it answers on leaf.admin.floor.<tag>), 0 if none.
func (n *Node) SegmentFloor(tag string) int64 { return n.seg.engine.Floor(tag) }

func (n *Node) snowflakeWorker() int64 {
	if src := n.serve.sf.Source(); src != nil {
		return src.Worker()
	}
	return -1
}

// opaquePerm is the engine's Config.Opaque: an opaque tag's permutation
// under this node's key, refused when the tag was created with another
// key (its ids would be another permutation's, which could repeat ids).
func (n *Node) opaquePerm(tag string, m segment.Mode) (segment.Permuter, error) {
	switch {
	case n.seg.opaque == nil:
		return nil, fmt.Errorf("node %s has no opaque key (--opaque-key-file or LEAF_OPAQUE_KEY); the tag was created with key %s", n.cfg.Name, m.KeyID)
	}
	return n.seg.opaque.ForMode(tag, m.Width, m.KeyID, int64(n.cfg.Region.Count), int64(n.cfg.Region.ID)) // the region's share
}
