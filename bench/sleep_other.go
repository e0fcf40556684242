//go:build !linux

package main

import "time"

func lockThreadForSleep() {}

// preciseSleep is time.Sleep outside Linux: latency cells there wait at least
// a millisecond per chunk when the process is otherwise idle.
func preciseSleep(d time.Duration) { time.Sleep(d) }
