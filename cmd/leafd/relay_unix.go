//go:build unix

package main

import (
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// startRelay points this process's descriptor 2 at a pipe read by leafd
// stderr-relay (relay.go); os.Stderr, the log handler and the runtime all
// write to descriptor 2. Should the relay end first (killed on its own),
// descriptor 2 points at the original stderr again: lines are then written
// as they are, rather than lost or killing leafd with SIGPIPE.
func startRelay() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	orig, err := unix.Dup(2)
	if err != nil {
		return err
	}
	unix.CloseOnExec(orig)
	r, w, err := os.Pipe()
	if err != nil {
		_ = unix.Close(orig)
		return err
	}
	cmd := exec.Command(exe, relayCommand)
	cmd.Stdin, cmd.Stderr = r, os.NewFile(uintptr(orig), "stderr")
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		_ = unix.Close(orig)
		return err
	}
	r.Close()
	// A write to a descriptor 2 whose reader is gone fails with EPIPE
	// instead of killing the process once SIGPIPE is notified.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	if err := unix.Dup2(int(w.Fd()), 2); err != nil {
		w.Close()
		_ = cmd.Process.Kill()
		return err
	}
	w.Close()
	go func() {
		_ = cmd.Wait()
		_ = unix.Dup2(orig, 2)
	}()
	return nil
}
