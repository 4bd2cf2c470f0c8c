package kube

import "sync"

// Broadcast hands change notifications to any number of subscribers. Each
// subscriber has one pending slot: bursts coalesce, and a slow reader never
// blocks the sender.
type Broadcast struct {
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
}

// Subscribe returns a channel that receives a value after any Notify, and
// the function that unsubscribes.
func (b *Broadcast) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	if b.subs == nil {
		b.subs = map[chan struct{}]struct{}{}
	}
	b.subs[ch] = struct{}{}
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		delete(b.subs, ch)
		b.mu.Unlock()
	}
}

// Notify tells every subscriber something changed.
func (b *Broadcast) Notify() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
