// Package mysqlschema makes the tables and columns leafmq needs on MySQL
// and MariaDB, and asks for no privilege it does not use: a table that is
// there is not created again, a column that is there is not added.
//
// CREATE TABLE IF NOT EXISTS needs the CREATE privilege even when the
// table exists, so a service account limited to reading and writing rows
// (the tables made beforehand from deploy/schema.sql) would be refused at
// every start. EnsureTable asks whether the table is there first.
package mysqlschema
