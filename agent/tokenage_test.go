package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The token's age survives the agent's restarts, starts again with a new
// token, starts from k3s's own token file on a node that ran before the
// record, and the record never holds the token.
func TestNoteTokenKeepsWhenTheTokenWasFirstApplied(t *testing.T) {
	state, k3sData := t.TempDir(), t.TempDir()
	token := "K10" + string(bytes.Repeat([]byte("ab"), 32)) + "::server:sekret-password-1"
	day1 := time.Date(2026, 1, 10, 8, 0, 0, 0, time.UTC)

	first := NoteToken(state, k3sData, token, day1)
	if !first.Since.Equal(day1) || first.Problem != "" {
		t.Fatalf("first application: %+v, want since %s", first, day1)
	}
	// The agent restarts months later with the same token.
	again := NoteToken(state, k3sData, token, day1.AddDate(0, 6, 0))
	if !again.Since.Equal(day1) || again.Source != first.Source {
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
	if rotated := NoteToken(state, k3sData, token+"-rotated", day2); !rotated.Since.Equal(day2) {
		t.Errorf("a new token: %+v, want since %s", rotated, day2)
	}

	// A node that ran k3s before the agent kept records: k3s's own token
	// file is older, and says so.
	fresh, k3sOld := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(k3sOld, "server"), 0o700); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(k3sOld, "server", "token")
	if err := os.WriteFile(tokenFile, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	written := day1.AddDate(-2, 0, 0)
	if err := os.Chtimes(tokenFile, written, written); err != nil {
		t.Fatal(err)
	}
	if seeded := NoteToken(fresh, k3sOld, token, day2); !seeded.Since.Equal(written) || seeded.Source != "k3s's server/token file" {
		t.Errorf("a node older than the record: %+v, want since %s from k3s's file", seeded, written)
	}

	// A record that cannot be kept: said, with a lower bound.
	unwritable := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(unwritable, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := NoteToken(unwritable, k3sData, token, day2); r.Problem == "" || !r.Since.Equal(day2) {
		t.Errorf("an unwritable state dir: %+v, want a problem and since now", r)
	}
}
