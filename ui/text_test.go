package ui

import (
	"testing"
)

func TestClean(t *testing.T) {
	for in, want := range map[string]string{
		"node-a":                              "node-a",
		"héllo ✓":                             "héllo ✓",
		"a\x1b]0;title\x07b":                  "ab", // OSC ended by BEL
		"a\x1b]52;c;aGk=\x1b\\b":              "ab", // OSC 52 ended by ST
		"a\x1b]2;x\x1b[31mb":                  "ab", // an ESC ends the string and starts a CSI
		"a\x1b[2J\x1b[1;1Hb":                  "ab", // CSI with parameters
		"a\x1b[?1049hb":                       "ab", // private CSI
		"a\u009b31mb":                         "ab", // 8-bit CSI
		"a\u009d0;t\u009cb":                   "ab", // 8-bit OSC and ST
		"a\x1bcb":                             "ab", // ESC c: terminal reset
		"a\x1b(Bb":                            "ab", // ESC with an intermediate
		"a\tb\nc\rd":                          "a b c d",
		"a\x00\x08\x7f\u0085b":                "ab",       // NUL, backspace, DEL, NEL
		"a\xffb":                              "a\ufffdb", // not UTF-8
		"a\x1bP1$r\x1b\\b":                    "ab",       // DCS
		"unterminated \x1b]0;everything else": "unterminated ",
	} {
		if got := Clean(in); got != want {
			t.Errorf("Clean(%q) = %q, want %q", in, got, want)
		}
	}
}

// CleanStrings reaches strings in nested structs, slices, maps and
// pointers, and never writes into the value it was given: the data may be
// shared with whoever built it.
func TestCleanStrings(t *testing.T) {
	type inner struct {
		Name string
		Tags []string
	}
	type outer struct {
		Title   string
		Items   []inner
		Ptr     *inner
		Labels  map[string]string
		Any     any
		private string
	}
	in := outer{Title: "t\x1b]0;x\x07", Items: []inner{{Name: "ok"}, {Name: "a\x07", Tags: []string{"b\x1b[2J"}}},
		Ptr: &inner{Name: "p\x1b"}, Labels: map[string]string{"k\x07": "v\x1b]52;c;x\x07"}, Any: "i\x00", private: "\x07"}
	got := CleanStrings(in)
	if got.Title != "t" || got.Items[1].Name != "a" || got.Items[1].Tags[0] != "b" || got.Ptr.Name != "p" || got.Labels["k"] != "v" || got.Any != "i" {
		t.Errorf("not cleaned: %+v %+v", got, *got.Ptr)
	}
	if in.Title != "t\x1b]0;x\x07" || in.Items[1].Name != "a\x07" || in.Items[1].Tags[0] != "b\x1b[2J" || in.Ptr.Name != "p\x1b" || in.Labels["k\x07"] == "" {
		t.Errorf("the input was written into: %+v", in)
	}
	clean := outer{Title: "t", Items: []inner{{Name: "ok"}}}
	if got := CleanStrings(clean); &got.Items[0] != &clean.Items[0] {
		t.Error("a clean value should be shared, not copied")
	}
}
