package config

import (
	"flag"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// setting is one row of a subsystem's settings table: its flag (and so
// its LEAF_* variable), its default in the flag's syntax ("" for none, or
// one that help describes), the field of C it sets, and its help.
type setting[C any] struct {
	name  string
	def   string
	field func(*C) any // *string, *int, *int64 or *time.Duration
	help  string
}

// table is one subsystem's settings, with the group name and title leafd
// -h shows them under.
type table[C any] struct {
	group, title string
	rows         []setting[C]
}

// bind ties the table to the part of a Config it sets.
func (t table[C]) bind(c *C) bound {
	b := bound{group: t.group, title: t.title}
	for _, r := range t.rows {
		b.rows = append(b.rows, boundSetting{name: r.name, def: r.def, help: r.help, ptr: r.field(c)})
	}
	return b
}

// bound is a settings table bound to a Config.
type bound struct {
	group, title string
	rows         []boundSetting
}

type boundSetting struct {
	name, def, help string
	ptr             any
}

// fill sets every zero field that has a default to it.
func (b bound) fill() {
	for _, r := range b.rows {
		if r.def == "" || !reflect.ValueOf(r.ptr).Elem().IsZero() {
			continue
		}
		if err := setText(r.ptr, r.def); err != nil {
			panic(fmt.Sprintf("config: setting %s: default %q: %v", r.name, r.def, err))
		}
	}
}

// setText sets *p from its flag syntax.
func setText(p any, s string) error {
	switch p := p.(type) {
	case *string:
		*p = s
	case *int:
		v, err := strconv.Atoi(s)
		if err != nil {
			return err
		}
		*p = v
	case *int64:
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return err
		}
		*p = v
	case *time.Duration:
		v, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		*p = v
	default:
		return fmt.Errorf("a field of type %T", p)
	}
	return nil
}

// envName is the environment variable of a setting's flag.
func envName(flag string) string {
	return "LEAF_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// FlagSet describes the flags of leafd: every subsystem's settings table,
// and the NATS credentials (natsauth) with the NATS settings.
func (c *Config) FlagSet(out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("leafd", flag.ContinueOnError)
	fs.SetOutput(out)
	for _, b := range c.subsystems() {
		for _, r := range b.rows {
			help := r.help + " (" + envName(r.name) + ")"
			switch p := r.ptr.(type) {
			case *string:
				fs.StringVar(p, r.name, *p, help)
			case *int:
				fs.IntVar(p, r.name, *p, help)
			case *int64:
				fs.Int64Var(p, r.name, *p, help)
			case *time.Duration:
				fs.DurationVar(p, r.name, *p, help)
			default:
				panic(fmt.Sprintf("config: setting %s has a field of type %T", r.name, p))
			}
		}
		if b.group == natsSettings.group {
			c.NATS.Auth.Flags(fs, "nats-")
		}
	}
	fs.Usage = func() { c.printUsage(fs) }
	return fs
}

// printUsage is leafd -h: the flags by subsystem, each with its help and
// its LEAF_* variable.
func (c *Config) printUsage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprintf(w, "Usage: leafd [flags]   (leafd probe URL: exit 0 when URL answers 200)\n\nEvery flag has a LEAF_* environment variable (flags win).\n")
	group := map[string]string{}
	subs := c.subsystems()
	for _, b := range subs {
		for _, r := range b.rows {
			group[r.name] = b.group
		}
	}
	for _, b := range subs {
		fmt.Fprintf(w, "\n%s:\n", b.title)
		fs.VisitAll(func(f *flag.Flag) {
			in, ok := group[f.Name]
			if !ok { // natsauth's credentials
				in = natsSettings.group
			}
			if in != b.group {
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
	c.Store.OpaqueKey = getenv("LEAF_OPAQUE_KEY")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return c, c.Validate()
}
