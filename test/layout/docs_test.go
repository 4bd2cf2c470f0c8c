package layout

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every test the README and docs/ name as the one that holds a promise
// exists: a test renamed or removed cannot leave a guarantee resting on
// nothing (docs/SECURITY.md and README's "What sitecon guarantees" name
// hundreds).
func TestDocsNameOnlyTestsThatExist(t *testing.T) {
	root := moduleRoot(t)
	out, err := exec.Command("git", "-C", root, "ls-files", "*_test.go").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v)", err)
	}
	defined := map[string]bool{}
	funcTest := regexp.MustCompile(`(?m)^func (Test\w+)\(`)
	for _, rel := range strings.Fields(string(out)) {
		data, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range funcTest.FindAllStringSubmatch(string(data), -1) {
			defined[m[1]] = true
		}
	}
	if len(defined) < 100 {
		t.Fatalf("only %d tests found: the walk is broken", len(defined))
	}
	docs, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	docs = append(docs, filepath.Join(root, "README.md"))
	named := regexp.MustCompile("`(Test[A-Z]\\w*)`")
	cited := 0
	for _, doc := range docs {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range named.FindAllStringSubmatch(string(data), -1) {
			cited++
			if !defined[m[1]] {
				t.Errorf("%s names %s, and no such test exists", filepath.Base(doc), m[1])
			}
		}
	}
	if cited == 0 {
		t.Fatal("no test named in the docs: the pattern is broken")
	}
}
