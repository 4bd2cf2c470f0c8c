package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/kube"
)

// The cluster token's age, for sitecon doctor's SC-TOKEN-AGE: nothing in
// k3s or in the cluster config says when a token was made, so the agent
// records when it first applied the token it applies now. The record
// holds a hash of the token (to know a new token from the old one),
// never the token itself, and lives in the agent's private state
// directory.

// tokenSeenName is the record's file in the state directory.
const tokenSeenName = "token-seen.json"

type tokenSeenRecord struct {
	// Fingerprint is the SHA-256 of tokenFingerprintLabel and the token.
	Fingerprint string    `json:"fingerprint"`
	Since       time.Time `json:"since"`
	Source      string    `json:"source"`
}

// tokenFingerprintLabel keeps the hash apart from any other hash of the
// token.
const tokenFingerprintLabel = "sitecon token-seen v1\x00"

func tokenFingerprint(token string) string {
	sum := sha256.Sum256([]byte(tokenFingerprintLabel + token))
	return hex.EncodeToString(sum[:])
}

// NoteToken returns since when this node applies token: the record's
// time when the record is of the same token; else now, or the time k3s
// wrote its server/token file (k3sDataDir) when that is older and no
// record of another token exists (a node that ran before the agent kept
// records). A new record is written atomically. A record that cannot be
// read or written is said in Problem, with now as Since: a lower bound.
func NoteToken(stateDir, k3sDataDir, token string, now time.Time) kube.TokenReport {
	path := filepath.Join(stateDir, tokenSeenName)
	fp := tokenFingerprint(token)
	var rec tokenSeenRecord
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		if jerr := json.Unmarshal(data, &rec); jerr != nil {
			rec = tokenSeenRecord{}
		} else if rec.Fingerprint == fp && !rec.Since.IsZero() {
			return kube.TokenReport{Since: rec.Since, Source: rec.Source}
		}
	case !errors.Is(err, os.ErrNotExist):
		return kube.TokenReport{Since: now, Source: "this agent's start", Problem: fmt.Sprintf("the token's record: %v", err)}
	}
	rec = tokenSeenRecord{Fingerprint: fp, Since: now, Source: "first applied by this node's agent"}
	// No record, or an unreadable one: k3s's own token file, if older,
	// says the token was in use before.
	if data == nil {
		if fi, err := os.Stat(filepath.Join(k3sDataDir, "server", "token")); err == nil && fi.ModTime().Before(now) {
			rec.Since, rec.Source = fi.ModTime().UTC(), "k3s's server/token file"
		}
	}
	out, _ := json.Marshal(rec)
	if err := config.WriteFileAtomic(path, out, 0o600); err != nil {
		return kube.TokenReport{Since: rec.Since, Source: rec.Source, Problem: fmt.Sprintf("the token's record: %v", err)}
	}
	return kube.TokenReport{Since: rec.Since, Source: rec.Source}
}

// noteAppliedToken records v's token (NoteToken) for the node report.
func (a *Agent) noteAppliedToken(v *config.Validated) {
	if a.opts.StateDir == "" {
		return // no records kept (--no-bootstrap)
	}
	tr := NoteToken(a.opts.StateDir, a.opts.K3sPaths.DataDir, v.Token.Reveal(), time.Now())
	if tr.Problem != "" {
		a.log.Warn("cluster token's age", "problem", tr.Problem)
	}
	a.mu.Lock()
	a.token = &tr
	a.mu.Unlock()
}
