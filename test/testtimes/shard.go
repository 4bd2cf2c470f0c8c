package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// unknownSeconds is the time assumed for a test the durations file does
// not name yet (a new one): about an e2e test's median.
const unknownSeconds = 10

// shard splits tests into n shards of about equal time (the longest
// first, each to the shard with the least so far) and returns shard i's
// names. durations are the seconds each test took when last measured.
func shard(tests []string, durations map[string]float64, i, n int) []string {
	weight := func(t string) float64 {
		if d, ok := durations[t]; ok {
			return d
		}
		return unknownSeconds
	}
	sorted := slices.Clone(tests)
	slices.SortFunc(sorted, func(a, b string) int {
		return cmp.Or(cmp.Compare(weight(b), weight(a)), strings.Compare(a, b))
	})
	load := make([]float64, n)
	var mine []string
	for _, t := range sorted {
		least := 0
		for j := range load {
			if load[j] < load[least] {
				least = j
			}
		}
		load[least] += weight(t)
		if least == i {
			mine = append(mine, t)
		}
	}
	slices.Sort(mine)
	return mine
}

// runPattern is go test's -run pattern for exactly names (top-level tests).
func runPattern(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = regexp.QuoteMeta(n)
	}
	return "^(" + strings.Join(quoted, "|") + ")$"
}

// readDurations reads "SECONDS NAME" lines; a missing file is no
// durations (every test then counts unknownSeconds).
func readDurations(path string) (map[string]float64, error) {
	out := map[string]float64{}
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		secs, name, ok := strings.Cut(line, " ")
		d, err := strconv.ParseFloat(secs, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("%s:%d: want SECONDS NAME, got %q", path, n, line)
		}
		out[strings.TrimSpace(name)] = d
	}
	return out, sc.Err()
}

// readTestNames reads the names `go test -list` prints: the lines that
// name a test, not its "ok" line.
func readTestNames(r io.Reader) ([]string, error) {
	var names []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "Test") && !strings.ContainsAny(line, " \t") {
			names = append(names, line)
		}
	}
	return names, sc.Err()
}

// writeDurations writes the top-level tests' times of the packages whose
// path ends in pkgSuffix, for the next run's shards.
func (s *suite) writeDurations(w io.Writer, pkgSuffix string) error {
	var tests []testKey
	for k := range s.testTime {
		if strings.HasSuffix(k.pkg, pkgSuffix) {
			tests = append(tests, k)
		}
	}
	// The slowest first, as a reader looks for them.
	slices.SortFunc(tests, func(a, b testKey) int {
		return cmp.Or(cmp.Compare(s.testTime[b], s.testTime[a]), strings.Compare(a.test, b.test))
	})
	var lines []string
	for _, k := range tests {
		lines = append(lines, fmt.Sprintf("%.1f %s", s.testTime[k], k.test))
	}
	_, err := fmt.Fprintf(w, "# seconds each test took (go run ./test/testtimes -record), for make test's shards\n%s\n", strings.Join(lines, "\n"))
	return err
}
