package formation

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"
)

// StatusAnswer is what one address answered GET /status: Answer is its
// body, trimmed ("cluster:<uuid>", or empty from a node not yet a member);
// Err says why there was no answer.
type StatusAnswer struct {
	Addr   netip.Addr
	Answer string
	Err    error
}

// AskStatus asks every address for /status at once, at most parallel
// requests in flight (zero: 32), each within timeout (zero: 1 s), and
// returns one StatusAnswer per address, in addrs' order. It reads the
// answers as the seed probe does (statusAnswer); unlike MemberProbe.Find
// it does not stop at the first member: a reader looking for every
// cluster on a prefix (sitecon doctor's second-cluster check) needs them
// all.
func AskStatus(ctx context.Context, addrs []netip.Addr, dial func(ctx context.Context, network, addr string) (net.Conn, error),
	timeout time.Duration, parallel int) []StatusAnswer {
	if timeout == 0 {
		timeout = time.Second
	}
	if parallel == 0 {
		parallel = 32
	}
	out := make([]StatusAnswer, len(addrs))
	slots := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, a := range addrs {
		out[i].Addr = a
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			out[i].Err = ctx.Err()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			out[i].Answer, out[i].Err = statusAnswer(ctx, a, dial, timeout)
		}()
	}
	wg.Wait()
	return out
}
