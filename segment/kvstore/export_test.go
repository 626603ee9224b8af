package kvstore

// Conflicts reports how many compare-and-swap conflicts s has retried.
func (s *Store) Conflicts() int64 { return s.conflicts.Load() }
