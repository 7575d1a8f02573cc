package gateway

// CachedEntries exposes the cache size to tests.
func CachedEntries(f *LocalFence) int { return f.cached() }
