package server_test

import (
	"testing"

	"github.com/fencegate/fencegate/internal/testenv"
)

// RunMain stops the shared PostgreSQL cluster of the tests that use one.
func TestMain(m *testing.M) { testenv.RunMain(m) }
