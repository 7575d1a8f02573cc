package postgres

import (
	"testing"

	"github.com/fencegate/fencegate/internal/testenv"
)

// TestMain stops the throwaway PostgreSQL cluster of testenv.Postgres at
// exit. It serves every test file of this package (fence and lease).
func TestMain(m *testing.M) { testenv.RunMain(m) }
