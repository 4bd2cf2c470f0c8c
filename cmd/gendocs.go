package cmd

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// newGenDocsCmd writes the man pages and shell completions the package
// ships (make dist), generated from the command tree itself so they never
// drift from it. Hidden: it is the build's, not the technician's.
func newGenDocsCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:    "gen-docs DIR",
		Short:  "Write man pages (DIR/man1) and shell completions (DIR/completions) for packaging",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			man := filepath.Join(args[0], "man1")
			completions := filepath.Join(args[0], "completions")
			for _, dir := range []string{man, completions} {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					return err
				}
			}
			// No date in the pages: a rebuild of the same commit gives the same package.
			header := &doc.GenManHeader{Title: "SITECON", Section: "1", Source: "sitecon " + buildVersion, Manual: "sitecon manual"}
			root.DisableAutoGenTag = true
			if err := doc.GenManTree(root, header, man); err != nil {
				return fmt.Errorf("man pages: %w", err)
			}
			for name, write := range map[string]func(string) error{
				"sitecon.bash": func(p string) error { return root.GenBashCompletionFileV2(p, true) },
				"_sitecon":     root.GenZshCompletionFile,
				"sitecon.fish": func(p string) error { return root.GenFishCompletionFile(p, true) },
			} {
				if err := write(filepath.Join(completions, name)); err != nil {
					return fmt.Errorf("completion %s: %w", name, err)
				}
			}
			return nil
		},
	}
}
