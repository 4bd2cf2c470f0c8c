package apps

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// What the agent publishes is read by others (the local socket, the state
// files): renaming the Go types must not change a name or value on the wire.
func TestPublishedWireNamesAndValues(t *testing.T) {
	for status, want := range map[PublishedNodeStatus]string{
		PublishedReady: "READY", PublishedNotReady: "NOTREADY", PublishedDown: "DOWN",
	} {
		data, err := json.Marshal(PublishedNode{Node: "node-a", Status: status, Since: time.Unix(0, 0).UTC()})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), `"status":"`+want+`"`) {
			t.Errorf("node status %q published as %s, want \"status\":%q", status, data, want)
		}
	}
	data, err := json.Marshal(PublishedApp{UUID: "u1", KubeStatus: KubeRunning, ClusterAppRunning: true, IsDNIdNode: true, Activate: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"uuid":"u1"`, `"kube_status":"running"`, `"cluster_app_running":true`, `"is_dnid_node":true`, `"activate":true`, `"effective_dnid":""`, `"scheduled_on_this_node":false`, `"changed_at":`} {
		if !strings.Contains(string(data), field) {
			t.Errorf("published app %s lacks %s", data, field)
		}
	}
}
