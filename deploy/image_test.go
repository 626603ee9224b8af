package deploy_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leafmq/leafmq/wire"
)

// dockerStage is what the build stage of deploy/Dockerfile does: its ARG
// defaults, ENV and the RUN lines after the source is copied; and the final
// stage's ENV.
type dockerStage struct {
	args, env, runEnv map[string]string
	runs              []string
}

// readDockerfile takes deploy/Dockerfile apart (continuation lines joined).
func readDockerfile(t *testing.T) dockerStage {
	t.Helper()
	text := strings.ReplaceAll(string(repoFile(t, "Dockerfile")), "\\\n", " ")
	st := dockerStage{args: map[string]string{}, env: map[string]string{}, runEnv: map[string]string{}}
	stage, copied := 0, false
	kv := regexp.MustCompile(`(\w+)=(\S*)`)
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		word, rest, _ := strings.Cut(line, " ")
		switch word {
		case "FROM":
			stage++
		case "ARG":
			name, def, _ := strings.Cut(rest, "=")
			st.args[name] = def
		case "ENV":
			for _, m := range kv.FindAllStringSubmatch(rest, -1) {
				if stage == 1 {
					st.runEnv[m[1]] = m[2]
				} else {
					st.env[m[1]] = m[2]
				}
			}
		case "COPY":
			copied = copied || (stage == 1 && strings.HasPrefix(rest, ". "))
		case "RUN":
			if stage == 1 && copied {
				st.runs = append(st.runs, rest)
			}
		}
	}
	if len(st.runs) == 0 {
		t.Fatal("Dockerfile: no RUN after COPY . . in the build stage")
	}
	return st
}

// The image, built as deploy/Dockerfile builds it with its default
// arguments (docker itself does not run here: the same commands, ARGs and
// ENV run on the checkout, with no .git as in the build context), starts
// and serves ids: its default VERSION must be SemVer, since the NATS micro
// service refuses any other version and leafd would exit at start.
func TestImageBuildStarts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds leafd")
	}
	st := readDockerfile(t)
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	env := append(os.Environ(), "GIT_DIR="+filepath.Join(out, "no-git")) // the context has no .git
	for k, v := range st.runEnv {
		env = append(env, k+"="+v)
	}
	for k, v := range st.args {
		env = append(env, k+"="+v)
	}
	for _, run := range st.runs {
		cmd := exec.Command("bash", "-c", strings.ReplaceAll(run, "/out", out))
		cmd.Dir, cmd.Env = root, env
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("RUN %s: %v\n%s", run, err, b)
		}
	}
	leafd := filepath.Join(out, "leafd")
	if b, err := exec.Command(leafd, "--version").Output(); err != nil || !strings.HasPrefix(string(b), "leafd 0.0.0-dev ") {
		t.Fatalf("leafd --version = %q, %v; want the image's default 0.0.0-dev", b, err)
	}

	// The image's environment, on loopback (tests bind nothing else) and a
	// temporary data directory.
	httpAddr := freeAddr(t)
	cmd := exec.Command(leafd)
	cmd.Env = os.Environ()
	for k, v := range st.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, "LEAF_HTTP="+httpAddr, "LEAF_DATA="+t.TempDir(), "LEAF_NATS_LISTEN=127.0.0.1:0")
	if st.env["LEAF_HTTP"] == "" || st.env["LEAF_DATA"] == "" {
		t.Fatalf("the image sets no LEAF_HTTP or LEAF_DATA: %v", st.env)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := regexp.MustCompile(`is serving ids on (nats://\S+)`).FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	var url string
	select {
	case url = <-urls:
	case err := <-exited:
		t.Fatalf("leafd of the image exited at start: %v\n%s", err, stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("leafd of the image did not start\n%s", stderr.String())
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+path, nil)
		resp, err := http.DefaultClient.Do(req)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s = %d", path, resp.StatusCode)
		}
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	reply, err := nc.RequestMsg(wire.NewRequest(wire.SnowflakeSubject, 1, false), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := wire.ReplyError(reply); err != nil {
		t.Fatal(err)
	}
	if ids, err := wire.DecodeIDs(nil, reply.Data, false); err != nil || len(ids) != 1 {
		t.Fatalf("ids %v, %v", ids, err)
	}
}

// freeAddr is a free loopback address.
func freeAddr(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", freePorts(t, 1)[0])
}
