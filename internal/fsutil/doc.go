// Package fsutil holds the one way leafmq writes a local file that ids
// depend on (a snowflake lease file, the ZooKeeper cache, segment floors
// and steps): WriteFile, durable across a power cut. Ground floor: it
// imports only the standard library.
//
// The room: floor 1 of the README's Layout; it imports only the standard
// library and outside modules. No package it imports stands on its floor or
// above (farm-studio look: no arrow runs up).
package fsutil
