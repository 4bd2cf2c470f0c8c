package apps

import (
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watchedDirs keeps inotify watches on the apps directory and its
// subdirectories. A watch follows an inode: a directory renamed away and
// replaced by another keeps the watch on the old one, so every read re-arms
// the watches on whatever is at the paths now.
type watchedDirs struct {
	watcher *fsnotify.Watcher
	log     *slog.Logger
	inodes  map[string]uint64 // by path: the directory the watch is on
}

func (w *watchedDirs) arm(root string) {
	if w.inodes == nil {
		w.inodes = map[string]uint64{}
	}
	for _, path := range []string{root, filepath.Join(root, appsSubdir), filepath.Join(root, volumesSubdir)} {
		var ino uint64
		if st, err := os.Stat(path); err == nil {
			if sys, ok := st.Sys().(*syscall.Stat_t); ok {
				ino = sys.Ino
			}
		}
		have, watched := w.inodes[path]
		if watched && have == ino && ino != 0 {
			continue
		}
		if watched {
			_ = w.watcher.Remove(path)
			delete(w.inodes, path)
		}
		if ino == 0 {
			continue // not there: the next read reports it and re-arms
		}
		if err := w.watcher.Add(path); err != nil {
			w.log.Warn("watch apps directory", "dir", path, "err", err)
			continue
		}
		w.inodes[path] = ino
	}
}

// loadFiles reads the apps directory into the set the agent acts on. It
// returns when a file held absent (HoldAbsentFiles) is due to leave the
// config if it is still absent (0: none held).
func (c *Controller) loadFiles(now time.Time) time.Duration {
	read := ReadAppFiles(c.opts.AppsDir)
	if c.firstRead.IsZero() {
		c.firstRead = now
	}
	c.mu.Lock()
	prevErrors := c.set.Errors
	var next time.Duration
	read, c.absentSince, next = HoldAbsentFiles(read, c.lastGood, c.absentSince, now, c.opts.FileAbsentGrace)
	c.set, c.lastGood = MergeAppFiles(read, c.lastGood)
	errs := maps.Clone(c.set.Errors)
	c.mu.Unlock()
	c.opts.Metrics.AppConfigFailures.Set(float64(len(errs)))
	for _, path := range slices.Sorted(maps.Keys(errs)) {
		if prevErrors[path] != errs[path] {
			c.log.Error("app config file not usable; keeping its last good version", "file", path, "err", errs[path])
			c.timeline.Add(TimelineEvent{Time: now, Kind: EventConfig, Message: filepath.Base(path) + ": " + errs[path], Warning: true})
		}
	}
	return next
}
