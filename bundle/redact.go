package bundle

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/sitecon/sitecon/agent/config"
)

// Redacted replaces what a bundle must not hold.
const Redacted = "[redacted]"

// MinSecretBytes is the shortest secret value scrubbed by its value: a
// shorter one ("true", a port number) would be replaced wherever the
// same few characters appear, and is no secret worth the name. The
// fields that hold tokens and passwords are redacted whatever their
// length.
const MinSecretBytes = 8

// Redactor takes secrets out of a bundle's files, in two ways: by field
// (the values of JSON fields and of "key: value" and "--flag value" text
// whose name says token or password, cloud-init's user and network
// data, and anything shaped like a k3s token), and by value (every value
// it was given, as written and in base64, wherever it appears).
type Redactor struct {
	mu     sync.Mutex
	values []string
}

// NewRedactor is a Redactor that knows no value yet.
func NewRedactor() *Redactor { return &Redactor{} }

// AddValue makes r scrub v, as given and trimmed of surrounding white
// space (a token read from a file), and their base64 forms, wherever
// they appear.
func (r *Redactor) AddValue(v string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range []string{v, strings.TrimSpace(v)} {
		if len(v) < MinSecretBytes {
			continue
		}
		for _, s := range []string{v, base64.StdEncoding.EncodeToString([]byte(v)), base64.RawStdEncoding.EncodeToString([]byte(v)),
			base64.URLEncoding.EncodeToString([]byte(v)), base64.RawURLEncoding.EncodeToString([]byte(v))} {
			if !slices.Contains(r.values, s) {
				r.values = append(r.values, s)
			}
		}
	}
	// Longest first: a value that holds another is replaced whole.
	slices.SortFunc(r.values, func(a, b string) int { return len(b) - len(a) })
}

// AddToken makes r scrub a cluster token: as given, and its password
// alone (the secure form K10<ca-hash>::server:<password> carries it).
func (r *Redactor) AddToken(token string) {
	token = strings.TrimSpace(token)
	r.AddValue(token)
	if _, password := config.ParseToken(token); password != "" {
		r.AddValue(password)
	}
}

// Known says how many values r scrubs (each with its base64 forms).
func (r *Redactor) Known() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.values)
}

var (
	// k3sTokenPattern is a k3s token in its secure form.
	k3sTokenPattern = regexp.MustCompile(`K10[0-9a-fA-F]{16,}::[A-Za-z0-9_.-]+:[^\s"',;]+`)
	// secretFieldPattern is "token: x", "password=x", `"token":"x"` in
	// text; the value stops at white space, a quote or a bracket.
	secretFieldPattern = regexp.MustCompile(`(?i)((?:[a-z_-]*token|password|passwd)"?\s*[:=]\s*"?)([^\s"',;{}\[\]]+)`)
	// secretFlagPattern is "--token x", "--agent-token=x".
	secretFlagPattern = regexp.MustCompile(`(?i)(--(?:agent-)?token[ =])([^\s"',;]+)`)
)

// secretField says whether a JSON field of this name holds a secret when
// it holds a string: tokens and passwords (not a file or path naming
// where one is), cloud-init's user and network data.
func secretField(name string) bool {
	n := strings.ToLower(name)
	if strings.HasSuffix(n, "file") || strings.HasSuffix(n, "path") || strings.HasSuffix(n, "ref") {
		return false
	}
	switch n {
	case "userdata", "userdatabase64", "networkdata", "networkdatabase64":
		return true
	}
	return strings.Contains(n, "token") || strings.Contains(n, "password") || strings.Contains(n, "passwd")
}

// Scrub returns data with its secrets replaced by Redacted, and how many
// it replaced. A .json file that parses is redacted field by field and
// written again (indented); a .jsonl file line by line; anything else as
// text.
func (r *Redactor) Scrub(name string, data []byte) ([]byte, int) {
	r.mu.Lock()
	values := slices.Clone(r.values)
	r.mu.Unlock()
	n := 0
	parsed := false
	switch {
	case strings.HasSuffix(name, ".json"):
		if out, ok := scrubJSON(data, values, &n, true); ok {
			data, parsed = out, true
		}
	case strings.HasSuffix(name, ".jsonl"):
		lines := bytes.SplitAfter(data, []byte("\n"))
		var buf bytes.Buffer
		for _, line := range lines {
			trimmed := bytes.TrimSpace(line)
			if out, ok := scrubJSON(trimmed, values, &n, false); ok && len(trimmed) > 0 {
				buf.Write(out)
				if bytes.HasSuffix(line, []byte("\n")) {
					buf.WriteByte('\n')
				}
				continue
			}
			// A line that is not JSON is scrubbed as text.
			buf.WriteString(scrubText(string(line), values, &n))
		}
		data, parsed = buf.Bytes(), true
	}
	if parsed {
		// Every string was scrubbed as it was walked; what is left is a
		// known value outside a string (in a key), scrubbed by value
		// alone: a text pattern would break the JSON.
		return []byte(scrubValues(string(data), values, &n)), n
	}
	return []byte(scrubText(string(data), values, &n)), n
}

// scrubText replaces the secret-shaped text and every known value in s.
func scrubText(s string, values []string, n *int) string {
	s = k3sTokenPattern.ReplaceAllStringFunc(s, func(string) string { *n++; return Redacted })
	for _, p := range []*regexp.Regexp{secretFieldPattern, secretFlagPattern} {
		s = p.ReplaceAllStringFunc(s, func(m string) string {
			sub := p.FindStringSubmatch(m)
			if sub[2] == Redacted || strings.HasPrefix(sub[2], "********") {
				return m // already redacted (k3s writes its own stars)
			}
			*n++
			return sub[1] + Redacted
		})
	}
	return scrubValues(s, values, n)
}

// scrubValues replaces every known value in s.
func scrubValues(s string, values []string, n *int) string {
	for _, v := range values {
		if c := strings.Count(s, v); c > 0 {
			*n += c
			s = strings.ReplaceAll(s, v, Redacted)
		}
	}
	return s
}

// scrubJSON decodes one JSON value, redacts it field by field and string
// by string, and encodes it again; ok false when data is not JSON.
func scrubJSON(data []byte, values []string, n *int, indent bool) ([]byte, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return nil, false
	}
	v = scrubValue(v, values, n)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if indent {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(v); err != nil {
		return nil, false
	}
	out := buf.Bytes()
	if !indent {
		out = bytes.TrimSuffix(out, []byte("\n"))
	}
	return out, true
}

func scrubValue(v any, values []string, n *int) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if s, ok := e.(string); ok && s != "" && s != Redacted && secretField(k) {
				*n++
				t[k] = Redacted
				continue
			}
			t[k] = scrubValue(e, values, n)
		}
		return t
	case []any:
		for i, e := range t {
			t[i] = scrubValue(e, values, n)
		}
		return t
	case string:
		return scrubText(t, values, n)
	}
	return v
}
