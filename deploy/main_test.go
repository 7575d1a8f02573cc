package deploy

import (
	"testing"

	"github.com/fencegate/fencegate/internal/testenv"
)

// The tests build the fencegate binary (to run `fencegate validate` on the
// shipped configurations); RunMain removes it at exit.
func TestMain(m *testing.M) { testenv.RunMain(m) }
