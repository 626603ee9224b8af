package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Environment variables set by scripts/mariadb.sh and `make test`.
const (
	EnvMySQLDSN = "LEAF_TEST_MYSQL_DSN" // server-level DSN, go-sql-driver syntax
	EnvMySQLPID = "LEAF_TEST_MYSQL_PID" // pid of that server's mariadbd
	EnvRequire  = "LEAF_TEST_REQUIRE"   // "1": a missing server fails the test instead of skipping it
)

// adminTimeout bounds creating and dropping a test database.
const adminTimeout = 15 * time.Second

// Required reports whether LEAF_TEST_REQUIRE=1: tests must not skip for want
// of a server.
func Required() bool { return os.Getenv(EnvRequire) == "1" }

// MySQL returns the DSN of a fresh, empty database created for this test on
// the server named by LEAF_TEST_MYSQL_DSN, in go-sql-driver syntax with
// parseTime=true (root@tcp(127.0.0.1:PORT)/leaf_test_<random>?parseTime=true).
// The database is dropped at clean-up. Without a server the test is skipped,
// or fails when LEAF_TEST_REQUIRE=1.
func MySQL(t testing.TB) string {
	t.Helper()
	base := os.Getenv(EnvMySQLDSN)
	if base == "" {
		msg := "testenv: " + EnvMySQLDSN + " is not set; run `make test`, or " +
			"`scripts/mariadb.sh start /tmp/leafmy && source /tmp/leafmy/env` first"
		if Required() {
			t.Fatal(msg + " (" + EnvRequire + "=1 forbids skipping)")
		}
		t.Skip(msg)
	}
	cfg, err := mysql.ParseDSN(base)
	if err != nil {
		t.Fatalf("testenv: %s: %v", EnvMySQLDSN, err)
	}
	cfg.DBName = ""
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatalf("testenv: %s: %v", EnvMySQLDSN, err)
	}
	admin := sql.OpenDB(conn)
	admin.SetMaxOpenConns(1)

	name := "leaf_test_" + randomHex(8)
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		_ = admin.Close()
		t.Fatalf("testenv: create database on %s: %v", cfg.Addr, err)
	}
	t.Cleanup(func() {
		defer admin.Close()
		ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Logf("testenv: drop database %s: %v", name, err)
		}
	})

	cfg.DBName = name
	cfg.ParseTime = true
	return cfg.FormatDSN()
}

// MySQLUser creates a user on the server of dsn (a DSN from MySQL) that
// holds only privileges (as GRANT writes them, "SELECT, INSERT") on dsn's
// database, and returns dsn with that user in it. The user is dropped at
// clean-up.
func MySQLUser(t testing.TB, dsn, privileges string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	admin := sql.OpenDB(conn)
	admin.SetMaxOpenConns(1)
	user, password := "leaf_"+randomHex(6), randomHex(12)
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	for _, stmt := range []string{
		"CREATE USER '" + user + "'@'%' IDENTIFIED BY '" + password + "'",
		"GRANT " + privileges + " ON `" + cfg.DBName + "`.* TO '" + user + "'@'%'",
	} {
		if _, err := admin.ExecContext(ctx, stmt); err != nil {
			_ = admin.Close()
			t.Fatalf("testenv: %s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		defer admin.Close()
		ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP USER IF EXISTS '"+user+"'@'%'"); err != nil {
			t.Logf("testenv: drop user %s: %v", user, err)
		}
	})
	cfg.User, cfg.Passwd = user, password
	return cfg.FormatDSN()
}

// MySQLPID returns the pid of the MariaDB server behind LEAF_TEST_MYSQL_DSN,
// from LEAF_TEST_MYSQL_PID, or 0 if it is unknown. Fault tests SIGSTOP and
// SIGCONT it; other packages' tests share that server, so keep stops short.
func MySQLPID() int {
	pid, err := strconv.Atoi(os.Getenv(EnvMySQLPID))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}
