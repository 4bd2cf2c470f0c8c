package doctor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/test/testcert"
)

func TestCertExpiry(t *testing.T) {
	now := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	for _, tc := range []struct {
		name    string
		rel     string
		left    time.Duration
		want    Severity
		summary string
	}{
		{"expires in 20 days", "server/tls/client-admin.crt", 20 * day, Error, "expires in 20 days"},
		{"expired", "agent/client-kubelet.crt", -2 * day, Error, "expired"},
		{"inside the renew window", "server/tls/etcd/server-client.crt", 60 * day, Warn, "expires in 60 days"},
		{"a year left", "server/tls/serving-kube-apiserver.crt", 365 * day, OK, "valid for more than 90 days"},
		{"just outside the window", "agent/serving-kubelet.crt", 91 * day, OK, "valid for more than 90 days"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			testcert.Write(t, filepath.Join(dir, tc.rel), now.Add(tc.left))
			// A key beside it is no certificate: not read.
			if err := os.WriteFile(filepath.Join(dir, filepath.Dir(tc.rel), "x.key"), []byte("key"), 0o600); err != nil {
				t.Fatal(err)
			}
			fs := checkCerts(context.Background(), &Env{K3sDataDir: dir, Now: now})
			if len(fs) != 1 {
				t.Fatalf("findings %+v, want one", fs)
			}
			f := fs[0]
			if f.Severity != tc.want || !strings.Contains(f.Summary, tc.summary) {
				t.Errorf("got %s %q, want %s containing %q", f.Severity, f.Summary, tc.want, tc.summary)
			}
			if f.Severity >= Warn && (!strings.Contains(f.Next, "k3s certificate rotate") || !strings.Contains(f.Subject, tc.rel)) {
				t.Errorf("next %q, subject %q: want the rotate command and the file", f.Next, f.Subject)
			}
		})
	}
}

func TestCertCheckSaysWhyItDidNotRun(t *testing.T) {
	dir := t.TempDir()
	fs := checkCerts(context.Background(), &Env{K3sDataDir: filepath.Join(dir, "none"), Now: time.Now()})
	if len(fs) != 1 || fs[0].Severity != Info || !strings.Contains(fs[0].Summary, "not checked: no k3s data dir") {
		t.Errorf("missing data dir: %+v", fs)
	}
	testcert.Write(t, filepath.Join(dir, "server/tls/ok.crt"), time.Now().Add(400*24*time.Hour))
	if err := os.WriteFile(filepath.Join(dir, "server/tls/broken.crt"), []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	fs = checkCerts(context.Background(), &Env{K3sDataDir: dir, Now: time.Now()})
	if len(fs) != 1 || fs[0].Severity != Warn || !strings.Contains(fs[0].Summary, "broken.crt not checked: it could not be read") {
		t.Errorf("unreadable certificate: %+v", fs)
	}
}

// A check that hangs past its deadline yields a finding saying so; one that
// panics says it failed; one that finds nothing is reported ok.
func TestRunBoundsEveryCheck(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	checks := []Check{
		{ID: "SC-T-HANG", Area: AreaNodes, Title: "hangs", Deadline: 50 * time.Millisecond,
			Run: func(ctx context.Context, _ *Env) []Finding { <-block; return nil }},
		{ID: "SC-T-PANIC", Area: AreaNodes, Title: "panics", Deadline: time.Second,
			Run: func(context.Context, *Env) []Finding { panic("boom") }},
		{ID: "SC-T-QUIET", Area: AreaApps, Title: "quiet", Deadline: time.Second,
			Run: func(context.Context, *Env) []Finding { return nil }},
		{ID: "SC-T-API", Area: AreaApps, Title: "needs the API", Deadline: time.Second, NeedsAPI: true,
			Run: func(context.Context, *Env) []Finding { t.Error("ran without the API"); return nil }},
	}
	start := time.Now()
	r := Run(context.Background(), checks, &Env{APIProblem: "cannot reach the API server at https://127.0.0.1:1"})
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("took %s", took)
	}
	got := map[string]Finding{}
	for _, f := range r.Findings {
		got[f.ID] = f
	}
	for id, want := range map[string]struct {
		sev  Severity
		text string
	}{
		"SC-T-HANG":      {Warn, "did not finish within its deadline of 50ms"},
		"SC-T-PANIC":     {Warn, "the check failed: boom"},
		"SC-T-QUIET":     {OK, "quiet: ok"},
		"SC-T-API":       {Warn, "not checked: the cluster API could not be read"},
		IDAPIUnreachable: {Error, "could not be read"},
	} {
		if f := got[id]; f.Severity != want.sev || !strings.Contains(f.Summary, want.text) {
			t.Errorf("%s: %s %q, want %s containing %q", id, f.Severity, f.Summary, want.sev, want.text)
		}
	}
	if r.ExitStatus() != ExitAPIUnreachable {
		t.Errorf("exit status %d, want %d", r.ExitStatus(), ExitAPIUnreachable)
	}
	if r.Findings[0].Area != AreaCluster {
		t.Errorf("first finding %+v: want the worst area (cluster API) first", r.Findings[0])
	}
}

func TestExitStatusByWorstFinding(t *testing.T) {
	for _, tc := range []struct {
		worst Severity
		want  int
	}{{OK, 0}, {Info, 0}, {Warn, 1}, {Error, 1}} {
		if got := (Report{Worst: tc.worst}).ExitStatus(); got != tc.want {
			t.Errorf("worst %s: exit %d, want %d", tc.worst, got, tc.want)
		}
	}
}

// A file holding a chain is judged by the certificate in it that expires
// first: k3s's client certificates carry their CA after the leaf, and a CA
// that expires first breaks the leaf with it.
func TestCertExpiryIsAFilesEarliest(t *testing.T) {
	now := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	leaf, ca := filepath.Join(dir, "leaf.crt"), filepath.Join(dir, "ca.crt")
	testcert.Write(t, leaf, now.Add(400*24*time.Hour))
	testcert.Write(t, ca, now.Add(20*24*time.Hour))
	var chain []byte
	for _, p := range []string{leaf, ca} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		chain = append(chain, b...)
	}
	path := filepath.Join(dir, "server/tls/client-admin.crt")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, chain, 0o600); err != nil {
		t.Fatal(err)
	}
	fs := checkCerts(context.Background(), &Env{K3sDataDir: dir, Now: now})
	if len(fs) != 1 || fs[0].Severity != Error || !strings.Contains(fs[0].Summary, "expires in 20 days") {
		t.Errorf("a chain whose second certificate expires in 20 days: %+v", fs)
	}
}

// An API server that answered while the cluster was still being read
// gets its own next step: waiting longer, not checking that k3s runs.
func TestAPIStillReadingSaysWaitLonger(t *testing.T) {
	for _, tc := range []struct {
		still     bool
		want, not string
	}{
		{false, "check that k3s runs", "answers"},
		{true, "answers", "check that k3s runs"},
	} {
		r := Run(context.Background(), nil, &Env{APIProblem: "why", APIStillReading: tc.still})
		var next string
		for _, f := range r.Findings {
			if f.ID == IDAPIUnreachable {
				next = f.Next
			}
		}
		if !strings.Contains(next, tc.want) || strings.Contains(next, tc.not) {
			t.Errorf("still reading %v: next step %q, want %q and not %q", tc.still, next, tc.want, tc.not)
		}
	}
}
