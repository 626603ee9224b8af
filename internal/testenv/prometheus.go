package testenv

import (
	"os/exec"
	"testing"
)

// Prometheus binaries, from Debian's prometheus package (scripts/test.sh
// installs it).
const (
	promtoolBin   = "promtool"
	prometheusBin = "prometheus"
)

// Promtool returns the path of promtool, found on PATH (Debian's prometheus
// package puts it at /usr/bin/promtool). Without it the test is skipped, or
// fails when LEAF_TEST_REQUIRE=1.
func Promtool(t testing.TB) string {
	t.Helper()
	return binary(t, promtoolBin)
}

// Prometheus returns the path of the prometheus server binary, found on
// PATH. Tests start their own server on a free 127.0.0.1 port with a
// storage directory under t.TempDir(), and stop it by its pid. Without it
// the test is skipped, or fails when LEAF_TEST_REQUIRE=1.
func Prometheus(t testing.TB) string {
	t.Helper()
	return binary(t, prometheusBin)
}

// binary returns the path of name on PATH, or skips (or fails) the test.
func binary(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		msg := "testenv: " + name + " is not on PATH; run `make test`, or " +
			"`apt-get install -y --no-install-recommends prometheus` first"
		if Required() {
			t.Fatal(msg + " (" + EnvRequire + "=1 forbids skipping)")
		}
		t.Skip(msg)
	}
	return path
}
