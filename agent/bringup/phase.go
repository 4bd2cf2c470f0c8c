package bringup

// Phase is where bootstrap stands, as the agent publishes it (agent.State).
type Phase string

// Bootstrap phases, in order; PhaseError when the current step keeps
// failing. The agent sets PhaseStarting, PhaseLeft and PhaseExternal
// itself; a bring-up the others.
const (
	PhaseStarting Phase = "starting"
	// PhaseWaitingLink: the cluster interface has no carrier (cable out,
	// switch port down); nothing is probed, taken or asked until it has.
	PhaseWaitingLink Phase = "waiting-for-link"
	PhaseConfiguring Phase = "configuring-address"
	PhaseWaitingSeed Phase = "waiting-for-seed"
	// PhaseCheckingMembership: a server that has been a member asks its
	// peers whether it still is one, before it starts k3s (between the
	// /status server and starting-k3s).
	PhaseCheckingMembership Phase = "checking-membership"
	PhaseStartingK3s        Phase = "starting-k3s"
	PhaseJoined             Phase = "joined"
	PhaseError              Phase = "error"
	PhaseLeft               Phase = "left"
	// PhaseExternal: the agent runs against a cluster it did not form
	// (--no-bootstrap); only the apps part runs.
	PhaseExternal Phase = "no-bootstrap"
)
