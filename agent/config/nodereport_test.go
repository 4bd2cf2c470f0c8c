package config

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

// A report request verifies only with the cluster's key, for the address
// it was made for, as it was made; an answer only for its nonce, its node
// and its body as signed.
func TestNodeReportMACs(t *testing.T) {
	const cluster = "7F3E2A10-8C4B-4F8E-9A55-2B1C3D4E5F60"
	key, _ := NewLifeKey(cluster, "s3cret-password")
	other, _ := NewLifeKey(cluster, "another-password")
	target := netip.MustParseAddrPort("127.100.1.2:12346")
	now := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	req, err := key.NewReportRequest(target, now)
	if err != nil {
		t.Fatal(err)
	}
	// What the agent parses from the query, on its side of the connection.
	parsed, err := ParseReportRequest(target, req.Query())
	if err != nil {
		t.Fatal(err)
	}
	if err := key.CheckReportRequest(parsed); err != nil {
		t.Fatalf("the cluster's own request: %v", err)
	}
	elsewhere, _ := ParseReportRequest(netip.MustParseAddrPort("127.100.1.3:12346"), req.Query())
	later := parsed
	later.At = now.Add(time.Second)
	for name, c := range map[string]struct {
		key LifeKey
		r   ReportRequest
	}{
		"another token":                {other, parsed},
		"made for another node":        {key, elsewhere},
		"its time changed on the way":  {key, later},
		"no key on the agent":          {LifeKey{}, parsed},
		"its nonce changed on the way": {key, func() ReportRequest { r := parsed; r.Nonce = make([]byte, LifeNonceSize); return r }()},
		"a MAC of another cluster's id": {func() LifeKey {
			k, _ := NewLifeKey("00000000-0000-4000-8000-000000000000", "s3cret-password")
			return k
		}(), parsed},
	} {
		if err := c.key.CheckReportRequest(c.r); err == nil {
			t.Errorf("%s: the request was accepted", name)
		}
	}
	if _, err := (LifeKey{}).NewReportRequest(target, now); err == nil {
		t.Error("a request made without a key")
	}

	body := []byte(`{"node":"node-b","phase":"joined"}`)
	proof := key.SignReport("node-b", req.Nonce, body)
	if err := key.VerifyReport("node-b", req.Nonce, body, proof); err != nil {
		t.Fatalf("node-b's own answer: %v", err)
	}
	another, _ := NewLifeNonce()
	for name, c := range map[string]struct {
		key   LifeKey
		node  string
		nonce []byte
		body  []byte
		proof string
	}{
		"another token":            {other, "node-b", req.Nonce, body, proof},
		"replayed for another ask": {key, "node-b", another, body, proof},
		"a tampered body":          {key, "node-b", req.Nonce, []byte(`{"node":"node-b","phase":"error"}`), proof},
		"another node's name":      {key, "node-c", req.Nonce, body, proof},
		"no proof":                 {key, "node-b", req.Nonce, body, ""},
	} {
		if err := c.key.VerifyReport(c.node, c.nonce, c.body, c.proof); err == nil {
			t.Errorf("%s: the answer verified", name)
		}
	}
}

// A request dated outside the window is refused with the difference said,
// which clock is ahead, and by how much.
func TestClockDifference(t *testing.T) {
	now := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		at   time.Time
		want string
	}{
		{now.Add(-4 * time.Minute), ""},
		{now.Add(4 * time.Minute), ""},
		{now.Add(-7*time.Minute - 12*time.Second), "this node's clock is 7m12s ahead of the reader's"},
		{now.Add(time.Hour), "this node's clock is 1h0m0s behind the reader's"},
	} {
		err := ClockDifference(c.at, now, NodeReportWindow)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.at.Sub(now), err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.at.Sub(now), err, c.want)
		}
	}
}
