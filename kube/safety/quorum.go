package safety

import (
	"fmt"
	"slices"
	"strings"
)

// Member is one etcd member as the quorum arithmetic sees it. Today the
// members are the Nodes carrying the etcd role label; the arithmetic takes
// the list from its caller so that etcd's own member list (read with
// k3s's client certificates) can replace them without touching it.
type Member struct {
	Name string
	// Down says why the member cannot be counted on to vote ("NotReady",
	// "cordoned"); empty when it is healthy. A cordoned member still
	// votes, but it is on its way out (another drain is running or
	// stopped half way): counting it would let two members leave at once.
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
	// Down lists the other members that are not healthy, with why.
	Down []string
}

// Needed is the quorum of m members: floor(m/2)+1.
func Needed(m int) int { return m/2 + 1 }

// TakeOut does the arithmetic of taking out out of service.
func TakeOut(members []Member, out, verb string) Quorum {
	q := Quorum{Verb: verb, Out: out, Members: len(members), Needed: Needed(len(members))}
	for _, m := range members {
		switch {
		case m.Name == out:
			q.IsMember = true
		case m.Down != "":
			q.Down = append(q.Down, m.Name+" "+m.Down)
		default:
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

// String says the arithmetic in words: "2 etcd members; draining node-a
// leaves 1 healthy, quorum needs 2".
func (q Quorum) String() string {
	down := ""
	if len(q.Down) > 0 {
		down = " (" + strings.Join(q.Down, ", ") + ")"
	}
	return fmt.Sprintf("%d etcd member%s; %s %s leaves %d healthy%s, quorum needs %d",
		q.Members, plural(q.Members), q.Verb, q.Out, q.Healthy, down, q.Needed)
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
