package deploy

import (
	"os"
	"testing"
)

// TestMain removes the helm binary the tests built (helmCommand), once
// every test is done with it.
func TestMain(m *testing.M) {
	code := m.Run()
	if helmBinDir != "" {
		_ = os.RemoveAll(helmBinDir)
	}
	os.Exit(code)
}
