package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leafmq/leafmq/internal/freeport"
)

// proc is one child process the harness owns (a nats-server or a leafd).
// It runs in a process group of its own, so a kill reaches everything it
// started, and gets SIGKILL if the harness dies (Pdeathsig). Methods are
// safe for concurrent use.
type proc struct {
	name    string
	bin     string
	args    []string // the flags it always gets
	dir     string
	logPath string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when the current process has exited
	wanted  bool          // the harness expects it to be running
	exitErr error         // how the last process exited
	starts  int
	onExit  func(p *proc, err error, unexpected bool)
}

// start runs the process with its flags plus extra. It returns once the
// process has started; it does not wait for it to be ready.
func (p *proc) start(extra ...string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s: already running (pid %d)", p.name, p.cmd.Process.Pid)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "\n=== chaos: %s start: %s %s\n", time.Now().Format(time.RFC3339Nano), p.bin,
		strings.Join(append(append([]string(nil), p.args...), extra...), " "))
	cmd := exec.Command(p.bin, append(append([]string(nil), p.args...), extra...)...)
	cmd.Dir = p.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("%s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.wanted = cmd, done, true
	p.starts++
	go func() {
		err := cmd.Wait()
		_ = logf.Close()
		p.mu.Lock()
		unexpected := p.wanted
		p.cmd, p.exitErr, p.wanted = nil, err, false
		onExit := p.onExit
		p.mu.Unlock()
		close(done)
		if onExit != nil {
			onExit(p, err, unexpected)
		}
	}()
	return nil
}

// signal sends sig to the process group and, if it ends the process, waits
// up to wait for it to exit (then SIGKILLs it). Not running: nothing to do.
func (p *proc) signal(sig syscall.Signal, wait time.Duration) {
	p.mu.Lock()
	if p.cmd == nil {
		p.mu.Unlock()
		return
	}
	pid, done := p.cmd.Process.Pid, p.done
	p.wanted = false
	p.mu.Unlock()
	_ = syscall.Kill(-pid, sig)
	_ = syscall.Kill(-pid, syscall.SIGCONT) // a frozen process must see it
	select {
	case <-done:
	case <-time.After(wait):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-done
	}
}

// pid is the running process's id, or 0.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// kill9 is kill -9 of the process group, waiting for it to be gone.
func (p *proc) kill9() { p.signal(syscall.SIGKILL, 10*time.Second) }

// stop asks the process to exit (SIGTERM) and kills it after wait.
func (p *proc) stop(wait time.Duration) { p.signal(syscall.SIGTERM, wait) }

// logTail returns the last n lines of the process's log.
func (p *proc) logTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// freePorts returns n distinct TCP ports free on 127.0.0.1, held for this
// process's life: servers restarted on their ports keep them.
func freePorts(n int) ([]int, error) { return freeport.Take(n) }

// waitTCP waits until something accepts connections on addr.
func waitTCP(ctx context.Context, addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s does not accept connections: %w", addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// script runs scripts/<name> start|stop dir and returns the variables of
// dir/env (for start).
func script(ctx context.Context, repo, name, verb, dir string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(repo, "scripts", name), verb, dir)
	cmd.Dir = repo
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("scripts/%s %s %s: %w\n%s", name, verb, dir, err, out.String())
	}
	if verb != "start" {
		return nil, nil
	}
	return readEnv(filepath.Join(dir, "env"))
}

// readEnv parses the `export K=V` lines the scripts write.
func readEnv(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "export "), "=")
		if !ok {
			continue
		}
		env[k] = strings.Trim(v, `'"`)
	}
	return env, nil
}

// pidFrom reads a pid from env[key].
func pidFrom(env map[string]string, key string) (int, error) {
	pid, err := strconv.Atoi(env[key])
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("no pid in %s=%q", key, env[key])
	}
	return pid, nil
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}

// errNotReady marks a component that did not come up in time.
var errNotReady = errors.New("not ready")
