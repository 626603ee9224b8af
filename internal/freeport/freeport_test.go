package freeport

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestTakeDistinctFreeBelowEphemeral(t *testing.T) {
	ports, err := Take(50)
	if err != nil {
		t.Fatal(err)
	}
	more, err := Take(50)
	if err != nil {
		t.Fatal(err)
	}
	first := ephemeralFirst()
	seen := map[int]bool{}
	for _, p := range append(ports, more...) {
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if p < low || p >= first {
			t.Fatalf("port %d outside %d–%d", p, low, first-1)
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d not free: %v", p, err)
		}
		_ = ln.Close()
	}
}

// TestTakeSkipsPortInUse: a port some other program listens on is not
// handed out, though no lock names it.
func TestTakeSkipsPortInUse(t *testing.T) {
	var busy []net.Listener
	defer func() {
		for _, ln := range busy {
			_ = ln.Close()
		}
	}()
	inUse := map[int]bool{}
	for p := low; p < low+2000; p++ {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		busy = append(busy, ln)
		inUse[p] = true
	}
	mu.Lock()
	saved := bounds
	bounds = [2]int{low, low + 2100}
	mu.Unlock()
	defer func() { mu.Lock(); bounds = saved; mu.Unlock() }()
	ports, err := Take(20)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ports {
		if inUse[p] {
			t.Fatalf("port %d handed out while something listens on it", p)
		}
	}
}

// TestTakeHeldAcrossProcesses: the ports a process was handed stay locked
// while it lives, so another process is not handed them.
func TestTakeHeldAcrossProcesses(t *testing.T) {
	if os.Getenv("FREEPORT_CHILD") == "1" {
		ports, err := Take(20)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		for _, p := range ports {
			fmt.Println(p)
		}
		fmt.Println("done")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // hold them until told
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestTakeHeldAcrossProcesses$")
	cmd.Env = append(os.Environ(), "FREEPORT_CHILD=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stdin.Close(); _ = cmd.Wait() }()
	var theirs []int
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "done" {
		p, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
		if err != nil {
			t.Fatalf("child: %s", sc.Text())
		}
		theirs = append(theirs, p)
	}
	if len(theirs) != 20 {
		t.Fatalf("child handed %d ports, want 20", len(theirs))
	}
	dir := filepath.Join(os.TempDir(), "leafmq-ports")
	for _, p := range theirs {
		f, err := lock(filepath.Join(dir, strconv.Itoa(p)))
		if !errors.Is(err, errLocked) {
			if f != nil {
				_ = f.Close()
			}
			t.Fatalf("port %d of the other process: lock = %v, want held", p, err)
		}
	}
	_ = stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	// Its locks die with it.
	f, err := lock(filepath.Join(dir, strconv.Itoa(theirs[0])))
	if err != nil {
		t.Fatalf("port %d after the other process exited: %v", theirs[0], err)
	}
	_ = f.Close()
}
