package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The token's age survives the agent's restarts, starts again with a new
// token, and the record never holds the token; a record that cannot be
// kept is said.
func TestNoteTokenKeepsWhenTheTokenWasFirstApplied(t *testing.T) {
	state := t.TempDir()
	token := "K10" + string(bytes.Repeat([]byte("ab"), 32)) + "::server:sekret-password-1"
	day1 := time.Date(2026, 1, 10, 8, 0, 0, 0, time.UTC)

	first := NoteToken(state, token, day1)
	if !first.Since.Equal(day1) || first.Problem != "" {
		t.Fatalf("first application: %+v, want since %s", first, day1)
	}
	// The agent restarts months later with the same token.
	again := NoteToken(state, token, day1.AddDate(0, 6, 0))
	if !again.Since.Equal(day1) || again.Source != first.Source || again.Problem != "" {
		t.Errorf("same token after a restart: %+v, want since %s", again, day1)
	}
	record, err := os.ReadFile(filepath.Join(state, tokenSeenName))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(record, []byte(token)) || bytes.Contains(record, []byte("sekret-password-1")) {
		t.Errorf("the record holds the token: %s", record)
	}
	if fi, _ := os.Stat(filepath.Join(state, tokenSeenName)); fi.Mode().Perm() != 0o600 {
		t.Errorf("the record's mode is %v, want 0600", fi.Mode().Perm())
	}

	// A new token: its age starts when it is applied.
	day2 := day1.AddDate(0, 7, 0)
	if rotated := NoteToken(state, token+"-rotated", day2); !rotated.Since.Equal(day2) {
		t.Errorf("a new token: %+v, want since %s", rotated, day2)
	}

	// A record that cannot be kept: said, with a lower bound.
	unwritable := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(unwritable, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := NoteToken(unwritable, token, day2); r.Problem == "" || !r.Since.Equal(day2) {
		t.Errorf("an unwritable state dir: %+v, want a problem and since now", r)
	}
}

// A clock that is wrong never gives the token a wrong age: not set (a
// device without a battery-backed clock, before NTP), nothing is recorded
// and the age is not told; a record made while the clock was ahead or not
// set is counted again from now, and said; a malformed record too.
func TestNoteTokenAgainstAWrongClock(t *testing.T) {
	token := "K10" + strings.Repeat("cd", 32) + "::server:another-password"
	now := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)

	state := t.TempDir()
	boot := time.Date(1970, 1, 1, 0, 0, 42, 0, time.UTC)
	if r := NoteToken(state, token, boot); !r.Since.IsZero() || !strings.Contains(r.Problem, "not set") {
		t.Errorf("a clock not set: %+v, want no date and the problem said", r)
	}
	if _, err := os.Stat(filepath.Join(state, tokenSeenName)); err == nil {
		t.Error("a record was written with a clock not set")
	}
	if r := NoteToken(state, token, now); !r.Since.Equal(now) || r.Problem != "" {
		t.Errorf("once the clock is set: %+v, want since %s", r, now)
	}

	for name, recorded := range map[string]time.Time{
		"ahead":   now.AddDate(1, 0, 0),
		"not set": time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		state := t.TempDir()
		NoteToken(state, token, tokenAgeFloor) // a valid record, then made wrong
		data, err := os.ReadFile(filepath.Join(state, tokenSeenName))
		if err != nil {
			t.Fatal(err)
		}
		data = bytes.Replace(data, []byte(tokenAgeFloor.Format(time.RFC3339)), []byte(recorded.Format(time.RFC3339)), 1)
		if err := os.WriteFile(filepath.Join(state, tokenSeenName), data, 0o600); err != nil {
			t.Fatal(err)
		}
		r := NoteToken(state, token, now)
		if !r.Since.Equal(now) || !strings.Contains(r.Problem, "clock was wrong") {
			t.Errorf("a record made while the clock was %s (%s): %+v, want since now and the problem said", name, data, r)
		}
		if again := NoteToken(state, token, now.Add(time.Hour)); !again.Since.Equal(now) || again.Problem != "" {
			t.Errorf("after the record was mended (%s): %+v", name, again)
		}
	}

	malformed := t.TempDir()
	if err := os.WriteFile(filepath.Join(malformed, tokenSeenName), []byte("{half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := NoteToken(malformed, token, now); !r.Since.Equal(now) || !strings.Contains(r.Problem, "unreadable") {
		t.Errorf("a malformed record: %+v, want since now and the problem said", r)
	}
}
