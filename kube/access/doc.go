// Package access is what a node's own identity may do in the cluster: the
// RBAC rules each agent's node identity is granted and the admission
// policy that holds it to its own node's objects. The agent applies them at
// bring-up; tests prove them against a real API server.
//
// It imports only kube (names, clients).
package access
