package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// A mistyped command line says what was wrong, how the command is used,
// and, for a misspelt command, what was probably meant; it never runs
// anything and never exits 0 (issue 20: `sitecon cordon` with no node
// printed no usage line, an unknown command got no "did you mean", and
// `sitecon node remov` printed the help and succeeded).
func TestMistypedCommandLines(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"cordn"}, []string{`unknown command "cordn"`, "did you mean", "cordon"}},
		{[]string{"cordon"}, []string{"accepts 1 arg", "usage: sitecon cordon NODE"}},
		{[]string{"drain", "node-a", "node-b"}, []string{"usage: sitecon drain NODE"}},
		{[]string{"node", "remov", "node-c"}, []string{`unknown command "remov"`, "did you mean", "remove"}},
		{[]string{"drain", "--bogus", "node-a"}, []string{"unknown flag: --bogus", "usage: sitecon drain NODE"}},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			out, err := runCLI(t, filepath.Join(t.TempDir(), "audit.jsonl"), c.args...)
			if err == nil {
				t.Fatalf("succeeded; printed:\n%s", out)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error %q does not say %q", err, w)
				}
			}
		})
	}
}
