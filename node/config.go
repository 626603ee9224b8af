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

	"github.com/leafmq/leafmq/segment"
	"github.com/leafmq/leafmq/wire"
)

// Config is one node's configuration. Zero values mean the defaults in comments.
type Config struct {
	Name        string // node name; default "leafd-<hostname>-<pid>"
	NATS        string // URL(s) of an existing NATS to join; empty embeds a nats-server
	NATSListen  string // embedded server's client address; default 127.0.0.1:4222
	HTTP        string // HTTP address; default 127.0.0.1:8080; "off" disables it
	DataDir     string // embedded server's JetStream data; default ./data
	MySQL       string // DSN of a MySQL/MariaDB leaf_alloc; empty uses JetStream KV
	AutoCreate  string // "true"/"false": create unknown tags on first use; default true on KV, false on MySQL
	DefaultStep int    // step of auto-created tags; default segment.DefaultStep
	KVReplicas  int    // replicas of the KV bucket; default 1
	MaxBatch    int    // largest ids per request; default wire.DefaultMaxBatch
	LogLevel    string // debug, info, warn, error; default info
}

// FlagSet describes the flags of leafd.
func (c *Config) FlagSet(out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("leafd", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.Name, "name", c.Name, "node name (LEAF_NAME); default leafd-<host>-<pid>")
	fs.StringVar(&c.NATS, "nats", c.NATS, "join an existing NATS at this URL instead of embedding one (LEAF_NATS)")
	fs.StringVar(&c.NATSListen, "nats-listen", c.NATSListen, "embedded nats-server client address (LEAF_NATS_LISTEN)")
	fs.StringVar(&c.HTTP, "http", c.HTTP, "HTTP address for /healthz and /metrics, or off (LEAF_HTTP)")
	fs.StringVar(&c.DataDir, "data", c.DataDir, "data directory of the embedded nats-server (LEAF_DATA)")
	fs.StringVar(&c.MySQL, "mysql", c.MySQL, "MySQL/MariaDB DSN of Leaf's leaf_alloc table, e.g. user:pw@tcp(127.0.0.1:3306)/leaf (LEAF_MYSQL)")
	fs.StringVar(&c.AutoCreate, "auto-create", c.AutoCreate, "create unknown tags on first use: true or false; default true on JetStream KV, false on MySQL (LEAF_AUTO_CREATE)")
	fs.IntVar(&c.DefaultStep, "default-step", c.DefaultStep, "step of auto-created tags (LEAF_DEFAULT_STEP)")
	fs.IntVar(&c.KVReplicas, "kv-replicas", c.KVReplicas, "replicas of the JetStream KV bucket, 1 or 3 (LEAF_KV_REPLICAS)")
	fs.IntVar(&c.MaxBatch, "max-batch", c.MaxBatch, "largest number of ids one request may ask for (LEAF_MAX_BATCH)")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error (LEAF_LOG_LEVEL)")
	return fs
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
		Name:        fmt.Sprintf("leafd-%s-%d", host, os.Getpid()),
		NATSListen:  "127.0.0.1:4222",
		HTTP:        "127.0.0.1:8080",
		DataDir:     "data",
		DefaultStep: segment.DefaultStep,
		KVReplicas:  1,
		MaxBatch:    wire.DefaultMaxBatch,
		LogLevel:    "info",
	}
}

// Parse builds a Config from defaults, then LEAF_* variables (read through
// getenv), then args: flags win over the environment.
func Parse(args []string, getenv func(string) string, out io.Writer) (Config, error) {
	c := Defaults()
	fs := c.FlagSet(out)
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := "LEAF_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(name); v != "" {
			if err := f.Value.Set(v); err != nil && envErr == nil {
				envErr = fmt.Errorf("%s=%q: %v", name, v, err)
			}
		}
	})
	if envErr != nil {
		return c, envErr
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return c, c.Validate()
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
	if c.MaxBatch < 1 || c.MaxBatch > 1_000_000 {
		return fmt.Errorf("%w: max-batch %d must be 1-1000000", ErrConfig, c.MaxBatch)
	}
	if _, err := c.level(); err != nil {
		return err
	}
	return nil
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
