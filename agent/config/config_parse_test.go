package config

import (
	"errors"
	"strings"
	"testing"
)

// Issue 38: a config's mistakes said so that a technician can fix them:
// JSON that does not parse names the line and column; every unknown field
// at once, each with the field it resembles; a field of the wrong type with
// where it is. Before, "unexpected EOF", and only the first unknown field,
// reported as invalid JSON.
func TestParseSaysWhereAndWhatToFix(t *testing.T) {
	for _, c := range []struct {
		name, data string
		want       []string
		fields     []string // a *ValidationError's fields, in order
	}{
		{"cut off", "{\n  \"cluster_name\": \"site\",\n  \"node_name\": \"node-a\"\n", []string{"ends at line 4, column 1", "missing }"}, nil},
		{"a stray comma", "{\n  \"cluster_name\": \"site\",\n}\n", []string{"line 3, column 1"}, nil},
		{"two typos", `{"cluster_intreface": "eth1", "node_nmae": "node-a", "cluster_name": "site"}`,
			[]string{"cluster_intreface: unknown field (did you mean cluster_interface?)", "node_nmae: unknown field (did you mean node_name?)", "2 problem(s)"},
			[]string{"cluster_intreface", "node_nmae"}},
		{"nothing like it", `{"colour": "blue"}`, []string{"colour: unknown field"}, []string{"colour"}},
		{"the wrong type", "{\n  \"cluster_name\": \"site\",\n  \"is_worker_node\": \"yes\"\n}", []string{"is_worker_node: is a JSON string, want true or false (line 3, column 3)"}, []string{"is_worker_node"}},
		{"not an object", `["a"]`, []string{"one JSON object"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.data))
			if err == nil {
				t.Fatal("parsed")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error does not say %q:\n%v", w, err)
				}
			}
			var v *ValidationError
			if c.fields != nil && (!errors.As(err, &v) || strings.Join(v.Fields(), ",") != strings.Join(c.fields, ",")) {
				t.Errorf("problems %v, want %v (%v)", v, c.fields, err)
			}
			if strings.Contains(c.name, "typo") && strings.Contains(err.Error(), "not valid JSON") {
				t.Errorf("an unknown field is called invalid JSON: %v", err)
			}
		})
	}
	if _, err := Parse([]byte(`{"cluster_name": "site", "node_name": "node-a"}`)); err != nil {
		t.Errorf("a good config: %v", err)
	}
}
