//go:build !unix

package main

import (
	"os"
	"syscall"
)

// Outside Unix the command gets no process group of its own and only an
// interrupt (Windows cannot deliver SIGTERM); a lost lock kills it.

var forwarded = []os.Signal{os.Interrupt}

// No stop signals: stopSignal and contSignal are never sent.
var (
	stopSignals            []os.Signal
	stopSignal, contSignal os.Signal = os.Interrupt, os.Interrupt
)

var terminate, killSignal os.Signal = os.Kill, os.Kill

func suspendSelf(<-chan os.Signal) {}

func groupAttr() *syscall.SysProcAttr { return nil }

func signalGroup(p *os.Process, sig os.Signal) error { return p.Signal(sig) }

func processStatus(ps *os.ProcessState) int { return ps.ExitCode() }

func signum(os.Signal) int { return 2 }
