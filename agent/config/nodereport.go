package config

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"time"
)

// Node reports: when the cluster API does not answer, the console and
// `sitecon status` ask every node's agent, on its cluster address, what it
// knows of itself (its phase, k3s, its etcd member's view, its clock). A
// report says much about the site, so only a holder of the cluster token
// may read it, and the reader must know it is the node's own. Both ways
// are MACs under the cluster's LifeKey (derived from the token, which
// never travels):
//   - the request carries the reader's fresh nonce, the reader's clock and
//     the address it dials, and a MAC over them: the agent refuses a
//     request without a good MAC, one dated outside NodeReportWindow of
//     its own clock (and says by how much the clocks differ, itself a
//     finding), one it has seen before, and one made for another address
//     (a request overheard on the way to one node does not read another).
//   - the answer's MAC covers the node, the reader's nonce and the SHA-256
//     of the body: a recorded answer does not verify for another nonce,
//     and a body changed on the way does not verify at all.

// NodeReportPath is where an agent serves its own report, beside GET
// /status on its cluster address: GET NodeReportPath?nonce=&at=&mac=.
const NodeReportPath = "/status/report"

// NodeReportProofHeader carries the answer's MAC (hex).
const NodeReportProofHeader = "Sitecon-Report-Proof"

// NodeReportCertHeader and NodeReportSigHeader carry the node's own
// certificate (DER) and its signature over the answer (base64), when the
// agent signs with the node's credential (LifeKey.WithNodeWord).
const (
	NodeReportCertHeader = "Sitecon-Report-Node-Cert"
	NodeReportSigHeader  = "Sitecon-Report-Node-Sig"
)

// NodeReportWindow is how far the reader's clock may be from the agent's:
// a request dated further away is refused, with the difference said.
const NodeReportWindow = 5 * time.Minute

// The labels keep a request's MAC from standing for an answer's, and both
// from any other use of the key.
const (
	reportRequestLabel = "sitecon node-report request v1"
	reportAnswerLabel  = "sitecon node-report answer v1"
	// reportNodeLabel: an answer signed with the node's own credential.
	reportNodeLabel = "sitecon node-report answer v2 node"
)

// ReportRequest is a reader's request for a node's report.
type ReportRequest struct {
	// Target is the address the reader dials (host:port), as the agent
	// sees it on its side of the connection.
	Target netip.AddrPort
	Nonce  []byte
	// At is the reader's clock when it asked.
	At  time.Time
	MAC []byte
}

// requestMAC is the keyed MAC over the cluster id, the target, the nonce
// and the time (Unix nanoseconds, as sent).
func (k LifeKey) requestMAC(target netip.AddrPort, nonce []byte, at time.Time) []byte {
	return keyedMAC(k.key, reportRequestLabel, []byte(k.clusterID), []byte(target.String()), nonce,
		[]byte(strconv.FormatInt(at.UnixNano(), 10)))
}

// NewReportRequest is a fresh request to the agent at target, dated now.
func (k LifeKey) NewReportRequest(target netip.AddrPort, now time.Time) (ReportRequest, error) {
	if !k.Valid() {
		return ReportRequest{}, errors.New("no cluster key to ask for a node's report with")
	}
	nonce, err := NewLifeNonce()
	if err != nil {
		return ReportRequest{}, err
	}
	target = netip.AddrPortFrom(target.Addr().Unmap(), target.Port())
	return ReportRequest{Target: target, Nonce: nonce, At: now, MAC: k.requestMAC(target, nonce, now)}, nil
}

// Query is the request as URL query parameters.
func (r ReportRequest) Query() url.Values {
	return url.Values{"nonce": {hex.EncodeToString(r.Nonce)}, "at": {strconv.FormatInt(r.At.UnixNano(), 10)},
		"mac": {hex.EncodeToString(r.MAC)}}
}

// ParseReportRequest reads a request from its query parameters, made to
// the agent at local (its side of the connection).
func ParseReportRequest(local netip.AddrPort, q url.Values) (ReportRequest, error) {
	nonce, err := hex.DecodeString(q.Get("nonce"))
	if err != nil || len(nonce) != LifeNonceSize {
		return ReportRequest{}, fmt.Errorf("nonce: want %d bytes in hex", LifeNonceSize)
	}
	at, err := strconv.ParseInt(q.Get("at"), 10, 64)
	if err != nil {
		return ReportRequest{}, errors.New("at: want the reader's clock in Unix nanoseconds")
	}
	mac, err := hex.DecodeString(q.Get("mac"))
	if err != nil || len(mac) != sha256.Size {
		return ReportRequest{}, errors.New("mac: want an HMAC-SHA256 in hex")
	}
	return ReportRequest{Target: netip.AddrPortFrom(local.Addr().Unmap(), local.Port()), Nonce: nonce, At: time.Unix(0, at), MAC: mac}, nil
}

// ErrReportKey: the request's MAC does not verify with this node's key.
var ErrReportKey = errors.New("the request is not signed with this cluster's key (another cluster's token, or a request made for another address)")

// CheckReportRequest checks that r was made with this key for the agent
// at r.Target; the clock and the replay are the server's to check.
func (k LifeKey) CheckReportRequest(r ReportRequest) error {
	if !k.Valid() {
		return errors.New("this agent has no cluster token to check a request with")
	}
	if !hmac.Equal(r.MAC, k.requestMAC(r.Target, r.Nonce, r.At)) {
		return ErrReportKey
	}
	return nil
}

// ClockDifference is why a request dated at is refused by an agent whose
// clock reads now, or nil when the two are within window: the error says
// which clock is ahead and by how much.
func ClockDifference(at, now time.Time, window time.Duration) error {
	d := now.Sub(at)
	switch {
	case d > window:
		return fmt.Errorf("the clocks differ: this node's clock is %s ahead of the reader's (a request must be within %s)", d.Round(time.Second), window)
	case -d > window:
		return fmt.Errorf("the clocks differ: this node's clock is %s behind the reader's (a request must be within %s)", (-d).Round(time.Second), window)
	}
	return nil
}

// answerMAC is the keyed MAC over the cluster id, the node, the reader's
// nonce and the body's SHA-256.
func (k LifeKey) answerMAC(node string, nonce, body []byte) []byte {
	sum := sha256.Sum256(body)
	return keyedMAC(k.key, reportAnswerLabel, []byte(k.clusterID), []byte(node), nonce, sum[:])
}

// SignReport is node's proof (hex) of body as its answer to nonce.
func (k LifeKey) SignReport(node string, nonce, body []byte) string {
	return hex.EncodeToString(k.answerMAC(node, nonce, body))
}

// VerifyReport checks that body, proven by proof, is node's answer to
// nonce in this key's cluster.
func (k LifeKey) VerifyReport(node string, nonce, body []byte, proof string) error {
	if !k.Valid() {
		return errors.New("no cluster key to check a report with")
	}
	got, err := hex.DecodeString(proof)
	if err != nil || !hmac.Equal(got, k.answerMAC(node, nonce, body)) {
		return errors.New("its report does not verify with this cluster's key (another cluster's token, an answer to another request, or a body changed on the way)")
	}
	return nil
}

// reportNodeDigest is what a node signs of its report with its own
// credential: the cluster, the node, the reader's nonce and the body's
// SHA-256.
func (k LifeKey) reportNodeDigest(node string, nonce, body []byte) []byte {
	sum := sha256.Sum256(body)
	return framedSum(reportNodeLabel, []byte(k.clusterID), []byte(node), nonce, sum[:])
}

// SignReportAsNode signs body, node's answer to nonce, with the node's
// own credential (base64 certificate and signature for the headers);
// ok is false without a NodeWord or when the node cannot sign as itself.
func (k LifeKey) SignReportAsNode(node string, nonce, body []byte) (cert, sig string, ok bool) {
	if k.word == nil {
		return "", "", false
	}
	c, s, err := k.word.Sign(node, k.reportNodeDigest(node, nonce, body))
	if err != nil {
		return "", "", false
	}
	return base64.StdEncoding.EncodeToString(c), base64.StdEncoding.EncodeToString(s), true
}

// VerifyReportAsNode checks that body, node's answer to nonce, is signed
// with node's own credential (the headers' base64 certificate and
// signature): the token's MAC shows only that some node of the cluster
// answered. Without a NodeWord there is nothing to check it with: nil.
func (k LifeKey) VerifyReportAsNode(node string, nonce, body []byte, cert, sig string) error {
	if k.word == nil {
		return nil
	}
	c, err1 := base64.StdEncoding.DecodeString(cert)
	s, err2 := base64.StdEncoding.DecodeString(sig)
	if cert == "" || sig == "" || err1 != nil || err2 != nil {
		return fmt.Errorf("its report is not signed with node %s's own credential (an agent whose node has no credential yet or that predates it, or another node answering in its name)", node)
	}
	if err := k.word.Check(node, k.reportNodeDigest(node, nonce, body), c, s); err != nil {
		return fmt.Errorf("its report's signature as node %s does not hold: %w", node, err)
	}
	return nil
}
