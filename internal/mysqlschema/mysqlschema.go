package mysqlschema

import (
	"context"
	"database/sql"
	"errors"

	"github.com/go-sql-driver/mysql"
)

// MySQL error numbers read here.
const (
	erNoSuchTable = 1146 // ER_NO_SUCH_TABLE
	erBadField    = 1054 // ER_BAD_FIELD_ERROR
)

// EnsureTable runs create when table (as it is written in SQL, quoted
// where needed) is missing, and only then. Of two processes that create
// it at once one may fail; the table is then there and that is no error.
// Any other error of the check (no privilege to read it, no database) is
// returned as it is.
func EnsureTable(ctx context.Context, db *sql.DB, table, create string) error {
	exists := "SELECT 1 FROM " + table + " LIMIT 0"
	return ensure(ctx, db, exists, create, erNoSuchTable)
}

// AddColumn runs alter when verify (a SELECT of the column) finds it
// missing, and only then. Of two processes that alter at once one fails;
// verify then finds the column the other added.
func AddColumn(ctx context.Context, db *sql.DB, verify, alter string) error {
	return ensure(ctx, db, verify, alter, erBadField)
}

func ensure(ctx context.Context, db *sql.DB, verify, change string, missing uint16) error {
	_, err := db.ExecContext(ctx, verify)
	if !is(err, missing) {
		return err
	}
	if _, err := db.ExecContext(ctx, change); err != nil {
		if _, again := db.ExecContext(ctx, verify); again == nil {
			return nil
		}
		return err
	}
	return nil
}

// is reports whether err is the MySQL error numbered number.
func is(err error, number uint16) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == number
}
