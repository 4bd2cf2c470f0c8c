package views

import (
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/ui"
)

// What a screen draws from a stale cache (the API server not answering:
// kube.ClusterStatus.Stale) is decided here, once, for every screen: stale
// data is never drawn as healthy. A figure says how old it is, a state
// carries a "?" (the last state seen, not known to hold now), and nothing
// is green.

// stale is the frame's staleness, nil while the cluster answers (or
// before it was read at all: then there is nothing to draw).
func stale(f *Frame) *kube.Staleness {
	if f == nil || !f.Synced {
		return nil
	}
	return f.Status.Stale
}

// asOf is " (as of 2m ago)" after a figure read from a stale cache, ""
// while the cluster answers.
func asOf(f *Frame, now time.Time) string {
	s := stale(f)
	if s == nil {
		return ""
	}
	return " (as of " + Age(s.AsOf, now, true) + " ago)"
}

// okStyle is the style of a healthy state: green while the cluster
// answers, muted from a stale cache.
func okStyle(ctx *ui.Context, f *Frame) *lipgloss.Style {
	if stale(f) != nil {
		return &ctx.Styles.Muted
	}
	return &ctx.Styles.OK
}

// stateText is a state as a cell shows it: "Ready", or "Ready?" from a
// stale cache (the last state seen, not known to hold now).
func stateText(f *Frame, state string) string {
	if stale(f) != nil && state != "" {
		return state + "?"
	}
	return state
}

// staleBanner is the line above every screen while the cache is stale: how
// long the API has not answered and how old the data is. It fits 80
// columns; the overview says why, whole.
func staleBanner(s *kube.Staleness, now time.Time, onOverview bool) string {
	line := "Cluster API down " + Age(s.Since, now, true) + ": the data is as of " + Age(s.AsOf, now, true) + " ago, not live"
	if !onOverview {
		line += " · why: 1 overview"
	}
	return line
}

// apiDownLines are the overview's words on a stale cache: that the
// cluster API is down, why, and what to check, wrapped to width.
func apiDownLines(s *kube.Staleness, now time.Time, width int) []string {
	text := "The cluster API is down (no answer for " + Age(s.Since, now, true) + "): this is the site as of " +
		Age(s.AsOf, now, true) + " ago, and what changed since is unknown."
	lines := wrap(text, width)
	if s.Reason != "" {
		lines = append(lines, wrap("Why: "+s.Reason, width)...)
	}
	if hint := kube.APIDownHint(s.Reason); hint != "" {
		lines = append(lines, wrap("Check: "+hint, width)...)
	}
	return lines
}

// wrap breaks text into lines of at most width cells, at spaces where it
// can, within a word where it must (a URL longer than the line).
func wrap(text string, width int) []string {
	width = max(width, 10)
	return strings.Split(ansi.Wrap(text, width, ""), "\n")
}
