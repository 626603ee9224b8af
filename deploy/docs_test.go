package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The alert table of README.md lists the rules of prometheus/alerts.yml,
// each with its severity, in the file's order: no more, no fewer.
func TestReadmeAlertTable(t *testing.T) {
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert  string
				Labels map[string]string
			}
		}
	}
	if err := yaml.Unmarshal(repoFile(t, "prometheus/alerts.yml"), &rules); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				want = append(want, r.Alert+" "+r.Labels["severity"])
			}
		}
	}
	got := readmeAlerts(t, string(repoFile(t, "README.md")))
	if len(want) == 0 || len(got) == 0 {
		t.Fatalf("alerts.yml has %d alerts, the README's table %d rows: has either's shape changed?", len(want), len(got))
	}
	if !slices.Equal(got, want) {
		t.Errorf("README.md's alert table (alert severity):\n  %s\nprometheus/alerts.yml:\n  %s",
			strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// readmeAlerts reads the rows "| `Alert` | when | severity |" of the table
// that follows "`alerts.yml`:" as "Alert severity".
func readmeAlerts(t *testing.T, readme string) []string {
	t.Helper()
	_, after, ok := strings.Cut(readme, "`alerts.yml`:\n")
	if !ok {
		t.Fatal("README.md has no \"`alerts.yml`:\" table")
	}
	row := regexp.MustCompile("^\\|\\s*`(\\w+)`\\s*\\|.*\\|\\s*(\\w+)\\s*\\|$")
	var out []string
	inTable := false
	for line := range strings.SplitSeq(after, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "|"):
			inTable = true
			if m := row.FindStringSubmatch(line); m != nil {
				out = append(out, m[1]+" "+m[2])
			} else if !strings.HasPrefix(line, "| alert") && !strings.HasPrefix(line, "|---") {
				t.Errorf("README.md alert table: row %q is not | `Alert` | when | severity |", line)
			}
		case inTable:
			return out
		}
	}
	return out
}

// deployPathRE matches a path under deploy/ in running text.
var deployPathRE = regexp.MustCompile(`\bdeploy/[A-Za-z0-9_.*/-]*[A-Za-z0-9_*/]`)

// fileExts are the endings of the files the deploy docs name.
var fileExts = []string{".yml", ".yaml", ".json", ".conf", ".cfg", ".sql", ".service", ".example", ".md", ".sh", ".go", ".dockerignore"}

// notInRepo are paths the deploy docs name that are not files of the
// repository: made by the operator or the build.
var notInRepo = []string{"deploy/.env", "bin/"}

// docFileRefs returns the repository paths named in text: the `quoted`
// words that look like a path (a folder, or a known file ending) and
// every deploy/… path. Absolute paths (inside a container or a host), URLs,
// images, annotations and assignments are not repository paths.
func docFileRefs(text string) []string {
	var refs []string
	for _, m := range regexp.MustCompile("`([^`\\s]+)`").FindAllStringSubmatch(text, -1) {
		p := m[1]
		if strings.HasPrefix(p, "/") || strings.HasPrefix(p, "$") || strings.HasPrefix(p, "-") || strings.ContainsAny(p, ":=<>@{}") {
			continue
		}
		if first, _, ok := strings.Cut(p, "/"); ok && strings.Contains(first, ".") {
			continue // a domain: an image, an annotation (prometheus.io/*)
		}
		if strings.Contains(p, "/") || slices.ContainsFunc(fileExts, func(e string) bool { return strings.HasSuffix(p, e) }) {
			refs = append(refs, p)
		}
	}
	return append(refs, deployPathRE.FindAllString(text, -1)...)
}

// refExists reports whether ref names something in the repository: a path
// (or glob) from deploy/ or from the repository's root, or the name of a
// file under deploy/ (the README names k8s/'s files in its k8s section).
func refExists(t *testing.T, ref string) bool {
	t.Helper()
	if slices.Contains(notInRepo, ref) {
		return true
	}
	for _, base := range []string{".", ".."} {
		if m, _ := filepath.Glob(filepath.Join(base, filepath.FromSlash(ref))); len(m) > 0 {
			return true
		}
	}
	if strings.Contains(strings.TrimSuffix(ref, "/"), "/") {
		return false
	}
	found := false
	_ = filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == strings.TrimSuffix(ref, "/") {
			found = true
		}
		return nil
	})
	return found
}

// No deploy doc names a file that does not exist: README.md, the package
// comment, and what the top README says of deploy/.
func TestDocsNameExistingFiles(t *testing.T) {
	docs := map[string]string{
		"deploy/README.md": string(repoFile(t, "README.md")),
		"deploy/doc.go":    string(repoFile(t, "doc.go")),
	}
	top, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var deployRefs []string
	for _, r := range deployPathRE.FindAllString(string(top), -1) {
		deployRefs = append(deployRefs, "`"+r+"`")
	}
	docs["README.md (deploy/ paths)"] = strings.Join(deployRefs, " ")
	checked := 0
	for doc, text := range docs {
		for _, ref := range docFileRefs(text) {
			checked++
			if !refExists(t, ref) {
				t.Errorf("%s names %s, which does not exist", doc, ref)
			}
		}
	}
	if checked < 30 {
		t.Fatalf("only %d file references found in the deploy docs: has their shape changed?", checked)
	}
}
