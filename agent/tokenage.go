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
	"github.com/sitecon/sitecon/kube/nodestate"
)

// The cluster token's age, for sitecon doctor's SC-TOKEN-AGE: nothing in
// k3s or in the cluster config says when a token was made, so the agent
// records when it first applied the token it applies now. The record
// holds a SHA-256 of the token (to know a new token from the old one),
// never the token itself, and lives in the agent's private state
// directory (0600); a cluster token is long and random, not a password
// a hash could be searched for.

// tokenSeenName is the record's file in the state directory.
const tokenSeenName = config.TokenSeenFile

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

// tokenAgeFloor is a date no record can honestly predate (before sitecon
// recorded tokens): a clock that says earlier is not set (a device
// without a battery-backed clock, before NTP).
var tokenAgeFloor = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// NoteToken returns since when this node applies token: the record's
// time when the record is of the same token, else now, recorded
// atomically. A node that applied its token before the record existed
// counts from the record's first day: a lower bound. A record that
// cannot be read or written is said in Problem, with now as Since (a
// lower bound); so is a clock that is not set (nothing is recorded then,
// and Since is zero: the age cannot be told), and a record dated in the
// future or before any record could be (made while the clock was wrong:
// counted again from now).
func NoteToken(stateDir, token string, now time.Time) nodestate.TokenReport {
	if now.Before(tokenAgeFloor) {
		return nodestate.TokenReport{Source: "this node's clock", Problem: fmt.Sprintf("this node's clock says %s: it is not set, so the token's age cannot be dated", now.UTC().Format(time.RFC3339))}
	}
	path := filepath.Join(stateDir, tokenSeenName)
	fp := tokenFingerprint(token)
	var rec tokenSeenRecord
	var problem string
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		switch jerr := json.Unmarshal(data, &rec); {
		case jerr != nil:
			problem = fmt.Sprintf("the token's record was unreadable (%v): counted again from now", jerr)
		case rec.Fingerprint != fp:
			// Another token: this one's age starts now.
		case rec.Since.After(now) || rec.Since.Before(tokenAgeFloor):
			problem = fmt.Sprintf("the token's record was dated %s, made while the clock was wrong: counted again from now", rec.Since.UTC().Format(time.RFC3339))
		default:
			return nodestate.TokenReport{Since: rec.Since, Source: rec.Source}
		}
	case !errors.Is(err, os.ErrNotExist):
		return nodestate.TokenReport{Since: now, Source: "this agent's start", Problem: fmt.Sprintf("the token's record: %v", err)}
	}
	rec = tokenSeenRecord{Fingerprint: fp, Since: now, Source: "first applied by this node's agent"}
	out, _ := json.Marshal(rec)
	if err := config.WriteFileAtomic(path, out, 0o600); err != nil {
		return nodestate.TokenReport{Since: rec.Since, Source: rec.Source, Problem: fmt.Sprintf("the token's record: %v", err)}
	}
	return nodestate.TokenReport{Since: rec.Since, Source: rec.Source, Problem: problem}
}

// noteAppliedToken records v's token (NoteToken) for the node report.
func (a *Agent) noteAppliedToken(v *config.Validated) {
	if a.opts.StateDir == "" {
		return // no records kept (--no-bootstrap)
	}
	tr := NoteToken(a.opts.StateDir, v.Token.Reveal(), time.Now())
	if tr.Problem != "" {
		a.log.Warn("cluster token's age", "problem", tr.Problem)
	}
	a.mu.Lock()
	a.token = &tr
	a.mu.Unlock()
}
