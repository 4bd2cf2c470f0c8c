// Command testtimes reads `go test -json` streams (files, one per go test
// run) and reports them as one suite: each package's result and time, the
// whole output of every test that failed, and the slowest tests, so a
// suite's time can be read where it goes. It exits 1 when any test or
// package failed, or a stream ended before its package did (a killed run).
//
//	go run ./test/testtimes [-slowest 20] [-record FILE -package SUFFIX] STREAM.json...
//
// With -shard I/N it reads test names (`go test -list`) on stdin instead
// and prints the -run pattern of shard I of N, the tests split by the
// times in -durations so that the shards take about as long:
//
//	go test -list . ./test/e2e/ | go run ./test/testtimes -shard 0/3 -durations FILE
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// testKey is a test of a package in one stream (a file: the same package
// runs in several, as the e2e shards and the race step do).
type testKey struct{ stream, pkg, test string }

type suite struct {
	pkgResult map[string]string // package -> pass, fail, skip
	pkgTime   map[string]float64
	testTime  map[testKey]float64
	failed    []testKey // in the order they failed
	output    map[testKey]*strings.Builder
	pkgOutput map[string]*strings.Builder
	order     []string // packages in the order they ended
	started   map[string]bool
	// buildFailed: a package did not build (its tests never ran).
	buildFailed bool
}

func newSuite() *suite {
	return &suite{pkgResult: map[string]string{}, pkgTime: map[string]float64{}, testTime: map[testKey]float64{},
		output: map[testKey]*strings.Builder{}, pkgOutput: map[string]*strings.Builder{}, started: map[string]bool{}}
}

// read reads one stream's events; stream names it in the report.
func (s *suite) read(r io.Reader, stream string) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil || ev.Action == "" {
			// Not an event: the build's own output (a compile error).
			s.builder(s.pkgOutput, "")
			s.pkgOutput[""].Write(append(line, '\n'))
			continue
		}
		k := testKey{stream, ev.Package, ev.Test}
		pkg := ev.Package + " (" + stream + ")"
		switch ev.Action {
		case "start":
			s.started[pkg] = true
		case "build-output":
			// A package that did not build: its compiler's words.
			s.builder(s.pkgOutput, "")
			s.pkgOutput[""].WriteString(ev.Output)
		case "build-fail":
			s.buildFailed = true
		case "output":
			if ev.Test != "" {
				if s.output[k] == nil {
					s.output[k] = &strings.Builder{}
				}
				s.output[k].WriteString(ev.Output)
			} else {
				s.builder(s.pkgOutput, pkg)
				s.pkgOutput[pkg].WriteString(ev.Output)
			}
		case "pass", "fail", "skip":
			if ev.Test == "" {
				s.pkgResult[pkg], s.pkgTime[pkg] = ev.Action, ev.Elapsed
				s.order = append(s.order, pkg)
				continue
			}
			if !strings.Contains(ev.Test, "/") {
				s.testTime[k] = ev.Elapsed
			}
			if ev.Action == "fail" {
				s.failed = append(s.failed, k)
			} else {
				delete(s.output, k) // only a failure's output is shown
			}
		}
	}
	return sc.Err()
}

func (s *suite) builder(m map[string]*strings.Builder, k string) {
	if m[k] == nil {
		m[k] = &strings.Builder{}
	}
}

// report writes the suite's report and says whether it passed.
func (s *suite) report(w io.Writer, slowest int) bool {
	ok := true
	for _, k := range s.failed {
		ok = false
		fmt.Fprintf(w, "=== FAIL %s %s (%s)\n%s\n", k.pkg, k.test, k.stream, s.output[k])
	}
	for _, pkg := range s.order {
		if s.pkgResult[pkg] == "fail" {
			ok = false
			if out := s.pkgOutput[pkg]; out != nil {
				fmt.Fprintf(w, "=== FAIL %s (package output)\n%s\n", pkg, out)
			}
		}
	}
	if s.buildFailed {
		ok = false
	}
	if out := s.pkgOutput[""]; out != nil && out.Len() > 0 {
		fmt.Fprintf(w, "=== not go test events (build output)\n%s\n", out)
	}
	for _, pkg := range slices.Sorted(maps.Keys(s.started)) {
		if _, ended := s.pkgResult[pkg]; !ended {
			ok = false
			fmt.Fprintf(w, "=== %s never ended (killed, or timed out): its output\n%s\n", pkg, s.pkgOutput[pkg])
		}
	}
	fmt.Fprintln(w, "--- packages, slowest first")
	pkgs := slices.Clone(s.order)
	slices.SortStableFunc(pkgs, func(a, b string) int { return int((s.pkgTime[b] - s.pkgTime[a]) * 1000) })
	var total float64
	for _, pkg := range pkgs {
		total += s.pkgTime[pkg]
		if s.pkgResult[pkg] == "skip" && s.pkgTime[pkg] == 0 {
			continue // no test files
		}
		fmt.Fprintf(w, "%-4s %8s  %s\n", s.pkgResult[pkg], fmtSeconds(s.pkgTime[pkg]), strings.TrimPrefix(pkg, "github.com/sitecon/sitecon/"))
	}
	fmt.Fprintf(w, "--- the %d slowest tests\n", slowest)
	tests := make([]testKey, 0, len(s.testTime))
	for k := range s.testTime {
		tests = append(tests, k)
	}
	slices.SortFunc(tests, func(a, b testKey) int {
		if d := s.testTime[b] - s.testTime[a]; d != 0 {
			return int(d * 1000)
		}
		return strings.Compare(a.test, b.test)
	})
	for _, k := range tests[:min(slowest, len(tests))] {
		fmt.Fprintf(w, "%8s  %s %s (%s)\n", fmtSeconds(s.testTime[k]), strings.TrimPrefix(k.pkg, "github.com/sitecon/sitecon/"), k.test, k.stream)
	}
	fmt.Fprintf(w, "--- %d packages, %s of package time, %d failed tests\n", len(pkgs), fmtSeconds(total), len(s.failed))
	return ok
}

func fmtSeconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(100 * time.Millisecond).String()
}

func main() {
	slowest := flag.Int("slowest", 20, "how many of the slowest tests to list")
	shardOf := flag.String("shard", "", "I/N: print the -run pattern of shard I of N of the tests named on stdin")
	durationsFile := flag.String("durations", "", "with -shard: the tests' last times (SECONDS NAME lines)")
	record := flag.String("record", "", "write the tests' times of -package to this file")
	recordPkg := flag.String("package", "/test/e2e", "with -record: the package path's suffix")
	flag.Parse()
	if *shardOf != "" {
		if err := printShard(*shardOf, *durationsFile); err != nil {
			fmt.Fprintln(os.Stderr, "testtimes:", err)
			os.Exit(1)
		}
		return
	}
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: testtimes [-slowest N] STREAM.json...")
		os.Exit(2)
	}
	s := newSuite()
	for _, path := range flag.Args() {
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testtimes:", err)
			os.Exit(1)
		}
		if err := s.read(f, strings.TrimSuffix(filepath.Base(path), ".json")); err != nil {
			fmt.Fprintf(os.Stderr, "testtimes: %s: %v\n", path, err)
			os.Exit(1)
		}
		f.Close()
	}
	if *record != "" {
		f, err := os.Create(*record)
		if err == nil {
			err = s.writeDurations(f, *recordPkg)
			err = errors.Join(err, f.Close())
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "testtimes:", err)
			os.Exit(1)
		}
	}
	if !s.report(os.Stdout, *slowest) {
		os.Exit(1)
	}
}

func printShard(spec, durationsFile string) error {
	var i, n int
	if _, err := fmt.Sscanf(spec, "%d/%d", &i, &n); err != nil || n < 1 || i < 0 || i >= n {
		return fmt.Errorf("-shard %q: want I/N with 0 <= I < N", spec)
	}
	durations, err := readDurations(durationsFile)
	if err != nil {
		return err
	}
	names, err := readTestNames(os.Stdin)
	if err != nil {
		return err
	}
	mine := shard(names, durations, i, n)
	if len(mine) == 0 {
		// More shards than tests: a pattern that matches none.
		fmt.Println("^$")
		return nil
	}
	fmt.Println(runPattern(mine))
	return nil
}
