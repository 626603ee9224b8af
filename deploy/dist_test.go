package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// make dist builds version-stamped release binaries and a SHA256SUMS that
// sha256sum -c accepts (here for this machine's platform; the release
// builds linux and darwin, amd64 and arm64, the same way).
func TestMakeDist(t *testing.T) {
	if testing.Short() {
		t.Skip("builds leafd")
	}
	dir := t.TempDir()
	platform := runtime.GOOS + "/" + runtime.GOARCH
	cmd := exec.Command("make", "-s", "dist", "DIST="+dir, "PLATFORMS="+platform, "VERSION=1.2.3-test")
	cmd.Dir = ".."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make dist: %v\n%s", err, b)
	}
	sums, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	suffix := "-1.2.3-test-" + runtime.GOOS + "-" + runtime.GOARCH
	for _, bin := range []string{"leafd", "leafctl"} {
		if !strings.Contains(string(sums), "  "+bin+suffix+"\n") {
			t.Errorf("SHA256SUMS does not list %s%s:\n%s", bin, suffix, sums)
		}
	}
	check := exec.Command("sha256sum", "-c", "SHA256SUMS")
	check.Dir = dir
	if b, err := check.CombinedOutput(); err != nil {
		t.Fatalf("sha256sum -c: %v\n%s", err, b)
	}
	b, err := exec.Command(filepath.Join(dir, "leafd"+suffix), "--version").Output()
	if err != nil || !strings.HasPrefix(string(b), "leafd 1.2.3-test (revision ") {
		t.Fatalf("leafd --version = %q, %v", b, err)
	}
	bad := exec.Command("make", "-s", "dist", "DIST="+t.TempDir(), "PLATFORMS="+platform, "VERSION=dev")
	bad.Dir = ".."
	if b, err := bad.CombinedOutput(); err == nil || !strings.Contains(string(b), "not SemVer") {
		t.Fatalf("make dist VERSION=dev: %v\n%s; want a refusal naming SemVer", err, b)
	}
}
