// Package mysqldb is what leafmq's MySQL packages (segment/mysql,
// snowflake/dbworker) share: making the tables and columns they need, and
// reading the server's errors.
//
// It asks for no privilege it does not use: a table that is there is not
// created again, a column that is there is not added.
//
// CREATE TABLE IF NOT EXISTS needs the CREATE privilege even when the
// table exists, so a service account limited to reading and writing rows
// (the tables made beforehand from deploy/schema.sql) would be refused at
// every start. EnsureTable asks whether the table is there first.
//
// Missing and Denied sort the server's errors that no retry mends: a
// database, table or column that is not there, and a user the server
// refuses (a wrong password, a missing grant).
package mysqldb
