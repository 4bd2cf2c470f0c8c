package formation

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sitecon/sitecon/agent/config"
)

func TestBundleRoundTripAndChecksum(t *testing.T) {
	plan, err := Plan(formRequest())
	if err != nil {
		t.Fatal(err)
	}
	line, err := plan.Nodes[1].Encode()
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(line, " \n") || !strings.HasPrefix(line, BundlePrefix) {
		t.Errorf("bundle is not one line: %q", line)
	}
	got, err := DecodeBundle(line[:40] + "\n  " + line[40:]) // wrapped by a terminal
	if err != nil {
		t.Fatal(err)
	}
	if got != plan.Nodes[1] {
		t.Errorf("round trip: %+v != %+v", got, plan.Nodes[1])
	}
	// Any single mistyped character is caught.
	for i := len(BundlePrefix); i < len(line); i += 7 {
		typo := []byte(line)
		typo[i] ^= 0x01
		if _, err := DecodeBundle(string(typo)); err == nil {
			t.Fatalf("typo at %d accepted", i)
		}
	}
	if _, err := DecodeBundle(line[:len(line)-5]); !errors.Is(err, ErrBundleChecksum) {
		t.Errorf("cut short: %v", err)
	}
	if _, err := DecodeBundle("hello"); err == nil || !strings.Contains(err.Error(), "not a sitecon join bundle") {
		t.Errorf("not a bundle: %v", err)
	}
}

func TestNodeFilesWrite(t *testing.T) {
	plan, err := Plan(formRequest())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files, err := plan.Nodes[2].Files(dir, "eth7")
	if err != nil {
		t.Fatal(err)
	}
	if err := files.Write(); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(filepath.Join(dir, "cluster.json"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ClusterInterface != "eth7" || cfg.TokenFile != filepath.Join(dir, "token") {
		t.Errorf("config = %+v", cfg)
	}
	for _, name := range []string{"cluster.json", "token"} {
		st, _ := os.Stat(filepath.Join(dir, name))
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v", name, st.Mode().Perm())
		}
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "cluster.json")); bytes.Contains(data, []byte(plan.Token.Reveal())) {
		t.Error("the config must name the token file, not hold the token")
	}
	entries, _ := os.ReadDir(dir)
	names := []string{}
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"cluster.json", "token"}) {
		t.Errorf("dir holds %v", names)
	}
}

func FuzzDecodeBundle(f *testing.F) {
	plan, err := Plan(formRequest())
	if err != nil {
		f.Fatal(err)
	}
	line, _ := plan.Nodes[0].Encode()
	f.Add(line)
	f.Add(BundlePrefix + "e30.44136fa355b3678a")
	f.Add(BundlePrefix + "....")
	f.Fuzz(func(t *testing.T, s string) {
		b, err := DecodeBundle(s)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to a bundle that decodes the same.
		again, err := b.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if b2, err := DecodeBundle(again); err != nil || b2 != b {
			t.Fatalf("re-encode: %v %+v != %+v", err, b2, b)
		}
	})
}
