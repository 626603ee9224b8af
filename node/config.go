package node

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/leafmq/leafmq/internal/natsauth"
	"github.com/leafmq/leafmq/opaque"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/wire"
)

// Config is one node's configuration. Zero values mean the defaults in comments.
type Config struct {
	Name        string // node name; default "leafd-<hostname>-<pid>"
	NATS        string // URL(s) of an existing NATS to join; empty embeds a nats-server
	NATSListen  string // embedded server's client address; default 127.0.0.1:4222
	HTTP        string // HTTP address; default 127.0.0.1:8080; "off" disables it
	DataDir     string // the embedded server's JetStream data, lease files, segment steps; default ./data
	MySQL       string // DSN of a MySQL/MariaDB leaf_alloc; empty uses JetStream KV
	AutoCreate  string // "true"/"false": create unknown tags on first use; default true on KV, false on MySQL
	DefaultStep int    // step of auto-created tags; default segment.DefaultStep
	KVReplicas  int    // replicas of the KV bucket; default 1
	MaxBatch    int    // largest ids per request; default wire.DefaultMaxBatch
	MaxTags     int    // most segment tags a node holds; default segment.DefaultMaxTags
	MaxStep     int    // cap of the dynamic segment step; default segment.DefaultMaxStep
	LogLevel    string // debug, info, warn, error; default info
	LogFormat   string // text or json; default text

	// Snowflake.
	Registry      string        // worker ids: kv, zk, mysql, static or off; default mysql with MySQL, else kv
	WorkerID      int64         // static worker id
	ZK            string        // ZooKeeper servers host:port,... for Registry zk
	ZKName        string        // Leaf's leaf.name: znodes under /snowflake/<name>; default leafmq
	ZKAddr        string        // this node's ip:port identity in ZooKeeper; default <http host, or the host's first non-loopback ip>:<http port>
	WorkerMySQL   string        // DSN of the WORKER_NODE database; default MySQL
	Layout        string        // leaf, uidgen or TIME+WORKER+SEQ bits; default leaf
	TimeUnit      string        // ms or s; default the layout's
	Epoch         string        // date, RFC 3339 time or Unix ms; default the layout's
	LeaseAhead    time.Duration // persisted time lease reach; default 3s (10 ticks for a layout in seconds)
	MaxBackward   time.Duration // clock steps back waited out; default 5ms
	MaxStartWait  time.Duration // clock behind the last lease by more fails the start; default 30s
	PeerClockMax  time.Duration // refuse to start when off the peers' average by more; default 1s; negative disables
	LayoutWarn    time.Duration // warn when the layout has less time left; default 8760h (a year)
	SnowflakeRing int           // snowflake ring size; default 65536

	// JetStream batch pool.
	Pool      string // pools to keep full: comma-separated tags, and/or "snowflake"; empty: none
	PoolDepth int    // batches per pool; default pool.DefaultDepth
	PoolBatch int    // ids per batch; default pool.DefaultBatch

	// OpaqueKeyFile holds, in hex, the key that opaque tags' ids are
	// permuted with (16, 24 or 32 bytes); OpaqueKey is the same key given
	// in the environment (LEAF_OPAQUE_KEY only, never a flag, which ps
	// would show). Neither is ever logged. Without a key, opaque tags are
	// refused.
	OpaqueKeyFile string
	OpaqueKey     string

	// Auth is how the node authenticates to the NATS of --nats: a .creds
	// file, an nkey seed, user/password, a token, TLS (flags --nats-creds,
	// --nats-user, --nats-password-file, --nats-tls-ca, …). A user and
	// password (or a token) may also be in the URL.
	Auth natsauth.Config

	// Fault drills only: run this node's snowflake clock off the real one.
	FaultClockOffset time.Duration // added to the clock from the start
	FaultClockStep   string        // "BY@AFTER": add BY to the clock AFTER the start, e.g. -10s@5s
}

// setting is one row of leafd's configuration: its flag (and so its
// LEAF_* environment variable: the flag's name in capitals, - as _), the
// subsystem it belongs to, the Config field it sets and its help. FlagSet,
// leafd -h, the environment (Parse) and the README's Configuration table
// (TestREADMEConfigurationTable) all follow this table; the NATS
// credentials have a table of their own (natsauth).
type setting struct {
	group string // node, nats, http, store, snowflake, pool, log, fault
	name  string
	field func(*Config) any // *string, *int, *int64 or *time.Duration
	help  string
}

var settings = []setting{
	{group: "node", name: "name", field: func(c *Config) any { return &c.Name },
		help: "node name; default leafd-<host>-<pid>"},
	{group: "nats", name: "nats", field: func(c *Config) any { return &c.NATS },
		help: "join an existing NATS at this URL instead of embedding one"},
	{group: "nats", name: "nats-listen", field: func(c *Config) any { return &c.NATSListen },
		help: "embedded nats-server client address"},
	{group: "http", name: "http", field: func(c *Config) any { return &c.HTTP },
		help: "HTTP address for /healthz and /metrics, or off"},
	{group: "node", name: "data", field: func(c *Config) any { return &c.DataDir },
		help: "the node's directory: the embedded nats-server's JetStream data, snowflake lease files, each tag's last dynamic step"},
	{group: "store", name: "mysql", field: func(c *Config) any { return &c.MySQL },
		help: "MySQL/MariaDB DSN of Leaf's leaf_alloc table, e.g. user:pw@tcp(127.0.0.1:3306)/leaf"},
	{group: "store", name: "auto-create", field: func(c *Config) any { return &c.AutoCreate },
		help: "create unknown tags on first use: true or false; default true on JetStream KV, false on MySQL"},
	{group: "store", name: "default-step", field: func(c *Config) any { return &c.DefaultStep },
		help: "step of auto-created tags"},
	{group: "store", name: "kv-replicas", field: func(c *Config) any { return &c.KVReplicas },
		help: "replicas of the JetStream KV bucket, 1 or 3"},
	{group: "node", name: "max-batch", field: func(c *Config) any { return &c.MaxBatch },
		help: "largest number of ids one request may ask for"},
	{group: "store", name: "max-tags", field: func(c *Config) any { return &c.MaxTags },
		help: "most segment tags one node holds; requests for more fail"},
	{group: "store", name: "max-step", field: func(c *Config) any { return &c.MaxStep },
		help: "cap of the dynamic segment step; a node buffers up to two segments per tag"},
	{group: "log", name: "log-level", field: func(c *Config) any { return &c.LogLevel },
		help: "debug, info, warn or error"},
	{group: "log", name: "log-format", field: func(c *Config) any { return &c.LogFormat },
		help: "text (logfmt) or json, one object a line"},
	{group: "snowflake", name: "worker-registry", field: func(c *Config) any { return &c.Registry },
		help: "snowflake worker ids from kv (JetStream KV leases), zk, mysql (WORKER_NODE), static or off; default mysql with --mysql, else kv"},
	{group: "snowflake", name: "worker-id", field: func(c *Config) any { return &c.WorkerID },
		help: "worker id for --worker-registry static"},
	{group: "snowflake", name: "zk", field: func(c *Config) any { return &c.ZK },
		help: "ZooKeeper servers host:port[,host:port...] for --worker-registry zk"},
	{group: "snowflake", name: "zk-name", field: func(c *Config) any { return &c.ZKName },
		help: "Leaf's leaf.name: worker znodes under /snowflake/<name>/forever"},
	{group: "snowflake", name: "zk-addr", field: func(c *Config) any { return &c.ZKAddr },
		help: "this node's ip:port in ZooKeeper, which keeps its worker id across restarts; default the --http host (if not a wildcard, else the host's first non-loopback ip) and port; a loopback one is refused when ZooKeeper is not on loopback, and a second live process with the same one refuses snowflake"},
	{group: "snowflake", name: "worker-mysql", field: func(c *Config) any { return &c.WorkerMySQL },
		help: "DSN of UidGenerator's WORKER_NODE database; default --mysql"},
	{group: "snowflake", name: "snowflake-layout", field: func(c *Config) any { return &c.Layout },
		help: "snowflake bit layout: leaf (41+10+12 ms), uidgen (28+22+13 s) or TIME+WORKER+SEQ"},
	{group: "snowflake", name: "snowflake-unit", field: func(c *Config) any { return &c.TimeUnit },
		help: "time unit of the layout: ms or s"},
	{group: "snowflake", name: "snowflake-epoch", field: func(c *Config) any { return &c.Epoch },
		help: "epoch of the layout: 2016-05-20, an RFC 3339 time or Unix ms"},
	{group: "snowflake", name: "lease-ahead", field: func(c *Config) any { return &c.LeaseAhead },
		help: "how far ahead of the clock the persisted time lease reaches; default 3s, or 10 ticks of a layout in seconds"},
	{group: "snowflake", name: "max-backward", field: func(c *Config) any { return &c.MaxBackward },
		help: "backwards clock steps up to this are waited out"},
	{group: "snowflake", name: "max-start-wait", field: func(c *Config) any { return &c.MaxStartWait },
		help: "a clock behind the worker's last lease by more fails the start"},
	{group: "snowflake", name: "peer-clock-max", field: func(c *Config) any { return &c.PeerClockMax },
		help: "refuse to start when the clock is off the live nodes' average by more; negative disables"},
	{group: "snowflake", name: "layout-warn", field: func(c *Config) any { return &c.LayoutWarn },
		help: "warn when the layout's time bits run out sooner"},
	{group: "pool", name: "pool", field: func(c *Config) any { return &c.Pool },
		help: "JetStream batch pools to keep full: tags and/or snowflake, comma-separated"},
	{group: "pool", name: "pool-depth", field: func(c *Config) any { return &c.PoolDepth },
		help: "batches kept in each pool"},
	{group: "pool", name: "pool-batch", field: func(c *Config) any { return &c.PoolBatch },
		help: "ids per pool batch"},
	{group: "store", name: "opaque-key-file", field: func(c *Config) any { return &c.OpaqueKeyFile },
		help: "file holding the key of opaque tags in hex (16, 24 or 32 bytes; or the key itself in LEAF_OPAQUE_KEY); never logged"},
	{group: "snowflake", name: "snowflake-ring", field: func(c *Config) any { return &c.SnowflakeRing },
		help: "size of the pre-filled snowflake ring"},
	{group: "fault", name: "fault-clock-offset", field: func(c *Config) any { return &c.FaultClockOffset },
		help: "fault drills only: run the snowflake clock this far off"},
	{group: "fault", name: "fault-clock-step", field: func(c *Config) any { return &c.FaultClockStep },
		help: "fault drills only: BY@AFTER steps the snowflake clock by BY, AFTER the start, e.g. -10s@5s"},
}

// envName is the environment variable of a setting's flag.
func envName(flag string) string {
	return "LEAF_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// FlagSet describes the flags of leafd: the settings table, and the NATS
// credentials (natsauth) after --nats.
func (c *Config) FlagSet(out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("leafd", flag.ContinueOnError)
	fs.SetOutput(out)
	for _, s := range settings {
		help := s.help + " (" + envName(s.name) + ")"
		switch p := s.field(c).(type) {
		case *string:
			fs.StringVar(p, s.name, *p, help)
		case *int:
			fs.IntVar(p, s.name, *p, help)
		case *int64:
			fs.Int64Var(p, s.name, *p, help)
		case *time.Duration:
			fs.DurationVar(p, s.name, *p, help)
		default:
			panic(fmt.Sprintf("node: setting %s has a field of type %T", s.name, p))
		}
		if s.name == "log-format" {
			c.Auth.Flags(fs, "nats-")
		}
	}
	fs.Usage = func() { printUsage(fs) }
	return fs
}

// groups are the subsystems of leafd -h, in order, with their titles.
var groups = []struct{ name, title string }{
	{"node", "The node"},
	{"nats", "NATS (the embedded server, or one to join, and its credentials)"},
	{"http", "HTTP"},
	{"store", "Segment store and tags"},
	{"snowflake", "Snowflake"},
	{"pool", "JetStream batch pool"},
	{"log", "Logging"},
	{"fault", "Fault drills"},
}

// printUsage is leafd -h: the flags by subsystem, each with its help and
// its LEAF_* variable.
func printUsage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprintf(w, "Usage: leafd [flags]   (leafd probe URL: exit 0 when URL answers 200)\n\nEvery flag has a LEAF_* environment variable (flags win).\n")
	group := map[string]string{}
	for _, s := range settings {
		group[s.name] = s.group
	}
	for _, g := range groups {
		fmt.Fprintf(w, "\n%s:\n", g.title)
		fs.VisitAll(func(f *flag.Flag) {
			in, ok := group[f.Name]
			if !ok { // natsauth's credentials
				in = "nats"
			}
			if in != g.name {
				return
			}
			name, usage := flag.UnquoteUsage(f)
			fmt.Fprintf(w, "  --%s %s\n    \t%s", f.Name, name, usage)
			if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "0s" {
				fmt.Fprintf(w, " (default %q)", f.DefValue)
			}
			fmt.Fprintln(w)
		})
	}
}

// Defaults returns the zero-setup configuration.
func Defaults() Config {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, host)
	if len(host) > 40 {
		host = host[:40]
	}
	if host == "" {
		host = "host"
	}
	return Config{
		Name:          fmt.Sprintf("leafd-%s-%d", host, os.Getpid()),
		NATSListen:    "127.0.0.1:4222",
		HTTP:          "127.0.0.1:8080",
		DataDir:       "data",
		DefaultStep:   segment.DefaultStep,
		KVReplicas:    1,
		MaxBatch:      wire.DefaultMaxBatch,
		LogLevel:      "info",
		ZKName:        "leafmq",
		Layout:        "leaf",
		MaxBackward:   snowflake.DefaultMaxBackward,
		MaxStartWait:  snowflake.DefaultMaxStartWait,
		PeerClockMax:  time.Second,
		LayoutWarn:    365 * 24 * time.Hour,
		SnowflakeRing: 65536,
	}
}

// Parse builds a Config from defaults, then LEAF_* variables (read through
// getenv), then args: flags win over the environment.
func Parse(args []string, getenv func(string) string, out io.Writer) (Config, error) {
	c := Defaults()
	fs := c.FlagSet(out)
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		if v := getenv(name); v != "" {
			if err := f.Value.Set(v); err != nil && envErr == nil {
				envErr = fmt.Errorf("%s=%q: %v", name, v, err)
			}
		}
	})
	if envErr != nil {
		return c, envErr
	}
	c.OpaqueKey = getenv("LEAF_OPAQUE_KEY")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return c, c.Validate()
}

// opaqueKey reads the opaque key, nil when none is configured.
func (c *Config) opaqueKey() (*opaque.Key, error) {
	switch {
	case c.OpaqueKeyFile != "":
		return opaque.ReadKeyFile(c.OpaqueKeyFile)
	case c.OpaqueKey != "":
		k, err := opaque.ParseKey(c.OpaqueKey)
		if err != nil {
			return nil, fmt.Errorf("LEAF_OPAQUE_KEY: %w", err)
		}
		return k, nil
	}
	return nil, nil
}

// ErrConfig marks configuration errors.
var ErrConfig = errors.New("config")

// Validate checks every field and fills what is left to its default.
func (c *Config) Validate() error {
	d := Defaults()
	if c.Name == "" {
		c.Name = d.Name
	}
	if c.NATSListen == "" {
		c.NATSListen = d.NATSListen
	}
	if c.HTTP == "" {
		c.HTTP = d.HTTP
	}
	if c.DataDir == "" {
		c.DataDir = d.DataDir
	}
	if c.DefaultStep == 0 {
		c.DefaultStep = d.DefaultStep
	}
	if c.KVReplicas == 0 {
		c.KVReplicas = 1
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = d.MaxBatch
	}
	if c.LogLevel == "" {
		c.LogLevel = d.LogLevel
	}
	switch c.LogFormat {
	case "":
		c.LogFormat = "text"
	case "text", "json":
	default:
		return fmt.Errorf("%w: log-format %q must be text or json", ErrConfig, c.LogFormat)
	}
	if !nameRE(c.Name) {
		return fmt.Errorf("%w: name %q must be 1-64 characters of [A-Za-z0-9_.-]", ErrConfig, c.Name)
	}
	if _, _, err := net.SplitHostPort(c.NATSListen); err != nil {
		return fmt.Errorf("%w: nats-listen %q: %v", ErrConfig, c.NATSListen, err)
	}
	if c.HTTP != "off" {
		if _, _, err := net.SplitHostPort(c.HTTP); err != nil {
			return fmt.Errorf("%w: http %q: %v (or off)", ErrConfig, c.HTTP, err)
		}
	}
	if c.OpaqueKey != "" && c.OpaqueKeyFile != "" {
		return fmt.Errorf("%w: give the opaque key in LEAF_OPAQUE_KEY or --opaque-key-file, not both", ErrConfig)
	}
	if _, err := c.opaqueKey(); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	switch c.AutoCreate {
	case "", "true", "false":
	default:
		return fmt.Errorf("%w: auto-create %q must be true or false", ErrConfig, c.AutoCreate)
	}
	if err := segment.CheckStep(c.DefaultStep); err != nil {
		return fmt.Errorf("%w: default-step: %v", ErrConfig, err)
	}
	if c.KVReplicas < 1 || c.KVReplicas > 5 {
		return fmt.Errorf("%w: kv-replicas %d must be 1-5", ErrConfig, c.KVReplicas)
	}
	if c.MaxTags == 0 {
		c.MaxTags = segment.DefaultMaxTags
	}
	if c.MaxTags < 1 || c.MaxTags > 10_000_000 {
		return fmt.Errorf("%w: max-tags %d must be 1-10000000", ErrConfig, c.MaxTags)
	}
	if c.MaxStep == 0 {
		c.MaxStep = segment.DefaultMaxStep
	}
	if c.MaxStep < 1 || c.MaxStep > segment.MaxStep {
		return fmt.Errorf("%w: max-step %d must be 1-%d", ErrConfig, c.MaxStep, segment.MaxStep)
	}
	if c.MaxBatch < 1 || c.MaxBatch > 1_000_000 {
		return fmt.Errorf("%w: max-batch %d must be 1-1000000", ErrConfig, c.MaxBatch)
	}
	if _, err := c.level(); err != nil {
		return err
	}
	if !c.Auth.IsZero() {
		if c.NATS == "" {
			return fmt.Errorf("%w: NATS credentials and TLS settings (--nats-*) need --nats: the embedded server has none", ErrConfig)
		}
		if err := c.Auth.Validate(); err != nil {
			return fmt.Errorf("%w: %v", ErrConfig, err)
		}
	}
	return c.validateSnowflake(d)
}

// autoCreate resolves the AutoCreate default.
func (c *Config) autoCreate() bool {
	if c.AutoCreate == "" {
		return c.MySQL == ""
	}
	v, _ := strconv.ParseBool(c.AutoCreate)
	return v
}

func (c *Config) level() (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return l, fmt.Errorf("%w: log-level %q must be debug, info, warn or error", ErrConfig, c.LogLevel)
	}
	return l, nil
}

func nameRE(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// timeouts used when building the node.
const (
	startTimeout = 30 * time.Second
	stopTimeout  = 10 * time.Second
)

// stepFileName is the file under DataDir where the segment engine remembers
// each tag's dynamic step across restarts (segment.StepFile).
const stepFileName = "segment-steps.json"
