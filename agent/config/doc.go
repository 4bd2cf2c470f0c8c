// Package config is a node's cluster config as EVE hands it over: parsing
// and validating it (every problem at once), the cluster token (read,
// decrypted, checked for entropy, k3s's secure form), and the atomic
// write every file the agent keeps goes through.
package config
