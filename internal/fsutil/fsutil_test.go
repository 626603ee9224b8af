package fsutil_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/leafmq/leafmq/internal/fsutil"
)

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "f.json")
	for _, content := range []string{"first\n", "second, longer\n", ""} {
		if err := fsutil.WriteFile(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("read %q, %v; want %q", got, err, content)
		}
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil || len(entries) != 1 {
		t.Fatalf("directory holds %v (%v); want only f.json: no temp file left", entries, err)
	}
	if err := fsutil.WriteFile(filepath.Join(path, "x"), nil); err == nil {
		t.Fatal("a path under a file was written")
	}
}
