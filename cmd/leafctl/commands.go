package main

import (
	"fmt"
	"strings"
)

// command is one leafctl command, as litestream's cmd/litestream has them:
// a type per command, in a file of its own, that parses its arguments with
// its own FlagSet (its -h prints its usage and every flag) and runs. Ids
// of a monotonic tag come through the Go client (next --mono).
type command interface {
	// Name is what follows leafctl on the command line.
	Name() string
	// Synopsis is the command's lines in leafctl -h; nil hides it.
	Synopsis() []synopsisLine
	// Run parses args and runs the command.
	Run(c *cli, args []string) error
}

// synopsisLine is one line of the overview: how to call, and what it does.
type synopsisLine struct{ call, what string }

// commands is every command: the one place a command is named, so the
// dispatch and the overview cannot disagree.
var commands = []command{
	nextCmd{}, snowflakeCmd{}, decodeCmd{}, batchCmd{}, nodesCmd{}, poolCmd{},
	tagCmd{}, eventsCmd{}, benchCmd{}, benchEchoCmd{},
}

// aliases are other names of commands.
var aliases = map[string]string{"tags": "tag"}

// lookup finds the command called name.
func lookup(name string) (command, bool) {
	if a, ok := aliases[name]; ok {
		name = a
	}
	for _, cmd := range commands {
		if cmd.Name() == name {
			return cmd, true
		}
	}
	return nil, false
}

// commandNames are the names of the commands leafctl -h shows.
func commandNames() []string {
	var names []string
	for _, cmd := range commands {
		if cmd.Synopsis() != nil {
			names = append(names, cmd.Name())
		}
	}
	return names
}

// overview is leafctl -h: every command's synopsis, then the global flags.
func overview() string {
	var b strings.Builder
	b.WriteString("leafctl: ask leafmq for ids and administer it\n\nUsage:\n  leafctl [global flags] COMMAND [flags] [global flags]\n\nCommands:\n")
	for _, cmd := range commands {
		for _, l := range cmd.Synopsis() {
			if len(l.call) <= 36 {
				fmt.Fprintf(&b, "  %-36s  %s\n", l.call, l.what)
			} else {
				fmt.Fprintf(&b, "  %s\n  %-36s  %s\n", l.call, "", l.what)
			}
		}
	}
	b.WriteString(globalFlags)
	return b.String()
}

const globalFlags = `
Global flags (before or after the command):
  --version        print the version and exit
  --context NAME   a nats CLI context (env NATS_CONTEXT; default the selected one):
                   its url and credentials, where flags and env give none
  --nats URL       NATS server(s) (env LEAF_NATS, or NATS_URL; default nats://127.0.0.1:4222)
  --timeout D      per-request timeout (default 5s)
  --creds F, --nkey F, --user U, --password-file F, --token-file F,
  --tls-ca F, --tls-cert F, --tls-key F
                   NATS credentials and TLS (env LEAF_NATS_CREDS, LEAF_NATS_USER,
                   LEAF_NATS_PASSWORD, LEAF_NATS_TOKEN, LEAF_NATS_TLS_CA, …)

Run 'leafctl COMMAND -h' for a command's flags.
Exit codes: 0 ok, 1 request failed, 2 bad arguments.

What the commands show, and why:
  the commands, where leafctl connects  https://github.com/leafmq/leafmq/blob/main/README.md#leafctl
  tag modes (create --mode)             https://github.com/leafmq/leafmq/blob/main/docs/ordering.md
  events, nodes, pools, readiness       https://github.com/leafmq/leafmq/blob/main/docs/operations.md#monitoring
  refusals (503, 404, 400) and faults   https://github.com/leafmq/leafmq/blob/main/docs/fault-model.md
  ids from Go, JavaScript, C, any NATS  https://github.com/leafmq/leafmq/blob/main/docs/clients.md
`
