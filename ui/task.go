package ui

import (
	"context"

	tea "github.com/charmbracelet/bubbletea"
)

// Task runs slow work (an action against the cluster) off the UI goroutine
// and reports back as messages: TaskProgressMsg per step, then TaskDoneMsg.
// Update never waits on it; Cancel stops it through its context.
type Task struct {
	ID     int
	cancel context.CancelFunc
	msgs   chan tea.Msg
}

// TaskProgressMsg is one line of a task's progress.
type TaskProgressMsg struct {
	ID   int
	Line string
}

// TaskDoneMsg ends a task; Err is nil on success.
type TaskDoneMsg struct {
	ID  int
	Err error
}

// StartTask runs fn and returns the task and the command that delivers its
// first message; each delivered message must be followed by t.Next().
func StartTask(id int, fn func(ctx context.Context, progress func(string)) error) (*Task, tea.Cmd) {
	ctx, cancel := context.WithCancel(context.Background())
	t := &Task{ID: id, cancel: cancel, msgs: make(chan tea.Msg, 64)}
	go func() {
		err := fn(ctx, func(line string) {
			select {
			case t.msgs <- TaskProgressMsg{ID: id, Line: line}:
			case <-ctx.Done():
			}
		})
		t.msgs <- TaskDoneMsg{ID: id, Err: err}
		close(t.msgs)
	}()
	return t, t.Next()
}

// Next waits for the task's next message.
func (t *Task) Next() tea.Cmd {
	return func() tea.Msg {
		msg, ok := <-t.msgs
		if !ok {
			return nil
		}
		return msg
	}
}

// Cancel asks the task to stop; its TaskDoneMsg still arrives.
func (t *Task) Cancel() { t.cancel() }
