// Package datadir holds a leafd's claim on its data directory: the flock
// that keeps a second process off it (Lock, ErrInUse), the leafd.lock file
// that names the holder, and the instance record (instance.json) that lets
// a restarted node name its dead predecessor (Lock.TakeOver). It also names
// the files under the directory that other packages keep there
// (FloorFileName).
//
// A Lock is used by one goroutine at a time: the node takes it first at
// start and releases it last at close. Ground floor: it imports only the
// standard library and internal/fsutil.
package datadir
