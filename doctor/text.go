package doctor

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// WriteText writes the report for people: by area, the worst area first,
// each finding with its id, then its evidence and next step indented. The
// caller cleans the strings of control characters first (they come from
// the cluster and from files).
func WriteText(w io.Writer, r Report) error {
	var b strings.Builder
	area := ""
	for _, f := range r.Findings {
		if f.Area != area {
			if area != "" {
				b.WriteString("\n")
			}
			area = f.Area
			fmt.Fprintf(&b, "%s\n", strings.ToUpper(area))
		}
		fmt.Fprintf(&b, "  %-5s %-24s %s\n", f.Severity, f.ID, f.Summary)
		for _, e := range f.Evidence {
			fmt.Fprintf(&b, "        %s\n", e)
		}
		// A "not checked" finding's next step says how to get the check
		// run: printed whatever its severity.
		if f.Next != "" && (f.Severity >= Warn || notChecked(f)) {
			fmt.Fprintf(&b, "        next: %s\n", f.Next)
		}
	}
	counts := map[Severity]int{}
	unchecked := 0
	for _, f := range r.Findings {
		counts[f.Severity]++
		if notChecked(f) {
			unchecked++
		}
	}
	fmt.Fprintf(&b, "\n%d error, %d warn, %d info, %d ok", counts[Error], counts[Warn], counts[Info], counts[OK])
	if unchecked > 0 {
		// Never read as a clean bill: what was not looked at is said
		// beside what was, and how to get it looked at.
		fmt.Fprintf(&b, "; %d not checked (each says why; most need this node's cluster config: on a node, or --config FILE)", unchecked)
	}
	fmt.Fprintf(&b, "; exit status %d", r.ExitStatus())
	if r.APIProblem != "" {
		b.WriteString(" (the cluster API could not be read)")
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// notChecked: the finding says its check did not run, or ran in part.
func notChecked(f Finding) bool { return f.NotChecked }

// WriteJSON writes the report as one indented JSON object.
func WriteJSON(w io.Writer, r Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
