package mysqldb

import (
	"context"
	"database/sql"
	"errors"
	"slices"

	"github.com/go-sql-driver/mysql"
)

// MySQL error numbers read here.
const (
	erDBAccess       = 1044 // ER_DBACCESS_DENIED_ERROR
	erAccess         = 1045 // ER_ACCESS_DENIED_ERROR
	erBadDB          = 1049 // ER_BAD_DB_ERROR
	erBadField       = 1054 // ER_BAD_FIELD_ERROR
	erNoDB           = 1046 // ER_NO_DB_ERROR
	erTableAccess    = 1142 // ER_TABLEACCESS_DENIED_ERROR
	erNoSuchTable    = 1146 // ER_NO_SUCH_TABLE
	erSpecificAccess = 1227 // ER_SPECIFIC_ACCESS_DENIED_ERROR
)

// Missing reports whether err is the server's "no such database, table
// or column".
func Missing(err error) bool {
	return is(err, erBadDB, erNoDB, erNoSuchTable, erBadField)
}

// Denied reports whether err is the server refusing the user: a wrong
// password, or a grant missing for the database, a table or a statement.
func Denied(err error) bool {
	return is(err, erDBAccess, erAccess, erTableAccess, erSpecificAccess)
}

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

// is reports whether err is a MySQL error of one of numbers.
func is(err error, numbers ...uint16) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && slices.Contains(numbers, me.Number)
}
