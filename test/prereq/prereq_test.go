package prereq

import (
	"fmt"
	"testing"
)

// recorder is a testing.TB that records how Need ended the test.
type recorder struct {
	testing.TB
	failed, skipped string
}

func (r *recorder) Helper()                      {}
func (r *recorder) Fatalf(f string, args ...any) { r.failed = fmt.Sprintf(f, args...) }
func (r *recorder) Skipf(f string, args ...any)  { r.skipped = fmt.Sprintf(f, args...) }

func TestNeedFailsUnderCISkipsElsewhere(t *testing.T) {
	for _, tc := range []struct {
		ci                string
		ok                bool
		wantFail, wantSkp bool
	}{
		{ci: "1", ok: false, wantFail: true},
		{ci: "", ok: false, wantSkp: true},
		{ci: "1", ok: true},
		{ci: "", ok: true},
	} {
		t.Setenv("CI", tc.ci)
		r := &recorder{TB: t}
		Need(r, tc.ok, "tmux")
		if (r.failed != "") != tc.wantFail || (r.skipped != "") != tc.wantSkp {
			t.Errorf("CI=%q ok=%v: failed %q skipped %q", tc.ci, tc.ok, r.failed, r.skipped)
		}
	}
}
