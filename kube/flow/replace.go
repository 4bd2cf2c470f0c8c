package flow

import (
	"context"
	"fmt"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/safety"
)

// ActionReplace is a replace's action name, as recorded.
const ActionReplace = "replace-node"

// ReplaceRequest is a device replaced: Old drained and removed, New given
// a join bundle with Old's cluster address, so the site's addressing stays
// as it was.
type ReplaceRequest struct {
	Old, New string
	// Bundle makes New's join bundle at the address ip (this node's
	// cluster config and the seed in effect: package agent knows how).
	Bundle func(ip string) (string, error)
}

// Replace is a replace planned: the address handed on and the bundle
// that carries it, made before anything changes.
type Replace struct {
	Record *Record
	ReplaceRequest
	IP, Bundle string
}

// PlanReplace finds Old's address in nodes (the cluster's, as derived
// from its snapshot) and makes New's bundle before anything changes: a
// bundle that cannot be made must not leave the site one device short. A
// refusal is recorded and returned as a *Refused; the drain follows
// (CheckDrain, then Replace.Drain).
func PlanReplace(r Recorder, d kube.Data, nodes []kube.NodeStatus, req ReplaceRequest) (*Replace, error) {
	rec := r.Open(ActionReplace, req.Old+" → "+req.New)
	ip, found := "", false
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
		if n.Name == req.Old {
			ip, found = n.InternalIP, true
		}
	}
	switch {
	case !found:
		return nil, rec.Refuse(fmt.Sprintf("%s: %v (nodes: %s)", req.Old, safety.ErrUnknownNode, OrNone(names...)))
	case ip == "":
		return nil, rec.Refuse(req.Old + " has no internal address to hand on")
	}
	// The seed's address handed to a new device would make it the seed of
	// a cluster it never was part of: the seed moves first.
	if why := kube.SeedRemovalRefusal(d, req.Old); why != "" {
		return nil, rec.Refuse(why)
	}
	bundle, err := req.Bundle(ip)
	if err != nil {
		return nil, rec.Refuse("the new node's bundle: " + err.Error())
	}
	return &Replace{Record: rec, ReplaceRequest: req, IP: ip, Bundle: bundle}, nil
}

// Drain is the replace's drain of Old from its preflight, recorded as the
// replace: once Old is removed, the record says who takes its address.
func (rp *Replace) Drain(snap *kube.Snapshot, p safety.Preflight, checkErr error, opts DrainOptions) (*Drain, error) {
	d, err := NewDrain(rp.Record, snap, p, checkErr, opts)
	if err != nil {
		return nil, err
	}
	d.removed = func() {
		d.SetDetail(fmt.Sprintf("%s removed; %s joins at %s", rp.Old, rp.New, rp.IP))
	}
	return d, nil
}

// CheckDrain is the preflight of the replace's drain of Old.
func (rp *Replace) CheckDrain(ctx context.Context, snap *kube.Snapshot, local string, opts DrainOptions) (safety.Preflight, error) {
	return CheckDrain(ctx, snap, ActionReplace, rp.Old, local, opts)
}
