package node

import (
	"os"
	"path/filepath"
	"testing"
)

// takeOver names the previous instance of a data directory only when it
// ran in that very directory during this boot: never from a copy of the
// record (another directory, another host) or from an earlier boot, whose
// instance may be alive.
func TestTakeOver(t *testing.T) {
	if bootID() == "" {
		t.Skip("no boot id on this system")
	}
	lockAt := func(dir string) *dirLock {
		t.Helper()
		l, err := lockDataDir(dir, "", "t")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	a := t.TempDir()
	l := lockAt(a)
	if prev := l.takeOver("one"); prev != "" {
		t.Fatalf("first start: previous instance %q, want none", prev)
	}
	_ = l.Close()
	l = lockAt(a)
	if prev := l.takeOver("two"); prev != "one" {
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
	if prev := l.takeOver("copy"); prev != "" {
		t.Fatalf("a copied record: previous instance %q, want none", prev)
	}
	_ = l.Close()

	// Another boot (or another host with the same directory's inode).
	old := bootID
	bootID = func() string { return "another-boot" }
	defer func() { bootID = old }()
	l = lockAt(a)
	defer l.Close()
	if prev := l.takeOver("three"); prev != "" {
		t.Fatalf("after another boot: previous instance %q, want none", prev)
	}
}
