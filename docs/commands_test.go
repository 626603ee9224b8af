package docs_test

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leafmq/leafmq/config"
)

// shellLangs are the info strings of the fenced blocks whose lines are
// commands.
var shellLangs = []string{"sh", "bash", "shell", "console"}

// notRun are the programs the docs name that this machine cannot run, or
// that change it outside a temp directory, each with the reason and where
// it is tested instead. Their arguments that name repository files are
// still checked.
var notRun = map[string]string{
	"docker":     "no Docker here; deploy/image_test.go and deploy/manifests_run_test.go run the image's and compose's commands with the built binaries",
	"kubectl":    "no Kubernetes here; deploy/static_test.go and deploy/manifests_run_test.go check and run the manifests' commands",
	"systemctl":  "needs systemd as init; deploy/static_test.go checks the unit file",
	"journalctl": "needs systemd as init",
	"install":    "writes /usr/local/bin and /etc",
	"sha256sum":  "needs the release archives of make dist; deploy/dist_test.go checks them and SHA256SUMS",
	"tar":        "needs the release archives of make dist; deploy/dist_test.go checks their contents",
	"mariadb":    "needs a MariaDB server named db; deploy/ and segment/mysql tests load deploy/schema.sql into a real MariaDB",
	"curl":       "asks a deployment's leafd or a profile; node/ tests read /metrics and /debug/pprof",
	"grep":       "filters the output of the command before it",
	"cp":         "makes an operator's file",
	"source":     "reads an operator's file",
	"export":     "sets a variable of the operator's shell",
	"openssl":    "makes a secret",
	"promtool":   "deploy/prometheus_test.go runs the same checks on the same files",
	"npm":        "TestClientPrograms installs exactly the package docs/clients.md names (into a temp dir) and runs the program with it",
}

// A command of a doc, as the shell would split it.
type command struct {
	block block
	argv  []string
}

func (c command) String() string { return fmt.Sprintf("%s: %s", c.block, strings.Join(c.argv, " ")) }

// Every command in a shell block of README.md, docs/*.md and deploy's
// READMEs is run, or checked against what it names: leafctl commands that
// answer at once run against a real leafd and must succeed, the others are
// parsed by leafctl itself; leafd's flags are parsed by config.Parse, the
// flag set leafd uses, and a leafd that joins a NATS is started, joined to
// the test's node; make targets and variables are the Makefile's;
// nats-server's flags are parsed by nats-server's own ConfigureOptions;
// nats CLI commands are the ones leafmq's subjects, buckets and services
// take; go commands name packages, flags and benchmarks that exist. A
// program the test does not know fails it: add a check, or a reason to
// notRun.
func TestCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts leafd")
	}
	n := startNode(t)
	checked := 0
	for _, file := range markdownFiles(t) {
		vars := map[string]string{} // a file's blocks are one session
		for _, b := range codeBlocks(file, readRepo(t, file)) {
			switch {
			case slices.Contains(shellLangs, b.lang):
				for _, c := range commandsOf(t, b, vars) {
					checked++
					t.Run(fmt.Sprintf("%s:%d", file, b.line), func(t *testing.T) { checkCommand(t, n, c) })
				}
			case b.lang == "" && isSynopsis(b.text):
				checked++
				checkSynopsis(t, b)
			}
		}
	}
	if checked < 30 {
		t.Errorf("checked %d commands: the docs have more; has the block format changed?", checked)
	}
}

// startNode starts a leafd of the test's own, stopped at its clean-up.
func startNode(t *testing.T) *leafd {
	t.Helper()
	leafdBin, _ := bins(t)
	n, err := startLeafd(leafdBin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.stop)
	return n
}

func checkCommand(t *testing.T, n *leafd, c command) {
	prog := filepath.Base(c.argv[0])
	args := c.argv[1:]
	switch {
	case prog == "leafctl":
		checkLeafctl(t, n, c, args)
	case prog == "leafd":
		checkLeafd(t, n, c, args)
	case prog == "make":
		checkMake(t, c, args)
	case prog == "nats":
		checkNATS(t, c, args)
	case prog == "nats-server":
		checkNATSServer(t, c, args)
	case prog == "go":
		checkGo(t, c, args)
	case prog == "curl" && loopbackAPI(args) != "":
		path := loopbackAPI(args)
		resp, err := http.Get(n.httpURL + path)
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: GET %s = %d %s", c, path, resp.StatusCode, body)
		}
		t.Logf("ran: %s", c)
	case strings.HasPrefix(c.argv[0], "scripts/") || strings.HasPrefix(c.argv[0], "./scripts/"):
		checkScript(t, c, c.argv[0])
	case notRun[prog] != "":
		if prog == "npm" && !regexp.MustCompile(`^install nats@\d+\.\d+\.\d+$`).MatchString(strings.Join(args, " ")) {
			t.Errorf("%s: the only npm command TestClientPrograms runs is `npm install nats@X.Y.Z`", c)
		}
		checkPaths(t, c)
		t.Logf("not run: %s: %s", c, notRun[prog])
	default:
		t.Errorf("%s: %s is a program this test does not know: add a check, or a reason in notRun", c, prog)
	}
	for _, a := range c.argv {
		checkSubst(t, c, a)
	}
}

// loopbackAPI is the path of a curl command that asks a node on this
// machine's loopback for ids or health (the test asks its own node), or "".
func loopbackAPI(args []string) string {
	for _, a := range args {
		u, err := url.Parse(a)
		if err != nil || u.Host == "" {
			if u2, err2 := url.Parse("http://" + a); err2 == nil && !strings.HasPrefix(a, "-") {
				u, err = u2, nil
			}
		}
		if err != nil || u == nil || (u.Hostname() != "127.0.0.1" && u.Hostname() != "localhost") {
			continue
		}
		if strings.HasPrefix(u.Path, "/api/") || u.Path == "/readyz" || u.Path == "/healthz" || u.Path == "/metrics" {
			return u.RequestURI()
		}
	}
	return ""
}

// checkSubst checks the repository's scripts a $(…) in word runs.
func checkSubst(t *testing.T, c command, word string) {
	for _, m := range regexp.MustCompile(`\$\(([^()]*)\)`).FindAllStringSubmatch(word, -1) {
		inner := words(m[1])
		if len(inner) > 0 && (strings.HasPrefix(inner[0], "scripts/") || strings.HasPrefix(inner[0], "./scripts/")) {
			checkScript(t, c, inner[0])
		}
	}
}

// leafctlCommands answer at once: the test runs them against its node.
var leafctlCommands = map[string]bool{"next": true, "snowflake": true, "decode": true, "nodes": true, "pool": true, "tag": true}

func checkLeafctl(t *testing.T, n *leafd, c command, args []string) {
	_, leafctlBin := bins(t)
	var cmd string
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--nats" || a == "-nats":
			i++ // its URL: replaced below
			continue
		case strings.HasPrefix(a, "--nats=") || strings.HasPrefix(a, "-nats="):
			continue
		case cmd == "" && !strings.HasPrefix(a, "-"):
			cmd = a
		}
		rest = append(rest, a)
	}
	if cmd == "" {
		t.Fatalf("%s: no leafctl command", c)
	}
	if leafctlCommands[cmd] {
		out, stderr, err := run(t, ".", time.Minute, leafctlBin, append(rest, "--nats", n.natsURL)...)
		if err != nil {
			t.Errorf("%s: run against a leafd: %v\n%s%s", c, err, out, stderr)
		}
		t.Logf("ran: %s", c)
		return
	}
	// The others run long (bench, events): leafctl parses them, then
	// fails to connect to a port nothing listens on. Exit 2 is a bad
	// argument.
	_, stderr, err := run(t, ".", time.Minute, leafctlBin, append(rest, "--nats", "nats://127.0.0.1:1", "--timeout", "300ms")...)
	if code := exitCode(err); code == 2 || code < 0 {
		t.Errorf("%s: leafctl refuses its arguments (exit %d): %s", c, code, stderr)
	}
	t.Logf("parsed by leafctl (not run: it runs until stopped or for a duration): %s", c)
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

// checkLeafd parses leafd's arguments with leafd's own flag set; a leafd
// that joins a NATS (--nats) is started, joined to the test's node on a
// data directory and HTTP port of its own, and must become ready.
func checkLeafd(t *testing.T, n *leafd, c command, args []string) {
	leafdBin, _ := bins(t)
	if slices.Contains(args, "--version") {
		out, _, err := run(t, ".", 30*time.Second, leafdBin, args...)
		if err != nil || !regexp.MustCompile(`^leafd \S+ \(revision \S+, go[\d.]+ \w+/\w+\)\n$`).MatchString(out) {
			t.Errorf("%s: %v %q", c, err, out)
		}
		return
	}
	noEnv := func(string) string { return "" }
	if _, err := config.Parse(args, noEnv, io.Discard); err != nil {
		t.Errorf("%s: leafd refuses its arguments: %v", c, err)
		return
	}
	if !slices.Contains(args, "--nats") {
		t.Logf("parsed by leafd (not run: it embeds a NATS server on the doc's fixed ports): %s", c)
		return
	}
	// launch gives it a free HTTP port and a temp data directory of its
	// own, after the doc's (the last of a flag wins).
	j, err := launch(leafdBin, t.TempDir(), replaceFlag(args, "--nats", n.natsURL)...)
	if err != nil {
		t.Fatalf("%s: %v", c, err)
	}
	j.stop()
	t.Logf("ran, joined to the test's node: %s", c)
}

// replaceFlag sets --name's value in args (added when missing).
func replaceFlag(args []string, name, value string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		if a == name && i+1 < len(out) {
			out[i+1] = value
			return out
		}
		if strings.HasPrefix(a, name+"=") {
			out[i] = name + "=" + value
			return out
		}
	}
	return append(out, name, value)
}

var (
	makeTargetRE = regexp.MustCompile(`(?m)^([A-Za-z][\w-]*):`)
	makeVarRE    = regexp.MustCompile(`^([A-Z][A-Z0-9_]*)=`)
)

func checkMake(t *testing.T, c command, args []string) {
	mk := readRepo(t, "Makefile")
	var targets []string
	for _, m := range makeTargetRE.FindAllStringSubmatch(mk, -1) {
		targets = append(targets, m[1])
	}
	if len(args) == 0 {
		t.Errorf("%s: make without a target", c)
	}
	for _, a := range args {
		if m := makeVarRE.FindStringSubmatch(a); m != nil {
			if !strings.Contains(mk, "$("+m[1]+")") && !regexp.MustCompile(`(?m)^`+m[1]+`\s*[?:]?=`).MatchString(mk) {
				t.Errorf("%s: the Makefile does not use %s", c, m[1])
			}
			continue
		}
		if !slices.Contains(targets, a) {
			t.Errorf("%s: the Makefile has no target %q (it has %v)", c, a, targets)
		}
	}
}

// The nats CLI is not installed here (go install of natscli builds for
// minutes): its commands are checked against the forms leafmq's docs use,
// and what they name against leafmq's subjects, buckets and services.
var (
	natsSubjectRE = regexp.MustCompile(`^leaf\.(segment\.[A-Za-z0-9_-]{1,128}|mono\.[A-Za-z0-9_-]{1,128}|snowflake(\.[A-Za-z0-9_-]+)?|snowflake\.decode|admin\.[a-z.]+|events\.(>|[a-z]+\.(>|[a-z]+))|floor\.[A-Za-z0-9_-]+)$`)
	natsBuckets   = []string{"leaf_alloc", "leaf_workers", "leaf_mono", "leaf_nodes"}
	natsServices  = []string{"leaf-segment", "leaf-snowflake"}
	natsBodyRE    = regexp.MustCompile(`^(|\d+|\{.*\})$`)
)

func checkNATS(t *testing.T, c command, args []string) {
	var pos []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-s" || a == "--server" || a == "--context" || a == "--creds":
			i++
		case strings.HasPrefix(a, "--server=") || strings.HasPrefix(a, "--context="):
		case strings.HasPrefix(a, "-"):
			t.Errorf("%s: option %s is not one the docs use (-s, --server, --context, --creds)", c, a)
		default:
			pos = append(pos, a)
		}
	}
	bad := func(why string) { t.Errorf("%s: %s", c, why) }
	if len(pos) == 0 {
		bad("no nats command")
		return
	}
	switch strings.Join(pos[:min(2, len(pos))], " ") {
	case "req " + at(pos, 1):
		if len(pos) != 3 {
			bad("nats req SUBJECT BODY: a subject and a body ('' for none)")
		} else if !natsSubjectRE.MatchString(pos[1]) || strings.ContainsAny(pos[1], "*>") {
			bad("not a subject leafd answers: " + pos[1])
		} else if !natsBodyRE.MatchString(pos[2]) {
			bad("a body leafd does not take: " + pos[2])
		}
	case "sub " + at(pos, 1):
		if len(pos) != 2 || !natsSubjectRE.MatchString(pos[1]) {
			bad("nats sub SUBJECT, of leafmq's subjects")
		}
	case "kv get", "kv del", "kv purge", "kv put":
		want := 4
		if pos[1] == "put" {
			want = 5
		}
		if len(pos) != want || !slices.Contains(natsBuckets, pos[2]) {
			bad(fmt.Sprintf("nats kv %s BUCKET KEY%s, with a bucket of %v", pos[1], map[bool]string{true: " VALUE"}[want == 5], natsBuckets))
		}
	case "stream purge":
		if len(pos) != 3 || !slices.Contains(natsBuckets, strings.TrimPrefix(pos[2], "KV_")) {
			bad("nats stream purge KV_<bucket>")
		}
	case "micro ls", "micro info", "micro stats":
		if len(pos) > 3 || (len(pos) == 3 && !slices.Contains(natsServices, pos[2])) {
			bad(fmt.Sprintf("nats micro %s [SERVICE], SERVICE of %v", pos[1], natsServices))
		}
	case "context select":
		if len(pos) > 3 {
			bad("nats context select [NAME]")
		}
	default:
		bad("a nats command the docs do not use: add its form to checkNATS")
	}
	t.Logf("checked, not run (no nats CLI here): %s", c)
}

// checkNATSServer parses nats-server's arguments with its own
// ConfigureOptions, which also loads a -c config file of the repository
// (its $VARIABLES set as the operator would).
func checkNATSServer(t *testing.T, c command, args []string) {
	args = slices.Clone(args)
	for i, a := range args {
		if strings.HasPrefix(a, "deploy/") {
			args[i] = filepath.Join(root, filepath.FromSlash(a))
			// The file and those it includes, beside it.
			confs, _ := filepath.Glob(filepath.Join(filepath.Dir(args[i]), "*.conf"))
			for _, f := range confs {
				conf, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range regexp.MustCompile(`\$([A-Z][A-Z0-9_]*)`).FindAllStringSubmatch(string(conf), -1) {
					t.Setenv(m[1], "docs-test-secret")
				}
			}
		}
	}
	if _, err := server.ConfigureOptions(flag.NewFlagSet("nats-server", flag.ContinueOnError), args, nil, nil, nil); err != nil {
		t.Errorf("%s: nats-server refuses its arguments: %v", c, err)
	}
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return ""
}

func checkGo(t *testing.T, c command, args []string) {
	if len(args) == 0 {
		t.Fatalf("%s: go without a command", c)
	}
	switch args[0] {
	case "install":
		if len(args) != 2 || !regexp.MustCompile(`^[\w./-]+@v\d+\.\d+\.\d+$`).MatchString(args[1]) {
			t.Errorf("%s: go install PKG@vX.Y.Z", c)
		}
		t.Logf("not run: %s: builds a tool from the module proxy for minutes", c)
	case "build":
		pkg := args[len(args)-1]
		if _, stderr, err := run(t, root, 2*time.Minute, "go", "list", pkg); err != nil {
			t.Errorf("%s: go list %s: %v %s", c, pkg, err, stderr)
		}
	case "run":
		// go run PKG FLAGS: every flag is one the program lists in -h.
		if len(args) < 2 {
			t.Fatalf("%s: go run PKG", c)
		}
		bin := filepath.Join(t.TempDir(), "prog")
		if _, stderr, err := run(t, root, 5*time.Minute, "go", "build", "-o", bin, args[1]); err != nil {
			t.Fatalf("%s: go build %s: %v %s", c, args[1], err, stderr)
		}
		out, stderr, _ := run(t, ".", 30*time.Second, bin, "-h")
		help := out + stderr
		for _, a := range args[2:] {
			if strings.HasPrefix(a, "-") {
				name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
				if !regexp.MustCompile(`(?m)^\s+--?` + regexp.QuoteMeta(name) + `\b`).MatchString(help) {
					t.Errorf("%s: %s has no flag %s:\n%s", c, args[1], a, help)
				}
			}
		}
		t.Logf("flags checked, not run (it measures for minutes): %s", c)
	case "test":
		// go test PKG -bench NAME: the benchmark exists.
		pkg, bench := "", ""
		for i, a := range args[1:] {
			if a == "-bench" && i+2 < len(args) {
				bench = args[i+2]
			} else if strings.HasPrefix(a, "./") && pkg == "" {
				pkg = a
			}
		}
		files, _ := filepath.Glob(filepath.Join(root, pkg, "*_test.go"))
		found := false
		for _, f := range files {
			b, _ := os.ReadFile(f)
			found = found || regexp.MustCompile(`func Benchmark\w*`+regexp.QuoteMeta(bench)).Match(b)
		}
		if pkg == "" || bench == "" || !found {
			t.Errorf("%s: no benchmark %q in %q", c, bench, pkg)
		}
	default:
		t.Errorf("%s: go %s: add a check", c, args[0])
	}
}

func checkScript(t *testing.T, c command, path string) {
	fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(strings.TrimPrefix(path, "./"))))
	if err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("%s: %s is not an executable of the repository (%v)", c, path, err)
	}
}

// checkPaths checks that the repository paths an argument names exist.
func checkPaths(t *testing.T, c command) {
	for _, a := range c.argv[1:] {
		for _, p := range regexp.MustCompile(`\b(deploy|scripts)/[\w./-]*\w`).FindAllString(a, -1) {
			if p == "deploy/.env" {
				continue // the operator's copy of deploy/.env.example
			}
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err != nil {
				t.Errorf("%s: %s is not in the repository", c, p)
			}
		}
	}
}

// isSynopsis reports whether an unlabeled block is leafctl's synopsis:
// every line a leafctl command line.
func isSynopsis(text string) bool {
	ls := lines(text)
	return len(ls) > 0 && !slices.ContainsFunc(ls, func(l string) bool { return !strings.HasPrefix(l, "leafctl ") })
}

var (
	synFlagRE = regexp.MustCompile(`(?:^|[\s\[|])(--?[a-z][\w-]*)`)
	helpFlag  = regexp.MustCompile(`--?[a-z][\w-]*`)
)

// checkSynopsis checks each line of the README's leafctl synopsis against
// leafctl's own help: its command (and tag's subcommands) exist, and every
// flag it shows is one of theirs or a global flag.
func checkSynopsis(t *testing.T, b block) {
	_, leafctlBin := bins(t)
	global, _, err := run(t, ".", 30*time.Second, leafctlBin, "--help")
	if err != nil {
		t.Fatal(err)
	}
	_, globalFlags, _ := strings.Cut(global, "Global flags")
	for _, line := range lines(b.text) {
		code, _, _ := strings.Cut(line, "#")
		words := strings.Fields(code)[1:]
		for len(words) > 0 && strings.HasPrefix(words[0], "[") { // [--nats URL]
			for len(words) > 0 && !strings.HasSuffix(words[0], "]") {
				words = words[1:]
			}
			words = words[1:]
		}
		if len(words) == 0 {
			t.Errorf("%s: %q names no command", b, line)
			continue
		}
		cmds := [][]string{{words[0]}}
		if words[0] == "tag" {
			cmds = nil
			for _, sub := range regexp.MustCompile(`(?:^tag|\|)\s+\[?([a-z][a-z-]+)`).FindAllStringSubmatch(strings.Join(words, " "), -1) {
				cmds = append(cmds, []string{"tag", sub[1]})
			}
		}
		var helps string
		for _, cmd := range cmds {
			out, stderr, err := run(t, ".", 30*time.Second, leafctlBin, append(cmd, "-h")...)
			if err != nil || !strings.HasPrefix(out, "Usage: leafctl "+strings.Join(cmd, " ")) && !strings.HasPrefix(out, "leafctl "+cmd[0]) {
				t.Errorf("%s: %q: leafctl %s -h: %v %s%s", b, line, strings.Join(cmd, " "), err, out, stderr)
			}
			helps += out
		}
		for _, m := range synFlagRE.FindAllStringSubmatch(code, -1) {
			f := strings.TrimLeft(m[1], "-")
			if !slices.ContainsFunc(helpFlag.FindAllString(helps+globalFlags, -1), func(h string) bool { return strings.TrimLeft(h, "-") == f }) {
				t.Errorf("%s: %q shows %s, which leafctl %v -h does not list", b, line, m[1], cmds)
			}
		}
	}
}

// commandsOf splits a shell block into simple commands: continuation
// lines joined, comments dropped, a console block's prompts ($) only,
// variables assigned earlier in the file (vars) expanded, and lists and
// pipelines (&&, ||, ;, |, &) split; redirections and leading assignments
// dropped.
func commandsOf(t *testing.T, b block, vars map[string]string) []command {
	t.Helper()
	text := strings.ReplaceAll(b.text, "\\\n", " ")
	if b.lang == "console" {
		var prompts []string
		for _, line := range strings.Split(text, "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "$ "); ok {
				prompts = append(prompts, rest)
			}
		}
		text = strings.Join(prompts, "\n")
	}
	var out []command
	var argv []string
	flush := func() {
		i := 0
		for i < len(argv) && regexp.MustCompile(`^[A-Za-z_]\w*=`).MatchString(argv[i]) {
			i++
		}
		if i == len(argv) { // assignments alone: kept for later commands
			for _, a := range argv {
				k, v, _ := strings.Cut(a, "=")
				vars[k] = v
				checkSubst(t, command{block: b, argv: argv}, v)
			}
		} else {
			out = append(out, command{block: b, argv: argv[i:]})
		}
		argv = nil
	}
	toks := tokens(text)
	for i := 0; i < len(toks); i++ {
		tk := toks[i]
		name := strings.Trim(tk.word, "${}")
		switch {
		case tk.op == "<" || tk.op == ">":
			i++ // and its file
		case tk.op != "":
			flush()
		case strings.HasPrefix(tk.word, "$") && vars[name] != "":
			argv = append(argv, words(vars[name])...)
		default:
			argv = append(argv, tk.word)
		}
	}
	flush()
	return out
}

// token is a shell word, or an operator (a newline is one).
type token struct{ word, op string }

// tokens splits shell text into words (quotes removed) and operators,
// dropping comments. A quoted string may span lines.
func tokens(text string) []token {
	var out []token
	var cur strings.Builder
	inWord := false
	emit := func() {
		if inWord {
			out = append(out, token{word: cur.String()})
		}
		cur.Reset()
		inWord = false
	}
	for i := 0; i < len(text); i++ {
		ch := text[i]
		switch {
		case ch == ' ' || ch == '\t':
			emit()
		case ch == '\n':
			emit()
			out = append(out, token{op: "\n"})
		case ch == '#' && !inWord:
			for i+1 < len(text) && text[i+1] != '\n' {
				i++
			}
		case ch == '\'':
			j := strings.IndexByte(text[i+1:], '\'')
			if j < 0 {
				j = len(text) - i - 1
			}
			cur.WriteString(text[i+1 : i+1+j])
			inWord = true
			i += j + 1
		case ch == '"':
			inWord = true
			for i++; i < len(text) && text[i] != '"'; i++ {
				if text[i] == '\\' && i+1 < len(text) {
					i++
				}
				cur.WriteByte(text[i])
			}
		case ch == '$' && i+1 < len(text) && text[i+1] == '(':
			depth := 0
			for ; i < len(text); i++ {
				cur.WriteByte(text[i])
				if text[i] == '(' {
					depth++
				} else if text[i] == ')' {
					if depth--; depth == 0 {
						break
					}
				}
			}
			inWord = true
		case strings.ContainsRune("&|;<>", rune(ch)):
			emit()
			op := string(ch)
			if i+1 < len(text) && text[i+1] == ch {
				op += string(ch)
				i++
			}
			out = append(out, token{op: op})
		case ch == '\\' && i+1 < len(text):
			i++
			cur.WriteByte(text[i])
			inWord = true
		default:
			cur.WriteByte(ch)
			inWord = true
		}
	}
	emit()
	return out
}

// words returns the words of a shell line.
func words(s string) []string {
	var out []string
	for _, tk := range tokens(s) {
		if tk.op == "" {
			out = append(out, tk.word)
		}
	}
	return out
}
