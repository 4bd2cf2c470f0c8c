package config

import (
	"bytes"
	"compress/flate"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/netip"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
)

// Config is this node's part of an EVE EdgeNodeCluster, as the controller (or
// offline formation) hands it over. JSON field names are the EVE API's.
type Config struct {
	ClusterName      string `json:"cluster_name"`
	ClusterID        string `json:"cluster_id"`
	ClusterInterface string `json:"cluster_interface"`
	// ClusterIPPrefix is this node's cluster address with the cluster's
	// prefix length, e.g. 10.244.244.2/28.
	ClusterIPPrefix string `json:"cluster_ip_prefix"`
	IsWorkerNode    bool   `json:"is_worker_node"`
	JoinServerIP    string `json:"join_server_ip"`
	// TokenFile holds the cluster token in clear; EncryptedClusterToken is
	// the controller's object-level-encrypted token. Exactly one is set.
	TokenFile             string            `json:"token_file,omitempty"`
	EncryptedClusterToken json.RawMessage   `json:"encrypted_cluster_token,omitempty"`
	ClusterType           string            `json:"cluster_type,omitempty"`
	NodeName              string            `json:"node_name"`
	NodeUUID              string            `json:"node_uuid"`
	ResourceLabels        map[string]string `json:"resource_labels,omitempty"`
	// DeviceKeyFile is this device's ECDH private key (PEM; default
	// /persist/certs/ecdh.key.pem) and ControllerCertFile the controller's
	// ECDH certificate (PEM): together they decrypt encrypted_cluster_token.
	DeviceKeyFile      string `json:"device_key_file,omitempty"`
	ControllerCertFile string `json:"controller_cert_file,omitempty"`
}

// Cluster types EVE knows; empty means k3s.
const (
	ClusterTypeK3s = "k3s"
)

// FieldError is one problem with one field, with what to do about it.
type FieldError struct {
	Field   string
	Problem string
	Fix     string
}

func (e *FieldError) Error() string {
	if e.Fix == "" {
		return fmt.Sprintf("%s: %s", e.Field, e.Problem)
	}
	return fmt.Sprintf("%s: %s (%s)", e.Field, e.Problem, e.Fix)
}

// ValidationError lists every problem of a config at once.
type ValidationError struct {
	Problems []*FieldError
}

func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = "  - " + p.Error()
	}
	return fmt.Sprintf("invalid cluster config, %d problem(s):\n%s", len(e.Problems), strings.Join(lines, "\n"))
}

// Fields lists the fields with problems, in order.
func (e *ValidationError) Fields() []string {
	var out []string
	for _, p := range e.Problems {
		out = append(out, p.Field)
	}
	return out
}

// Parse decodes a config. Unknown fields are errors: a misspelt field
// name would otherwise be silently ignored. Every problem is said at once
// (a *ValidationError): each unknown field with the known one it most
// resembles, each field of the wrong type with where it is. JSON that
// does not parse says the line and column where it stops making sense.
func Parse(data []byte) (*Config, error) {
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&fields); err != nil {
		return nil, syntaxProblem(data, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		line, col := lineColumn(data, dec.InputOffset())
		return nil, fmt.Errorf("cluster config: unexpected data after the JSON object at line %d, column %d", line, col)
	}
	var c Config
	known := map[string]reflect.Value{}
	v := reflect.ValueOf(&c).Elem()
	for i := range v.NumField() {
		name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
		known[name] = v.Field(i)
	}
	var problems []*FieldError
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		field, ok := known[name]
		if !ok {
			p := &FieldError{Field: name, Problem: "unknown field"}
			if like := closestField(name, slices.Collect(maps.Keys(known))); like != "" {
				p.Fix = "did you mean " + like + "?"
			}
			problems = append(problems, p)
			continue
		}
		if err := json.Unmarshal(fields[name], field.Addr().Interface()); err != nil {
			p := &FieldError{Field: name, Problem: err.Error()}
			var typeErr *json.UnmarshalTypeError
			if errors.As(err, &typeErr) {
				p.Problem = fmt.Sprintf("is a JSON %s, want %s", typeErr.Value, jsonKind(typeErr.Type))
			}
			if at := fieldOffset(data, name); at >= 0 {
				line, col := lineColumn(data, at)
				p.Problem += fmt.Sprintf(" (line %d, column %d)", line, col)
			}
			problems = append(problems, p)
		}
	}
	if len(problems) > 0 {
		return nil, &ValidationError{Problems: problems}
	}
	if len(c.EncryptedClusterToken) > 0 && string(c.EncryptedClusterToken) == "null" {
		c.EncryptedClusterToken = nil
	}
	return &c, nil
}

// syntaxProblem says where JSON that does not parse stops making sense.
func syntaxProblem(data []byte, err error) error {
	var syntax *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		// Offset is just past the character that did not fit.
		line, col := lineColumn(data, syntax.Offset-1)
		return fmt.Errorf("cluster config is not valid JSON at line %d, column %d: %v", line, col, syntax)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		line, col := lineColumn(data, int64(len(data)))
		return fmt.Errorf("cluster config is not valid JSON: it ends at line %d, column %d before the object does (a missing } or \")", line, col)
	case errors.As(err, &typeErr):
		return fmt.Errorf("cluster config must be one JSON object ({...}), not a JSON %s", typeErr.Value)
	}
	return fmt.Errorf("cluster config is not valid JSON: %w", err)
}

// lineColumn is offset's line and column (from 1) in data.
func lineColumn(data []byte, offset int64) (line, col int) {
	offset = min(max(offset, 0), int64(len(data)))
	before := data[:offset]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(offset) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return line, col
}

// fieldOffset is where "name" first appears as a key in data (-1: not
// found): where a field of the wrong type is.
func fieldOffset(data []byte, name string) int64 {
	return int64(bytes.Index(data, []byte(`"`+name+`"`)))
}

// jsonKind names a Go type as the JSON it takes.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice:
		return "a list"
	}
	return t.String()
}

// closestField is the known field name nearest to name (a typo's few
// edits away), "" when none is near.
func closestField(name string, known []string) string {
	best, bestDist := "", 4
	slices.Sort(known)
	for _, k := range known {
		if d := editDistance(name, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b (a swap counts 2),
// as cobra's own "did you mean" measures a mistyped command.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// Load reads and parses a config file.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster config: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Environment is what validation checks against on this machine.
type Environment struct {
	// InterfaceExists reports whether a network interface exists.
	InterfaceExists func(name string) bool
	// ReadFile reads the token file.
	ReadFile func(path string) ([]byte, error)
}

// HostEnvironment checks against the real host.
func HostEnvironment() Environment {
	return Environment{
		InterfaceExists: func(name string) bool {
			_, err := net.InterfaceByName(name)
			return err == nil
		},
		ReadFile: os.ReadFile,
	}
}

// The shapes a config's fields must have; formation checks a node list
// with the same ones.
var (
	// UUIDPattern is a UUID as EVE writes one (cluster and node ids).
	UUIDPattern = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	// A Kubernetes node name is a DNS subdomain; k3s uses it as-is.
	NodeNamePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	// Label keys and values as Kubernetes accepts them.
	labelValuePattern = regexp.MustCompile(`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)
	labelNamePattern  = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
	// ClusterNameRegexp is a cluster name: it becomes a label value.
	ClusterNameRegexp = regexp.MustCompile(`^[A-Za-z0-9][-A-Za-z0-9_.]{0,62}$`)
)

// MinTokenEntropyBytes is how much entropy a cluster token must carry.
const MinTokenEntropyBytes = 32

// Validated is a config that passed validation, with its parsed parts.
type Validated struct {
	*Config
	NodeIP  netip.Addr
	Prefix  netip.Prefix
	JoinIP  netip.Addr
	Token   Secret
	IsSeed  bool
	Network netip.Prefix
}

// Validate checks every rule and returns all problems at once. The token is
// read (clear file) and checked; it is carried as a Secret that never prints.
func Validate(c *Config, env Environment) (*Validated, error) {
	var problems []*FieldError
	add := func(field, problem, fix string) {
		problems = append(problems, &FieldError{Field: field, Problem: problem, Fix: fix})
	}
	v := &Validated{Config: c}

	if c.ClusterName == "" {
		add("cluster_name", "missing", "name the cluster, e.g. \"site1\"")
	} else if !ClusterNameRegexp.MatchString(c.ClusterName) {
		add("cluster_name", fmt.Sprintf("%q is not a valid name", c.ClusterName), "use letters, digits, '-', '_' or '.', at most 63 characters")
	}
	checkUUID := func(field, value string) {
		if value == "" {
			add(field, "missing", "set it to a UUID like 7f3e2a10-8c4b-4f8e-9a55-2b1c3d4e5f60")
		} else if !UUIDPattern.MatchString(value) {
			add(field, fmt.Sprintf("%q is not a UUID", value), "use the 8-4-4-4-12 hex form")
		}
	}
	checkUUID("cluster_id", c.ClusterID)
	checkUUID("node_uuid", c.NodeUUID)
	if c.NodeName == "" {
		add("node_name", "missing", "set this node's name, e.g. \"node-a\"")
	} else if len(c.NodeName) > 253 || !NodeNamePattern.MatchString(c.NodeName) {
		add("node_name", fmt.Sprintf("%q is not a valid Kubernetes node name", c.NodeName), "use lower-case letters, digits and '-'")
	}
	if c.ClusterType != "" && c.ClusterType != ClusterTypeK3s {
		add("cluster_type", fmt.Sprintf("%q is not supported", c.ClusterType), "use \"k3s\" or leave it out")
	}

	if c.ClusterInterface == "" {
		add("cluster_interface", "missing", "name the interface on the cluster LAN, e.g. \"eth1\"")
	} else if env.InterfaceExists != nil && !env.InterfaceExists(c.ClusterInterface) {
		add("cluster_interface", fmt.Sprintf("interface %q does not exist on this device", c.ClusterInterface), "check `ip link` for the cluster port's name")
	}

	prefixOK := false
	if c.ClusterIPPrefix == "" {
		add("cluster_ip_prefix", "missing", "set this node's address with the prefix length, e.g. 10.244.244.2/28")
	} else if p, err := netip.ParsePrefix(c.ClusterIPPrefix); err != nil {
		add("cluster_ip_prefix", fmt.Sprintf("%q does not parse", c.ClusterIPPrefix), "write ADDRESS/LENGTH, e.g. 10.244.244.2/28")
	} else if !p.Addr().Is4() {
		add("cluster_ip_prefix", "only IPv4 cluster prefixes are supported", "use an IPv4 prefix such as 10.244.244.2/28")
	} else if p.Bits() > 29 {
		add("cluster_ip_prefix", fmt.Sprintf("/%d leaves no room for three nodes", p.Bits()), "use /29 or shorter, e.g. /28")
	} else {
		v.Prefix, v.NodeIP, v.Network = p, p.Addr(), p.Masked()
		prefixOK = true
		if v.NodeIP == v.Network.Addr() {
			add("cluster_ip_prefix", fmt.Sprintf("%s is the network address of %s", v.NodeIP, v.Network), "pick a host address inside the prefix")
		} else if v.NodeIP == Broadcast(v.Network) {
			add("cluster_ip_prefix", fmt.Sprintf("%s is the broadcast address of %s", v.NodeIP, v.Network), "pick a host address inside the prefix")
		}
	}

	if c.JoinServerIP == "" {
		add("join_server_ip", "missing", "set the seed server's cluster address")
	} else if ip, err := netip.ParseAddr(c.JoinServerIP); err != nil {
		add("join_server_ip", fmt.Sprintf("%q is not an IP address", c.JoinServerIP), "write an address such as 10.244.244.1")
	} else {
		v.JoinIP = ip
		if prefixOK {
			if !v.Network.Contains(ip) {
				add("join_server_ip", fmt.Sprintf("%s is outside the cluster prefix %s", ip, v.Network), "the seed must be on the cluster LAN")
			} else if ip == v.Network.Addr() || ip == Broadcast(v.Network) {
				add("join_server_ip", fmt.Sprintf("%s is not a host address of %s", ip, v.Network), "pick the seed's host address")
			}
			v.IsSeed = ip == v.NodeIP
			if v.IsSeed && c.IsWorkerNode {
				add("is_worker_node", "a worker node cannot be the seed server (its address is join_server_ip)", "make a server node the seed, or set is_worker_node to false")
			}
		}
	}

	for k, val := range c.ResourceLabels {
		name := k
		if i := strings.LastIndexByte(k, '/'); i >= 0 {
			name = k[i+1:]
		}
		if len(name) > 63 || !labelNamePattern.MatchString(name) || len(val) > 63 || !labelValuePattern.MatchString(val) {
			add("resource_labels", fmt.Sprintf("%q=%q is not a valid Kubernetes label", k, val), "use letters, digits, '-', '_' and '.', at most 63 characters")
		}
		if k == "node-uuid" {
			add("resource_labels", "node-uuid is set by the agent from node_uuid", "remove it from resource_labels")
		}
	}

	switch {
	case c.TokenFile == "" && len(c.EncryptedClusterToken) == 0:
		add("token_file", "no cluster token", "set token_file (or encrypted_cluster_token from the controller)")
	case c.TokenFile != "" && len(c.EncryptedClusterToken) > 0:
		add("token_file", "both token_file and encrypted_cluster_token are set", "keep one")
	case c.TokenFile != "":
		if env.ReadFile == nil {
			break
		}
		data, err := env.ReadFile(c.TokenFile)
		if err != nil {
			add("token_file", fmt.Sprintf("cannot read %s: %v", c.TokenFile, errors.Unwrap(err)), "check the path and its permissions")
			break
		}
		token := strings.TrimSpace(string(data))
		// A secure token's entropy is its password's: the CA hash is public.
		if _, password := ParseToken(token); EntropyBits(password) < MinTokenEntropyBytes*8 {
			bits := EntropyBits(password)
			add("token_file", fmt.Sprintf("the token carries about %d bits of entropy, %d needed", int(bits), MinTokenEntropyBytes*8),
				"generate one with `head -c 32 /dev/urandom | base64` or `sitecon form`")
			break
		}
		v.Token = Secret(token)
	default:
		token, field, problem, fix := decryptConfigToken(c, env)
		if problem != "" {
			add(field, problem, fix)
			break
		}
		if bits := EntropyBits(token.Reveal()); bits < MinTokenEntropyBytes*8 {
			add("encrypted_cluster_token", fmt.Sprintf("the decrypted token carries about %d bits of entropy, %d needed", int(bits), MinTokenEntropyBytes*8), "have the controller issue a stronger token")
			break
		}
		v.Token = token
	}

	if len(problems) > 0 {
		return nil, &ValidationError{Problems: problems}
	}
	return v, nil
}

// DefaultDeviceKeyFile is where EVE keeps the device's ECDH private key.
const DefaultDeviceKeyFile = "/persist/certs/ecdh.key.pem"

// decryptConfigToken decrypts encrypted_cluster_token, or names the field at
// fault and what to do.
func decryptConfigToken(c *Config, env Environment) (token Secret, field, problem, fix string) {
	var block CipherBlock
	if err := json.Unmarshal(c.EncryptedClusterToken, &block); err != nil {
		return "", "encrypted_cluster_token", "not a cipher block: " + err.Error(), "pass the controller's CipherBlock (cipherContextId, initialValue, cipherData, clearTextSha256)"
	}
	if c.ControllerCertFile == "" {
		return "", "controller_cert_file", "missing: needed to decrypt encrypted_cluster_token", "name the controller's ECDH certificate (PEM)"
	}
	keyFile := c.DeviceKeyFile
	if keyFile == "" {
		keyFile = DefaultDeviceKeyFile
	}
	if env.ReadFile == nil {
		return "", "", "", ""
	}
	key, err := env.ReadFile(keyFile)
	if err != nil {
		return "", "device_key_file", fmt.Sprintf("cannot read %s: %v", keyFile, errors.Unwrap(err)), "check the path and its permissions"
	}
	cert, err := env.ReadFile(c.ControllerCertFile)
	if err != nil {
		return "", "controller_cert_file", fmt.Sprintf("cannot read %s: %v", c.ControllerCertFile, errors.Unwrap(err)), "check the path and its permissions"
	}
	token, err = DecryptClusterToken(block, key, cert)
	if err != nil {
		return "", "encrypted_cluster_token", err.Error(), "check device_key_file and controller_cert_file, or ask the controller to re-send the token"
	}
	return token, "", "", ""
}

// Broadcast is the last address of the prefix: never a node's.
func Broadcast(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	n := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	n |= host
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
}

// EntropyBits estimates a token's entropy, conservatively, as the least of
// three measures: its length times the bits per character its alphabet
// allows (hex, letters, digits, symbols); its size compressed (catches
// "abcdabcd"); and, for a token using few characters, its length times its
// Shannon entropy per character (catches "abababab"). 32 random bytes, hex or base64, pass 256 bits; passwords and
// patterns do not.
func EntropyBits(s string) float64 {
	if s == "" {
		return 0
	}
	counts := map[rune]int{}
	n := 0
	for _, r := range s {
		counts[r]++
		n++
	}
	shannon := 0.0
	for _, c := range counts {
		p := float64(c) / float64(n)
		shannon -= p * math.Log2(p)
	}
	var compressed bytes.Buffer
	w, _ := flate.NewWriter(&compressed, flate.BestCompression)
	_, _ = w.Write([]byte(s))
	_ = w.Close()
	// A random string does not shrink, so its deflate stream (a few bytes of
	// block header included) is no shorter than its entropy.
	bits := min(math.Log2(float64(alphabetSize(s)))*float64(n), float64(8*compressed.Len()))
	// The Shannon figure of a short random sample understates its alphabet;
	// it is only trusted to expose a low-diversity token.
	if shannon < 3 {
		bits = min(bits, shannon*float64(n))
	}
	return bits
}

func alphabetSize(s string) int {
	classes := []func(rune) bool{
		func(r rune) bool { return r >= '0' && r <= '9' },
		func(r rune) bool { return r >= 'a' && r <= 'z' },
		func(r rune) bool { return r >= 'A' && r <= 'Z' },
	}
	sizes := []int{10, 26, 26}
	size := 0
	used := make([]bool, len(classes))
	other := 0
	for _, r := range s {
		matched := false
		for i, in := range classes {
			if in(r) {
				used[i], matched = true, true
			}
		}
		if !matched {
			other++
		}
	}
	for i, u := range used {
		if u {
			size += sizes[i]
		}
	}
	if other > 0 {
		size += 32
	}
	return max(size, 2)
}

// Secret is a value that must never reach a log, a status output or a screen.
type Secret string

// String hides the secret.
func (Secret) String() string { return "[redacted]" }

// GoString hides the secret from %#v.
func (Secret) GoString() string { return "[redacted]" }

// MarshalJSON hides the secret from JSON output.
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"[redacted]"`), nil }

// LogValue hides the secret from slog.
func (Secret) LogValue() slog.Value { return slog.StringValue("[redacted]") }

// Reveal returns the secret for the one place that needs it: the k3s config.
func (s Secret) Reveal() string { return string(s) }

// NodeLabels are the labels k3s registers this node with: its UUID and the
// resource labels, sorted for a stable config file.
func (v *Validated) NodeLabels() []string {
	labels := []string{"node-uuid=" + v.NodeUUID}
	keys := make([]string, 0, len(v.ResourceLabels))
	for k := range v.ResourceLabels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		labels = append(labels, k+"="+v.ResourceLabels[k])
	}
	return labels
}

// StatusPort is where every node answers GET /status on its cluster address.
const StatusPort = 12346

// WithJoinIP is the config with another seed address: the seed is the server
// whose cluster address it is. A worker is never the seed, whatever address
// it is given: that would turn it into a k3s server.
func (v *Validated) WithJoinIP(ip netip.Addr) *Validated {
	out := *v
	cfg := *v.Config
	cfg.JoinServerIP = ip.String()
	out.Config, out.JoinIP, out.IsSeed = &cfg, ip, v.NodeIP == ip && !v.IsWorkerNode
	return &out
}
