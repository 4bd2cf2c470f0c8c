package main

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sitecon/sitecon/test/threadholder"
)

func TestMain(m *testing.M) {
	threadholder.RunIfHolder()
	os.Exit(m.Run())
}

// stopRunning returns only once the member has let go of what it held:
// every thread of it gone, not only its main thread. The stand-in then
// starts the member again on the same ports and data; one started while
// the old one's threads still held them exited at once (the bootstrap
// power-cut test saw a joiner's k3s start twice on first boot).
func TestStopRunningWaitsForEveryThreadOfTheMember(t *testing.T) {
	memberData := filepath.Join(t.TempDir(), "member")
	holder, addr := threadholder.Start(t, nil, "--data-dir="+memberData)
	pidFile := filepath.Join(t.TempDir(), "member.pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(holder.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}

	stopRunning(pidFile, memberData, 200*time.Millisecond)

	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("stopRunning returned while the member still held its port: %v", err)
	}
	_ = l.Close()
}
