// Package fsutil holds the one way leafmq writes a local file that ids
// depend on (a snowflake lease file, the ZooKeeper cache, segment floors
// and steps): WriteFile, durable across a power cut. Ground floor: it
// imports only the standard library.
package fsutil
