package chaos

import (
	"fmt"
	"os"
	"testing"
)

// TestMain lets the test binary be the hostile flood's generator too: the
// harness starts its own executable with FloodCommand, which is ordo-chaos
// in a run and this binary in a test.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == FloodCommand {
		if err := FloodMain(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", FloodCommand, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
