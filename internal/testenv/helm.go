package testenv

import "testing"

// Helm returns the path of the pinned helm binary (tools/helm, built by
// scripts/tools.sh helm); the chart's tests render with it, offline.
func Helm(t testing.TB) string {
	t.Helper()
	return tool(t, "helm", "helm")
}
