// Package streams opens the long-lived streams the console and the agent
// read from the cluster: a pod's or app's logs (cut into bounded lines) and
// a VM's screen (VNC through the API server).
//
// It imports only kube (names, clients, the read model to find an app).
package streams
