package docs_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
)

// repoURL is where the binaries' help and status page link the docs: the
// repository on GitHub (the module's path), at main.
const repoURL = "https://github.com/leafmq/leafmq/blob/main/"

var (
	// mdLinkRE is an inline link or image: [text](target "title").
	mdLinkRE = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	// codeSpanRE is inline code, whose brackets are no links.
	codeSpanRE = regexp.MustCompile("`[^`\n]*`")
	// headingRE is an ATX heading.
	headingRE = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	// htmlAnchorRE is an HTML anchor: <a id="x"> or <a name="x">.
	htmlAnchorRE = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
)

// prose returns text without its fenced code blocks (their lines left
// empty, so that line numbers hold).
func prose(text string) []string {
	ls := strings.Split(text, "\n")
	in := false
	for i, l := range ls {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
			ls[i] = ""
		} else if in {
			ls[i] = ""
		}
	}
	return ls
}

// anchors returns the #anchors of a markdown text as GitHub makes them:
// each heading's text lower-cased, without punctuation but - and _, its
// spaces made -, a -N added to the Nth repeat; and HTML anchors.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	count := map[string]int{}
	for _, l := range prose(text) {
		for _, m := range htmlAnchorRE.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
		m := headingRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s := slug(m[1])
		if n := count[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		count[s]++
	}
	return out
}

func slug(heading string) string {
	heading = mdLinkRE.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsNumber(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// resolve checks a link target relative to the file from (both from the
// repository's root): the file or directory exists, and an #anchor is a
// heading of the markdown file it names.
func resolve(t *testing.T, from, target string) error {
	t.Helper()
	p, anchor, _ := strings.Cut(target, "#")
	p, _, _ = strings.Cut(p, "?")
	file := from
	if p != "" {
		file = path.Clean(path.Join(path.Dir(from), p))
		if strings.HasPrefix(file, "../") {
			return fmt.Errorf("%s leaves the repository", target)
		}
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(file))); err != nil {
			return fmt.Errorf("%s: no %s in the repository", target, file)
		}
	}
	if anchor == "" {
		return nil
	}
	if !strings.HasSuffix(file, ".md") {
		return fmt.Errorf("%s: an anchor in %s, which is not markdown", target, file)
	}
	if !anchors(readRepo(t, file))[anchor] {
		return fmt.Errorf("%s: %s has no heading #%s", target, file, anchor)
	}
	return nil
}

// Every relative link of README.md, docs/*.md and deploy's READMEs names
// a file or directory of the repository, and every #anchor a heading of
// the file it points into; links to the repository's GitHub pages too.
func TestLinks(t *testing.T) {
	checked := 0
	for _, file := range markdownFiles(t) {
		// The whole text at once: a link's text may span lines.
		text := codeSpanRE.ReplaceAllStringFunc(strings.Join(prose(readRepo(t, file)), "\n"), func(span string) string {
			return strings.Repeat(" ", len(span))
		})
		for _, ix := range mdLinkRE.FindAllStringSubmatchIndex(text, -1) {
			label, target := text[ix[2]:ix[3]], text[ix[4]:ix[5]]
			line := 1 + strings.Count(text[:ix[0]], "\n")
			if rest, ok := strings.CutPrefix(target, repoURL); ok {
				target = "/" + rest
			}
			switch {
			case strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:"):
				continue
			case strings.HasPrefix(target, "/"): // from the repository's root
				target = strings.Repeat("../", strings.Count(file, "/")) + strings.TrimPrefix(target, "/")
			}
			checked++
			if err := resolve(t, file, target); err != nil {
				t.Errorf("%s:%d: [%s](%s): %v", file, line, strings.Join(strings.Fields(label), " "), text[ix[4]:ix[5]], err)
			}
		}
	}
	if checked < 20 {
		t.Errorf("checked %d links: the docs have more; has the link format changed?", checked)
	}
}

// docLinks returns the repository paths (and #anchors) that text links
// through repoURL.
func docLinks(text string) []string {
	var out []string
	for _, m := range regexp.MustCompile(regexp.QuoteMeta(repoURL)+`([\w./-]+(?:#[\w-]+)?)`).FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

// checkDocLinks checks that text links each of want (a path, without
// anchor) through repoURL, and that every such link resolves.
func checkDocLinks(t *testing.T, what, text string, want ...string) {
	t.Helper()
	links := docLinks(text)
	for _, l := range links {
		if err := resolve(t, "README.md", l); err != nil {
			t.Errorf("%s links %s%s: %v", what, repoURL, l, err)
		}
	}
	for _, w := range want {
		if !slices.ContainsFunc(links, func(l string) bool { return l == w || strings.HasPrefix(l, w+"#") }) {
			t.Errorf("%s does not link %s%s (it links %v)", what, repoURL, w, links)
		}
	}
}

// leafctl --help points to the docs that explain what its commands show:
// the README's leafctl section, the operations guide (events, nodes, the
// pool), the fault model (what a refusal means) and the client guide.
func TestLeafctlHelpLinksTheDocs(t *testing.T) {
	_, leafctlBin := bins(t)
	out, stderr, err := run(t, ".", 30*time.Second, leafctlBin, "--help")
	if err != nil {
		t.Fatalf("leafctl --help: %v %s", err, stderr)
	}
	checkDocLinks(t, "leafctl --help", out, "README.md", "docs/operations.md", "docs/fault-model.md", "docs/clients.md")
}

// The status page a leafd serves points to the docs that explain what it
// shows: the operations guide (the page, readiness, metrics) and the
// fault model (why a node is not ready, what a refusal means).
func TestStatusPageLinksTheDocs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts leafd")
	}
	n := startNode(t)
	resp, err := http.Get(n.httpURL + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	page, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /: %v %s", err, resp.Status)
	}
	checkDocLinks(t, "the status page", string(page), "docs/operations.md", "docs/fault-model.md")
}

// Every test the docs name as evidence (`TestX`, `TestX/sub`) is a test
// function of the repository: a renamed or removed test would leave a
// claim without its proof.
func TestDocsNameRealTests(t *testing.T) {
	var src strings.Builder
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "bin" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, "_test.go") {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			src.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	funcs := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^func (Test\w+)\(`).FindAllStringSubmatch(src.String(), -1) {
		funcs[m[1]] = true
	}
	named := 0
	for _, file := range markdownFiles(t) {
		for _, m := range regexp.MustCompile("`(Test[A-Z]\\w*)(?:/[\\w-]+)?`").FindAllStringSubmatch(readRepo(t, file), -1) {
			named++
			if !funcs[m[1]] {
				t.Errorf("%s names %s, which no _test.go defines", file, m[1])
			}
		}
	}
	if named < 50 {
		t.Errorf("the docs name %d tests: has the format changed?", named)
	}
}

// The fault model's tables stay tables: no cell is longer than a few
// lines (300 characters); the depth is in each fault's section.
func TestFaultModelCellsShort(t *testing.T) {
	for i, l := range prose(readRepo(t, "docs/fault-model.md")) {
		if !strings.HasPrefix(l, "|") {
			continue
		}
		for _, cell := range strings.Split(strings.Trim(l, "|"), " | ") {
			if n := len([]rune(strings.TrimSpace(cell))); n > 300 {
				t.Errorf("docs/fault-model.md:%d: a cell of %d characters (at most 300): %.80s…", i+1, n, strings.TrimSpace(cell))
			}
		}
	}
}

// The README is the entrance, at most 300 lines: depth lives in docs/.
func TestREADMEShort(t *testing.T) {
	if n := strings.Count(readRepo(t, "README.md"), "\n"); n > 300 {
		t.Errorf("README.md has %d lines, at most 300: move the depth to docs/", n)
	}
}

// The README's Go client lines are lines of the program that
// TestClientPrograms runs (docs/clients.md), so they compile and work.
func TestREADMEGoClientIsTested(t *testing.T) {
	var program string
	for _, b := range codeBlocks("docs/clients.md", readRepo(t, "docs/clients.md")) {
		if b.lang == "go" && strings.Contains(b.text, `"github.com/leafmq/leafmq/client"`) {
			program = b.text
			break
		}
	}
	if program == "" {
		t.Fatal("docs/clients.md has no Go program of the client package")
	}
	norm := func(l string) string {
		code, _, _ := strings.Cut(l, "//")
		return strings.Join(strings.Fields(code), " ")
	}
	have := map[string]bool{}
	for _, l := range strings.Split(program, "\n") {
		have[norm(l)] = true
	}
	shown := 0
	for _, b := range codeBlocks("README.md", readRepo(t, "README.md")) {
		if b.lang != "go" {
			continue
		}
		for i, l := range strings.Split(b.text, "\n") {
			if n := norm(l); n != "" {
				shown++
				if !have[n] {
					t.Errorf("README.md:%d: %q is not a line of docs/clients.md's Go program", b.line+1+i, strings.TrimSpace(l))
				}
			}
		}
	}
	if shown == 0 {
		t.Error("README.md shows no Go client lines")
	}
}

// faultNameRE is a chaos fault kind as the docs write it: a name, a glob
// (net-*) or a brace list (net-{latency,reset}-nats).
var faultNameRE = regexp.MustCompile("`((?:kill|pause|restart|freeze|hosts|net|clock|op)-[\\w{},*-]+)`")

// Every chaos fault the docs name is one the harness injects
// (leafchaos --list-faults), and the fault model names every one: a fault
// renamed or added without its doc shows here.
func TestDocsNameRealFaults(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "leafchaos")
	if _, stderr, err := run(t, root, 5*time.Minute, "go", "build", "-o", bin, "./cmd/leafchaos"); err != nil {
		t.Fatalf("go build leafchaos: %v %s", err, stderr)
	}
	out, stderr, err := run(t, ".", 30*time.Second, bin, "--list-faults")
	if err != nil {
		t.Fatalf("leafchaos --list-faults: %v %s", err, stderr)
	}
	faults := lines(out)
	if len(faults) < 10 {
		t.Fatalf("leafchaos --list-faults: %q", out)
	}
	inFaultModel := map[string]bool{}
	for _, file := range markdownFiles(t) {
		for _, m := range faultNameRE.FindAllStringSubmatch(readRepo(t, file), -1) {
			matched := false
			for _, name := range expandBraces(m[1]) {
				re := regexp.MustCompile("^" + strings.ReplaceAll(regexp.QuoteMeta(name), `\*`, `.*`) + "$")
				for _, f := range faults {
					if re.MatchString(f) {
						matched = true
						if file == "docs/fault-model.md" {
							inFaultModel[f] = true
						}
					}
				}
			}
			if !matched {
				t.Errorf("%s names the chaos fault %s, which leafchaos --list-faults does not have", file, m[1])
			}
		}
	}
	for _, f := range faults {
		if !inFaultModel[f] {
			t.Errorf("docs/fault-model.md does not name the chaos fault %s", f)
		}
	}
}

// expandBraces expands the shell's {a,b} lists of s.
func expandBraces(s string) []string {
	i := strings.IndexByte(s, '{')
	j := strings.IndexByte(s, '}')
	if i < 0 || j < i {
		return []string{s}
	}
	var out []string
	for _, alt := range strings.Split(s[i+1:j], ",") {
		out = append(out, expandBraces(s[:i]+alt+s[j+1:])...)
	}
	return out
}
