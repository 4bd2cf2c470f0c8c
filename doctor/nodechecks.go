package doctor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sitecon/sitecon/kube/nodestate"
)

// The checks that need the node itself: each node's agent makes them for
// its own report (package nodecheck, kube/nodestate/nodechecks.go) and the doctor
// reads every node's report, asked with the cluster config's key, as the
// clocks' check does; they run with the cluster API down too. A node whose
// agent gave no report, or whose agent predates the check, gets a finding
// saying the check could not run there: never silence.

// eachNodeReport runs judge on every node's report that carries the
// check's section (has). what names the check in the findings of the
// nodes it could not run on.
func eachNodeReport(ctx context.Context, env *Env, what string, has func(*nodestate.NodeReport) bool,
	judge func(node string, r *nodestate.NodeReport) []Finding) []Finding {
	if env.NodeReports == nil {
		return []Finding{{NotChecked: true, Severity: Info, Summary: "not checked: no cluster config on this machine to ask the nodes with",
			Next: "on a node, or with --config FILE"}}
	}
	r := env.NodeReports(ctx)
	if len(r.Answers) == 0 {
		return []Finding{{NotChecked: true, Severity: Info, Summary: "not checked: no node could be asked", Evidence: nonEmpty(r.Problem)}}
	}
	var out []Finding
	for _, a := range r.Answers {
		name := a.Name()
		switch {
		case !a.Answered:
			out = append(out, Finding{NotChecked: true, Severity: Warn, Subject: name,
				Summary:  fmt.Sprintf("%s not checked on %s: its agent gave no report", what, name),
				Evidence: nonEmpty(a.Problem),
				Next:     fmt.Sprintf("on %s: systemctl status sitecon-agent (its agent makes this check)", name)})
		case !has(a.Report):
			version := a.Report.Version
			if version == "" {
				version = "unknown version"
			}
			out = append(out, Finding{NotChecked: true, Severity: Warn, Subject: name,
				Summary:  fmt.Sprintf("%s not checked on %s: its agent (%s) predates this check", what, name, version),
				Evidence: []string{"its report has no such section"},
				Next:     fmt.Sprintf("upgrade sitecon on %s", name)})
		default:
			out = append(out, judge(name, a.Report)...)
		}
	}
	return out
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// onceNodeReports asks the nodes once for all the checks that read their
// reports: each check's call waits for the one round (or its own ctx).
func onceNodeReports(ask nodeReportsFunc) nodeReportsFunc {
	if ask == nil {
		return nil
	}
	var (
		once sync.Once
		got  nodestate.NodeReports
		done = make(chan struct{})
	)
	return func(ctx context.Context) nodestate.NodeReports {
		go once.Do(func() {
			got = ask(context.WithoutCancel(ctx))
			close(done)
		})
		select {
		case <-done:
			return got
		case <-ctx.Done():
			return nodestate.NodeReports{At: time.Now(), Problem: "the nodes' reports did not arrive in time: " + ctx.Err().Error()}
		}
	}
}

// Longhorn's prerequisites, each with how bad its absence is and what to
// do on the node.
var longhornPrereqs = []struct {
	name string
	get  func(*nodestate.StorageReport) nodestate.Prereq
	sev  Severity
	// missing says what is wrong; next what to do (%s: the node).
	missing, next string
}{
	{"iscsid", func(s *nodestate.StorageReport) nodestate.Prereq { return s.Iscsid }, Error,
		"iscsid is not running: Longhorn cannot attach volumes there",
		"on %s: systemctl enable --now iscsid (package open-iscsi)"},
	{"iscsi_tcp", func(s *nodestate.StorageReport) nodestate.Prereq { return s.IscsiTCP }, Warn,
		"the iscsi_tcp module is not loaded",
		"on %s: modprobe iscsi_tcp, and name it in /etc/modules-load.d/iscsi_tcp.conf to load it at boot"},
	{"multipathd", func(s *nodestate.StorageReport) nodestate.Prereq { return s.Multipathd }, Warn,
		"multipathd may claim Longhorn's devices: volumes then fail to mount",
		`on %s: add blacklist { devnode "^sd[a-z0-9]+" } to /etc/multipath.conf, then systemctl restart multipathd`},
	{"NFS client", func(s *nodestate.StorageReport) nodestate.Prereq { return s.NFSClient }, Warn,
		"no NFS client: Longhorn's RWX volumes cannot be mounted there",
		"on %s: install the NFS client (nfs-common or nfs-utils: mount.nfs)"},
}

// checkLonghornPrereqs reads each node's Longhorn prerequisites.
func checkLonghornPrereqs(ctx context.Context, env *Env) []Finding {
	return eachNodeReport(ctx, env, "Longhorn's prerequisites", func(r *nodestate.NodeReport) bool { return r.Storage != nil },
		func(node string, r *nodestate.NodeReport) []Finding {
			var out []Finding
			for _, p := range longhornPrereqs {
				got := p.get(r.Storage)
				switch {
				case got.Problem != "":
					out = append(out, Finding{NotChecked: true, Severity: Warn, Subject: node,
						Summary:  fmt.Sprintf("%s: %s not checked: it could not be read", node, p.name),
						Evidence: []string{got.Problem}, Next: fmt.Sprintf("run sitecon doctor again; if it recurs, check on %s by hand", node)})
				case !got.OK:
					out = append(out, Finding{Severity: p.sev, Subject: node, Summary: node + ": " + p.missing,
						Evidence: nonEmpty(got.Evidence), Next: fmt.Sprintf(p.next, node)})
				}
			}
			return out
		})
}

// checkNodeCerts judges every node's k3s certificates, as its agent read
// them in its own k3s data dir (JudgeCert, as for this machine's).
func checkNodeCerts(ctx context.Context, env *Env) []Finding {
	return eachNodeReport(ctx, env, "k3s certificates", func(r *nodestate.NodeReport) bool { return r.Certs != nil },
		func(node string, r *nodestate.NodeReport) []Finding {
			c := r.Certs
			switch {
			case c.Problem != "" && len(c.Files) == 0:
				return []Finding{{NotChecked: true, Severity: Warn, Subject: node, Summary: node + ": its k3s certificates not checked: they could not be read",
					Evidence: []string{c.Problem}, Next: fmt.Sprintf("on %s: sitecon doctor --k3s-data-dir DIR, as root", node)}}
			case !c.Found:
				return []Finding{{Severity: Info, Subject: node,
					Summary: fmt.Sprintf("%s: no k3s certificates in %s (k3s has not run there yet, or another data dir)", node, c.DataDir)}}
			}
			var out []Finding
			for _, file := range c.Files {
				f := JudgeCert(file, env.Now)
				if f.Severity == OK {
					continue
				}
				f.Subject = node + ":" + file.Path
				f.Summary = node + ": " + f.Summary
				f.Next = "on " + node + ": " + f.Next // JudgeCert's says one server at a time
				out = append(out, f)
			}
			return out
		})
}

// checkTimeSync warns of a node whose kernel says its clock is not
// synchronised (SC-CLOCK-SKEW compares the clocks themselves: nodes
// can agree and all be wrong, or one can be right by chance today).
func checkTimeSync(ctx context.Context, env *Env) []Finding {
	return eachNodeReport(ctx, env, "time synchronisation", func(r *nodestate.NodeReport) bool { return r.Time != nil },
		func(node string, r *nodestate.NodeReport) []Finding {
			t := r.Time
			switch {
			case t.Problem != "":
				return []Finding{{NotChecked: true, Severity: Warn, Subject: node, Summary: node + ": its clock's synchronisation not checked: the kernel could not be asked",
					Evidence: []string{t.Problem}}}
			case t.Synchronized:
				return nil
			}
			return []Finding{{Severity: Warn, Subject: node, Summary: node + "'s clock is not synchronised",
				Evidence: []string{timexText(*t)},
				Next:     fmt.Sprintf("on %s: timedatectl status (or chronyc tracking); give it an NTP server it reaches", node)}}
		})
}

// credentialNext is what to do about a node that cannot sign with its
// own credential: k3s writes it, and the client CA, when it runs.
const credentialNext = "on the node: is k3s running (systemctl status sitecon-agent)? It writes the node's credential and the cluster's client CA " +
	"(<k3s-data-dir>/agent/kubelet.kubeconfig, client-ca.crt); restart the agent once they are there"

// checkNodeCredentials finds the nodes whose agent cannot sign its proof
// of life with the node's own credential, or check one against the
// cluster's client CA: their word that they fenced does not count, so a
// failover off them waits for their silence, and a leader among them
// takes no node's word.
func checkNodeCredentials(ctx context.Context, env *Env) []Finding {
	// A node that cannot sign as itself cannot sign its report either: a
	// reader that checks the signature keeps that report aside (NotOwn),
	// and what it says of the node's credential is the finding, not "no
	// report".
	var notOwn []Finding
	if env.NodeReports != nil {
		for _, a := range env.NodeReports(ctx).Answers {
			if a.Answered || a.NotOwn == nil {
				continue
			}
			name := a.Name()
			ev := []string{a.Problem}
			if a.NotOwn.Credential != nil && a.NotOwn.Credential.Problem != "" {
				ev = append(ev, "its agent says (unsigned as the node): "+a.NotOwn.Credential.Problem)
			}
			notOwn = append(notOwn, Finding{Severity: Warn, Subject: name, Summary: name + " cannot sign its proof of life and report with its own credential",
				Evidence: append(ev, "its peers do not take its word that it fenced: a failover off it waits until it is silent or powered off"),
				Next:     strings.Replace(credentialNext, "on the node", "on "+name, 1)})
		}
	}
	found := eachNodeReport(ctx, env, "own credential", func(r *nodestate.NodeReport) bool { return r.Credential != nil },
		func(node string, r *nodestate.NodeReport) []Finding {
			if r.Credential.Problem == "" {
				return nil
			}
			return []Finding{{Severity: Warn, Subject: node, Summary: node + " cannot sign its proof of life with its own credential",
				Evidence: []string{r.Credential.Problem, "its peers do not take its word that it fenced: a failover off it waits until it is silent or powered off"},
				Next:     strings.Replace(credentialNext, "on the node", "on "+node, 1)}}
		})
	if len(notOwn) == 0 {
		return found
	}
	// The "gave no report" of those nodes is the finding above.
	seen := map[string]bool{}
	for _, f := range notOwn {
		seen[f.Subject] = true
	}
	return append(notOwn, slices.DeleteFunc(found, func(f Finding) bool { return seen[f.Subject] })...)
}

// timexText says the kernel's answer as adjtimex gave it.
func timexText(t nodestate.TimeReport) string {
	var flags []string
	if t.Status&unix.STA_UNSYNC != 0 {
		flags = append(flags, "STA_UNSYNC set")
	}
	flags = append(flags, fmt.Sprintf("maximum error %s, estimated %s", t.MaxError, t.EstError))
	state := fmt.Sprintf("state %d", t.State)
	if t.State == unix.TIME_ERROR {
		state += " (TIME_ERROR)"
	}
	return "adjtimex: " + strings.Join(flags, ", ") + ", " + state
}

// tokenMaxAge is the age past which the cluster token is worth rotating:
// it is the one secret that lets a device join the cluster, and it is
// copied to every node and into every node's config.
const tokenMaxAge = 365 * 24 * time.Hour

// tokenRotateNext is how a token is rotated: k3s's token rotate on one
// server changes the servers' token; every node's cluster config must
// then carry the new one.
const tokenRotateNext = "rotate it from the controller (the edge-node cluster's config); offline: on one server " +
	"k3s token rotate --token OLD --new-token NEW, then NEW in every node's cluster config, " + oneServerAtATime

// tokenFutureSlack is how far in the future a node's first use may be
// and still count as now: the node answered after the doctor's clock was
// read, and clocks may differ by less than SC-CLOCK-SKEW's error (which
// says so itself).
const tokenFutureSlack = 5 * time.Minute

// checkTokenAge says since when each node applies its cluster token (its
// agent's record; nothing else records when a token was made), and warns
// of one older than tokenMaxAge.
func checkTokenAge(ctx context.Context, env *Env) []Finding {
	return eachNodeReport(ctx, env, "the cluster token's age", func(r *nodestate.NodeReport) bool { return r.Token != nil },
		func(node string, r *nodestate.NodeReport) []Finding {
			t := r.Token
			age := env.Now.Sub(t.Since)
			days := int(max(age, 0) / (24 * time.Hour))
			evidence := fmt.Sprintf("in use since %s (%s)", t.Since.UTC().Format("2006-01-02"), t.Source)
			switch {
			case t.Problem != "" && t.Since.IsZero():
				return []Finding{{NotChecked: true, Severity: Info, Subject: node, Summary: fmt.Sprintf("the cluster token's age not checked on %s: %s", node, t.Problem)}}
			case age < -tokenFutureSlack:
				return []Finding{{NotChecked: true, Severity: Warn, Subject: node,
					Summary:  fmt.Sprintf("the cluster token's age not checked on %s: it reports a first use in the future", node),
					Evidence: []string{evidence, "this machine's clock or the node's is wrong: see " + IDClockSkew}}}
			case t.Problem != "":
				return []Finding{{NotChecked: true, Severity: Warn, Subject: node, Summary: fmt.Sprintf("%s: the cluster token's age partly checked: at least %d days", node, days),
					Evidence: []string{evidence, t.Problem}, Next: fmt.Sprintf("on %s: check the agent's state directory (permissions, free space) and its clock (timedatectl status)", node)}}
			case age > tokenMaxAge:
				return []Finding{{Severity: Warn, Subject: node, Summary: fmt.Sprintf("%s: the cluster token is %d days old", node, days),
					Evidence: []string{evidence}}}
			}
			return []Finding{{Severity: OK, Subject: node, Summary: fmt.Sprintf("%s: the cluster token is %d days old", node, days),
				Evidence: []string{evidence}}}
		})
}
