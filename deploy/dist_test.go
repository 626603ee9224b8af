package deploy_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// make dist packs each binary with LICENSE and README.md into a .tar.gz
// per platform, as nats-server releases are (a folder named as the
// archive), and a SHA256SUMS over the archives that sha256sum -c accepts
// (here for this machine's platform; the release builds linux and darwin,
// amd64 and arm64, the same way).
func TestMakeDist(t *testing.T) {
	if testing.Short() {
		t.Skip("builds leafd")
	}
	dir := t.TempDir()
	platform := runtime.GOOS + "/" + runtime.GOARCH
	cmd := exec.Command("make", "-s", "dist", "DIST="+dir, "PLATFORMS="+platform, "VERSION=1.2.3-test")
	cmd.Dir = ".."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make dist: %v\n%s", err, b)
	}
	suffix := "-v1.2.3-test-" + runtime.GOOS + "-" + runtime.GOARCH
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"SHA256SUMS", "leafctl" + suffix + ".tar.gz", "leafd" + suffix + ".tar.gz"}; !slices.Equal(names, want) {
		t.Fatalf("dist holds %v, want %v", names, want)
	}
	sums, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(sums), "\n"); n != 2 {
		t.Errorf("SHA256SUMS has %d lines, want one per archive:\n%s", n, sums)
	}
	check := exec.Command("sha256sum", "-c", "SHA256SUMS")
	check.Dir = dir
	if b, err := check.CombinedOutput(); err != nil {
		t.Fatalf("sha256sum -c: %v\n%s", err, b)
	}
	license := repoFile(t, "../LICENSE")
	readme := repoFile(t, "../README.md")
	if !bytes.Contains(license, []byte("Apache License\n                           Version 2.0")) ||
		!bytes.Contains(license, []byte("Copyright 2026 The leafmq Authors")) {
		t.Error("LICENSE is not the Apache-2.0 text with the leafmq Authors' copyright")
	}
	for _, bin := range []string{"leafd", "leafctl"} {
		folder := bin + suffix
		files := untar(t, filepath.Join(dir, folder+".tar.gz"))
		var got []string
		for name := range files {
			got = append(got, name)
		}
		slices.Sort(got)
		if want := []string{folder + "/", folder + "/LICENSE", folder + "/README.md", folder + "/" + bin}; !slices.Equal(got, want) {
			t.Fatalf("%s.tar.gz holds %v, want %v", folder, got, want)
		}
		if !bytes.Equal(files[folder+"/LICENSE"].data, license) || !bytes.Equal(files[folder+"/README.md"].data, readme) {
			t.Errorf("%s.tar.gz: LICENSE or README.md differs from the repository's", folder)
		}
		exe := files[folder+"/"+bin]
		if exe.mode&0o111 == 0 || exe.uid != 0 || exe.gid != 0 {
			t.Errorf("%s in %s.tar.gz: mode %v, owner %d:%d; want executable, 0:0", bin, folder, exe.mode, exe.uid, exe.gid)
		}
		path := filepath.Join(t.TempDir(), bin)
		if err := os.WriteFile(path, exe.data, 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := exec.Command(path, "--version").Output()
		if err != nil || !strings.HasPrefix(string(b), bin+" 1.2.3-test (revision ") {
			t.Fatalf("%s --version = %q, %v", bin, b, err)
		}
	}
	bad := exec.Command("make", "-s", "dist", "DIST="+t.TempDir(), "PLATFORMS="+platform, "VERSION=dev")
	bad.Dir = ".."
	if b, err := bad.CombinedOutput(); err == nil || !strings.Contains(string(b), "not SemVer") {
		t.Fatalf("make dist VERSION=dev: %v\n%s; want a refusal naming SemVer", err, b)
	}
}

type tarFile struct {
	mode     os.FileMode
	uid, gid int
	data     []byte
}

// untar reads every entry of a .tar.gz.
func untar(t *testing.T, path string) map[string]tarFile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	files := map[string]tarFile{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = tarFile{h.FileInfo().Mode(), h.Uid, h.Gid, data}
	}
}
