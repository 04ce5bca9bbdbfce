package main

import (
	"os"
	"strings"
	"testing"
)

// Every flag the daemon accepts is documented in the README; collector
// enable flags are covered by the README's --collector.<name> line and listed
// in its metric table.
func TestREADMEDocumentsEveryFlag(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	app, _ := newApp()
	for _, f := range app.Model().Flags {
		if f.Hidden || f.Name == "help" || f.Name == "version" {
			continue
		}
		name := "--" + f.Name
		if strings.Count(f.Name, ".") == 1 && strings.HasPrefix(f.Name, "collector.") {
			continue // --collector.<name>
		}
		if !strings.Contains(string(readme), name) {
			t.Errorf("README.md does not document %s (%s)", name, f.Help)
		}
	}
}
