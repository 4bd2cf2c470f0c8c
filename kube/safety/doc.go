// Package safety holds the pure rules of the on-site actions: the drain,
// remove, replace and leave preflight (drain.go: quorum, the last copy, the
// pods, pinned apps, and the re-check before the change), the etcd quorum
// arithmetic (quorum.go), which Longhorn replicas still hold a volume's
// up-to-date data (copies.go), which nodes an app may move to (migrate.go),
// whether an app may return to its designated node (returnhome.go) and
// which node may be the seed (seed.go). The rules
// are those of docs/DESIGN.md, "Quorum is arithmetic" and "The last copy
// stays". It reads plain values and talks to nothing, so its tests run
// without a control plane (kube's own test binary boots sitebox in
// TestMain); package kube gathers the values from the cluster once
// (kube.CheckDrain, kube.DrainCheck.Facts).
package safety
