package e2e

import (
	"testing"

	"github.com/fencegate/fencegate/internal/testenv"
)

// TestMain lets testenv remove the built binary and stop the PostgreSQL
// clusters the tests started.
func TestMain(m *testing.M) { testenv.RunMain(m) }
