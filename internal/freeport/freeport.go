package freeport

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Take picks ports from low up to the first port of the kernel's
// ephemeral range, or up to defaultFirst (Linux's default first) when that
// range cannot be read.
const (
	low          = 20000
	defaultFirst = 32768
	tries        = 2000 // candidates looked at per port before giving up
)

var (
	mu     sync.Mutex
	given  = map[int]bool{}
	locks  []*os.File // held open: closing one would release its port
	bounds [2]int     // the range picked from, set at the first Take
)

// Take returns n distinct ports free on 127.0.0.1 now, none of which this
// process or another process using this package has been handed before
// (for as long as that process lives).
func Take(n int) ([]int, error) {
	mu.Lock()
	defer mu.Unlock()
	if bounds[1] == 0 {
		bounds = [2]int{low, ephemeralFirst()}
	}
	dir := filepath.Join(os.TempDir(), "leafmq-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, fmt.Errorf("freeport: %w", err)
	}
	ports := make([]int, 0, n)
	for range n {
		p, err := take(dir)
		if err != nil {
			return nil, err
		}
		ports = append(ports, p)
	}
	return ports, nil
}

// Addr returns "127.0.0.1:PORT" for one port from Take.
func Addr() (string, error) {
	p, err := Take(1)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p[0])), nil
}

func take(dir string) (int, error) {
	for range tries {
		p := bounds[0] + rand.IntN(bounds[1]-bounds[0])
		if given[p] {
			continue
		}
		f, err := lock(filepath.Join(dir, strconv.Itoa(p)))
		if err != nil {
			if errors.Is(err, errLocked) || errors.Is(err, fs.ErrPermission) { // another process's, or another user's
				continue
			}
			return 0, fmt.Errorf("freeport: %w", err)
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil { // taken by a program outside this package
			_ = f.Close()
			continue
		}
		_ = ln.Close()
		given[p] = true
		locks = append(locks, f)
		return p, nil
	}
	return 0, fmt.Errorf("freeport: no free port found in %d–%d after %d tries", bounds[0], bounds[1]-1, tries)
}

// ephemeralFirst returns the first port of the kernel's ephemeral range
// (Linux), or the default when it cannot be read or leaves too little
// room below it.
func ephemeralFirst() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return defaultFirst
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return defaultFirst
	}
	first, err := strconv.Atoi(f[0])
	if err != nil || first < low+1000 {
		return defaultFirst
	}
	return first
}
