package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/test/sitebox"
)

// The bundles forming saved go once their node has joined (a Ready Node of
// the cluster), seen through the agent's watch; a node that has not joined
// keeps its bundle.
func TestJoinBundlesRemovedOnceJoined(t *testing.T) {
	site := sitebox.Shared(t)
	dir := filepath.Join(t.TempDir(), "join-bundles")
	if _, err := formation.SaveJoinBundles(dir, map[string]string{"node-b": "b\n", "node-c": "c\n", "node-z": "z\n"}); err != nil {
		t.Fatal(err)
	}
	snap, err := kube.NewSnapshot(site.Config, nil, kube.WithoutEvents())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	snap.Start(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		formation.RemoveBundlesOnceJoined(ctx, snap, dir, slog.New(slog.DiscardHandler))
	}()
	gone := func(node string) bool {
		_, err := os.Lstat(filepath.Join(dir, node+".bundle"))
		return errors.Is(err, fs.ErrNotExist)
	}
	until(t, 30*time.Second, "the joined nodes' bundles removed", func() (string, bool) {
		b, c := gone("node-b"), gone("node-c")
		return fmt.Sprintf("node-b's gone %v, node-c's gone %v", b, c), b && c
	}, func(last string) string { return last })
	if gone("node-z") {
		t.Fatal("node-z never joined: its bundle must stay")
	}
	// Still watching for node-z: it returns only when ctx ends.
	select {
	case <-done:
		t.Fatal("the watch stopped with a bundle left")
	default:
	}
	cancel()
	<-done
}
