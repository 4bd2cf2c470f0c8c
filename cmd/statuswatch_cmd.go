package cmd

import (
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/sitecon/sitecon/views"
)

// watchTerminal is what `sitecon status --watch` draws on: the command's
// output, sized when it is a terminal; and, when standard input is a
// terminal, its keys one at a time without echo (so q quits without
// Enter). Ctrl-C still signals (ISIG stays on). restore puts the terminal
// back as it was.
func watchTerminal(cmd *cobra.Command) (views.WatchTerminal, func()) {
	t := views.WatchTerminal{Out: cmd.OutOrStdout()}
	if f, ok := t.Out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fd := int(f.Fd())
		t.Size = func() (int, int, bool) {
			w, h, err := term.GetSize(fd)
			return w, h, err == nil
		}
	}
	restore := func() {}
	in := int(os.Stdin.Fd())
	if !term.IsTerminal(in) {
		return t, restore
	}
	was, err := unix.IoctlGetTermios(in, unix.TCGETS)
	if err != nil {
		return t, restore
	}
	keys := *was
	keys.Lflag &^= unix.ICANON | unix.ECHO
	keys.Cc[unix.VMIN], keys.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(in, unix.TCSETS, &keys); err != nil {
		return t, restore
	}
	t.Keys = os.Stdin
	return t, func() { _ = unix.IoctlSetTermios(in, unix.TCSETS, was) }
}
