package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/client/ask"
	"github.com/leafmq/leafmq/internal/buildinfo"
	"github.com/leafmq/leafmq/internal/natsauth"
)

// errUsage marks argument errors (exit code 2).
var errUsage = errors.New("usage")

type cli struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	natsURL        string
	urlGiven       bool // --nats, LEAF_NATS or NATS_URL: a context's url does not replace it
	contextName    string
	contextDone    bool // the nats CLI context is loaded (once, by connect)
	auth           natsauth.Config
	timeout        time.Duration
	ready          func() // tests: called once a streaming command is subscribed
	region         string // tag commands: the region whose nodes answer (--region)
}

func main() {
	c := &cli{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	os.Exit(c.run(os.Args[1:]))
}

// globalFlags defines the connection flags on fs. They are defined on the
// global flag set and on every command's (parse), so that they go before
// or after the command, as in nats and kubectl; each keeps what an
// earlier parse set.
func (c *cli) globalFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.natsURL, "nats", c.natsURL, "NATS server URL(s), comma-separated (env LEAF_NATS or NATS_URL)")
	fs.StringVar(&c.contextName, "context", c.contextName, "the nats CLI context to use (env NATS_CONTEXT; default the one nats context select chose)")
	fs.DurationVar(&c.timeout, "timeout", c.timeout, "timeout of each request")
	c.auth.Flags(fs, "")
}

// isGlobalFlag reports whether name is one of globalFlags.
func isGlobalFlag(name string) bool {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	(&cli{}).globalFlags(fs)
	return fs.Lookup(name) != nil
}

// noteFlags records what the flags parsed into fs say about where to
// connect.
func (c *cli) noteFlags(fs *flag.FlagSet) {
	fs.Visit(func(f *flag.Flag) { c.urlGiven = c.urlGiven || f.Name == "nats" })
}

func (c *cli) run(args []string) int {
	fs := flag.NewFlagSet("leafctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.natsURL = c.getenv("LEAF_NATS")
	if c.natsURL == "" {
		c.natsURL = c.getenv("NATS_URL") // as the nats CLI
	}
	c.urlGiven = c.natsURL != ""
	if c.natsURL == "" {
		c.natsURL = nats.DefaultURL
	}
	c.timeout = 5 * time.Second
	// Credentials from the environment: LEAF_NATS_CREDS, LEAF_NATS_PASSWORD_FILE, …
	// (flags win: they are parsed after).
	c.auth.FromEnv(c.getenv)
	c.auth.FromNATSEnv(c.getenv)
	c.globalFlags(fs)
	version := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(c.stdout, overview())
			return 0
		}
		return c.usageErr(err)
	}
	if *version {
		fmt.Fprintln(c.stdout, "leafctl", buildinfo.String())
		return 0
	}
	c.noteFlags(fs)
	rest := fs.Args()
	if len(rest) == 0 {
		return c.usageErr(errors.New("no command"))
	}
	if rest[0] == "help" {
		if len(rest) > 1 { // leafctl help COMMAND [SUBCOMMAND]: its -h
			return c.run(append(append([]string{}, rest[1:]...), "-h"))
		}
		fmt.Fprint(c.stdout, overview())
		return 0
	}
	cmd, ok := lookup(rest[0])
	if !ok {
		fmt.Fprintf(c.stderr, "leafctl: unknown command %q\nCommands: %s.\nRun 'leafctl --help' for what each does.\n", rest[0], strings.Join(commandNames(), ", "))
		return 2
	}
	err := cmd.Run(c, rest[1:])
	var he helpError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &he):
		fmt.Fprint(c.stdout, he.usage())
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(c.stderr, "leafctl %s: %v\nRun 'leafctl %s -h' for its usage.\n", rest[0], err, rest[0])
		return 2
	default:
		fmt.Fprintf(c.stderr, "leafctl: %v\n", err)
		return 1
	}
}

func (c *cli) usageErr(err error) int {
	fmt.Fprintf(c.stderr, "leafctl: %v\n\n%s", err, overview())
	return 2
}

// cmdUsage is each command's usage line and what it does, by flag set
// name, for `leafctl COMMAND -h`.
var cmdUsage = map[string]string{
	"next":         "next TAG [flags]\n\nTake ids of TAG (leaf.segment.TAG; with --mono, of a monotonic tag: leaf.mono.TAG).",
	"snowflake":    "snowflake [flags]\n\nTake snowflake ids (leaf.snowflake, or leaf.snowflake.KEY).",
	"decode":       "decode ID [flags]\n\nSplit a snowflake id into time, worker and sequence, by the nodes' layout (or --local).",
	"batch":        "batch TAG|snowflake [flags]\n\nTake one ready-made batch from the JetStream pool.",
	"nodes":        "nodes [flags]\n\nEvery leafd's micro services: requests, errors, processing time.",
	"pool":         "pool [flags]\n\nBatches in each JetStream pool.",
	"events":       "events [flags]\n\nTail monitoring events (leaf.events.>).",
	"tag":          "tag SUBCOMMAND [flags] [args]\n\nSubcommands: list, create, set-step, set-max, restart, decode (leafctl tag SUBCOMMAND -h).",
	"tag list":     "tag list [flags]\n\nEvery tag with its max_id and step.",
	"tag create":   "tag create TAG [flags]\n\nCreate a tag (admin; refused below any floor a live node reports). Its mode is fixed for its life.",
	"tag decode":   "tag decode TAG ID\n\nThe sequence number of an opaque tag's id (admin; a node with the tag's key answers).",
	"tag set-step": "tag set-step TAG STEP\n\nChange a tag's configured step (admin).",
	"tag set-max":  "tag set-max TAG MAX\n\nRaise a tag's max_id; never lowers it (admin).",
	"tag restart":  "tag restart TAG --floor N\n\nStart a (deleted) tag over at max_id N; refused below any max_id the store or a live node remembers (admin).",
}

// helpError is -h on a command: run prints its usage and exits 0.
type helpError struct{ fs *flag.FlagSet }

func (h helpError) Error() string { return "help requested" }
func (h helpError) Unwrap() error { return flag.ErrHelp }

// usage is the command's usage line, what it does, and every flag with its
// help.
func (h helpError) usage() string {
	var b strings.Builder
	line, ok := cmdUsage[h.fs.Name()]
	if !ok {
		line = h.fs.Name() + " [flags]"
	}
	fmt.Fprintf(&b, "Usage: leafctl %s\n", line)
	// The command's own flags; the global ones are in leafctl -h.
	own := flag.NewFlagSet(h.fs.Name(), flag.ContinueOnError)
	h.fs.VisitAll(func(f *flag.Flag) {
		if !isGlobalFlag(f.Name) {
			own.Var(f.Value, f.Name, f.Usage)
		}
	})
	flags := 0
	own.VisitAll(func(*flag.Flag) { flags++ })
	if flags > 0 {
		b.WriteString("\nFlags:\n")
		own.SetOutput(&b)
		own.PrintDefaults()
	}
	b.WriteString("\nGlobal flags (--nats, --context, --timeout, credentials; before or after the command): leafctl -h.\n")
	return b.String()
}

// parse parses flags, the global ones among them, and positional
// arguments in any order.
func (c *cli) parse(fs *flag.FlagSet, args []string, positional int) ([]string, error) {
	fs.SetOutput(io.Discard)
	c.globalFlags(fs)
	defer c.noteFlags(fs)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, helpError{fs}
			}
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(pos) != positional {
		return nil, fmt.Errorf("%w: %s wants %d argument(s), got %d", errUsage, fs.Name(), positional, len(pos))
	}
	return pos, nil
}

func (c *cli) connect() (*nats.Conn, error) {
	if err := c.loadContext(); err != nil {
		return nil, err
	}
	opts := []nats.Option{nats.Name("leafctl"), nats.Timeout(c.timeout)}
	if !c.auth.IsZero() {
		auth, err := c.auth.Options()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		opts = append(opts, auth...)
	}
	nc, err := nats.Connect(c.natsURL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", natsauth.RedactURL(c.natsURL), err)
	}
	return nc, nil
}

// loadContext lets a nats CLI context fill what flags and environment left
// unset. It runs once all flags are parsed, so that --context and --nats
// count wherever they stand.
func (c *cli) loadContext() error {
	if c.contextDone {
		return nil
	}
	c.contextDone = true
	nctx, ok, err := natsauth.LoadContext(c.contextName, c.getenv)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if ok {
		if !c.urlGiven && nctx.URL != "" {
			c.natsURL = nctx.URL
		}
		c.auth.FromContext(nctx)
	}
	return nil
}

func (c *cli) request(nc *nats.Conn, msg *nats.Msg) (*nats.Msg, error) {
	ctx, cancel := context.WithTimeout(c.ctx(), c.timeout)
	defer cancel()
	return ask.Request(ctx, nc, msg)
}

func (c *cli) ctx() context.Context { return context.Background() }
