package apps

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/nodecred"
	"github.com/sitecon/sitecon/test/testcert"
)

// Every node holds the cluster token, so the token's MAC alone lets a
// worker that answers at another node's address say in that node's name
// that it fenced, and the failover goes while the node's copy runs
// (docs/SECURITY.md, gap 4). Signed with each node's own credential, the
// word "fenced" counts only from the node itself; an answer the node
// could not sign, or one the leader cannot check, holds the failover.
func TestLifeProbeTakesAFenceOnlyFromTheNodeItself(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewClientCA(t, dir)
	word := func(node string) config.NodeWord {
		return nodecred.New(ca.NodeKubeconfig(t, node), ca.Path)
	}
	key := testLifeKey(t, "cluster-password")
	fenced := config.NewLifeStatus(true, DefaultFailoverTimeout)
	fenced.SetFenced(true, time.Now().Add(-3*time.Second))

	nodeB := serve(t, config.LifeProofHandler(key.WithNodeWord(word("node-b")), "node-b", fenced))
	// node-d, a worker: the token and its own credential, answering at
	// node-b's address in node-b's name.
	forger := serve(t, config.LifeProofHandler(key.WithNodeWord(word("node-d")), "node-b", fenced))
	// node-b's agent before its k3s wrote its credential: it cannot sign.
	unsigned := serve(t, config.LifeProofHandler(key.WithNodeWord(nodecred.New(filepath.Join(dir, "none"), ca.Path)), "node-b", fenced))

	// node-d signing node-b's answer with its own credential (its valid
	// certificate, its own name in it).
	ownSigned := serve(t, config.LifeProofHandler(key.WithNodeWord(testcert.SignsAs{NodeWord: word("node-d"), As: "node-d"}), "node-b", fenced))
	// A token holder that takes node-b's own signed answer (not fenced),
	// says fenced instead and makes the token's MAC again.
	notFenced := config.NewLifeStatus(true, DefaultFailoverTimeout)
	nodeBKey := key.WithNodeWord(word("node-b"))
	restated := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		nonce, _ := hex.DecodeString(r.URL.Query().Get("nonce"))
		genuine := nodeBKey.AnswerWith("node-b", nonce, notFenced.State(time.Now()))
		forged := key.AnswerWith("node-b", nonce, fenced.State(time.Now()))
		forged.NodeCert, forged.NodeSig = genuine.NodeCert, genuine.NodeSig
		_ = json.NewEncoder(w).Encode(forged)
	}))

	leader := LifeProbe{Key: key.WithNodeWord(word("node-a")), FailoverTimeout: DefaultFailoverTimeout}
	tokenOnly := LifeProbe{Key: key, FailoverTimeout: DefaultFailoverTimeout}
	noCA := LifeProbe{Key: key.WithNodeWord(nodecred.New(filepath.Join(dir, "none"), filepath.Join(dir, "no-ca.crt"))), FailoverTimeout: DefaultFailoverTimeout}
	for _, c := range []struct {
		name     string
		probe    LifeProbe
		addr     string
		evidence LifeEvidence
		detail   string
	}{
		{"node-b's own word", leader, nodeB, LifeFenced, "has fenced"},
		// What the token's MAC alone lets through, and the node word stops.
		{"a worker's word in node-b's name, checked with the token alone", tokenOnly, forger, LifeFenced, "has fenced"},
		{"a worker's word in node-b's name", leader, forger, LifeStranger, "not signed with node node-b's own credential"},
		{"node-b's agent without its credential yet", leader, unsigned, LifeStranger, "not signed with node node-b's own credential"},
		{"a worker's word in node-b's name, signed with its own credential", leader, ownSigned, LifeStranger, "not node node-b's own identity"},
		{"node-b's signature on an unfenced answer, its state changed to fenced", leader, restated, LifeStranger, "does not verify"},
		// The leader's own fault, said as its own: never the node's death.
		{"a leader without the client CA to check with", noCA, nodeB, LifeUnknown, "this node cannot check node-b's signed proof of life"},
	} {
		life := c.probe.Probe(context.Background(), c.addr, "node-b")
		if life.Evidence != c.evidence || !strings.Contains(life.Detail, c.detail) {
			t.Errorf("%s: %s, %q; want %s with %q", c.name, life.Evidence, life.Detail, c.evidence, c.detail)
		}
		if c.evidence == LifeStranger && !life.Alive {
			t.Errorf("%s: taken for dead: the failover would go", c.name)
		}
	}
}
