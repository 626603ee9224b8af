// Package testenv gives tests the real servers that scripts start for them.
//
// `make test` (and CI) runs scripts/mariadb.sh, which starts a throwaway
// MariaDB on a free 127.0.0.1 port and exports
//
//	LEAF_TEST_MYSQL_DSN=root@tcp(127.0.0.1:PORT)/   a server-level DSN (no database)
//	LEAF_TEST_MYSQL_PID=PID                         the mariadbd process, for fault tests
//	LEAF_TEST_REQUIRE=1                             missing servers fail instead of skip
//
// MySQL creates a fresh database per test and drops it at clean-up, so tests
// (and packages run in parallel by go test) never see each other's rows:
//
//	func TestStore(t *testing.T) {
//		dsn := testenv.MySQL(t) // root@tcp(127.0.0.1:PORT)/leaf_test_1a2b…?parseTime=true
//		...
//	}
//
// When LEAF_TEST_MYSQL_DSN is unset the test is skipped with a hint to run
// `make test`, unless LEAF_TEST_REQUIRE=1, which makes it fail: a CI run must
// not pass by skipping. To run one package by hand:
//
//	scripts/mariadb.sh start /tmp/leafmy && source /tmp/leafmy/env
//	go test ./segment/mysql/
//	scripts/mariadb.sh stop /tmp/leafmy
//
// ZooKeeper works the same way: scripts/zookeeper.sh exports
// LEAF_TEST_ZK_ADDR=127.0.0.1:PORT and LEAF_TEST_ZK_PID, and
// testenv.ZooKeeper(t) returns the address (skipping or failing as above).
// The server is shared, so each test uses its own random root znode.
//
// Eventually is the one polling helper of the module's tests: it waits for
// a condition another goroutine makes true, with a bound on the wait that
// is a guard against hangs, never a timing assertion.
//
// The helpers are safe to call from parallel tests.
package testenv
