//go:build !unix

package main

import "errors"

// startRelay: only unix systems let leafd point its own stderr at the
// relay; elsewhere a crash's traceback stays text.
func startRelay() error { return errors.New("the stderr relay needs a unix system") }
