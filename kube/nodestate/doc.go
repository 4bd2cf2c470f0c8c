// Package nodestate is what the nodes say of themselves beyond their Node
// objects: each agent's node report (its checks, network, etcd view) and
// etcd's member list as the agents observe and publish it, with the
// removal of a member.
//
// It imports kube (names, clients) and kube/safety (the quorum rules).
package nodestate
