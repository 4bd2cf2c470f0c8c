package nodestate

import "time"

// The node report's sections for the checks that need the node itself
// (sitecon doctor gathers them from every node's report): Longhorn's
// prerequisites, whether the kernel's clock is synchronised, and k3s's
// certificates. Each is a pointer in NodeReport: nil is a report from an
// agent that predates the section, which the doctor says it could not
// check, never that all is well. The agent fills them in
// agent/nodereport.go from the package nodecheck.

// StorageReport is Longhorn's prerequisites as this node found them.
type StorageReport struct {
	// Iscsid: the iSCSI daemon runs (a process named iscsid); Longhorn
	// attaches every volume through it.
	Iscsid Prereq `json:"iscsid"`
	// IscsiTCP: the iscsi_tcp kernel module is loaded (or built in).
	IscsiTCP Prereq `json:"iscsiTCP"`
	// Multipathd: multipathd does not claim Longhorn's devices (it is not
	// running, or its config blacklists them).
	Multipathd Prereq `json:"multipathd"`
	// NFSClient: an NFS client (mount.nfs or mount.nfs4) for Longhorn's
	// RWX volumes.
	NFSClient Prereq `json:"nfsClient"`
}

// Prereq is one prerequisite: met or not, and what was looked at.
type Prereq struct {
	OK bool `json:"ok"`
	// Evidence is what was found, in words (the process, the file).
	Evidence string `json:"evidence,omitempty"`
	// Problem is why it could not be checked (a file that could not be
	// read): neither met nor failing.
	Problem string `json:"problem,omitempty"`
}

// TimeReport is whether this node's kernel says its clock is
// synchronised, as adjtimex(2) reads it (what timedatectl's "System
// clock synchronized" reads).
type TimeReport struct {
	// Synchronized: STA_UNSYNC is clear and the maximum error is below
	// 16 s (the kernel's ceiling, reached when nothing disciplines it).
	Synchronized bool `json:"synchronized"`
	// Status is the kernel's STA_* flags; State adjtimex's return (5 is
	// TIME_ERROR: not synchronised).
	Status int `json:"status"`
	State  int `json:"state"`
	// MaxError and EstError are the kernel's maximum and estimated error.
	MaxError time.Duration `json:"maxErrorNanoseconds"`
	EstError time.Duration `json:"estErrorNanoseconds"`
	// Problem is why the kernel could not be asked.
	Problem string `json:"problem,omitempty"`
}

// CertsReport is k3s's certificates in this node's k3s data dir.
type CertsReport struct {
	DataDir string `json:"dataDir"`
	// Found: a server/tls or agent directory is there (false: k3s has not
	// run here, or another data dir).
	Found bool `json:"found"`
	// Files are the certificate files, unreadable ones first, then by
	// expiry; past a bound the rest are counted in Omitted (they expire
	// later than every one listed).
	Files   []CertFile `json:"files,omitempty"`
	Omitted int        `json:"omitted,omitempty"`
	// Problem is why the directory could not be read.
	Problem string `json:"problem,omitempty"`
}

// CertFile is one certificate file and the earliest expiry of the
// certificates in it.
type CertFile struct {
	Path     string    `json:"path"`
	Subject  string    `json:"subject,omitempty"`
	NotAfter time.Time `json:"notAfter"`
	// Problem is why the file could not be read as a certificate.
	Problem string `json:"problem,omitempty"`
}

// TokenReport is since when this node has applied the cluster token it
// applies now: nothing in k3s or the config says when a token was made,
// so the agent records when it first applied it (a hash of the token in
// its state directory, never the token) and reports that.
type TokenReport struct {
	Since time.Time `json:"since"`
	// Source says where Since comes from (the agent's record).
	Source string `json:"source"`
	// Problem is why the record could not be read or written: Since is
	// then only a lower bound (this agent's start); with Since zero, why
	// there is no token to date (no cluster config applied).
	Problem string `json:"problem,omitempty"`
}

// CredentialReport is whether the node's agent can sign its proof of life
// with the node's own credential and check the result against the
// cluster's client CA, as its peers do (agent/nodecred). A node that
// cannot is not taken at its word that it fenced: the failover of its
// apps waits for its silence.
type CredentialReport struct {
	// Problem is why it cannot ("" when it can).
	Problem string `json:"problem,omitempty"`
}
