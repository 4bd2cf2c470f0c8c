// Package formation is how a node comes to be in a cluster, and what it
// keeps of it: forming a cluster offline and the join bundles that carry
// it to the other nodes, the join info a member makes for a new node, the
// seed in effect and the seed record, the rule that a cluster is
// initialised once (the formed marker, the member probe), the cluster CA a
// joiner pins, and the node's records in the agent's state directory.
//
// Where things are:
//   - form.go: a formation plan (addresses, the token, the cluster id).
//   - bundle.go: a join bundle, its encoding, and the files it writes.
//   - formcluster.go: forming and joining from the command line.
//   - joinbundles.go: the bundles kept on a seed until their nodes joined.
//   - joininfo.go: join info for a new node, made on a member.
//   - joinrequest.go: what join info is asked for, and the cluster and
//     config in effect it is made from.
//   - seedeffect.go, seedrecord.go, seedfollower.go: which server is the
//     seed, the record of a moved seed, and following the cluster's seed.
//   - seedprobe.go: asking the seed's /status whether it takes this node.
//   - capin.go: the cluster CA a joiner pins and checks at the seed.
//   - formed.go: the formed marker and the rule that initialises once.
//   - records.go, leaverequest.go, removal.go: the records in the
//     state directory, the leave request, the removed marker and the
//     decision that a node was removed.
//
// It runs nothing of its own but the seed follower; the agent (package
// agent) wires it into its bring-up.
package formation
