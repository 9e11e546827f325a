// Command ringlimit is the command line of a ringlimit cluster: check one key,
// list members, load a cluster (bench), replay an access log through it
// (replay), or run the whole thing in one process (demo).
//
//	go run ./cmd/ringlimit demo
//	ringlimit check --addr 127.0.0.1:8081 user:42
//	ringlimit members --addr 127.0.0.1:8080
//	ringlimit bench --duration 10s --dist zipf
//	ringlimit replay --addr 127.0.0.1:8081 --algorithm fixed_window --limit 20
//
// Run "ringlimit <command> --help" for the flags. Exit codes: 0 success, 1 a
// negative answer (denied, mismatch, bound exceeded), 2 an error.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/cli"
	"github.com/ringlimit/ringlimit/cmd/ringlimit/internal/inprocess"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Execute(ctx, os.Args[1:], os.Stdout, os.Stderr, cli.Deps{InProcess: inprocess.Start})
	stop()
	os.Exit(code)
}
