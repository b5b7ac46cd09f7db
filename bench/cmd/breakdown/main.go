// Command breakdown prints where the CPU of one or more CPU profiles went,
// by the buckets of package internal/breakdown, and with -top the functions
// that spent most in each bucket: a check of the classification.
//
//	go run ./cmd/breakdown /tmp/ctrlbench/profiles/ctrl-r1-cpu-update.pprof
//	go run ./cmd/breakdown -top 8 /tmp/ctrlbench/profiles/raw-strip-r*-cpu-update.pprof
package main

import (
	"cmp"
	"flag"
	"fmt"
	"os"
	"slices"

	"github.com/google/pprof/profile"

	"github.com/typedctrl/ctrl/bench/internal/breakdown"
)

func main() {
	top := flag.Int("top", 0, "also list this many functions per bucket, by samples whose leaf they are")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: breakdown [-top n] profile...")
		os.Exit(2)
	}
	for _, path := range flag.Args() {
		if err := show(path, *top); err != nil {
			fmt.Fprintln(os.Stderr, "breakdown:", err)
			os.Exit(1)
		}
	}
}

func show(path string, top int) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	b, err := breakdown.Of(p)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	fmt.Printf("%s: %.2f s sampled\n", path, float64(b.Total())/1e9)
	leaves := map[breakdown.Bucket]map[string]int64{}
	if top > 0 {
		for _, s := range p.Sample {
			var stack []string
			for _, loc := range s.Location {
				for _, l := range loc.Line {
					stack = append(stack, l.Function.Name)
				}
			}
			bk := breakdown.Classify(stack)
			if leaves[bk] == nil {
				leaves[bk] = map[string]int64{}
			}
			leaf := "?"
			if len(stack) > 0 {
				leaf = stack[0]
			}
			leaves[bk][leaf] += s.Value[len(s.Value)-1]
		}
	}
	for _, bk := range breakdown.Buckets {
		fmt.Printf("  %-13s %5.1f%%  %6.2f s\n", bk, 100*b.Share(bk), float64(b[bk])/1e9)
		type fn struct {
			name string
			ns   int64
		}
		var fns []fn
		for name, ns := range leaves[bk] {
			fns = append(fns, fn{name, ns})
		}
		slices.SortFunc(fns, func(a, b fn) int { return cmp.Compare(b.ns, a.ns) })
		for _, f := range fns[:min(top, len(fns))] {
			fmt.Printf("      %6.2f s  %s\n", float64(f.ns)/1e9, f.name)
		}
	}
	return nil
}
