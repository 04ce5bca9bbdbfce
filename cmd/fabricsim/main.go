// Command fabricsim writes simulated traces of the nodes of a multi-node GPU
// job: real single-node GPU and host samples with a consistent synthetic
// InfiniBand/RoCE fabric (see internal/fabricsim and docs/simulation.md).
//
//	fabricsim -scenario testdata/fabric/healthy_gdr_line_rate.json -out testdata/fabric/traces
//	fabricsim -all testdata/fabric -out testdata/fabric/traces
//	fabricsim -summary testdata/fabric/traces/*-node0.gdrec
//
// Each scenario gives DIR/<scenario>-node<i>.gdrec per written node, mode
// 0600; the same scenario always gives the same bytes.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/gpudiag/gpudiag/internal/fabricsim"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "fabricsim:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fabricsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenario := fs.String("scenario", "", "scenario `FILE` (JSON) to simulate")
	all := fs.String("all", "", "simulate every *.json scenario in `DIR`")
	out := fs.String("out", "", "`DIR` to write the traces to (created if missing)")
	summary := fs.Bool("summary", false, "print the key numbers of the traces given as arguments (or of those written)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *summary && fs.NArg() > 0 && *scenario == "" && *all == "" {
		return printSummaries(fs.Args(), stdout)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if (*scenario == "") == (*all == "") {
		return errors.New("give exactly one of -scenario FILE and -all DIR")
	}
	if *out == "" {
		return errors.New("-out DIR is required")
	}
	files, err := scenarioFiles(*scenario, *all)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		s, err := fabricsim.Load(f)
		if err != nil {
			return err
		}
		paths, err := fabricsim.WriteTraces(s, *out)
		if err != nil {
			return fmt.Errorf("scenario %s: %w", f, err)
		}
		if *summary {
			if err := printSummaries(paths, stdout); err != nil {
				return err
			}
			continue
		}
		for _, p := range paths {
			fmt.Fprintln(stdout, p)
		}
	}
	return nil
}

func printSummaries(paths []string, w io.Writer) error {
	for _, p := range paths {
		s, err := fabricsim.SummarizeFile(p)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		fmt.Fprintln(w, p)
		s.Print(w)
	}
	return nil
}

func scenarioFiles(one, dir string) ([]string, error) {
	if one != "" {
		return []string{one}, nil
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no *.json scenario in %s", dir)
	}
	sort.Strings(files)
	return files, nil
}
