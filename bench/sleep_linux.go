package main

import (
	"runtime"
	"syscall"
	"time"
)

// lockThreadForSleep gives the calling goroutine its own OS thread for the
// rest of its life, with a 1µs timer slack (the default is 50µs), so that
// preciseSleep wakes close to the time asked. The thread ends with the
// goroutine.
func lockThreadForSleep() {
	runtime.LockOSThread()
	const prSetTimerslack = 29
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerslack, 1000, 0)
}

// preciseSleep sleeps d in nanosleep, not on a Go timer: when every goroutine
// of the process waits, the runtime sleeps in epoll with a whole millisecond
// as its shortest timeout, so time.Sleep(100µs) takes about 1.1ms.
func preciseSleep(d time.Duration) {
	if d <= 0 {
		return
	}
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}
