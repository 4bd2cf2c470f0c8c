package flow

import (
	"context"

	"github.com/sitecon/sitecon/audit"
)

// Add is join info for a new node, made and waiting to be shown. It
// carries the cluster token: handing it out is an action, recorded (who
// asked, for which node; never the token).
type Add struct {
	Action
	Text string
}

// PlanAdd makes the join info (join-info or add-node, by action) for
// node with role; detail says what was asked (role, address). Join info
// that cannot be made is recorded as failed and its error returned.
func PlanAdd(r Recorder, action, node, detail string, joinInfo func() (string, error)) (*Add, error) {
	rec := r.Open(action, node)
	rec.SetDetail(detail)
	text, err := joinInfo()
	if err != nil {
		return nil, joinProblem(err, rec.End(audit.OutcomeFailed, err))
	}
	return &Add{Action: Action{Record: rec}, Text: text}, nil
}

// Show shows the join info through show, its intent recorded before and
// its outcome after.
func (a *Add) Show(show func(text string) error) error {
	a.Change = func(context.Context, func(string)) error { return show(a.Text) }
	return a.Run(context.Background(), nil)
}
