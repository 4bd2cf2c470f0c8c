package safety

import (
	"fmt"
	"slices"
	"strings"
)

// Member is one voting etcd member as the quorum arithmetic sees it. The
// caller gives the list: etcd's own member list as the agents publish it
// (EtcdQuorum), never the Nodes' etcd role label, which misses a member
// without a Node.
type Member struct {
	// Name is the member's node when known, else its etcd name.
	Name string
	// Down says why the member cannot be counted on to vote ("NotReady",
	// "cordoned", "etcd: context deadline exceeded"); empty when it is
	// healthy. A cordoned member still votes, but it is on its way out
	// (another drain is running or stopped half way): counting it would
	// let two members leave at once.
	Down string
}

// Quorum is the arithmetic of taking one member out of service.
type Quorum struct {
	// Verb is what is done to Out ("draining", "removing", "replacing").
	Verb string
	Out  string
	// IsMember: Out is one of the members; if not, its leaving changes
	// nothing and the rest of the arithmetic is zero.
	IsMember bool
	// Members is M, the members now (Out included: during its drain it
	// is still a member).
	Members int
	// Healthy is how many members stay healthy with Out out of service.
	Healthy int
	// Needed is floor(M/2)+1.
	Needed int
	// Down lists the members that are not healthy, Out included, each
	// with why ("node-c: NotReady").
	Down []string
}

// Needed is the quorum of m members: floor(m/2)+1.
func Needed(m int) int { return m/2 + 1 }

// TakeOut does the arithmetic of taking out out of service.
func TakeOut(members []Member, out, verb string) Quorum {
	q := Quorum{Verb: verb, Out: out, Members: len(members), Needed: Needed(len(members))}
	for _, m := range members {
		if m.Down != "" {
			q.Down = append(q.Down, m.Name+": "+m.Down)
		}
		switch {
		case m.Name == out:
			q.IsMember = true
		case m.Down == "":
			q.Healthy++
		}
	}
	slices.Sort(q.Down)
	if !q.IsMember {
		return Quorum{Verb: verb, Out: out}
	}
	return q
}

// Holds reports whether a quorum stays healthy with Out out of service.
func (q Quorum) Holds() bool { return !q.IsMember || q.Healthy >= q.Needed }

// Spare is how many more members may fail, with Out out, before quorum is
// lost (negative: already lost).
func (q Quorum) Spare() int { return q.Healthy - q.Needed }

// String says the arithmetic in words: "3 etcd members, 1 unhealthy
// (node-c: NotReady); draining node-a leaves 1 of the 2 needed".
func (q Quorum) String() string {
	health := "all healthy"
	if len(q.Down) > 0 {
		health = fmt.Sprintf("%d unhealthy (%s)", len(q.Down), strings.Join(q.Down, ", "))
	}
	return fmt.Sprintf("%d etcd member%s, %s; %s %s leaves %d of the %d needed",
		q.Members, plural(q.Members), health, q.Verb, q.Out, q.Healthy, q.Needed)
}

// AfterRemoval is the arithmetic once Out has left the member list (a
// remove or replace): M-1 members, the same healthy ones.
func (q Quorum) AfterRemoval() Quorum {
	if !q.IsMember {
		return q
	}
	after := q
	after.Members--
	after.Needed = Needed(after.Members)
	return after
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// EtcdQuorum is the member list the quorum arithmetic counts, and where it
// came from. Only etcd's own list is counted: when it cannot be counted on
// (not published, no entry a current server wrote, stale), quorum is
// unknown, Members is empty and Unknown says why; whatever needs quorum is
// refused. The zero value is unknown.
type EtcdQuorum struct {
	Members []Member
	// Source says where the list came from, or why there is none to count
	// on; the preflight puts it in its verdict, the doctor in its finding.
	Source string
	// FromEtcd: Members is etcd's own list, fresh.
	FromEtcd bool
	// Unknown, when the list cannot be counted on, says what was read,
	// when, and what to do.
	Unknown string
	// Labelled are the Nodes with the etcd role label, for a display to
	// show what it knows while quorum is unknown. Never counted: a member
	// without a Node (right after a node remove) is missing from them, so
	// they can call a quorum safe that etcd's list would not.
	Labelled []Member
	// Learners are members that do not vote yet, said in words.
	Learners []string
	// Ignored are the published entries not counted, each with why
	// (kube.EtcdViews).
	Ignored []string
}

// LabelledSay says the Labelled members in words, and that they are not
// counted: "" when there are none.
func (q EtcdQuorum) LabelledSay() string {
	if len(q.Labelled) == 0 {
		return ""
	}
	var names []string
	for _, m := range q.Labelled {
		names = append(names, m.Name)
	}
	slices.Sort(names)
	return fmt.Sprintf("the Nodes' etcd role label names %s: not counted (it misses a member without a Node, as right after a node remove)", strings.Join(names, ", "))
}
