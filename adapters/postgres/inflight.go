package postgres

// InFlight reports how many writes to resource this replica has admitted
// and not yet released (the operator console's fences list). The writes
// of other replicas are theirs to report: the count is of this process's
// marker sessions, in memory, without a round trip.
func (f *SharedFence) InFlight(resource string) int {
	key := lockKey(resource)
	l := f.lane(key)
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sess == nil {
		return 0
	}
	e := l.sess.entries[key]
	if e == nil {
		return 0
	}
	n := 0
	for p := range e.flights {
		// Two resources may share a lock key (a 64-bit hash).
		if p.Resource == resource {
			n++
		}
	}
	return n
}
