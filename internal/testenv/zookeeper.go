package testenv

import (
	"net"
	"os"
	"strconv"
	"testing"
)

// Environment variables set by scripts/zookeeper.sh and `make test`.
const (
	EnvZKAddr = "LEAF_TEST_ZK_ADDR" // 127.0.0.1:PORT of a standalone ZooKeeper
	EnvZKPID  = "LEAF_TEST_ZK_PID"  // pid of that server's java process
)

// ZooKeeper returns the address ("127.0.0.1:PORT") of the ZooKeeper server
// named by LEAF_TEST_ZK_ADDR. The server is shared by every test: give each
// test its own root (a random znode name). Without a server the test is
// skipped, or fails when LEAF_TEST_REQUIRE=1.
func ZooKeeper(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(EnvZKAddr)
	if addr == "" {
		msg := "testenv: " + EnvZKAddr + " is not set; run `make test`, or " +
			"`scripts/zookeeper.sh start /tmp/leafzk && source /tmp/leafzk/env` first"
		if Required() {
			t.Fatal(msg + " (" + EnvRequire + "=1 forbids skipping)")
		}
		t.Skip(msg)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		t.Fatalf("testenv: %s=%q: %v", EnvZKAddr, addr, err)
	}
	return addr
}

// ZooKeeperPID returns the pid of the ZooKeeper server behind
// LEAF_TEST_ZK_ADDR, from LEAF_TEST_ZK_PID, or 0 if it is unknown.
func ZooKeeperPID() int {
	pid, err := strconv.Atoi(os.Getenv(EnvZKPID))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// RandomName returns a random name of n bytes in hex with prefix, for
// per-test namespaces on shared servers.
func RandomName(prefix string, n int) string { return prefix + randomHex(n) }
