package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Environment variables for browser tests.
const (
	// EnvChromium names the Chromium binary; scripts/test.sh installs the
	// Debian package and sets it. Unset: "chromium" is looked up in PATH.
	EnvChromium = "LEAF_TEST_CHROMIUM"
	// EnvArtifacts is a directory where tests leave files for humans
	// (screenshots); unset: the test's own temporary directory.
	EnvArtifacts = "LEAF_TEST_ARTIFACTS"
)

// Chromium returns the path of a Chromium binary for headless tests: the
// one named by LEAF_TEST_CHROMIUM, or chromium (or chromium-browser) in PATH.
// Without one the test is skipped, or fails when LEAF_TEST_REQUIRE=1.
// Run it with HeadlessFlags.
func Chromium(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(EnvChromium); p != "" {
		path, err := exec.LookPath(p)
		if err != nil {
			t.Fatalf("testenv: %s=%q: %v", EnvChromium, p, err)
		}
		return path
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	msg := "testenv: no chromium in PATH and " + EnvChromium + " is not set; " +
		"run `make test`, or `apt-get install -y chromium` first"
	if Required() {
		t.Fatal(msg + " (" + EnvRequire + "=1 forbids skipping)")
	}
	t.Skip(msg)
	return ""
}

// HeadlessFlags are the flags for a headless Chromium run on a machine
// without a display, a sandbox or a network: add --dump-dom,
// --screenshot=FILE or --virtual-time-budget=MS, then the URL. The profile
// lives in a fresh directory under t.TempDir().
func HeadlessFlags(t testing.TB) []string {
	t.Helper()
	return []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		// Without these Chromium floods the closed network with refused connections.
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio",
		"--user-data-dir=" + filepath.Join(t.TempDir(), "chromium-profile"),
	}
}

// ArtifactDir is the directory for files a test leaves for humans: the
// one named by LEAF_TEST_ARTIFACTS (created if missing), or t.TempDir().
func ArtifactDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(EnvArtifacts)
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("testenv: %s: %v", EnvArtifacts, err)
	}
	return dir
}
