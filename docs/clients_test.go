package docs_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/internal/testenv"
	"github.com/leafmq/leafmq/snowflake"
	"github.com/leafmq/leafmq/wire"
)

// docURL is the NATS URL the programs of docs/clients.md connect to; the
// test gives them its node's instead.
const docURL = "nats://127.0.0.1:4222"

// The tags the programs ask, made by the test before they run: orders
// starts above 2^53, where a JavaScript Number no longer holds every
// integer (two ids would print as one), and versions is monotonic.
const (
	ordersFloor   = 1<<53 + 1
	versionsFloor = 1 << 54
	rangeWidth    = 10_000_000 // far more ids than the programs take
)

// Every program of docs/clients.md runs against a real leafd and prints
// ids, one a line: each must be an id the node can have handed out (of
// tag orders, of the monotonic tag versions, or a snowflake id made in the
// last minutes) and distinct from every other id any program printed.
func TestClientPrograms(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs programs against a leafd")
	}
	n := startNode(t)
	nc, err := nats.Connect(n.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	admin(t, nc, wire.AdminRequest{Tag: "orders", Step: 1000, MaxID: ordersFloor})
	admin(t, nc, wire.AdminRequest{Tag: "versions", Step: 1000, MaxID: versionsFloor, Mode: "mono"})

	doc := readRepo(t, "docs/clients.md")
	seen := map[int64]string{}
	ran := map[string]int{}
	for _, b := range codeBlocks("docs/clients.md", doc) {
		var out string
		switch b.lang {
		case "go":
			out = runGo(t, b, n.natsURL)
		case "js":
			out = runJS(t, b, doc, n.natsURL)
		case "c":
			out = runC(t, b, n.natsURL)
		case "sh":
			continue // commands: commands_test.go
		default:
			t.Errorf("%s: a %q block: the test runs go, js and c programs; run this one too", b, b.lang)
			continue
		}
		if out == "" {
			continue // skipped: its toolchain is missing
		}
		ran[b.lang]++
		ids := lines(out)
		if len(ids) < 5 {
			t.Errorf("%s printed %d ids, want at least 5:\n%s", b, len(ids), out)
		}
		for _, s := range ids {
			id, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				t.Errorf("%s printed %q, not an int64", b, s)
				continue
			}
			if why := invalid(id); why != "" {
				t.Errorf("%s printed %d: %s", b, id, why)
			}
			if first, ok := seen[id]; ok {
				t.Errorf("%s printed %d, which %s printed too", b, id, first)
			}
			seen[id] = b.String()
		}
	}
	if ran["go"] < 2 {
		t.Errorf("ran %d Go programs of docs/clients.md, want 2 (the client package and nats.go alone)", ran["go"])
	}
	t.Logf("programs run: %v; %d distinct ids", ran, len(seen))
}

// invalid says why id cannot be one the test's node handed out, or "".
func invalid(id int64) string {
	switch {
	case id >= ordersFloor && id < ordersFloor+rangeWidth, id >= versionsFloor && id < versionsFloor+rangeWidth:
		return ""
	case id <= 0:
		return "not positive"
	}
	d := snowflake.LeafLayout().Decompose(id)
	if age := time.Since(d.Time); age < -time.Minute || age > 10*time.Minute {
		return fmt.Sprintf("neither of tag orders (from %d) nor versions (from %d), nor a snowflake id of now (its time: %v)",
			int64(ordersFloor), int64(versionsFloor), d.Time)
	}
	return ""
}

// admin creates a tag through leaf.admin.tag.create.
func admin(t *testing.T, nc *nats.Conn, req wire.AdminRequest) {
	t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	reply, err := nc.Request("leaf.admin.tag.create", body, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.ReplyError(reply); err != nil {
		t.Fatalf("create %s: %v", req.Tag, err)
	}
}

// withURL gives a program the node's NATS URL in place of the doc's.
func withURL(t *testing.T, b block, url string) string {
	t.Helper()
	if !strings.Contains(b.text, docURL) {
		t.Fatalf("%s does not connect to %s", b, docURL)
	}
	return strings.ReplaceAll(b.text, docURL, url)
}

// runGo builds a Go program as a package of this module (through an
// overlay: nothing is written to the tree), so that it uses this tree's
// client package, runs it and returns its stdout.
func runGo(t *testing.T, b block, url string) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(withURL(t, b, url)), 0o644); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	// A directory that does not exist: the overlay alone holds the program.
	pkg := filepath.Join(abs, "docs", "internal", fmt.Sprintf("program%d", b.line), "main.go")
	overlay, _ := json.Marshal(map[string]map[string]string{"Replace": {pkg: src}})
	overlayFile := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "program")
	if _, stderr, err := run(t, root, 5*time.Minute, "go", "build", "-overlay", overlayFile, "-o", bin, "./"+filepath.ToSlash(filepath.Join("docs", "internal", filepath.Base(filepath.Dir(pkg))))); err != nil {
		t.Fatalf("%s: go build: %v\n%s", b, err, stderr)
	}
	out, stderr, err := run(t, dir, time.Minute, bin)
	if err != nil {
		t.Fatalf("%s: %v\n%s", b, err, stderr)
	}
	return out
}

// npmSpec is the package the JavaScript section installs: `npm install nats@X`.
var npmSpec = regexp.MustCompile(`(?m)^npm install (nats@\d+\.\d+\.\d+)\s*$`)

// runJS runs the JavaScript program with Node.js and the nats package from
// npm, installed once per version into a cache under the temp directory
// (never into the tree). Without node and npm it is skipped, or fails
// under LEAF_TEST_REQUIRE=1 (scripts/test.sh installs them).
func runJS(t *testing.T, b block, doc, url string) string {
	t.Helper()
	m := npmSpec.FindStringSubmatch(doc)
	if m == nil {
		t.Fatal("docs/clients.md has no `npm install nats@X.Y.Z` line")
	}
	nodeBin, npmBin := lookPath(t, "node", "npm")
	if nodeBin == "" {
		return ""
	}
	modules := npmInstall(t, npmBin, m[1])
	dir := t.TempDir()
	if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ids.mjs"), []byte(withURL(t, b, url)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, err := run(t, dir, time.Minute, nodeBin, "ids.mjs")
	if err != nil {
		t.Fatalf("%s: node: %v\n%s", b, err, stderr)
	}
	return out
}

// npmInstall installs spec into a cache directory of its own under the
// temp directory, once: later runs find it there. It returns the
// node_modules directory.
func npmInstall(t *testing.T, npm, spec string) string {
	t.Helper()
	cache := filepath.Join(os.TempDir(), "leafmq-npm-"+strings.NewReplacer("@", "-", "/", "-").Replace(spec))
	modules := filepath.Join(cache, "node_modules")
	if _, err := os.Stat(filepath.Join(modules, "nats", "package.json")); err == nil {
		return modules
	}
	// Install beside the cache and rename it into place: a run that stops
	// halfway, or two runs at once, never leave a half-filled cache.
	tmp, err := os.MkdirTemp(os.TempDir(), "leafmq-npm-install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	if _, stderr, err := run(t, tmp, 5*time.Minute, npm, "install", "--no-audit", "--no-fund", "--no-package-lock", "--prefix", tmp, spec); err != nil {
		t.Fatalf("npm install %s: %v\n%s", spec, err, stderr)
	}
	if err := os.Rename(tmp, cache); err != nil {
		if _, statErr := os.Stat(filepath.Join(modules, "nats", "package.json")); statErr != nil {
			t.Fatalf("npm install %s: %v", spec, err)
		}
	}
	return modules
}

// runC compiles the C program against Debian's libnats-dev and runs it.
// Without cc, pkg-config or libnats it is skipped, or fails under
// LEAF_TEST_REQUIRE=1 (scripts/test.sh installs libnats-dev).
func runC(t *testing.T, b block, url string) string {
	t.Helper()
	cc, pkgConfig := lookPath(t, "cc", "pkg-config")
	if cc == "" {
		return ""
	}
	flags, _, err := run(t, ".", 30*time.Second, pkgConfig, "--cflags", "--libs", "libnats")
	if err != nil {
		missing(t, "libnats (Debian's libnats-dev) is not installed")
		return ""
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "ids.c")
	if err := os.WriteFile(src, []byte(withURL(t, b, url)), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "ids")
	args := append([]string{"-Wall", "-Werror", "-o", bin, src}, strings.Fields(flags)...)
	if _, stderr, err := run(t, dir, 2*time.Minute, cc, args...); err != nil {
		t.Fatalf("%s: cc: %v\n%s", b, err, stderr)
	}
	out, stderr, err := run(t, dir, time.Minute, bin)
	if err != nil {
		t.Fatalf("%s: %v\n%s", b, err, stderr)
	}
	return out
}

// lookPath returns the paths of two programs, or "" after skipping the
// test (failing it under LEAF_TEST_REQUIRE=1) when either is missing.
func lookPath(t *testing.T, a, b string) (string, string) {
	t.Helper()
	pa, errA := exec.LookPath(a)
	pb, errB := exec.LookPath(b)
	if errA != nil || errB != nil {
		missing(t, fmt.Sprintf("%s and %s are needed (%v, %v)", a, b, errA, errB))
		return "", ""
	}
	return pa, pb
}

// missing skips a subtest's worth of work for want of a tool: the test
// goes on with the other programs, and fails at its end under
// LEAF_TEST_REQUIRE=1, where nothing may be skipped.
func missing(t *testing.T, msg string) {
	t.Helper()
	msg = "docs: " + msg + "; run `make test`, which installs them"
	if testenv.Required() {
		t.Error(msg + " (" + testenv.EnvRequire + "=1 forbids skipping)")
		return
	}
	t.Log("skipped: " + msg)
}
