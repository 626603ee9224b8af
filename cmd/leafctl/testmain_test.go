package main

import (
	"os"
	"testing"
)

// TestMain lets the test binary stand in for leafctl when a test runs it as
// a child process (bench's echo process): with LEAFCTL_TEST_MAIN=1 it runs
// the command line instead of the tests.
func TestMain(m *testing.M) {
	if os.Getenv("LEAFCTL_TEST_MAIN") == "1" {
		c := &cli{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
		os.Exit(c.run(os.Args[1:]))
	}
	os.Setenv("LEAFCTL_TEST_MAIN", "1") // inherited by children only: this process is past the check
	os.Exit(m.Run())
}
