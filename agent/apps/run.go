package apps

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Run follows the config directory and the cluster until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	defer c.broadcaster.Shutdown()
	// A fresh install has an apps directory without its subdirectories:
	// make them. When the apps directory itself is missing (a partition not
	// mounted yet), nothing is made under its mount point: the read reports
	// it unknown and removals wait until it appears.
	if _, err := os.Stat(c.opts.AppsDir); err == nil {
		for _, sub := range []string{appsSubdir, volumesSubdir} {
			if err := os.MkdirAll(filepath.Join(c.opts.AppsDir, sub), 0o755); err != nil {
				c.log.Error("apps directory", "err", err)
			}
		}
	}
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch apps directory: %w", err)
	}
	defer watcher.Close()
	dirs := &watchedDirs{watcher: watcher, log: c.log}
	dirs.arm(c.opts.AppsDir)
	if c.opts.FenceWatch != nil {
		c.opts.FenceWatch.Attach(c)
	}
	changes, unsubscribe := c.snap.Subscribe()
	defer unsubscribe()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// The watch can miss a change (a directory replaced between two
	// events, an overflowed queue, a remount): a full read backs it up.
	reread := time.NewTicker(c.opts.RereadInterval)
	defer reread.Stop()
	// Editors write a file in several steps: read once things settle.
	var settle <-chan time.Time
	// absence is the end of the first hold of an absent file: read again
	// then, and the file still absent leaves the config.
	absence := time.NewTimer(time.Hour)
	defer absence.Stop()
	load := func() {
		dirs.arm(c.opts.AppsDir)
		if next := c.loadFiles(time.Now()); next > 0 {
			absence.Reset(next)
		}
	}
	if next := c.loadFiles(time.Now()); next > 0 {
		absence.Reset(next)
	}
	woke := time.Now()
	for {
		c.pass.begin(changes)
		next := c.reconcile(ctx, woke)
		c.pass.end(next)
		if next > 0 {
			timer.Reset(next)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		case <-c.kick:
		case <-timer.C:
		case ev := <-watcher.Events:
			if ev.Op != fsnotify.Chmod {
				settle = time.After(100 * time.Millisecond)
			}
			continue
		case err := <-watcher.Errors:
			c.log.Warn("apps directory watch", "err", err)
			settle = time.After(100 * time.Millisecond)
			continue
		case <-settle:
			settle = nil
			load()
		case <-reread.C:
			load()
		case <-absence.C:
			load()
		}
		woke = time.Now()
	}
}
