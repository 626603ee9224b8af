package config

import (
	"flag"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEConfigurationTable: the README's Configuration table and
// leafd's flags (the settings table and natsauth's) are the same set, and
// each row names its flags' environment variables.
func TestREADMEConfigurationTable(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "## Configuration")
	end := strings.Index(doc[start+1:], "\n## ")
	if start < 0 || end < 0 {
		t.Fatal("README has no Configuration section")
	}
	section := doc[start : start+1+end]
	flagRE := regexp.MustCompile("`--([a-z0-9-]+)`")
	rows := map[string]string{} // flag -> its row
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `--") {
			continue
		}
		first := strings.SplitN(line, "|", 3)[1]
		for _, m := range flagRE.FindAllStringSubmatch(first, -1) {
			rows[m[1]] = line
		}
	}
	var c Config
	fs := c.FlagSet(io.Discard)
	seen := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		seen[f.Name] = true
		row, ok := rows[f.Name]
		switch {
		case !ok:
			t.Errorf("flag --%s is not in the README's Configuration table", f.Name)
		case !strings.Contains(row, envName(f.Name)):
			t.Errorf("README row of --%s does not name %s: %s", f.Name, envName(f.Name), row)
		}
	})
	for name := range rows {
		if !seen[name] && name != "version" {
			t.Errorf("README's Configuration table lists --%s, which leafd does not have", name)
		}
	}
	for _, b := range c.subsystems() {
		for _, s := range b.rows {
			if s.help == "" || strings.Contains(s.help, "(LEAF_") {
				t.Errorf("setting %s: help %q (the environment variable is added, not written)", s.name, s.help)
			}
			// The README shows each default the table applies.
			if row, ok := rows[s.name]; ok && s.def != "" {
				if cols := strings.Split(row, "|"); len(cols) < 4 || !strings.Contains(cols[3], "`"+s.def+"`") {
					t.Errorf("README row of --%s does not give its default `%s`: %s", s.name, s.def, row)
				}
			}
		}
	}
}

// TestUsageByGroup: leafd -h shows every flag once, under its subsystem.
func TestUsageByGroup(t *testing.T) {
	var c Config
	var out strings.Builder
	fs := c.FlagSet(&out)
	fs.Usage()
	text := out.String()
	fs.VisitAll(func(f *flag.Flag) {
		if n := strings.Count(text, "  --"+f.Name+" "); n != 1 {
			t.Errorf("--%s appears %d times in leafd -h", f.Name, n)
		}
	})
}
