package natsauth

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Context is a context file of the nats CLI (`nats context save`):
// $XDG_CONFIG_HOME/nats/context/NAME.json, by default under ~/.config.
type Context struct {
	Name     string `json:"-"`
	URL      string `json:"url"`
	Creds    string `json:"creds"`
	NKey     string `json:"nkey"`
	User     string `json:"user"`
	Password string `json:"password"`
	Token    string `json:"token"`
	Cert     string `json:"cert"`
	Key      string `json:"key"`
	CA       string `json:"ca"`
}

// ErrContext: a named context cannot be found or read.
var ErrContext = errors.New("nats context")

// LoadContext reads the context name, or when name is "" the one NATS_CONTEXT
// names, or else the one the nats CLI selected (nats context select, kept in
// context.txt). ok is false when none is named or selected.
func LoadContext(name string, getenv func(string) string) (ctx Context, ok bool, err error) {
	dir := contextDir(getenv)
	if name == "" {
		name = getenv("NATS_CONTEXT")
	}
	if name == "" {
		b, err := os.ReadFile(filepath.Join(dir, "context.txt"))
		if errors.Is(err, fs.ErrNotExist) {
			return Context{}, false, nil
		}
		if err != nil {
			return Context{}, false, fmt.Errorf("%w: %v", ErrContext, err)
		}
		if name = strings.TrimSpace(string(b)); name == "" {
			return Context{}, false, nil
		}
	}
	if strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return Context{}, false, fmt.Errorf("%w: bad context name %q", ErrContext, name)
	}
	path := filepath.Join(dir, "context", name+".json")
	b, err := os.ReadFile(path)
	if err != nil {
		return Context{}, false, fmt.Errorf("%w %q: %v", ErrContext, name, err)
	}
	if err := json.Unmarshal(b, &ctx); err != nil {
		return Context{}, false, fmt.Errorf("%w %q: %s: %v", ErrContext, name, path, err)
	}
	ctx.Name = name
	return ctx, true, nil
}

// contextDir is the nats CLI's configuration directory.
func contextDir(getenv func(string) string) string {
	if x := getenv("XDG_CONFIG_HOME"); x != "" {
		return filepath.Join(x, "nats")
	}
	home := getenv("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	return filepath.Join(home, ".config", "nats")
}

// FromContext sets each setting that is still empty from ctx: flags and
// environment variables win over a context, as in the nats CLI. A context
// whose way to authenticate differs from one already set adds nothing to
// it.
func (c *Config) FromContext(ctx Context) {
	if len(c.methods()) == 0 {
		switch {
		case ctx.Creds != "":
			c.Creds = ctx.Creds
		case ctx.NKey != "":
			c.NKey = ctx.NKey
		case ctx.User != "":
			c.User, c.Password = ctx.User, ctx.Password
		case ctx.Token != "":
			c.Token = ctx.Token
		}
	}
	if c.TLSCA == "" {
		c.TLSCA = ctx.CA
	}
	if c.TLSCert == "" && c.TLSKey == "" {
		c.TLSCert, c.TLSKey = ctx.Cert, ctx.Key
	}
}
