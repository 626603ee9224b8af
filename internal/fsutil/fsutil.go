package fsutil

import (
	"os"
	"path/filepath"
)

// WriteFile replaces path with data durably: the data goes to a temp file
// in the same directory, is fsynced, renamed over path, and the directory
// is fsynced, so after a power cut readers see the old or the new content,
// never a mix and never an older one than a WriteFile that returned nil.
// The directory is created if missing.
func WriteFile(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync() // the content is on disk before the name points at it
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	// The rename itself is on disk only once the directory is.
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
