package natsconn

import (
	"context"
	"fmt"
	"log/slog"
)

// natsLogger passes the embedded nats-server's log to Options.Logger,
// so that it comes out in leafd's format (--log-format json included) and
// not at all where that logger discards it. The server's notices (its
// start-up banner among them, about twenty lines) are Debug: leafd's own
// records say at Info what an operator needs; the server's warnings and
// errors keep their level.
type natsLogger struct{ log *slog.Logger }

func (l natsLogger) logf(level slog.Level, format string, v []any) {
	if l.log.Enabled(context.Background(), level) {
		l.log.Log(context.Background(), level, fmt.Sprintf(format, v...), "component", "nats-server")
	}
}

func (l natsLogger) Noticef(format string, v ...any) { l.logf(slog.LevelDebug, format, v) }
func (l natsLogger) Warnf(format string, v ...any)   { l.logf(slog.LevelWarn, format, v) }
func (l natsLogger) Errorf(format string, v ...any)  { l.logf(slog.LevelError, format, v) }
func (l natsLogger) Debugf(format string, v ...any)  { l.logf(slog.LevelDebug, format, v) }
func (l natsLogger) Tracef(format string, v ...any)  { l.logf(slog.LevelDebug-4, format, v) }

// Fatalf is an error: the embedded server shuts itself down after it, and
// leafd, not the server, decides whether the process ends.
func (l natsLogger) Fatalf(format string, v ...any) { l.logf(slog.LevelError, format, v) }
