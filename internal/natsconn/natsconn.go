package natsconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/natsauth"
)

// ErrConfig marks an error of the Options that no retry mends (Listen's
// port, Auth), unless Options.ErrConfig names the caller's own.
var ErrConfig = errors.New("config")

// errNotConnected is Dial's before Connect.
var errNotConnected = errors.New("natsconn: not connected")

// Options is what a Conn connects to, and how.
type Options struct {
	Name    string // the connection's name (and the embedded server's)
	URL     string // the NATS to join; "": start an embedded server
	Listen  string // the embedded server's client address, host:port; port 0 picks a free port
	DataDir string // the embedded server's JetStream store is DataDir/jetstream
	Auth    natsauth.Config
	Logger  *slog.Logger // the connection's state and the embedded server's log; nil: slog.Default()
	Clock   clock.Clock  // ticks the round-trip meter; nil: the system clock
	// ErrConfig is wrapped by the errors of wrong Options, so that the
	// caller's errors.Is finds its own sentinel; nil: ErrConfig.
	ErrConfig error
}

// Conn is a node's NATS.
type Conn struct {
	opts Options
	log  *slog.Logger
	ns   *server.Server // nil when joining an existing NATS
	nc   *nats.Conn
	// dial connects to NATS as nc did, with extra options; the snowflake
	// endpoints take a connection of their own from it at each join
	// (responder.Config.SnowflakeConn).
	dial func(extra ...nats.Option) (*nats.Conn, error)
	rtt  meters // the round trip to NATS of each connection
}

// New is a Conn with opts, not yet connected (Connect).
func New(opts Options) *Conn {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.Clock = clock.Or(opts.Clock)
	if opts.ErrConfig == nil {
		opts.ErrConfig = ErrConfig
	}
	return &Conn{opts: opts, log: opts.Logger}
}

// connectTimeout bounds one connection's handshake to NATS.
const connectTimeout = 10 * time.Second

// A connection whose server has not answered pingsOut pings sent every
// pingEvery is given up as stale and made again (to another server of a
// cluster): a link that swallows bytes, or a frozen server, is otherwise
// noticed only by nats.go's default pings, after minutes in which the
// node says it is ready and NATS routes requests to it that nobody
// answers. A ping every few seconds costs nothing next to the requests.
// Every 3 s, two unanswered: a stalled server is left 6-9 s after it
// stalled, while a link's round trip may still reach 6 s.
const (
	pingEvery = 3 * time.Second
	pingsOut  = 2
)

// Connect starts the embedded server, unless Options.URL names a NATS to
// join or an earlier try started it, and connects to NATS.
func (c *Conn) Connect() error {
	url := c.opts.URL
	opts := []nats.Option{
		nats.Name(c.opts.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		// The handshake is three trips one way: nats.go's 2 s default
		// leaves a node 0.7 s from NATS unable to connect, or to reconnect
		// once it lost its server.
		nats.Timeout(connectTimeout),
		nats.PingInterval(pingEvery),
		nats.MaxPingsOutstanding(pingsOut),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				c.log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { c.log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted()) }),
	}
	if url == "" && c.ns != nil { // an earlier attempt started the server
		url = c.ns.ClientURL()
		opts = append(opts, nats.InProcessServer(c.ns))
	} else if url == "" {
		host, portStr, _ := net.SplitHostPort(c.opts.Listen)
		port, err := strconv.Atoi(portStr)
		if err != nil {
			return fmt.Errorf("%w: nats-listen port %q", c.opts.ErrConfig, portStr)
		}
		if port == 0 {
			port = server.RANDOM_PORT // as for --http: 0 picks a free port (nats-server reads 0 as 4222)
		}
		ns, err := server.NewServer(&server.Options{
			ServerName: c.opts.Name,
			Host:       host,
			Port:       port,
			JetStream:  true,
			StoreDir:   filepath.Join(c.opts.DataDir, "jetstream"),
			// Every range reservation, worker lease and taken pool batch
			// an id depends on is fsynced before the server acknowledges
			// it: a power cut must not roll max_id or a lease back
			// (DESIGN invariant 2). The default syncs every 2 minutes.
			SyncAlways: true,
			// As the deploy configs: a stuck client (a frozen leafd
			// joined to this server) loses its subscriptions within
			// seconds, not the default two minutes.
			PingInterval: pingEvery,
			MaxPingsOut:  pingsOut,
			NoSigs:       true,
			NoLog:        true,
		})
		if err != nil {
			return fmt.Errorf("embedded nats-server: %w", err)
		}
		// Its debug output only where leafd logs debug (trace never: a line
		// per protocol message).
		ns.SetLoggerV2(natsLogger{c.log}, c.log.Enabled(context.Background(), slog.LevelDebug), false, false)
		go ns.Start()
		if !ns.ReadyForConnections(10 * time.Second) {
			ns.Shutdown()
			return fmt.Errorf("embedded nats-server did not start on %s (is the port taken?)", c.opts.Listen)
		}
		c.ns = ns
		url = ns.ClientURL()
		opts = append(opts, nats.InProcessServer(ns))
	}
	if !c.opts.Auth.IsZero() {
		auth, err := c.opts.Auth.Options()
		if err != nil {
			return fmt.Errorf("%w: %v", c.opts.ErrConfig, err)
		}
		opts = append(opts, auth...)
	}
	c.dial = func(extra ...nats.Option) (*nats.Conn, error) {
		return nats.Connect(url, append(slices.Clip(opts), extra...)...)
	}
	nc, err := c.dial()
	if err != nil {
		return fmt.Errorf("connect to nats %s: %w", natsauth.RedactURL(url), err)
	}
	c.nc = nc
	return nil
}

// NC is the connection, nil until Connect succeeded.
func (c *Conn) NC() *nats.Conn { return c.nc }

// Server is the embedded nats-server, or nil.
func (c *Conn) Server() *server.Server { return c.ns }

// Dial makes another connection to NATS, with NC's options and extra
// (later options win).
func (c *Conn) Dial(extra ...nats.Option) (*nats.Conn, error) {
	if c.dial == nil {
		return nil, errNotConnected
	}
	return c.dial(extra...)
}

// DialMember makes the connection of one membership of a queue group that
// the node joins and leaves on its own (responder.Config.SnowflakeConn and
// SegmentConn), named after the node and suffix. It connects even while
// NATS is away, as a node serves a membership then too (a snowflake ring
// whose claim is confirmed), and logs nothing of its own: NC reports the
// state of NATS. Until it is closed, its round trip counts in RTT and
// SteadyRTT.
//
// It tries NC's server first, then the others in the usual random order:
// the node's answers go out on NC, so a membership on another server adds
// a server whose failure loses the node's share of the queue group, and a
// membership left for a slow server (SlowYield) comes back next to NC.
func (c *Conn) DialMember(suffix string) (*nats.Conn, error) {
	extra := []nats.Option{nats.Name(c.opts.Name + " " + suffix), nats.RetryOnFailedConnect(true),
		nats.DisconnectErrHandler(nil), nats.ReconnectHandler(nil)}
	if c.ns == nil && c.nc != nil { // (an embedded server's connections are in-process)
		extra = append(extra, serverFirst(c.nc.ConnectedUrl()))
	}
	nc, err := c.Dial(extra...)
	if err != nil {
		return nil, err
	}
	c.addMember(nc)
	return nc, nil
}

// serverFirst makes a connection try the server at u (a URL of the
// cluster, "": none) before the others of the list, which it then leaves
// out (nats.go tries Options.Url first).
func serverFirst(u string) nats.Option {
	return func(o *nats.Options) error {
		if u == "" {
			return nil
		}
		host := urlHost(u)
		o.Servers = slices.DeleteFunc(slices.Clone(o.Servers), func(s string) bool { return urlHost(s) == host })
		o.Url = u
		return nil
	}
}

// urlHost is the host:port of a server URL, scheme or not.
func urlHost(s string) string {
	if !strings.Contains(s, "://") {
		s = "nats://" + s
	}
	if u, err := url.Parse(s); err == nil {
		return u.Host
	}
	return s
}

// ClientURL is the NATS URL the connection is connected to: the embedded
// server's, else the server's it is connected to now (redacted), else "".
func (c *Conn) ClientURL() string {
	if c.ns != nil {
		return c.ns.ClientURL()
	}
	if c.nc != nil {
		return c.nc.ConnectedUrlRedacted()
	}
	return ""
}

// Drain drains the connection (its subscriptions finish what they hold),
// closing it when that takes longer than ctx allows. Nothing to drain
// before Connect.
func (c *Conn) Drain(ctx context.Context) error {
	if c.nc == nil {
		return nil
	}
	closed := make(chan struct{})
	c.nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	if err := c.nc.Drain(); err != nil {
		c.nc.Close()
		return nil
	}
	select {
	case <-closed:
	case <-ctx.Done():
		c.nc.Close()
	}
	return nil
}

// Shutdown stops the embedded nats-server, if there is one, and waits
// until it has.
func (c *Conn) Shutdown() {
	if c.ns != nil {
		c.ns.Shutdown()
		c.ns.WaitForShutdown()
	}
}
