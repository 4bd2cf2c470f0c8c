package nodecheck

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sitecon/sitecon/kube/nodestate"
)

// maxErrorCeiling is the kernel's NTP_PHASE_LIMIT-derived maximum error
// (16 s): the value maxerror grows to when nothing disciplines the clock.
// systemd's timedatectl counts a clock synchronised below it.
const maxErrorCeiling = 16 * time.Second

// TimeSync asks the kernel, through adjtimex (read only: no mode bit
// set), whether its clock is synchronised.
func TimeSync(adjtimex func(*unix.Timex) (int, error)) nodestate.TimeReport {
	var tx unix.Timex // Modes 0: only read
	state, err := adjtimex(&tx)
	if err != nil {
		return nodestate.TimeReport{Problem: fmt.Sprintf("adjtimex: %v", err)}
	}
	r := nodestate.TimeReport{Status: int(tx.Status), State: state,
		MaxError: time.Duration(tx.Maxerror) * time.Microsecond, EstError: time.Duration(tx.Esterror) * time.Microsecond}
	r.Synchronized = tx.Status&unix.STA_UNSYNC == 0 && r.MaxError < maxErrorCeiling
	return r
}
