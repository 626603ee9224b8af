package kvlease

// StopWatch stops l's watch, as a follower cut off from NATS stops hearing
// the bucket (its consumer resumes after the last message it got).
func StopWatch(l *Lease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w.stop()
}
