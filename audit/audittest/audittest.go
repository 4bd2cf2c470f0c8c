// Package audittest reads audit logs for tests, as httptest serves them.
package audittest

import (
	"strings"
	"testing"

	"github.com/sitecon/sitecon/audit"
)

// Outcomes is the log at path as its records' action:outcome, in order,
// separated by spaces ("cordon:intent cordon:done"); the test fails when
// the log cannot be read.
func Outcomes(t testing.TB, path string) string {
	t.Helper()
	recs, err := audit.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Action + ":" + r.Outcome
	}
	return strings.Join(out, " ")
}
