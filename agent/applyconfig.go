package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/workloads"
)

// The agent's part of the config watch (package configwatch decides):
// loading and validating the config, saying why it was rejected, and
// leaving the cluster.

// load reads and validates the config.
func (a *Agent) load() (*config.Validated, error) {
	c, err := config.Load(a.opts.ConfigPath)
	if err != nil {
		return nil, err
	}
	return config.Validate(c, a.opts.Env)
}

func (a *Agent) configError(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	// Retried every poll: logged when the reason changes, not each time.
	if a.state.ConfigError != err.Error() {
		a.log.Error("cluster config rejected; keeping the previous one, retrying", "err", err)
	}
	a.state.ConfigError = err.Error()
	if a.applied == nil {
		a.state.Phase, a.state.Since, a.state.LastError = PhaseError, time.Now(), err.Error()
	}
}

func (a *Agent) sameAsApplied(v *config.Validated) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.applied == nil {
		return false
	}
	x, _ := json.Marshal(a.applied.Config)
	y, _ := json.Marshal(v.Config)
	return bytes.Equal(x, y) && a.applied.Token == v.Token
}

// leave takes this node out, k3s already stopped by the caller: first the
// containers k3s started (they outlive k3s, each held by its shim, and a
// node that dropped its address while they ran would look dead to the
// others' failover guard, which then starts the same app a second time
// beside them), then the cluster address and the firewall table. A
// container that cannot be stopped keeps the address: false, and the node
// says so and tries again at the next poll.
func (a *Agent) leave(ctx context.Context) bool {
	a.mu.Lock()
	applied := a.applied
	a.mu.Unlock()
	if applied == nil {
		return true
	}
	rep, err := workloads.StopAll(ctx, a.opts.Workloads)
	if err != nil {
		err = fmt.Errorf("leaving: this node's containers could not all be stopped (%s): %w; keeping the cluster address, retrying", rep, err)
		a.log.Error("leave held", "err", err)
		a.setPhase(PhaseError, err)
		return false
	}
	a.log.Info("stopped this node's containers", "killed", len(rep.Killed), "unmounted", rep.Unmounted)
	a.mu.Lock()
	a.applied = nil
	a.token = nil
	a.mu.Unlock()
	err = a.bringUp.DropClusterAddress(applied)
	a.setPhase(PhaseLeft, err)
	a.log.Info("left the cluster", "err", err)
	return true
}
