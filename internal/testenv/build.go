package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Build builds the main package pkg of this module (e.g. "cmd/leafd") into
// a temp dir of t and returns the executable's path, so tests start the
// daemon the way users do. Go's build cache makes a repeat cost only the
// link.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", bin, "github.com/leafmq/leafmq/"+strings.TrimPrefix(pkg, "./"))
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testenv: go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}
