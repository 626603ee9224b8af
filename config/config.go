package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/leafmq/leafmq/internal/clock"
	"github.com/leafmq/leafmq/internal/natsauth"
	"github.com/leafmq/leafmq/opaque"
	"github.com/leafmq/leafmq/pool"
	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/wire"
)

// Config is one node's configuration, by subsystem. Zero values mean the
// defaults of the settings tables below (each field's row names it).
type Config struct {
	Name     string // node name; default "leafd-<hostname>-<pid>"
	DataDir  string // the embedded server's JetStream data, lease files, segment steps; default ./data
	MaxBatch int    // largest ids per request; default wire.DefaultMaxBatch

	NATS      NATSConfig
	Region    RegionConfig
	HTTP      HTTPConfig
	Store     StoreConfig
	Registry  RegistryConfig
	Snowflake SnowflakeConfig
	Pool      PoolConfig
	Log       LogConfig
	Fault     FaultConfig

	// Clock is the node's time: its timers and tickers (the start's
	// backoff, member renewals, the peer clock watch, the monotonic
	// leaders' refresh and balance) and the snowflake clock under
	// Fault's offset. Not a setting; tests set a clock.Fake. Default
	// clock.Real.
	Clock clock.Clock
}

// NATSConfig is the NATS the node serves on: an embedded server, or one to
// join with its credentials.
type NATSConfig struct {
	URL    string // URL(s) of an existing NATS to join; empty embeds a nats-server
	Listen string // embedded server's client address
	// MaxRTT is the longest round trip to NATS at which the node is ready
	// for the subjects it answers through NATS (segment, snowflake,
	// monotonic tags): above it the node's answers miss a client's 1 s
	// goal. Default 500ms; negative disables.
	MaxRTT time.Duration

	// Auth is how the node authenticates to the NATS of URL: a .creds
	// file, an nkey seed, user/password, a token, TLS (flags --nats-creds,
	// --nats-user, --nats-password-file, --nats-tls-ca, …). A user and
	// password (or a token) may also be in the URL.
	Auth natsauth.Config
}

// RegionConfig is the node's region, in a deployment of several regions:
// each a NATS cluster of its own, the clusters joined by gateways. A
// region's snowflake workers are leased from a registry of its own and
// its id is in the top bits of the ids' worker field (Snowflake's layout
// with region bits), so regions never make the same id.
type RegionConfig struct {
	// Count is how many region ids the deployment has, fixed for its
	// whole life (its ids' layout depends on it); 0: no regions.
	Count int
	// ID is this node's region id, 0..Count-1: set by --region-id, which
	// is required when Count > 0. A Config built in code sets it with
	// SetID (a zero ID alone is not an id given).
	ID int
	// Name is the region's name: the KV bucket, ZooKeeper path and MySQL
	// rows of its worker registry carry it. [A-Za-z0-9_-], at most 64
	// characters; empty: the node takes its NATS cluster's name.
	Name string

	idFlag string // --region-id as given ("" when not)
}

// On reports whether the deployment has regions (--regions > 0).
func (r RegionConfig) On() bool { return r.Count > 0 }

// SetID sets ID as --region-id does.
func (r *RegionConfig) SetID(id int) {
	r.ID, r.idFlag = id, strconv.Itoa(id)
}

// HTTPConfig is the node's HTTP listener (status, health, metrics, Leaf's API).
type HTTPConfig struct {
	Addr string // host:port, or "off"
}

// StoreConfig is the segment store and how tags are made.
type StoreConfig struct {
	MySQL       string // DSN of a MySQL/MariaDB leaf_alloc; empty uses JetStream KV
	AutoCreate  string // "true"/"false": create unknown tags on first use; default true on KV, false on MySQL
	DefaultStep int    // step of auto-created tags
	KVReplicas  int    // replicas of the KV bucket
	MaxTags     int    // most segment tags a node holds
	MaxStep     int    // cap of the dynamic segment step

	// OpaqueKeyFile holds, in hex, the key that opaque tags' ids are
	// permuted with (16, 24 or 32 bytes); OpaqueKey is the same key given
	// in the environment (LEAF_OPAQUE_KEY only, never a flag, which ps
	// would show). Neither is ever logged. Without a key, opaque tags are
	// refused.
	OpaqueKeyFile string
	OpaqueKey     string
}

// RegistryConfig is where snowflake worker ids come from.
type RegistryConfig struct {
	Kind        string // kv, zk, mysql, static or off; default mysql with a MySQL store, else kv
	WorkerID    int64  // the worker id of static
	ZK          string // ZooKeeper servers host:port,... for zk
	ZKName      string // Leaf's leaf.name: znodes under /snowflake/<name>
	ZKAddr      string // this node's ip:port identity in ZooKeeper; default <http host, or the host's first non-loopback ip>:<http port>
	WorkerMySQL string // DSN of the WORKER_NODE database; default the store's MySQL
}

// SnowflakeConfig is the snowflake layout, its clock guards and its ring.
type SnowflakeConfig struct {
	Layout       string        // leaf, leaf-dc, uidgen, TIME+WORKER+SEQ or TIME+REGION+WORKER+SEQ bits
	TimeUnit     string        // ms or s; default the layout's
	Epoch        string        // date, RFC 3339 time or Unix ms; default the layout's
	LeaseAhead   time.Duration // persisted time lease reach; default 3s (10 ticks for a layout in seconds)
	MaxBackward  time.Duration // clock steps back waited out
	MaxStartWait time.Duration // clock behind the last lease by more fails the start
	PeerClockMax time.Duration // refuse to start when off the peers' average by more; negative disables
	LayoutWarn   time.Duration // warn when the layout has less time left
	Ring         int           // snowflake ring size
}

// PoolConfig is the JetStream batch pool the node keeps full.
type PoolConfig struct {
	Tags  string // pools to keep full: comma-separated tags, and/or "snowflake"; empty: none
	Depth int    // batches per pool
	Batch int    // ids per batch
}

// LogConfig is the node's log.
type LogConfig struct {
	Level  string // debug, info, warn, error
	Format string // text or json
}

// FaultConfig is for fault drills only: run the node's snowflake clock off
// the real one.
type FaultConfig struct {
	ClockOffset time.Duration // added to the clock from the start
	ClockStep   string        // "BY@AFTER": add BY to the clock AFTER the start, e.g. -10s@5s
}

// The settings tables: one a subsystem, one row a setting. A row's flag
// names its LEAF_* variable (the flag in capitals, - as _); its def is the
// default, in the flag's syntax, that Defaults and Validate both apply
// (empty: none, or one worked out from other settings, which help says).
// FlagSet, leafd -h, the environment (Parse), Validate's defaults and the
// README's Configuration table (TestREADMEConfigurationTable) all follow
// them; the NATS credentials have a table of their own (natsauth).
var (
	nodeSettings = table[Config]{"node", "The node", []setting[Config]{
		{"name", "", func(c *Config) any { return &c.Name },
			"node name; default leafd-<host>-<pid>"},
		{"data", "./data", func(c *Config) any { return &c.DataDir },
			"the node's directory: the embedded nats-server's JetStream data, snowflake lease files, each tag's last dynamic step"},
		{"max-batch", strconv.Itoa(wire.DefaultMaxBatch), func(c *Config) any { return &c.MaxBatch },
			"largest number of ids one request may ask for"},
	}}
	natsSettings = table[NATSConfig]{"nats", "NATS (the embedded server, or one to join, and its credentials)", []setting[NATSConfig]{
		{"nats", "", func(c *NATSConfig) any { return &c.URL },
			"join an existing NATS at this URL instead of embedding one"},
		{"nats-listen", "127.0.0.1:4222", func(c *NATSConfig) any { return &c.Listen },
			"embedded nats-server client address"},
		{"max-nats-rtt", "500ms", func(c *NATSConfig) any { return &c.MaxRTT },
			"not ready for segment, snowflake and monotonic tags while the round trip to NATS is above this; negative disables"},
	}}
	regionSettings = table[RegionConfig]{"region", "Regions (each a NATS cluster, joined by gateways)", []setting[RegionConfig]{
		{"regions", "", func(c *RegionConfig) any { return &c.Count },
			"how many region ids the deployment has, fixed for its life (the snowflake layout's region bits hold them); default 0: no regions"},
		{"region-id", "", func(c *RegionConfig) any { return &c.idFlag },
			"this node's region id, 0 to --regions minus 1; required with --regions"},
		{"region", "", func(c *RegionConfig) any { return &c.Name },
			"this node's region name ([A-Za-z0-9_-]), which names its worker registry; default the NATS cluster's name"},
	}}
	httpSettings = table[HTTPConfig]{"http", "HTTP", []setting[HTTPConfig]{
		{"http", "127.0.0.1:8080", func(c *HTTPConfig) any { return &c.Addr },
			"HTTP address for /healthz and /metrics, or off"},
	}}
	storeSettings = table[StoreConfig]{"store", "Segment store and tags", []setting[StoreConfig]{
		{"mysql", "", func(c *StoreConfig) any { return &c.MySQL },
			"MySQL/MariaDB DSN of Leaf's leaf_alloc table, e.g. user:pw@tcp(127.0.0.1:3306)/leaf"},
		{"auto-create", "", func(c *StoreConfig) any { return &c.AutoCreate },
			"create unknown tags on first use: true or false; default true on JetStream KV, false on MySQL or with --regions"},
		{"default-step", strconv.Itoa(segment.DefaultStep), func(c *StoreConfig) any { return &c.DefaultStep },
			"step of auto-created tags"},
		{"kv-replicas", "1", func(c *StoreConfig) any { return &c.KVReplicas },
			"replicas of the JetStream KV bucket, 1 or 3"},
		{"max-tags", strconv.Itoa(segment.DefaultMaxTags), func(c *StoreConfig) any { return &c.MaxTags },
			"most segment tags one node holds; requests for more fail"},
		{"max-step", strconv.Itoa(segment.DefaultMaxStep), func(c *StoreConfig) any { return &c.MaxStep },
			"cap of the dynamic segment step; a node buffers up to two segments per tag"},
		{"opaque-key-file", "", func(c *StoreConfig) any { return &c.OpaqueKeyFile },
			"file holding the key of opaque tags in hex (16, 24 or 32 bytes; or the key itself in LEAF_OPAQUE_KEY); never logged"},
	}}
	registrySettings = table[RegistryConfig]{"registry", "Snowflake worker ids", []setting[RegistryConfig]{
		{"worker-registry", "", func(c *RegistryConfig) any { return &c.Kind },
			"snowflake worker ids from kv (JetStream KV leases), zk, mysql (WORKER_NODE), static or off; default mysql with --mysql, else kv"},
		{"worker-id", "", func(c *RegistryConfig) any { return &c.WorkerID },
			"worker id for --worker-registry static"},
		{"zk", "", func(c *RegistryConfig) any { return &c.ZK },
			"ZooKeeper servers host:port[,host:port...] for --worker-registry zk"},
		{"zk-name", "leafmq", func(c *RegistryConfig) any { return &c.ZKName },
			"Leaf's leaf.name: worker znodes under /snowflake/<name>/forever"},
		{"zk-addr", "", func(c *RegistryConfig) any { return &c.ZKAddr },
			"this node's ip:port in ZooKeeper, which keeps its worker id across restarts; default the --http host (if not a wildcard, else the host's first non-loopback ip) and port; a loopback one is refused when ZooKeeper is not on loopback, and a second live process with the same one refuses snowflake"},
		{"worker-mysql", "", func(c *RegistryConfig) any { return &c.WorkerMySQL },
			"DSN of UidGenerator's WORKER_NODE database; default --mysql"},
	}}
	snowflakeSettings = table[SnowflakeConfig]{"snowflake", "Snowflake layout and clock", []setting[SnowflakeConfig]{
		{"snowflake-layout", "leaf", func(c *SnowflakeConfig) any { return &c.Layout },
			"snowflake bit layout: leaf (41+10+12 ms), leaf-dc (41+5+5+12 ms: 5 region bits), uidgen (28+22+13 s), TIME+WORKER+SEQ or, with --regions, TIME+REGION+WORKER+SEQ"},
		{"snowflake-unit", "", func(c *SnowflakeConfig) any { return &c.TimeUnit },
			"time unit of the layout: ms or s; default the layout's"},
		{"snowflake-epoch", "", func(c *SnowflakeConfig) any { return &c.Epoch },
			"epoch of the layout: 2016-05-20, an RFC 3339 time or Unix ms; default the layout's"},
		{"lease-ahead", "", func(c *SnowflakeConfig) any { return &c.LeaseAhead },
			"how far ahead of the clock the persisted time lease reaches; default 3s, or 10 ticks of a layout in seconds"},
		{"max-backward", snowflake.DefaultMaxBackward.String(), func(c *SnowflakeConfig) any { return &c.MaxBackward },
			"backwards clock steps up to this are waited out"},
		{"max-start-wait", snowflake.DefaultMaxStartWait.String(), func(c *SnowflakeConfig) any { return &c.MaxStartWait },
			"a clock behind the worker's last lease by more fails the start"},
		{"peer-clock-max", "1s", func(c *SnowflakeConfig) any { return &c.PeerClockMax },
			"refuse to start when the clock is off the live nodes' average by more; negative disables"},
		{"layout-warn", "8760h", func(c *SnowflakeConfig) any { return &c.LayoutWarn },
			"warn when the layout's time bits run out sooner"},
		{"snowflake-ring", "65536", func(c *SnowflakeConfig) any { return &c.Ring },
			"size of the pre-filled snowflake ring"},
	}}
	poolSettings = table[PoolConfig]{"pool", "JetStream batch pool", []setting[PoolConfig]{
		{"pool", "", func(c *PoolConfig) any { return &c.Tags },
			"JetStream batch pools to keep full: tags and/or snowflake, comma-separated"},
		{"pool-depth", strconv.Itoa(pool.DefaultDepth), func(c *PoolConfig) any { return &c.Depth },
			"batches kept in each pool"},
		{"pool-batch", strconv.Itoa(pool.DefaultBatch), func(c *PoolConfig) any { return &c.Batch },
			"ids per pool batch"},
	}}
	logSettings = table[LogConfig]{"log", "Logging", []setting[LogConfig]{
		{"log-level", "info", func(c *LogConfig) any { return &c.Level },
			"debug, info, warn or error"},
		{"log-format", "text", func(c *LogConfig) any { return &c.Format },
			"text (logfmt) or json, one object a line"},
	}}
	faultSettings = table[FaultConfig]{"fault", "Fault drills", []setting[FaultConfig]{
		{"fault-clock-offset", "", func(c *FaultConfig) any { return &c.ClockOffset },
			"fault drills only: run the snowflake clock this far off"},
		{"fault-clock-step", "", func(c *FaultConfig) any { return &c.ClockStep },
			"fault drills only: BY@AFTER steps the snowflake clock by BY, AFTER the start, e.g. -10s@5s"},
	}}
)

// subsystems binds every settings table to its part of c, in the order
// leafd -h shows them.
func (c *Config) subsystems() []bound {
	return []bound{
		nodeSettings.bind(c),
		natsSettings.bind(&c.NATS),
		regionSettings.bind(&c.Region),
		httpSettings.bind(&c.HTTP),
		storeSettings.bind(&c.Store),
		registrySettings.bind(&c.Registry),
		snowflakeSettings.bind(&c.Snowflake),
		poolSettings.bind(&c.Pool),
		logSettings.bind(&c.Log),
		faultSettings.bind(&c.Fault),
	}
}

// Defaults returns the zero-setup configuration: every setting's default.
func Defaults() Config {
	var c Config
	c.fillDefaults()
	return c
}

// fillDefaults sets every zero setting to its table's default.
func (c *Config) fillDefaults() {
	if c.Name == "" {
		c.Name = defaultName()
	}
	for _, b := range c.subsystems() {
		b.fill()
	}
}

// defaultName is leafd-<host>-<pid>, the host cut to what a name may hold.
func defaultName() string {
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
	return fmt.Sprintf("leafd-%s-%d", host, os.Getpid())
}

// ErrConfig marks configuration errors.
var ErrConfig = errors.New("config")

// Validate fills every zero setting with its default and checks the
// configuration, subsystem by subsystem, then what links them.
func (c *Config) Validate() error {
	c.fillDefaults()
	if !nameRE(c.Name) {
		return fmt.Errorf("%w: name %q must be 1-64 characters of [A-Za-z0-9_.-]", ErrConfig, c.Name)
	}
	if c.MaxBatch < 1 || c.MaxBatch > 1_000_000 {
		return fmt.Errorf("%w: max-batch %d must be 1-1000000", ErrConfig, c.MaxBatch)
	}
	for _, err := range []error{c.NATS.validate(), c.Region.validate(), c.HTTP.validate(), c.Store.validate(), c.Log.validate()} {
		if err != nil {
			return err
		}
	}
	if c.Registry.Kind == "" {
		c.Registry.Kind = RegistryKV
		if c.Store.MySQL != "" {
			c.Registry.Kind = RegistryMySQL
		}
	}
	if c.Registry.WorkerMySQL == "" {
		c.Registry.WorkerMySQL = c.Store.MySQL
	}
	if c.Registry.Kind != RegistryZK {
		_ = c.defaultZKAddr() // shown, not used
	}
	if err := c.validatePool(); err != nil {
		return err
	}
	return c.validateSnowflake()
}

func (c *NATSConfig) validate() error {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("%w: nats-listen %q: %v", ErrConfig, c.Listen, err)
	}
	if c.Auth.IsZero() {
		return nil
	}
	if c.URL == "" {
		return fmt.Errorf("%w: NATS credentials and TLS settings (--nats-*) need --nats: the embedded server has none", ErrConfig)
	}
	if err := c.Auth.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return nil
}

// maxRegions bounds --regions: as many regions as a layout's worker
// field could ever split into leaves no worker to any of them.
const maxRegions = 1 << 16

func (r *RegionConfig) validate() error {
	given := r.idFlag != "" || r.ID != 0
	if r.idFlag != "" {
		id, err := strconv.Atoi(r.idFlag)
		if err != nil {
			return fmt.Errorf("%w: --region-id %q is not a number", ErrConfig, r.idFlag)
		}
		r.ID = id
	}
	switch {
	case r.Count < 0 || r.Count > maxRegions:
		return fmt.Errorf("%w: --regions %d must be 0 (no regions) to %d", ErrConfig, r.Count, maxRegions)
	case r.Count == 0 && given:
		return fmt.Errorf("%w: --region-id %d needs --regions N (how many regions the deployment has); without regions leave it out", ErrConfig, r.ID)
	case r.Count == 0 && r.Name != "":
		return fmt.Errorf("%w: --region %q needs --regions N and --region-id R; without regions leave it out", ErrConfig, r.Name)
	case r.Count > 0 && !given:
		return fmt.Errorf("%w: --regions %d needs --region-id, this node's region: 0-%d", ErrConfig, r.Count, r.Count-1)
	case r.Count > 0 && (r.ID < 0 || r.ID >= r.Count):
		return fmt.Errorf("%w: --region-id %d must be 0-%d for --regions %d", ErrConfig, r.ID, r.Count-1, r.Count)
	case len(r.Name) > 64 || strings.Trim(r.Name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "":
		return fmt.Errorf("%w: --region %q must be at most 64 characters of [A-Za-z0-9_-] (it names a KV bucket and a NATS subject token)", ErrConfig, r.Name)
	}
	return nil
}

func (c *HTTPConfig) validate() error {
	if c.Addr == "off" {
		return nil
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("%w: http %q: %v (or off)", ErrConfig, c.Addr, err)
	}
	return nil
}

func (c *StoreConfig) validate() error {
	if c.OpaqueKey != "" && c.OpaqueKeyFile != "" {
		return fmt.Errorf("%w: give the opaque key in LEAF_OPAQUE_KEY or --opaque-key-file, not both", ErrConfig)
	}
	if _, err := c.ReadOpaqueKey(); err != nil {
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
	if c.MaxTags < 1 || c.MaxTags > 10_000_000 {
		return fmt.Errorf("%w: max-tags %d must be 1-10000000", ErrConfig, c.MaxTags)
	}
	if c.MaxStep < 1 || c.MaxStep > segment.MaxStep {
		return fmt.Errorf("%w: max-step %d must be 1-%d", ErrConfig, c.MaxStep, segment.MaxStep)
	}
	return nil
}

// ReadOpaqueKey reads the opaque key, nil when none is configured.
func (c *StoreConfig) ReadOpaqueKey() (*opaque.Key, error) {
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

// AutoCreates reports whether unknown tags are created on first use:
// AutoCreate, or its default (true on the KV store, false on MySQL).
func (c *StoreConfig) AutoCreates() bool {
	if c.AutoCreate == "" {
		return c.MySQL == ""
	}
	v, _ := strconv.ParseBool(c.AutoCreate)
	return v
}

// AutoCreates reports whether the node creates unknown tags on first use:
// the store's default (StoreConfig.AutoCreates), but off by default with
// --regions: a tag made at 1 in a region's new store serves ids that a
// deployment turned into regions issued before (docs/regions.md, "From
// one region to N"); --auto-create true turns it on.
func (c *Config) AutoCreates() bool {
	if c.Store.AutoCreate == "" && c.Region.On() {
		return false
	}
	return c.Store.AutoCreates()
}

func (c *LogConfig) validate() error {
	switch c.Format {
	case "text", "json":
	default:
		return fmt.Errorf("%w: log-format %q must be text or json", ErrConfig, c.Format)
	}
	_, err := c.level()
	return err
}

func (c *LogConfig) level() (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(c.Level)); err != nil {
		return l, fmt.Errorf("%w: log-level %q must be debug, info, warn or error", ErrConfig, c.Level)
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
