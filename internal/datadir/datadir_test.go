package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TakeOver names the previous instance of a data directory only when it
// ran in that very directory during this boot: never from a copy of the
// record (another directory, another host) or from an earlier boot, whose
// instance may be alive.
func TestTakeOver(t *testing.T) {
	if bootID() == "" {
		t.Skip("no boot id on this system")
	}
	lockAt := func(dir string) *Lock {
		t.Helper()
		l, err := Acquire(dir, "", "t")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a := t.TempDir()
	l := lockAt(a)
	if prev := l.TakeOver("one"); prev != "" {
		t.Fatalf("first start: previous instance %q, want none", prev)
	}
	_ = l.Close()
	l = lockAt(a)
	if prev := l.TakeOver("two"); prev != "one" {
		t.Fatalf("restart: previous instance %q, want one", prev)
	}
	_ = l.Close()

	// The record copied into another data directory (a copied data dir).
	b := t.TempDir()
	rec, err := os.ReadFile(filepath.Join(a, instanceFileName))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b, instanceFileName), rec, 0o644); err != nil {
		t.Fatal(err)
	}
	l = lockAt(b)
	if prev := l.TakeOver("copy"); prev != "" {
		t.Fatalf("a copied record: previous instance %q, want none", prev)
	}
	_ = l.Close()

	// Another boot (or another host with the same directory's inode).
	old := bootID
	bootID = func() string { return "another-boot" }
	defer func() { bootID = old }()
	l = lockAt(a)
	defer l.Close()
	if prev := l.TakeOver("three"); prev != "" {
		t.Fatalf("after another boot: previous instance %q, want none", prev)
	}
}

// A second Acquire of a held data directory fails with ErrInUse naming the
// holder, through its store reached by a symlink too, and after leafd.lock
// was removed; Close frees it.
func TestAcquireInUse(t *testing.T) {
	dir := t.TempDir()
	first, err := Acquire(dir, filepath.Join(dir, "jetstream"), "first")
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	inUse := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), `"first"`) {
			t.Fatalf("%s: %v; want ErrInUse naming \"first\"", what, err)
		}
	}
	_, err = Acquire(dir, filepath.Join(dir, "jetstream"), "second")
	inUse("the same directory", err)

	other := t.TempDir()
	if err := os.Symlink(filepath.Join(dir, "jetstream"), filepath.Join(other, "jetstream")); err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(other, filepath.Join(other, "jetstream"), "linked")
	inUse("a store linked to a held one", err)

	if err := os.Remove(filepath.Join(dir, lockFileName)); err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire(dir, "", "second"); !errors.Is(err, ErrInUse) {
		t.Fatalf("after leafd.lock was removed: %v; want ErrInUse", err)
	}

	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Acquire(dir, filepath.Join(dir, "jetstream"), "third")
	if err != nil {
		t.Fatalf("after Close: %v", err)
	}
	_ = again.Close()
}
