package nodecheck

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/sitecon/sitecon/kube/nodestate"
)

// Longhorn's volumes appear on a node as SCSI disks (/dev/sdX) whose
// vendor and product are those of its iSCSI target. A multipathd that
// does not blacklist them takes them over, and the volume's mount fails
// ("already mounted or mount point busy"): Longhorn's knowledge base asks
// for `blacklist { devnode "^sd[a-z0-9]+" }` in /etc/multipath.conf.
const (
	longhornVendor  = "IET"
	longhornProduct = "VIRTUAL-DISK"
)

// longhornDevnodes are device names a Longhorn volume may get: any sd
// device but the first, which is usually the boot disk (a blacklist of
// that one alone leaves Longhorn's to multipathd).
var longhornDevnodes = []string{"sdb", "sdc", "sdz", "sdaa"}

// multipathd: not running, or running with Longhorn's devices
// blacklisted in /etc/multipath.conf or /etc/multipath/conf.d/*.conf.
func multipathd(h Host, procs map[string]int, procErr error) nodestate.Prereq {
	if procErr != nil {
		return nodestate.Prereq{Problem: procErr.Error()}
	}
	if procs["multipathd"] == 0 {
		return nodestate.Prereq{OK: true, Evidence: "multipathd does not run"}
	}
	files := []string{filepath.Join(h.Etc, "multipath.conf")}
	// A drop-in directory that cannot be read may hold the blacklist:
	// unknown, never taken as empty (filepath.Glob would hide the error).
	confD := filepath.Join(h.Etc, "multipath", "conf.d")
	entries, err := os.ReadDir(confD)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nodestate.Prereq{Problem: fmt.Sprintf("multipathd runs, and its drop-in directory could not be read: %v", err)}
	}
	var dropIns []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".conf") {
			dropIns = append(dropIns, filepath.Join(confD, e.Name()))
		}
	}
	slices.Sort(dropIns)
	files = append(files, dropIns...)
	var conf multipathConf
	var read []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nodestate.Prereq{Problem: fmt.Sprintf("multipathd runs, and its config could not be read: %v", err)}
		}
		read = append(read, f)
		conf.parse(string(data))
	}
	if len(read) == 0 {
		return nodestate.Prereq{Evidence: "multipathd runs with no " + files[0] + ": it claims every SCSI disk, Longhorn's too"}
	}
	if why, ok := conf.blacklistsLonghorn(); ok {
		return nodestate.Prereq{OK: true, Evidence: "multipathd runs; " + why + " (" + strings.Join(read, ", ") + ")"}
	}
	return nodestate.Prereq{Evidence: "multipathd runs and " + strings.Join(read, ", ") + " does not blacklist Longhorn's devices (/dev/sd*, vendor IET)"}
}

// multipathConf is what matters of multipath.conf: the blacklist and its
// exceptions.
type multipathConf struct {
	blacklist, exceptions multipathList
}

type multipathList struct {
	devnodes, wwids []string
	devices         []multipathDevice
}

type multipathDevice struct{ vendor, product string }

// parse reads one file's sections (multipath.conf(5): one attribute or
// section opening per line, '#' and '!' start a comment outside quotes).
func (c *multipathConf) parse(text string) {
	var stack []string
	var dev *multipathDevice
	for _, line := range strings.Split(text, "\n") {
		words := multipathWords(line)
		if len(words) == 0 {
			continue
		}
		if words[0] == "}" {
			if len(stack) > 0 {
				if stack[len(stack)-1] == "device" && dev != nil && len(stack) == 2 {
					if l := c.list(stack[0]); l != nil {
						l.devices = append(l.devices, *dev)
					}
					dev = nil
				}
				stack = stack[:len(stack)-1]
			}
			continue
		}
		if len(words) >= 2 && words[len(words)-1] == "{" {
			stack = append(stack, words[0])
			if words[0] == "device" {
				dev = &multipathDevice{}
			}
			continue
		}
		if len(words) < 2 || len(stack) == 0 {
			continue
		}
		l := c.list(stack[0])
		switch {
		case l == nil:
		case len(stack) == 1 && words[0] == "devnode":
			l.devnodes = append(l.devnodes, words[1])
		case len(stack) == 1 && words[0] == "wwid":
			l.wwids = append(l.wwids, words[1])
		case len(stack) == 2 && dev != nil && words[0] == "vendor":
			dev.vendor = words[1]
		case len(stack) == 2 && dev != nil && words[0] == "product":
			dev.product = words[1]
		}
	}
}

func (c *multipathConf) list(section string) *multipathList {
	switch section {
	case "blacklist":
		return &c.blacklist
	case "blacklist_exceptions":
		return &c.exceptions
	}
	return nil
}

// blacklistsLonghorn says whether Longhorn's devices are blacklisted and
// not excepted again, and by which entry.
func (c *multipathConf) blacklistsLonghorn() (string, bool) {
	// An exception that lets any of Longhorn's devices back in undoes the
	// blacklist for it; a blacklist must cover every one of them.
	if _, excepted := c.exceptions.matches(slices.ContainsFunc[[]string, string]); excepted {
		return "", false
	}
	return c.blacklist.matches(func(names []string, match func(string) bool) bool {
		return !slices.ContainsFunc(names, func(n string) bool { return !match(n) })
	})
}

// matches says which entry of l covers Longhorn's devices: a devnode
// pattern by covers (every name, or any), a wwid pattern that matches any
// id, a device entry naming Longhorn's vendor and product.
func (l multipathList) matches(covers func(names []string, match func(string) bool) bool) (string, bool) {
	for _, p := range l.devnodes {
		if re, err := regexp.Compile(p); err == nil && covers(longhornDevnodes, re.MatchString) {
			return fmt.Sprintf("devnode %q is blacklisted", p), true
		}
	}
	for _, p := range l.wwids {
		// Only a pattern that matches any id covers Longhorn's volumes.
		if re, err := regexp.Compile(p); err == nil && re.MatchString("") && re.MatchString("36001405f0e1d2c3b4a5968778695a4b3") {
			return fmt.Sprintf("wwid %q is blacklisted", p), true
		}
	}
	for _, d := range l.devices {
		if matchOrAny(d.vendor, longhornVendor) && matchOrAny(d.product, longhornProduct) && d.vendor != "" {
			return fmt.Sprintf("device vendor %q product %q is blacklisted", d.vendor, d.product), true
		}
	}
	return "", false
}

func matchOrAny(pattern, s string) bool {
	if pattern == "" {
		return true
	}
	re, err := regexp.Compile(pattern)
	return err == nil && re.MatchString(s)
}

// multipathWords splits a line into words: a quoted string is one word
// ("" inside it is a quote), a comment ends the line.
func multipathWords(line string) []string {
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	flush := func() {
		if inWord {
			words = append(words, cur.String())
			cur.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case quoted && ch == '"' && i+1 < len(line) && line[i+1] == '"':
			cur.WriteByte('"')
			i++
		case quoted && ch == '"':
			quoted = false
		case quoted:
			cur.WriteByte(ch)
		case ch == '"':
			inWord, quoted = true, true
		case ch == '#' || ch == '!':
			flush()
			return words
		case ch == ' ' || ch == '\t' || ch == '\r':
			flush()
		default:
			inWord = true
			cur.WriteByte(ch)
		}
	}
	flush()
	return words
}
