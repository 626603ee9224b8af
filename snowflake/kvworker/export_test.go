package kvworker

// Freeze stops r's claim refresher without closing Lost, as when r's
// process is stopped (SIGSTOP) past the TTL: the claim key expires while r
// still believes it holds the worker id.
func Freeze(r *Registry) {
	r.mu.Lock()
	stop := r.stop
	r.mu.Unlock()
	if stop != nil {
		stop()
	}
	r.wg.Wait()
}
