package gateway

// InFlight reports how many writes to resource this fence has admitted and
// not yet released: the writes this process is forwarding for it now (the
// operator console's fences list). It reads memory only, never the store;
// a resource the fence does not hold in memory has none.
func (f *LocalFence) InFlight(resource string) int {
	sh, h := f.shard(resource)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i := sh.lookup(h, resource); i >= 0 {
		return sh.entries[i].flying
	}
	return 0
}
