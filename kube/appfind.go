package kube

import (
	"cmp"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"
)

// PlacementOverride is an on-site move of an app (the agent's
// PlacementOverride, as stored in the sitecon-placement ConfigMap).
type PlacementOverride struct {
	Node       string    `json:"node"`
	NodeUUID   string    `json:"node_uuid"`
	By         string    `json:"by"`
	At         time.Time `json:"at"`
	Reason     string    `json:"reason,omitempty"`
	ConfigDNId string    `json:"config_dnid"`
	// ConfigVersion is the version of the app's config the move was made
	// against (0: unversioned): only an agent holding a newer one clears it.
	ConfigVersion uint64 `json:"config_version,omitempty"`
}

// ParseOverride reads one entry of the placement ConfigMap as every agent
// acts on it: JSON naming a node UUID. An entry that does not is ignored
// by the agents (and reported by them and by sitecon doctor).
func ParseOverride(raw string) (PlacementOverride, error) {
	var o PlacementOverride
	if err := json.Unmarshal([]byte(raw), &o); err != nil {
		return o, err
	}
	if o.NodeUUID == "" {
		return o, errors.New("no node_uuid")
	}
	return o, nil
}

// AppWhere says where an app is, for progress lines: "Running on node-c",
// "Scheduling, not placed yet", "starting, not placed yet" (a VM between
// its old instance and the new one).
func AppWhere(a AppStatus) string {
	phase := cmp.Or(a.Phase, "starting")
	if a.Node == "" {
		return phase + ", not placed yet"
	}
	return phase + " on " + a.Node
}

// FindApp finds an app by name or UUID; of the objects running it (a
// terminating pod and its replacement), the ready one wins.
func FindApp(apps []AppStatus, ref string) (AppStatus, bool) {
	var found AppStatus
	ok := false
	for _, a := range apps {
		if a.Name != ref && !strings.EqualFold(a.UUID, ref) {
			continue
		}
		if !ok || (a.Ready && !found.Ready) || (found.Phase == "Terminating" && a.Phase != "Terminating") {
			found, ok = a, true
		}
	}
	return found, ok
}

// AppNames lists app names, sorted and unique, for messages.
func AppNames(apps []AppStatus) string {
	var names []string
	for _, a := range apps {
		if !slices.Contains(names, a.Name) {
			names = append(names, a.Name)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
