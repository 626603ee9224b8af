// Package docs_test keeps README.md and docs/ true to the code: every
// command in them is run, or checked against the built binaries' own flag
// sets (commands_test.go); every client program runs against a real leafd
// (clients_test.go); every relative link and #anchor resolves, and the
// binaries' links into the docs too (links_test.go).
package docs_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leafmq/leafmq/internal/testenv"
)

// root is the repository's root, seen from this package's directory.
const root = ".."

// markdownFiles are the documents whose commands and links are checked:
// README.md, docs/*.md and every README.md under deploy/, as paths from
// the repository's root.
func markdownFiles(t testing.TB) []string {
	t.Helper()
	files := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md: %v", err)
	}
	for _, d := range docs {
		files = append(files, filepath.ToSlash(strings.TrimPrefix(d, root+string(filepath.Separator))))
	}
	err = filepath.WalkDir(filepath.Join(root, "deploy"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "README.md" {
			rel, _ := filepath.Rel(root, path)
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// readRepo returns the text of a file named from the repository's root.
func readRepo(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// block is a fenced code block of a markdown file.
type block struct {
	file string // from the repository's root
	line int    // of the opening fence, 1-based
	lang string // the fence's info string's first word; "" for none
	text string // the lines between the fences
}

func (b block) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// codeBlocks returns the fenced (```) code blocks of a markdown text.
func codeBlocks(file, text string) []block {
	var out []block
	var cur *block
	var lines []string
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if !strings.HasPrefix(trimmed, "```") {
			if cur != nil {
				lines = append(lines, line)
			}
			continue
		}
		if cur == nil {
			lang, _, _ := strings.Cut(strings.TrimSpace(strings.TrimPrefix(trimmed, "```")), " ")
			cur = &block{file: file, line: i + 1, lang: lang}
			lines = nil
			continue
		}
		cur.text = strings.Join(lines, "\n")
		out = append(out, *cur)
		cur = nil
	}
	return out
}

// The binaries, built once for the package's tests; TestMain removes them.
var (
	binDir  string
	binOnce sync.Once
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// bins returns the paths of leafd and leafctl built from this tree.
func bins(t testing.TB) (leafdBin, leafctlBin string) {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "leafmq-docs-bin-")
		if binErr != nil {
			return
		}
		for _, pkg := range []string{"cmd/leafd", "cmd/leafctl"} {
			cmd := exec.Command("go", "build", "-o", binDir, "github.com/leafmq/leafmq/"+pkg)
			cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
			if out, err := cmd.CombinedOutput(); err != nil {
				binErr = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
				return
			}
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return filepath.Join(binDir, "leafd"), filepath.Join(binDir, "leafctl")
}

// leafd is a running leafd on free loopback ports.
type leafd struct {
	natsURL string // nats://127.0.0.1:PORT: its embedded server's, or the one it joined
	httpURL string // http://127.0.0.1:PORT
	cmd     *exec.Cmd
	exited  chan struct{}
	data    string // removed by stop when the leafd made it
	ownData bool
	stderr  *testenv.Buffer
}

// startLeafd starts a leafd with its defaults (embedded nats-server and
// JetStream KV store) on free loopback ports and a temp data directory,
// and waits until it is ready.
func startLeafd(bin string) (*leafd, error) {
	natsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	data, err := os.MkdirTemp("", "leafmq-docs-data-")
	if err != nil {
		return nil, err
	}
	n, err := launch(bin, data, "--name", "docs", "--nats-listen", natsAddr)
	if err != nil {
		_ = os.RemoveAll(data)
		return nil, err
	}
	n.natsURL, n.ownData = "nats://"+natsAddr, true
	return n, nil
}

// launch starts bin with args on data and a free HTTP port, and waits
// until /readyz answers 200.
func launch(bin, data string, args ...string) (*leafd, error) {
	httpAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	n := &leafd{httpURL: "http://" + httpAddr, data: data, exited: make(chan struct{}), stderr: &testenv.Buffer{}}
	n.cmd = exec.Command(bin, append(args, "--http", httpAddr, "--data", data)...)
	n.cmd.Stdout, n.cmd.Stderr = n.stderr, n.stderr
	if err := n.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = n.cmd.Wait(); close(n.exited) }()
	if err := n.waitReady(60 * time.Second); err != nil {
		n.stop()
		return nil, err
	}
	return n, nil
}

// waitReady waits until the node's /readyz answers 200.
func (n *leafd) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		code, body := n.get("/readyz")
		if code == http.StatusOK {
			return nil
		}
		select {
		case <-n.exited:
			return fmt.Errorf("leafd exited before it was ready:\n%s", n.stderr)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("leafd not ready after %v (%d %s):\n%s", limit, code, body, n.stderr)
		}
	}
}

// get asks the node's HTTP port for path: the status code (0 when it
// does not answer) and the body.
func (n *leafd) get(path string) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(n.httpURL + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// stop stops the node with SIGTERM (a graceful stop), or SIGKILL after
// 30 s, and removes the data directory it made.
func (n *leafd) stop() {
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(30 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.exited
	}
	if n.ownData {
		_ = os.RemoveAll(n.data)
	}
}

// kill stops the node with SIGKILL, as a crash.
func (n *leafd) kill() {
	_ = n.cmd.Process.Kill()
	<-n.exited
}

// freeAddr returns a loopback address whose port is free right now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}

// run runs a command with a deadline and returns its stdout, its stderr
// and its error.
func run(t testing.TB, dir string, timeout time.Duration, name string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (ran past %v)", err, timeout)
	}
	return out.String(), errOut.String(), err
}

// lines returns the non-empty lines of s.
func lines(s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out
}
