// Package apps is the agent's apps part: it reads the app and volume
// config files, decides which node each app belongs on (DNId gating,
// on-site overrides), lays out the workloads and claims this node is the
// designated node of, detects migrations, judges failover when a node is
// lost, keeps the timeline, elects the stats leader, and counts its work
// in Prometheus metrics.
//
// Where things are:
//   - controller.go: the Controller (the apps part), its options, and what
//     it answers (Apps, Volumes, Node, Timeline, Subscribe).
//   - run.go: its loop, woken by the cluster, the apps directory, timers.
//   - appsdir.go: watching and reading the apps directory.
//   - reconcile.go: one pass, in named steps: observe, decide per app,
//     publish what is seen, act (place, failover), publish what acting found.
//   - published.go: what it publishes (PublishedApp, PublishedNode and its
//     PublishedNodeStatus: a contract with its readers, kept as it is) and
//     writes to the state directory.
//   - appconfig.go: reading and checking the app and volume files.
//   - gating.go: what each app's state is and whether this node places it.
//   - placement.go: the layout of an app, a volume, a storage class, and
//     whether a write over another node's layout may happen.
//   - place.go: one placement pass, a reconciler per concern, each a pure
//     decision and a small executor with its own memory: desired.go (what
//     this node lays out), layoutwriter.go (writing it: in sync, held,
//     conflict, move, retry, apply), pinnedvmi.go (failed pinned VMs
//     restarted once their node is back), orphans.go (what no longer has
//     a place here, never while a source cannot be read), handover.go
//     (recording on a layout another node places now the config this
//     node holds).
//   - failover.go: the evidence and the verdicts for a pod on a lost node
//     and for a volume left attached there; failoverrun.go: the leader
//     judging stuck pods, force-deleting, and releasing the volumes that
//     gone pods left on lost nodes (found in the cluster each time).
//   - placedcache.go: the watch on what sitecon laid out.
//   - timeline.go, leader.go, metrics.go, pending.go.
package apps
