// Package safety holds the pure arithmetic behind the drain, remove and
// replace preflights (DESIGN.md, safety rules 2 and 3): how many etcd
// members must stay healthy, and which Longhorn replicas still hold a
// volume's up-to-date data. It reads plain values and talks to nothing, so
// its tests run without a control plane (kube's own test binary boots
// sitebox in TestMain).
package safety
