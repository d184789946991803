package agent

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

//go:embed repl.py
var replScript string

const (
	// interruptGrace is how long a cell may take to stop after SIGINT
	// before the interpreter is killed and replaced.
	interruptGrace = 2 * time.Second
	// maxPyMessage bounds one message from the interpreter (it is the
	// code, trusted no more than the code): repl.py's largest, a result
	// with 3 MiB of PNG (4 MiB of base64) and two 256 Ki-character texts,
	// stays below it. Larger gets the interpreter killed.
	maxPyMessage = 8 << 20
	// pyMsgBuffer is how many decoded messages may wait for the cell:
	// with maxPyMessage it bounds what the interpreter makes the agent hold.
	pyMsgBuffer = 4
	// maxArtifactBytes bounds the artifacts of one cell so the result fits a frame.
	maxArtifactBytes = 4 << 20
)

// pyREPL is the agent's one persistent Python interpreter, started lazily
// and shared by all connections. Cells run one at a time.
type pyREPL struct {
	python string
	env    []string
	dir    string
	user   *User // who the interpreter runs as (ServerOptions.CodeUser)
	log    *slog.Logger

	sem    chan struct{} // one cell at a time; a channel so waiting honours ctx
	mu     sync.Mutex    // guards proc for close
	proc   *pyProc
	lost   bool // the interpreter died: report Restarted on the next result
	closed bool
	// warm is set while the interpreter was started by warmUp and has run
	// no cell: an exec kills it (dropWarm), so that a sandbox whose REPL
	// was never used looks as if it had never started one.
	warm bool
}

// warmUp starts the interpreter ahead of the first cell (the pool's
// sandboxes, for a session that may take one). No-op when it runs.
func (p *pyREPL) warmUp() error {
	select {
	case p.sem <- struct{}{}:
	default:
		return nil // a cell runs: the interpreter is there
	}
	defer func() { <-p.sem }()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("repl: agent is shutting down")
	}
	if p.proc != nil {
		return nil
	}
	pp, err := p.start()
	if err != nil {
		return err
	}
	p.proc, p.warm = pp, true
	return nil
}

// dropWarm kills an interpreter that warmUp started and no cell used.
func (p *pyREPL) dropWarm() {
	p.mu.Lock()
	if !p.warm || p.proc == nil {
		p.mu.Unlock()
		return
	}
	pp := p.proc
	p.proc, p.warm = nil, false
	p.mu.Unlock()
	pp.stop()
}

// pyProc is one running interpreter.
type pyProc struct {
	cmd    *exec.Cmd
	req    *os.File      // → python fd 3
	msgs   chan pyMsg    // ← python fd 4, closed at EOF or garbage
	exited chan struct{} // closed after Wait
	state  *os.ProcessState

	// abandon is closed when nobody will read msgs any more, so the
	// reader does not block forever on a killed interpreter's last words.
	abandon     chan struct{}
	abandonOnce sync.Once
	// inCell is set while a cell runs; messages outside a cell (from
	// the code's own threads) are dropped, like raw output.
	inCell atomic.Bool
	cells  uint64 // id of the last cell sent; only run touches it (one cell at a time)

	sinkMu sync.Mutex
	sink   func(stream string, b []byte) // where fd 1/2 output goes during a cell
}

// pyMsg is a message from the interpreter: output ("o") or result ("r").
type pyMsg struct {
	T           string     `json:"t"`
	ID          uint64     `json:"id"` // "r": the cell it answers
	S           string     `json:"s"`
	D           string     `json:"d"`
	OK          bool       `json:"ok"`
	Value       string     `json:"value"`
	Error       string     `json:"error"`
	Interrupted bool       `json:"interrupted"`
	ExitCode    int        `json:"exit_code"`
	Artifacts   []Artifact `json:"artifacts"`
}

func newPyREPL(python string, env []string, dir string, user *User, log *slog.Logger) *pyREPL {
	e := make([]string, 0, len(env)+2)
	e = append(append(e, env...), "MPLBACKEND=Agg")
	if !hasEnv(env, "MPLCONFIGDIR") { // the sandbox user has no writable home
		e = append(e, "MPLCONFIGDIR="+filepath.Join(os.TempDir(), "sandboxd-matplotlib"))
	}
	return &pyREPL{python: python, env: e, dir: dir, user: user, log: log, sem: make(chan struct{}, 1)}
}

func (p *pyREPL) start() (*pyProc, error) {
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	respR, respW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		respR.Close()
		respW.Close()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		respR.Close()
		respW.Close()
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd := exec.Command(p.python, "-u", "-I", "-c", replScript)
	cmd.Env, cmd.Dir = p.env, p.dir
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.ExtraFiles = []*os.File{reqR, respW} // fds 3 and 4
	cmd.SysProcAttr = p.user.sysProcAttr()
	started, err := p.user.wrap(cmd)
	if err == nil {
		err = procs.start(cmd)
		started()
	}
	reqR.Close()
	respW.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		reqW.Close()
		respR.Close()
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("repl: start %s: %w", p.python, err)
	}
	pp := &pyProc{cmd: cmd, req: reqW, msgs: make(chan pyMsg, pyMsgBuffer), exited: make(chan struct{}), abandon: make(chan struct{})}
	go pp.readMsgs(respR)
	go pp.readRaw(outR, "stdout")
	go pp.readRaw(errR, "stderr")
	go func() {
		cmd.Wait()
		procs.done(cmd.Process.Pid)
		pp.state = cmd.ProcessState
		reqW.Close()
		close(pp.exited)
	}()
	return pp, nil
}

// readMsgs passes the interpreter's messages to the running cell until
// EOF; a message over maxPyMessage or not JSON gets the interpreter killed.
func (pp *pyProc) readMsgs(r *os.File) {
	defer close(pp.msgs)
	defer r.Close()
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		m, err := readPyMsg(br)
		if err != nil {
			if errors.Is(err, errPyProtocol) {
				pp.kill()
			}
			return
		}
		if !pp.inCell.Load() {
			continue
		}
		select {
		case pp.msgs <- m:
		case <-pp.abandon:
			return
		}
	}
}

// readRaw forwards what the interpreter (or a subprocess) writes to fd 1
// or 2 directly, bypassing sys.stdout/sys.stderr, to the running cell;
// between cells it is dropped.
func (pp *pyProc) readRaw(r *os.File, stream string) {
	defer r.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			pp.sinkMu.Lock()
			if pp.sink != nil {
				pp.sink(stream, buf[:n])
			}
			pp.sinkMu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// drain drops messages that reached the channel before the cell began.
func (pp *pyProc) drain() {
	for {
		select {
		case _, ok := <-pp.msgs:
			if !ok {
				return
			}
		default:
			return
		}
	}
}

func (pp *pyProc) setSink(f func(string, []byte)) {
	pp.sinkMu.Lock()
	pp.sink = f
	pp.sinkMu.Unlock()
}

func (pp *pyProc) kill() { syscall.Kill(-pp.cmd.Process.Pid, syscall.SIGKILL) }

// stop kills the interpreter for good and waits for it.
func (pp *pyProc) stop() {
	pp.abandonOnce.Do(func() { close(pp.abandon) })
	pp.kill()
	<-pp.exited
}

// send writes a request; an interpreter that does not take it within
// timeout (a thread holding the GIL, a wedged process) counts as dead.
func (pp *pyProc) send(code string, id uint64, timeout time.Duration) error {
	body, err := json.Marshal(struct {
		Code string `json:"code"`
		ID   uint64 `json:"id"`
	}{code, id})
	if err != nil {
		return err
	}
	b := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(b, uint32(len(body)))
	copy(b[4:], body)
	pp.req.SetWriteDeadline(time.Now().Add(timeout))
	_, err = pp.req.Write(b)
	return err
}

func (p *pyREPL) close() {
	p.mu.Lock()
	p.closed = true
	pp := p.proc
	p.proc = nil
	p.mu.Unlock()
	if pp != nil {
		pp.stop()
	}
}

// run executes one cell. Timeout or ctx end sends SIGINT; a cell that does
// not stop within interruptGrace gets the interpreter killed (Restarted).
func (p *pyREPL) run(ctx context.Context, req REPLRequest, emit func(string, []byte)) (REPLResult, error) {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return REPLResult{}, ctx.Err()
	}
	defer func() { <-p.sem }()
	start := time.Now()

	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return REPLResult{}, errors.New("repl: agent is shutting down")
	}
	pp := p.proc
	p.warm = false
	restarted := false
	if pp == nil {
		var err error
		if pp, err = p.start(); err != nil {
			p.mu.Unlock()
			return REPLResult{}, err
		}
		p.proc = pp
		restarted, p.lost = p.lost, false
	}
	p.mu.Unlock()

	limit := clampLimit(req.OutputLimit)
	out, errb := newCapBuf(limit), newCapBuf(limit)
	var streamed [2]int64
	var outMu sync.Mutex // the raw fd reader and this goroutine both write
	write := func(stream string, b []byte) {
		outMu.Lock()
		defer outMu.Unlock()
		i, buf := 0, out
		if stream == "stderr" {
			i, buf = 1, errb
		}
		buf.Write(b)
		if emit != nil && streamed[i] < limit {
			k := min(int64(len(b)), limit-streamed[i])
			streamed[i] += k
			emit(stream, b[:k])
		}
	}
	pp.setSink(write)
	defer pp.setSink(nil)

	res := REPLResult{Restarted: restarted}
	finish := func() REPLResult {
		outMu.Lock()
		o, _ := out.Bytes() // a truncation marker is in the text
		e, _ := errb.Bytes()
		outMu.Unlock()
		res.Stdout, res.Stderr = string(o), string(e)
		res.Duration = time.Since(start)
		fitREPLResult(&res)
		return res
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = DefaultREPLTimeout
	}
	pp.inCell.Store(true)
	defer pp.inCell.Store(false)
	pp.drain()
	pp.cells++
	cell := pp.cells
	if err := pp.send(req.Code, cell, timeout); err != nil {
		pp.stop()
		p.died(pp)
		res.Error = "python interpreter is gone (" + err.Error() + "); the next call starts a fresh one, globals lost"
		return finish(), nil
	}

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	done, expired := ctx.Done(), timer.C
	var grace <-chan time.Time
	var timedOut bool
	interrupt := func() {
		syscall.Kill(pp.cmd.Process.Pid, syscall.SIGINT)
		g := time.NewTimer(interruptGrace)
		grace = g.C
		done, expired = nil, nil
	}
	for {
		select {
		case m, ok := <-pp.msgs:
			if !ok {
				// EOF or garbage: the interpreter died during the cell.
				pp.stop()
				p.died(pp)
				res.Error = fmt.Sprintf("python interpreter exited (%v) during the cell; the next call starts a fresh one, globals lost", pp.state)
				return finish(), nil
			}
			switch m.T {
			case "o":
				if m.S == "stdout" || m.S == "stderr" {
					write(m.S, []byte(m.D))
				}
			case "r":
				if m.ID != cell {
					continue // an earlier cell's, or forged by the code's own thread
				}
				m.result(&res, func(note string) { write("stderr", []byte(note)) })
				res.TimedOut = timedOut && m.Interrupted
				return finish(), nil
			}
		case <-expired:
			timedOut = true
			interrupt()
		case <-done:
			interrupt()
		case <-grace:
			pp.stop()
			p.mu.Lock()
			if p.proc == pp {
				p.proc = nil
			}
			p.mu.Unlock()
			res.OK, res.Restarted, res.TimedOut = false, true, timedOut
			res.Error = fmt.Sprintf("cell did not stop within %v of SIGINT; interpreter killed and restarted, globals lost", interruptGrace)
			return finish(), nil
		}
	}
}

// died forgets a dead interpreter; the next call starts a fresh one and
// reports Restarted.
func (p *pyREPL) died(pp *pyProc) {
	p.mu.Lock()
	if p.proc == pp {
		p.proc = nil
		p.lost = true
	}
	p.mu.Unlock()
}

func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			return true
		}
	}
	return false
}
