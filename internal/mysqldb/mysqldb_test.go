package mysqldb_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the "mysql" database/sql driver

	"github.com/leafmq/leafmq/internal/mysqldb"
	"github.com/leafmq/leafmq/internal/testenv"
)

const create = "CREATE TABLE IF NOT EXISTS t (id INT PRIMARY KEY) ENGINE=InnoDB"

func db(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	d, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// TestEnsureTable: a missing table is made, also by several processes at
// once; a table that is there needs no CREATE privilege; a missing column
// is added, and one that is there needs no ALTER privilege.
func TestEnsureTable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := testenv.MySQL(t)
	root := db(t, dsn)
	errs := make(chan error, 4)
	for range 4 {
		go func() { errs <- mysqldb.EnsureTable(ctx, root, "t", create) }()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("EnsureTable at once: %v", err)
		}
	}
	if err := mysqldb.AddColumn(ctx, root, "SELECT c FROM t LIMIT 0", "ALTER TABLE t ADD COLUMN c INT"); err != nil {
		t.Fatalf("AddColumn: %v", err)
	}

	rows := db(t, testenv.MySQLUser(t, dsn, "SELECT, INSERT, UPDATE, DELETE"))
	if err := mysqldb.EnsureTable(ctx, rows, "t", create); err != nil {
		t.Fatalf("EnsureTable of a table that is there, without CREATE: %v", err)
	}
	if err := mysqldb.AddColumn(ctx, rows, "SELECT c FROM t LIMIT 0", "ALTER TABLE t ADD COLUMN c INT"); err != nil {
		t.Fatalf("AddColumn of a column that is there, without ALTER: %v", err)
	}
	if err := mysqldb.EnsureTable(ctx, rows, "u", "CREATE TABLE u (id INT)"); err == nil {
		t.Fatal("EnsureTable made a table without the CREATE privilege")
	}
}
