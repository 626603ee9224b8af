package chaos

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/leafmq/leafmq/segment"
)

// Config is one soak run. Zero values mean the defaults in comments.
type Config struct {
	Duration    time.Duration // load and faults; default 3m
	Rate        int           // requests a second, all clients together; default 3000
	PoolRate    int           // pool takes a second; default 20; negative: none
	Concurrency int           // request workers; default 64
	Connections int           // client NATS connections; default 4
	MaxBatch    int           // largest batch asked for (batches are 2..MaxBatch); default 500
	Timeout     time.Duration // per request and pool take; default 2s
	Tags        []string      // segment tags; default a, b, c. The first also has a pool.
	Step        int           // step of the tags in leaf_alloc; default 1000
	// MaxStep is the leafds' --max-step; default 10,000,000. At the
	// default load the first tag takes ~17k ids/s per node, which Leaf's
	// cap of 1,000,000 buffers for about a minute only: too close to a
	// 60 s DB pause.
	MaxStep int
	DBPause time.Duration // how long MariaDB is SIGSTOPped; default Duration/10, 5s to 60s
	Faults  []string      // faults in the order of the schedule (cycled); default AllFaults
	Seed    int64         // of the clients' and the faults' randomness; default the time

	Repo     string // the leafmq checkout (scripts/, cmd/leafd); default found from the working directory up
	WorkDir  string // everything the run writes; default a fresh temp dir, removed unless Keep
	Keep     bool   // keep WorkDir (logs, data) after the run
	Leafd    string // leafd binary; default built from Repo into WorkDir
	NATSBin  string // nats-server binary; default built from the Go module into WorkDir
	Logger   *slog.Logger
	Progress io.Writer // a line every ProgressEvery; nil: none
	// ProgressEvery is how often a progress line is written; default 10s.
	ProgressEvery time.Duration
}

// Faults the harness injects.
const (
	FaultKillLeafd   = "kill-leafd"     // kill -9 a random leafd, restart it with the same flags
	FaultPauseDB     = "pause-db"       // SIGSTOP MariaDB for DBPause, then SIGCONT
	FaultKillNATS    = "kill-nats"      // kill -9 a random nats-server, restart it
	FaultRestartZK   = "restart-zk"     // kill -9 ZooKeeper, start it again on the same port and data
	FaultClockBack1  = "clock-back-1s"  // restart a leafd whose snowflake clock steps back 1s after 5s
	FaultClockBack10 = "clock-back-10s" // the same, 10s
)

// AllFaults is the default schedule: each once per cycle.
var AllFaults = []string{FaultKillLeafd, FaultPauseDB, FaultKillNATS, FaultRestartZK, FaultClockBack1, FaultClockBack10}

// ErrConfig marks a bad Config.
var ErrConfig = errors.New("chaos: config")

func (c *Config) validate() error {
	if c.Duration == 0 {
		c.Duration = 3 * time.Minute
	}
	if c.Rate == 0 {
		c.Rate = 3000
	}
	if c.PoolRate == 0 {
		c.PoolRate = 20
	}
	if c.MaxStep == 0 {
		c.MaxStep = 10_000_000
	}
	if c.Concurrency == 0 {
		c.Concurrency = 64
	}
	if c.Connections == 0 {
		c.Connections = 4
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = 500
	}
	if c.Timeout == 0 {
		c.Timeout = 2 * time.Second
	}
	if len(c.Tags) == 0 {
		c.Tags = []string{"a", "b", "c"}
	}
	if c.Step == 0 {
		c.Step = 1000
	}
	if c.DBPause == 0 {
		c.DBPause = min(max(c.Duration/10, 5*time.Second), 60*time.Second)
	}
	if len(c.Faults) == 0 {
		c.Faults = AllFaults
	}
	if c.Seed == 0 {
		c.Seed = time.Now().UnixNano()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = 10 * time.Second
	}
	switch {
	case c.Duration < 30*time.Second:
		return fmt.Errorf("%w: duration %v is under 30s", ErrConfig, c.Duration)
	case c.Rate < 1 || c.Rate > 100_000:
		return fmt.Errorf("%w: rate %d must be 1-100000", ErrConfig, c.Rate)
	case c.Concurrency < 1 || c.Connections < 1:
		return fmt.Errorf("%w: concurrency and connections must be positive", ErrConfig)
	case c.MaxBatch < 2 || c.MaxBatch > 10000:
		return fmt.Errorf("%w: max batch %d must be 2-10000", ErrConfig, c.MaxBatch)
	case c.Timeout < 100*time.Millisecond:
		return fmt.Errorf("%w: timeout %v is under 100ms", ErrConfig, c.Timeout)
	case c.DBPause < 0 || c.DBPause > 10*time.Minute:
		return fmt.Errorf("%w: db pause %v must be 0-10m", ErrConfig, c.DBPause)
	case c.Step < 1 || c.Step > segment.MaxStep:
		return fmt.Errorf("%w: step %d", ErrConfig, c.Step)
	case c.MaxStep < 1 || c.MaxStep > segment.MaxStep:
		return fmt.Errorf("%w: max step %d", ErrConfig, c.MaxStep)
	}
	for _, t := range c.Tags {
		if !segment.ValidTag(t) {
			return fmt.Errorf("%w: tag %q", ErrConfig, t)
		}
	}
	for _, f := range c.Faults {
		if !known(f) {
			return fmt.Errorf("%w: fault %q: want one of %s", ErrConfig, f, strings.Join(AllFaults, ", "))
		}
	}
	for _, p := range []*string{&c.Leafd, &c.NATSBin, &c.WorkDir, &c.Repo} {
		if *p != "" {
			abs, err := filepath.Abs(*p)
			if err != nil {
				return err
			}
			*p = abs
		}
	}
	if c.Repo == "" {
		repo, err := findRepo()
		if err != nil {
			return err
		}
		c.Repo = repo
	}
	return nil
}

func known(f string) bool {
	for _, k := range AllFaults {
		if f == k {
			return true
		}
	}
	return false
}

// findRepo walks up from the working directory to the leafmq go.mod.
func findRepo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/leafmq/leafmq\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%w: no leafmq checkout above the working directory (set Repo)", ErrConfig)
		}
		dir = parent
	}
}

// Available reports why a run cannot happen on this machine (MariaDB or
// ZooKeeper is not installed), or nil. The scripts would install them with
// apt-get; tests skip instead of installing.
func Available() error {
	var missing []string
	if _, err := lookPath("mariadbd", "/usr/sbin", "/sbin"); err != nil {
		missing = append(missing, "mariadbd")
	}
	if _, err := lookPath("java"); err != nil {
		missing = append(missing, "java")
	}
	if _, err := os.Stat("/usr/share/java/zookeeper.jar"); err != nil {
		missing = append(missing, "/usr/share/java/zookeeper.jar")
	}
	if len(missing) > 0 {
		return fmt.Errorf("chaos: missing %s (scripts/mariadb.sh and scripts/zookeeper.sh install them as root)", strings.Join(missing, ", "))
	}
	return nil
}
