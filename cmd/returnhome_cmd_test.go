package cmd

import (
	"path/filepath"
	"strings"
	"testing"
)

// return-home takes one APP or --all, never both and never neither; a
// mistyped line says so with its usage and runs nothing.
func TestReturnHomeArgs(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"return-home"}, []string{"accepts 1 arg (APP) or --all, received 0", "usage: sitecon return-home APP | --all"}},
		{[]string{"return-home", "hmi", "plc"}, []string{"accepts 1 arg (APP) or --all, received 2"}},
		{[]string{"return-home", "hmi", "--all"}, []string{"give APP or --all, not both"}},
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
