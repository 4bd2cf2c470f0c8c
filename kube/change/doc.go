// Package change holds the writes the on-site actions make through the
// API (cordon, drain, migrate, return home, node removal, the seed change)
// and the fresh reads their preflights judge (kube/safety rules on them).
// kube/flow sequences them into actions, with the audit records; the
// agent's drain requests and failover call them directly.
//
// It imports kube (the read model), kube/nodestate (etcd's members) and
// kube/safety.
package change
