package configwatch

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sitecon/sitecon/agent/config"
	"github.com/sitecon/sitecon/agent/formation"
	"github.com/sitecon/sitecon/agent/internal/agenttest"
)

// The config file's stat, poll by poll: only an absence that lasts the whole
// grace period leaves; other errors hold; a config that failed to load is
// loaded again at every poll until it loads.
func TestConfigWatch(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	notExist := fmt.Errorf("stat cluster.json: %w", fs.ErrNotExist)
	ioErr := fmt.Errorf("stat cluster.json: %w", syscall.EIO)
	// A config whose directory is absent (/persist not mounted), as a poll
	// stats it.
	_, dirAbsent := Stat(filepath.Join(t.TempDir(), "persist", "sitecon", "cluster.json"))
	type poll struct {
		at        time.Duration
		stamp     string
		err       error
		loadFails bool
		leaveReq  bool  // a leave request is there
		staleReq  bool  // …for another cluster than the config's
		unchecked bool  // …and the config could not be read to compare
		reqErr    error // the leave request cannot be read
		load      bool
		leave     bool
		noteHas   string
	}
	for name, polls := range map[string][]poll{
		"absent briefly (an editor's rename-save): no leave, no reload of an unchanged file": {
			{at: 0, stamp: "s1", load: true},
			{at: 2 * time.Second, err: notExist, noteHas: "config missing for 0s; leaving in 30s"},
			{at: 14 * time.Second, err: notExist, noteHas: "config missing for 12s; leaving in 18s"},
			{at: 16 * time.Second, stamp: "s1"},
		},
		"absent past the grace period: leave once, then load when it returns": {
			{at: 0, stamp: "s1", load: true},
			{at: 1 * time.Second, err: notExist},
			{at: 31 * time.Second, err: notExist, leave: true},
			{at: 33 * time.Second, err: notExist, noteHas: "not in a cluster"},
			{at: 40 * time.Second, stamp: "s1", load: true},
		},
		"an I/O error is unknown, never absent, and breaks an absence": {
			{at: 0, stamp: "s1", load: true},
			{at: 1 * time.Second, err: notExist},
			{at: 20 * time.Second, err: ioErr, noteHas: "cannot be read"},
			{at: 40 * time.Second, err: ioErr, noteHas: "holding what runs"},
			{at: 41 * time.Second, err: notExist},
			{at: 60 * time.Second, err: notExist, noteHas: "leaving in 11s"},
		},
		"a config directory that is absent (an unmounted /persist) is unknown, never a leave": {
			{at: 0, stamp: "s1", load: true},
			{at: 2 * time.Second, err: dirAbsent, noteHas: "is absent"},
			{at: 40 * time.Second, err: dirAbsent, noteHas: "holding what runs"},
			{at: 41 * time.Second, stamp: "s1"},
		},
		"absence counts only from a readable directory: the directory's absence breaks it": {
			{at: 0, stamp: "s1", load: true},
			{at: 1 * time.Second, err: notExist},
			{at: 20 * time.Second, err: dirAbsent, noteHas: "holding what runs"},
			{at: 21 * time.Second, err: notExist},
			{at: 40 * time.Second, err: notExist, noteHas: "leaving in 11s"},
		},
		"a leave request: leave once at once, stay out, come back when it is withdrawn": {
			{at: 0, stamp: "s1", load: true},
			{at: 2 * time.Second, stamp: "s1", leaveReq: true, leave: true, noteHas: "left the cluster on request (by tech"},
			{at: 4 * time.Second, stamp: "s1", leaveReq: true, noteHas: "remove /var/lib/sitecon/leave.json to join again"},
			{at: 6 * time.Second, stamp: "s1", load: true},
		},
		"a leave request of another cluster (the device formed anew since) is ignored, and said": {
			{at: 0, stamp: "s1", leaveReq: true, staleReq: true, load: true, noteHas: "ignored"},
			{at: 2 * time.Second, stamp: "s1", leaveReq: true, staleReq: true, noteHas: "remove /var/lib/sitecon/leave.json"},
			{at: 4 * time.Second, stamp: "s1"},
		},
		// The config briefly gone (an editor's rename-save) cannot be
		// compared with: the request found another cluster's stays so, and
		// the absence has its grace period, as without a request.
		"another cluster's leave request stays ignored while the config is briefly missing": {
			{at: 0, stamp: "s1", leaveReq: true, staleReq: true, load: true, noteHas: "ignored"},
			{at: 2 * time.Second, err: notExist, leaveReq: true, unchecked: true, noteHas: "config missing for 0s; leaving in 30s"},
			{at: 14 * time.Second, err: notExist, leaveReq: true, unchecked: true, noteHas: "ignored"},
			{at: 16 * time.Second, stamp: "s1", leaveReq: true, staleReq: true},
		},
		"a leave request that cannot be read holds, whatever the file": {
			{at: 0, stamp: "s1", load: true},
			{at: 2 * time.Second, err: notExist, reqErr: syscall.EACCES, noteHas: "leave request unreadable"},
			{at: 40 * time.Second, err: notExist, reqErr: syscall.EACCES, noteHas: "holding what runs"},
		},
		"a config that failed is retried every poll, unchanged or not": {
			{at: 0, stamp: "s1", load: true, loadFails: true},
			{at: 2 * time.Second, stamp: "s1", load: true, loadFails: true},
			{at: 4 * time.Second, stamp: "s1", load: true},
			{at: 6 * time.Second, stamp: "s1"},
			{at: 8 * time.Second, stamp: "s2", load: true},
		},
	} {
		t.Run(name, func(t *testing.T) {
			w := Watch{Grace: 30 * time.Second}
			for i, p := range polls {
				lr := LeaveRead{present: p.leaveReq, err: p.reqErr, path: "/var/lib/sitecon/leave.json",
					req: formation.LeaveRequest{By: "tech", At: t0}}
				lr.checked = !p.unchecked
				if p.staleReq {
					lr.otherCluster = "the config is cluster 2b1c…"
				}
				step := w.Next(p.stamp, p.err, lr, t0.Add(p.at))
				if step.Load != p.load || step.Leave != p.leave || !strings.Contains(step.Note, p.noteHas) {
					t.Fatalf("poll %d at %s: got load=%v leave=%v note %q; want load=%v leave=%v note containing %q",
						i, p.at, step.Load, step.Leave, step.Note, p.load, p.leave, p.noteHas)
				}
				if step.Load && p.loadFails {
					w.LoadFailed()
				}
			}
		})
	}
}

// A leave request names the cluster it was written for: beside a config of
// another cluster (the device was formed or joined anew since) it is not
// this cluster's technician asking.
func TestReadLeaveAgainstTheConfig(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "cluster.json")
	request := formation.Records{Dir: filepath.Join(dir, "state")}.LeaveRequestFile()
	cfg := agenttest.Config()
	writeConfig := func(c *config.Config) {
		t.Helper()
		data, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cfgPath, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeConfig(cfg)
	if lr := ReadLeave(cfgPath, request); lr.present || lr.err != nil {
		t.Fatalf("no request: %+v", lr)
	}
	req := formation.LeaveRequest{ClusterID: cfg.ClusterID, NodeName: cfg.NodeName, By: "tech", At: time.Now()}
	if err := formation.WriteLeaveRequest(request, req); err != nil {
		t.Fatal(err)
	}
	if lr := ReadLeave(cfgPath, request); !lr.present || lr.otherCluster != "" || !lr.checked {
		t.Fatalf("this cluster's request: %+v, want present, checked and honoured", lr)
	}
	// The same cluster id written in capitals is the same cluster.
	upper := *cfg
	upper.ClusterID = strings.ToUpper(cfg.ClusterID)
	writeConfig(&upper)
	if lr := ReadLeave(cfgPath, request); lr.otherCluster != "" {
		t.Fatalf("a request of %s beside a config of %s: %+v, want it this cluster's", cfg.ClusterID, upper.ClusterID, lr)
	}
	other := *cfg
	other.ClusterID = "2b1c3d4e-5f60-4a7f-8e9a-55aa7f3e2a10"
	writeConfig(&other)
	lr := ReadLeave(cfgPath, request)
	if !lr.present || !strings.Contains(lr.otherCluster, other.ClusterID) || !strings.Contains(lr.otherCluster, cfg.ClusterID) {
		t.Fatalf("a request of cluster %s beside a config of %s: %+v, want it named as another cluster's", cfg.ClusterID, other.ClusterID, lr)
	}
	// Another node's request (a config copied between devices) is not this
	// node's either.
	moved := *cfg
	moved.NodeName = "node-c"
	writeConfig(&moved)
	if lr := ReadLeave(cfgPath, request); !strings.Contains(lr.otherCluster, "node-c") {
		t.Fatalf("a request for node-b beside node-c's config: %+v, want it named as another node's", lr)
	}
	// No config to compare with: the request stands (there is nothing to
	// join anyway).
	if err := os.Remove(cfgPath); err != nil {
		t.Fatal(err)
	}
	if lr := ReadLeave(cfgPath, request); !lr.present || lr.otherCluster != "" || lr.checked {
		t.Fatalf("no config: %+v, want the request present and unchecked", lr)
	}
}

// Only a file removed from a directory that is there counts as absent; a
// directory that is absent, or a file where the directory should be, is
// unknown.
func TestStatConfigAbsentOnlyInReadableDirectory(t *testing.T) {
	dir := t.TempDir()
	if _, err := Stat(filepath.Join(dir, "cluster.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a file removed from a readable directory: %v, want absent", err)
	}
	for name, path := range map[string]string{
		"directory absent":    filepath.Join(dir, "persist", "sitecon", "cluster.json"),
		"directory is a file": filepath.Join(dir, "plain", "cluster.json"),
	} {
		if name == "directory is a file" {
			if err := os.WriteFile(filepath.Join(dir, "plain"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		_, err := Stat(path)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v, want an error that is not absence", name, err)
		}
	}
}
