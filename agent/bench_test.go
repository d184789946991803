package agent

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

// Warm REPL round trip, measured side by side with its parts:
//
//	BenchmarkPing              client → agent → client, no work (protocol cost)
//	BenchmarkPythonPipe        the interpreter alone: raw request/response over its pipes
//	BenchmarkREPLRun           the agent's REPL layer without the socket
//	BenchmarkREPLPrint         the full path a tool call takes
//
// Agent overhead of a cell = REPLPrint - PythonPipe.

func BenchmarkPing(b *testing.B) {
	c, _ := startServer(b, ServerOptions{})
	ctx := context.Background()
	for b.Loop() {
		if err := c.Ping(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkREPLPrint(b *testing.B) {
	needPython(b)
	c, _ := startServer(b, ServerOptions{})
	ctx := context.Background()
	req := REPLRequest{Code: "print(1)"}
	if _, err := c.REPL(ctx, req, nil); err != nil { // start the interpreter
		b.Fatal(err)
	}
	for b.Loop() {
		res, err := c.REPL(ctx, req, nil)
		if err != nil || res.Stdout != "1\n" {
			b.Fatal(res, err)
		}
	}
}

func BenchmarkREPLRun(b *testing.B) {
	needPython(b)
	p := newPyREPL(testPython, nil, "/", nil, slog.New(slog.DiscardHandler))
	defer p.close()
	ctx := context.Background()
	req := REPLRequest{Code: "print(1)"}
	emit := func(string, []byte) {}
	if _, err := p.run(ctx, req, emit); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		res, err := p.run(ctx, req, emit)
		if err != nil || res.Stdout != "1\n" {
			b.Fatal(res, err)
		}
	}
}

func BenchmarkPythonPipe(b *testing.B) {
	needPython(b)
	p := newPyREPL(testPython, nil, "/", nil, slog.New(slog.DiscardHandler))
	defer p.close()
	pp, err := p.start()
	if err != nil {
		b.Fatal(err)
	}
	p.proc = pp
	pp.inCell.Store(true)
	cell := func() {
		pp.cells++
		if err := pp.send("print(1)", pp.cells, time.Minute); err != nil {
			b.Fatal(err)
		}
		for m := range pp.msgs {
			if m.T == "r" {
				return
			}
		}
		b.Fatal("interpreter died")
	}
	cell()
	for b.Loop() {
		cell()
	}
}
