package formation

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/kube"
)

// Join bundles carry the cluster token. Forming saves each other node's
// bundle beside the seed's config, readable by root only, so a technician
// can copy it to that node as a file; the seed's agent removes each one
// once its node has joined, so the token does not lie around longer than
// the formation needs it.

// JoinBundlesDir is where forming saves the other nodes' bundles, one file
// per node, beside the config at configPath.
func JoinBundlesDir(configPath string) string {
	return filepath.Join(filepath.Dir(configPath), "join-bundles")
}

// bundleSuffix names a saved bundle file: <node>.bundle.
const bundleSuffix = ".bundle"

// SaveJoinBundles writes one root-only file per node (name → bundle text)
// under dir (0700), each atomically. It returns the paths by node.
func SaveJoinBundles(dir string, bundles map[string]string) (map[string]string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// An existing directory keeps its mode on MkdirAll: make it root-only.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, err
	}
	paths := map[string]string{}
	for node, text := range bundles {
		if node == "" || strings.ContainsAny(node, "/\x00") || node == "." || node == ".." {
			return nil, fmt.Errorf("node name %q cannot name a file", node)
		}
		path := filepath.Join(dir, node+bundleSuffix)
		if err := config.WriteFileAtomic(path, []byte(text), 0o600); err != nil {
			return nil, err
		}
		paths[node] = path
	}
	return paths, nil
}

// RemoveJoinedBundles removes the saved bundle of every node for which
// joined says yes. It returns the nodes whose bundles it removed and how
// many entries the directory still holds; a missing directory holds none.
// Only regular files named <node>.bundle are touched.
func RemoveJoinedBundles(dir string, joined func(node string) bool) (removed []string, left int, err error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var errs []error
	left = len(entries)
	for _, e := range entries {
		node, ok := strings.CutSuffix(e.Name(), bundleSuffix)
		if !ok || !e.Type().IsRegular() || !joined(node) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, node)
		left--
	}
	sort.Strings(removed)
	return removed, left, errors.Join(errs...)
}

// bundleChars are what a bundle is made of after its prefix: base64 and the
// dot before its checksum.
var bundleChars = regexp.MustCompile(`^[A-Za-z0-9+/=.]+$`)

// BundleFromText finds the one join bundle in text: a bare bundle, a saved
// bundle file, or the lines forming printed. Comment lines are ignored; a
// bundle broken over lines (a narrow screen wrapped it) continues on each
// following line made only of bundle characters. Text holding no bundle,
// or several, is an error that says so.
func BundleFromText(text string) (string, error) {
	var found []string
	current := -1 // index in found of the bundle still being read
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "#") {
			current = -1
			continue
		}
		if i := strings.Index(l, BundlePrefix); i >= 0 {
			token, _, _ := strings.Cut(l[i:], " ")
			found = append(found, token)
			current = len(found) - 1
			continue
		}
		if current >= 0 && l != "" && bundleChars.MatchString(l) {
			found[current] += l
			continue
		}
		current = -1
	}
	switch len(found) {
	case 0:
		return "", errors.New("no sitecon join bundle in it (a bundle starts with " + BundlePrefix + ")")
	case 1:
		return found[0], nil
	default:
		return "", fmt.Errorf("it holds %d join bundles: give this node's own (one file per node, under join-bundles/ on the seed)", len(found))
	}
}

// RemoveBundlesOnceJoined removes each join bundle forming saved in dir
// once its node is a Ready member of the cluster: the bundle carries the
// cluster token and is not needed after the join. It looks on every change
// of the snapshot (no polling) until none is left or ctx ends.
func RemoveBundlesOnceJoined(ctx context.Context, snap *kube.Snapshot, dir string, log *slog.Logger) {
	changes, unsubscribe := snap.Subscribe()
	defer unsubscribe()
	for {
		if snap.Synced() {
			// One lister lookup per saved bundle: no copy of the cluster.
			removed, left, err := RemoveJoinedBundles(dir, func(node string) bool {
				n, ok := snap.Node(node)
				return ok && kube.NodeIsReady(n)
			})
			for _, node := range removed {
				log.Info("removed the join bundle of a node that has joined", "node", node, "dir", dir)
			}
			switch {
			case err != nil:
				log.Warn("join bundles", "dir", dir, "err", err)
			case left == 0:
				// None saved on this node, or every node joined.
				if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
					log.Warn("join bundles", "dir", dir, "err", err)
				}
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changes:
		}
	}
}
