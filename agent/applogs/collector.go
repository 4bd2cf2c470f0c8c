// Package applogs collects the logs of the apps running on this node for
// the device's log service, as EVE's zedkube does (zedkube/applogs.go):
// each native-container app's containers, and a VM app's serial console
// (its virt-launcher's guest-console-log container, else compute), written
// as JSON lines (Record) to a bounded, rotated directory.
//
// Nothing is lost or written twice across an agent restart or a container
// restart, within the bounds below: each container instance's Position (pod UID, container, restart
// count, the last line's timestamp and how many lines had it) is saved
// after each batch, and the stream is resumed with timestamps and
// sinceTime from it; a line written but not yet saved in a position is
// found again in the current file at start. A follow is kept to the
// instance its position is in (instanceGuard): it ends when the pod
// reports a restart, whereupon the rest of the old instance is read from
// its previous log, and a stream that does not hold the position's last
// line (a newer instance the pod's status does not show yet) is not
// written. Pods come from the agent's watch (kube.Snapshot); no LISTs.
package applogs

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"

	"github.com/sitecon/sitecon/kube"
	"github.com/sitecon/sitecon/kube/streams"
)

// Pods is where the collector learns of pods: the agent's snapshot.
type Pods interface {
	Subscribe() (<-chan struct{}, func())
	WaitForSync(ctx context.Context) error
	Pods() []*corev1.Pod
}

// Options configure the collector.
type Options struct {
	// Dir holds the log files (Files) and, under positions/, the
	// positions.
	Dir string
	// Node is this node's name: only its pods are collected.
	Node string
	// MaxFileBytes and MaxFiles bound the directory (zero: the defaults,
	// DefaultMaxFileBytes and DefaultMaxFiles).
	MaxFileBytes int64
	MaxFiles     int
	// RetryMin and RetryMax bound the wait before a stream is opened again
	// after it ended or failed (zero: 1 s and 30 s).
	RetryMin, RetryMax time.Duration
	Log                *slog.Logger
}

// Collector follows the logs of this node's app containers.
type Collector struct {
	opts   Options
	client kubernetes.Interface
	pods   Pods
	pos    positions
	log    *slog.Logger

	writeMu sync.Mutex
	out     *rotatingFile
	// written are, per container, the positions read back from the
	// current file at start (see rotatingFile.written).
	written map[string]Position

	mu        sync.Mutex
	followers map[string]*follower
}

type follower struct {
	cancel context.CancelFunc
	done   chan struct{}
	// pod is the latest version the watch has shown (its restart counts).
	pod chan *corev1.Pod
}

// New opens the directory; Run collects.
func New(opts Options, client kubernetes.Interface, pods Pods) (*Collector, error) {
	if opts.Dir == "" || opts.Node == "" {
		return nil, errors.New("app logs: a directory and the node's name are needed")
	}
	opts.MaxFileBytes = cmp.Or(opts.MaxFileBytes, DefaultMaxFileBytes)
	opts.MaxFiles = max(cmp.Or(opts.MaxFiles, DefaultMaxFiles), 2)
	opts.RetryMin = cmp.Or(opts.RetryMin, time.Second)
	opts.RetryMax = cmp.Or(opts.RetryMax, 30*time.Second)
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	out, err := openRotating(opts.Dir, opts.MaxFileBytes, opts.MaxFiles)
	if err != nil {
		return nil, fmt.Errorf("app logs directory: %w", err)
	}
	written, err := out.written()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("app logs directory: %w", err), out.close())
	}
	return &Collector{opts: opts, client: client, pods: pods, log: opts.Log, out: out, written: written,
		pos: positions{dir: filepath.Join(opts.Dir, "positions")}, followers: map[string]*follower{}}, nil
}

// target is one container whose log this node collects.
type target struct {
	streams.LogTarget
	PodUID string
}

// Targets are the containers of this node's app pods to collect: every
// container of a native-container app's pod, and a VM app's console log.
// Pods not started yet have no log.
func Targets(pods []*corev1.Pod, node string) map[string]target {
	out := map[string]target{}
	for _, p := range pods {
		if p.Spec.NodeName != node || p.Namespace != kube.AppNamespace || p.Status.Phase == corev1.PodPending || p.Status.Phase == "" {
			continue
		}
		t, err := streams.LogTargetOf(p, "")
		if err != nil || t.App == "" {
			continue
		}
		containers := []string{t.Container}
		if !t.VM {
			containers = containers[:0]
			for _, c := range p.Spec.Containers {
				containers = append(containers, c.Name)
			}
		}
		for _, c := range containers {
			tc := target{LogTarget: t, PodUID: string(p.UID)}
			tc.Container, tc.Why = c, ""
			out[string(p.UID)+"_"+c] = tc
		}
	}
	return out
}

// Run collects until ctx ends.
func (c *Collector) Run(ctx context.Context) error {
	changes, unsubscribe := c.pods.Subscribe()
	defer unsubscribe()
	defer c.stopAll()
	// The first change may be the sync itself, before this subscribed.
	for c.pods.WaitForSync(ctx) != nil {
		if ctx.Err() != nil {
			return nil
		}
	}
	for {
		c.reconcile(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		}
	}
}

// reconcile starts a follower per target and stops those of pods gone.
func (c *Collector) reconcile(ctx context.Context) {
	pods := c.pods.Pods()
	if pods == nil {
		return // not synced: unknown is not empty
	}
	byUID := map[string]*corev1.Pod{}
	for _, p := range pods {
		byUID[string(p.UID)] = p
	}
	targets := Targets(pods, c.opts.Node)
	c.mu.Lock()
	defer c.mu.Unlock()
	live := map[string]bool{}
	for key, t := range targets {
		live[t.PodUID] = true
		if f, ok := c.followers[key]; ok {
			// The newest pod (its restart count) to the follower; an
			// older one unread is replaced.
			select {
			case <-f.pod:
			default:
			}
			f.pod <- byUID[t.PodUID]
			continue
		}
		fctx, cancel := context.WithCancel(ctx)
		f := &follower{cancel: cancel, done: make(chan struct{}), pod: make(chan *corev1.Pod, 1)}
		f.pod <- byUID[t.PodUID]
		c.followers[key] = f
		go func() {
			defer close(f.done)
			c.follow(fctx, t, f.pod)
		}()
	}
	for key, f := range c.followers {
		if _, ok := targets[key]; !ok {
			f.cancel()
			<-f.done
			delete(c.followers, key)
		}
	}
	// The pods gone from this node keep no position. Only pods the synced
	// cache shows count as live, so an empty cache removes nothing.
	for _, p := range pods {
		if p.Spec.NodeName == c.opts.Node {
			live[string(p.UID)] = true
		}
	}
	if err := c.pos.prune(live); err != nil && !errors.Is(err, os.ErrNotExist) {
		c.log.Warn("app logs: prune positions", "err", err)
	}
}

func (c *Collector) stopAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, f := range c.followers {
		f.cancel()
		<-f.done
		delete(c.followers, key)
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_ = c.out.close()
}

// restartCount is a container's restart count in the pod's status.
func restartCount(p *corev1.Pod, container string) int32 {
	if p == nil {
		return 0
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == container {
			return s.RestartCount
		}
	}
	return 0
}

// follow copies one container's log, instance after instance, until ctx
// ends.
func (c *Collector) follow(ctx context.Context, t target, pods <-chan *corev1.Pod) {
	log := c.log.With("pod", t.Namespace+"/"+t.Pod, "container", t.Container)
	pos, err := c.startPosition(t)
	if err != nil {
		log.Error("app logs: position unreadable; not collecting this container", "err", err)
		return
	}
	log.Info("app logs: following", "app", t.App, "from", pos.Time, "restarts", pos.RestartCount)
	var pod *corev1.Pod
	backoff := c.opts.RetryMin
	// unverifiedSince is when the kubelet's log first failed to hold the
	// line the position ends at, with no restart in the pod's status yet.
	var unverifiedSince time.Time
	for {
		// The newest pod the watch showed.
		select {
		case pod = <-pods:
		default:
		}
		if now := restartCount(pod, t.Container); now > pos.RestartCount {
			unverifiedSince = time.Time{}
			// The container restarted: the rest of the instance that
			// ended is its previous log, the whole of it when none of
			// its lines was read (it logged and ended while this agent
			// was away, or before its first stream sent anything).
			if now > pos.RestartCount+1 {
				if !pos.Time.IsZero() || pos.AtTime > 0 {
					log.Warn("app logs: instances between were never read (the kubelet keeps only the previous one)", "from", pos.RestartCount, "to", now)
				}
				pos = Position{PodUID: t.PodUID, Pod: t.Pod, Namespace: t.Namespace, Container: t.Container, RestartCount: now - 1}
			}
			if err := c.copyStream(ctx, t, &pos, streams.LogOptions{Previous: true, Timestamps: true, SinceTime: pos.SinceTime()}, nil); err != nil && ctx.Err() == nil {
				log.Warn("app logs: the previous instance's log", "err", err)
			}
			pos = Position{PodUID: t.PodUID, Pod: t.Pod, Namespace: t.Namespace, Container: t.Container, RestartCount: now}
			if err := c.savePosition(pos); err != nil {
				log.Error("app logs: save position", "err", err)
			}
		}
		// The stream must go on from the position's line: the kubelet
		// serves the container's current instance, which may be a newer
		// one than the pod's status shows yet (a kubelet reports a start
		// after it). Past a grace, a log that does not hold it is taken
		// as it is (the kubelet rotated the file away).
		guard := &instanceGuard{pods: pods, pod: &pod, verify: unverifiedSince.IsZero() || time.Since(unverifiedSince) < restartReportGrace}
		if !guard.verify {
			log.Warn("app logs: the kubelet's log does not hold the last line written and the pod reports no restart; reading on from what it holds (lines between may be lost)", "since", pos.Time, "restarts", pos.RestartCount)
		}
		resumedFrom := pos.Time
		err := c.copyStream(ctx, t, &pos, streams.LogOptions{Follow: true, Timestamps: true, SinceTime: pos.SinceTime()}, guard)
		if ctx.Err() != nil {
			return
		}
		notResumed := errors.Is(err, errNotResumed)
		unverifiedSince = nextUnverifiedSince(unverifiedSince, time.Now(), notResumed, guard, pos.Time.After(resumedFrom))
		if notResumed {
			log.Debug("app logs: the kubelet's log is not the instance written last; waiting for the pod to report the restart", "since", pos.Time, "restarts", pos.RestartCount)
			err = nil
		}
		if err != nil {
			if apierrors.IsNotFound(err) {
				log.Debug("app logs: stream", "err", err)
			} else {
				log.Warn("app logs: stream", "err", err)
			}
		} else {
			backoff = c.opts.RetryMin // it ran: the container stopped
		}
		select {
		case <-ctx.Done():
			return
		case pod = <-pods:
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, c.opts.RetryMax)
	}
}

// startPosition is the saved position of a container, moved on past what
// the current file shows was written after it.
func (c *Collector) startPosition(t target) (Position, error) {
	saved, ok, err := c.pos.load(t.PodUID, t.Container)
	if err != nil {
		return Position{}, err
	}
	if !ok {
		saved = Position{PodUID: t.PodUID, Pod: t.Pod, Namespace: t.Namespace, Container: t.Container}
	}
	if w, ok := c.written[saved.key()]; ok {
		saved = later(saved, w)
	}
	saved.Namespace = t.Namespace
	return saved, nil
}

func (c *Collector) savePosition(p Position) error { return c.pos.save(p) }

// copyStream writes one stream's new lines out (copyLines).
func (c *Collector) copyStream(ctx context.Context, t target, pos *Position, o streams.LogOptions, guard *instanceGuard) error {
	stream, err := streams.OpenLogStream(ctx, c.client, t.LogTarget, o)
	if err != nil {
		return err
	}
	defer stream.Close()
	return c.copyLines(ctx, stream, t, pos, flushInterval, guard)
}

// nextUnverifiedSince is when the kubelet's log first failed to hold the
// position's last line, after a follow: set at the first stream that did
// not go on from it (notResumed), kept while none does; cleared once a
// stream held that line (guard.verified) or, past the grace, wrote lines
// of the log as the kubelet holds it (moved): the position's last line is
// then in the current log again, and the next stream (a reopen after an
// API blip, a restart the pod reports late) is checked against it.
func nextUnverifiedSince(since, now time.Time, notResumed bool, guard *instanceGuard, moved bool) time.Time {
	switch {
	case notResumed:
		if since.IsZero() {
			return now
		}
		return since
	case guard.verified, !guard.verify && moved:
		return time.Time{}
	}
	return since
}

// restartReportGrace is how long a follow that does not go on from the
// position waits for the pod's status to report the restart that
// explains it, before the log is taken as the kubelet holds it.
const restartReportGrace = 30 * time.Second

// errNotResumed: the stream passed the position's time without the line
// the position ends at. A kubelet's log of one container instance holds
// every line the instance wrote (until it rotates the file), so the
// stream is of another instance: the container restarted, and the pod's
// status does not say so yet.
var errNotResumed = errors.New("the log does not go on from the position")

// instanceGuard keeps a follow to the container instance its position is
// in: the stream ends once the pod reports a restart (the rest of the
// instance is its previous log), and, with verify, a stream that passes
// the position's time without holding its last line is left unwritten
// (errNotResumed). A line of the new instance would otherwise be written
// as the old one's, moving the position past the old instance's unread
// end, and be written again from the new instance's start.
type instanceGuard struct {
	pods <-chan *corev1.Pod
	// pod is the newest pod the watch showed, kept up to date.
	pod    **corev1.Pod
	verify bool
	// verified: the stream held the position's last line.
	verified bool
}

// resumes says whether a line stamped ts is still consistent with a
// stream that goes on from resumeAt (the position's time as the stream
// opened): false once it passes resumeAt before a line at resumeAt.
func (g *instanceGuard) resumes(ts, resumeAt time.Time) bool {
	if g == nil || !g.verify || g.verified || resumeAt.IsZero() {
		return true
	}
	switch {
	case ts.Equal(resumeAt):
		g.verified = true
	case ts.After(resumeAt):
		return false
	}
	return true
}

// flushInterval is how often a stream's new lines are written and synced,
// then its position saved. A chatty app's lines come one at a time: a
// sync (and a position file) per line cost about 0.3 s of CPU per app and
// minute, and a flash write each on the device. A crash loses nothing:
// what was read but not saved is read again from the position.
const flushInterval = time.Second

// maxBatch is the most a batch holds before it is written out at once.
const maxBatch = 256 << 10

// copyLines writes the stream's lines out in batches: what came within
// every (or maxBatch of it), written and synced, then the position saved;
// at the stream's end (or ctx's) what is pending is written first.
func (c *Collector) copyLines(ctx context.Context, stream io.Reader, t target, pos *Position, every time.Duration, guard *instanceGuard) error {
	resumeAt := pos.Time
	var pods <-chan *corev1.Pod
	if guard != nil {
		pods = guard.pods
	}
	lines := make(chan string, 256)
	readErr := make(chan error, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		defer close(lines)
		// Each line bounded, the rest of a longer one dropped and said: an
		// app printing an endless line or binary must not grow the agent.
		r := streams.NewLogLineReader(stream, streams.MaxLogLineBytes)
		for {
			line, err := r.Next()
			// A line cut off by the stream's end is read again from the
			// position next time.
			if line.Complete {
				select {
				case lines <- line.String():
				case <-stop:
					return
				}
			}
			if err != nil {
				readErr <- err
				return
			}
		}
	}()
	var batch bytes.Buffer
	enc := json.NewEncoder(&batch)
	enc.SetEscapeHTML(false)
	seenAtTime := 0
	pending := false
	flush := func() error {
		if !pending {
			return nil
		}
		c.writeMu.Lock()
		err := c.out.write(batch.Bytes())
		c.writeMu.Unlock()
		if err != nil {
			return fmt.Errorf("write %s: %w", c.opts.Dir, err)
		}
		batch.Reset()
		pending = false
		return c.savePosition(*pos)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				if err := flush(); err != nil {
					return err
				}
				if err := <-readErr; !errors.Is(err, io.EOF) {
					return err
				}
				return nil
			}
			ts, text, ok := splitTimestamp(line)
			if !ok {
				continue
			}
			if !guard.resumes(ts, resumeAt) {
				return errors.Join(flush(), errNotResumed)
			}
			if !pos.Admit(ts, &seenAtTime) {
				continue
			}
			if err := enc.Encode(Record{AppUUID: t.AppUUID, AppName: t.App, Container: t.Container, Time: ts, Line: text,
				Pod: t.Pod, PodUID: t.PodUID, Restarts: pos.RestartCount}); err != nil {
				return err
			}
			pending = true
			if batch.Len() > maxBatch {
				if err := flush(); err != nil {
					return err
				}
			}
		case <-tick.C:
			if err := flush(); err != nil {
				return err
			}
		case p := <-pods:
			*guard.pod = p
			if restartCount(p, t.Container) > pos.RestartCount {
				// The instance ended: what it wrote after what was read
				// is in its previous log.
				return flush()
			}
		case <-ctx.Done():
			// The stream's close ends the reader; what was read is kept.
			return errors.Join(flush(), ctx.Err())
		}
	}
}

// splitTimestamp splits a line of a log read with timestamps=true.
func splitTimestamp(line string) (time.Time, string, bool) {
	stamp, text, ok := strings.Cut(line, " ")
	if !ok {
		stamp = line
	}
	ts, err := time.Parse(time.RFC3339Nano, stamp)
	if err != nil {
		return time.Time{}, "", false
	}
	return ts, strings.TrimSuffix(text, "\r"), true
}
