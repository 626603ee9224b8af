package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// relayCommand is the hidden first argument of the stderr relay process.
const relayCommand = "stderr-relay"

// The Go runtime writes a crash — an unrecovered panic, a fatal error, the
// goroutine dump of SIGQUIT — to file descriptor 2 as text, and exits before
// any goroutine of the process could rewrite it. Under --log-format json,
// leafd therefore points its descriptor 2 at a pipe read by a small second
// process (leafd stderr-relay), which writes JSON records through and wraps
// every other line as a record of its own: a log shipper that reads only
// JSON keeps the traceback. The relay outlives leafd by the moment it takes
// to read the pipe to its end.

// relay copies r to w, one line at a time: a line that is a JSON object
// passes as it is; any other line becomes {"time","level":"ERROR",
// "msg":"leafd stderr","text":line}. It returns at the end of r.
func relay(r io.Reader, w io.Writer, now func() time.Time) error {
	br := bufio.NewReaderSize(r, 64<<10)
	enc := json.NewEncoder(w)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			body := bytes.TrimRight(line, "\r\n")
			switch {
			case len(bytes.TrimSpace(body)) == 0:
			case body[0] == '{' && json.Valid(body):
				if _, werr := w.Write(append(body, '\n')); werr != nil {
					return werr
				}
			default:
				rec := struct {
					Time  string `json:"time"`
					Level string `json:"level"`
					Msg   string `json:"msg"`
					Text  string `json:"text"`
				}{now().Format(time.RFC3339Nano), "ERROR", "leafd stderr", string(body)}
				if werr := enc.Encode(rec); werr != nil {
					return werr
				}
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// runRelay is leafd stderr-relay: stdin to stderr through relay. It
// ignores the signals a terminal or a service manager sends to every
// process of leafd's group, so that it relays leafd's last lines, and ends
// when leafd closes the pipe (by exiting, whatever the cause).
func runRelay() int {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	if err := relay(os.Stdin, os.Stderr, time.Now); err != nil {
		return 1
	}
	return 0
}
