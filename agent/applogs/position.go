package applogs

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sitecon/sitecon/agent/config"
)

// Position is how far one container instance's log has been written out:
// the timestamp of the last line written and how many lines with exactly
// that timestamp were (a container may write several in one instant, and
// the API's sinceTime has whole seconds only). A container that restarts
// starts a new instance: RestartCount tells them apart.
type Position struct {
	PodUID       string    `json:"podUID"`
	Pod          string    `json:"pod"`
	Namespace    string    `json:"namespace"`
	Container    string    `json:"container"`
	RestartCount int32     `json:"restartCount"`
	Time         time.Time `json:"time"`
	AtTime       int       `json:"atTime"`
}

// key names a container of a pod: the position file's name.
func (p Position) key() string { return p.PodUID + "_" + p.Container }

// Admit says whether a line stamped ts comes after the position, and
// moves the position past it when it does. Lines come in order: a line
// older than the position, or one of the first AtTime lines at its time,
// was written out before.
func (p *Position) Admit(ts time.Time, seenAtTime *int) bool {
	switch {
	case ts.Before(p.Time):
		return false
	case ts.Equal(p.Time):
		*seenAtTime++
		if *seenAtTime <= p.AtTime {
			return false
		}
		p.AtTime++
		return true
	default:
		p.Time, p.AtTime = ts, 1
		*seenAtTime = 1
		return true
	}
}

// SinceTime is what to ask the API for to resume after p: its time
// rounded down to the second (what sinceTime carries); nil from the start.
func (p Position) SinceTime() *time.Time {
	if p.Time.IsZero() {
		return nil
	}
	t := p.Time.Truncate(time.Second)
	return &t
}

// positions keeps one file per container under dir, each written whole
// (config.WriteFileAtomic): an agent killed at any moment finds either
// the old position or the new.
type positions struct{ dir string }

func (s positions) path(key string) string { return filepath.Join(s.dir, key+".json") }

func (s positions) load(podUID, container string) (Position, bool, error) {
	data, err := os.ReadFile(s.path(podUID + "_" + container))
	if errors.Is(err, os.ErrNotExist) {
		return Position{}, false, nil
	}
	if err != nil {
		return Position{}, false, err
	}
	var p Position
	if err := json.Unmarshal(data, &p); err != nil {
		return Position{}, false, fmt.Errorf("position %s: %w", s.path(podUID+"_"+container), err)
	}
	return p, true, nil
}

func (s positions) save(p Position) error {
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return config.WriteFileAtomic(s.path(p.key()), data, 0o600)
}

// prune removes the positions of pods that are gone.
func (s positions) prune(live map[string]bool) error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		uid, _, ok := strings.Cut(strings.TrimSuffix(e.Name(), ".json"), "_")
		if !ok || !strings.HasSuffix(e.Name(), ".json") || live[uid] {
			continue
		}
		if err := os.Remove(filepath.Join(s.dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
