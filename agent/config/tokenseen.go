package config

// TokenSeenFile is the agent's record, in its state directory, of since
// when this node applies its cluster token: a SHA-256 of the token and
// the date (agent/tokenage.go). The support bundle copies the record
// without the hash.
const TokenSeenFile = "token-seen.json"
