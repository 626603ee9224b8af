package mysql

// NewUnconnected builds a Store without touching the network (Open pings and
// checks the table), so tests can make calls against a dead address.
func NewUnconnected(dsn string, opts Options) (*Store, error) { return newStore(dsn, opts) }
