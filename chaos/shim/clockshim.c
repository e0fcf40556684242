// clockshim: an LD_PRELOAD library that shifts and scales CLOCK_REALTIME for
// one process (a redis-server under test), controlled at run time through a
// small mmap'ed file. Built by the chaos suite (clock.go) with
//
//	gcc -O2 -shared -fPIC -o clockshim.so clockshim.c
//
// It calls the kernel with raw syscalls only: no malloc, no dlsym. That is
// what keeps it working under jemalloc (Debian's redis-server), where
// libfaketime recurses into malloc and hangs. The monotonic clocks are left
// alone on purpose: Redis computes key expiry from the wall clock.
//
// Control file (CLOCKSHIM_FILE), little-endian int64s, written in place by
// the test (never truncated: the file is mapped):
//
//	[0] seq        odd while the writer is changing the fields
//	[1] offset_ns  added to the fake time
//	[2] rate_ppm   speed of the fake clock, 1000000 = real speed
//	[3] anchor_ns  real time from which the rate applies
//
// fake = anchor + (real - anchor) * rate + offset
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

// glibc declares gettimeofday's tv nonnull; callers may still pass NULL.
#pragma GCC diagnostic ignored "-Wnonnull-compare"

struct ctl {
	volatile int64_t seq, offset_ns, rate_ppm, anchor_ns;
};

static struct ctl *ctl;
static int state; // 0 not tried, 1 tried

static void load(void) {
	if (__atomic_load_n(&state, __ATOMIC_ACQUIRE))
		return;
	const char *path = getenv("CLOCKSHIM_FILE");
	struct ctl *p = 0;
	if (path) {
		long fd = syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			long m = syscall(SYS_mmap, 0, sizeof(struct ctl), PROT_READ, MAP_SHARED, fd, 0);
			if (m != -1 && m != 0)
				p = (struct ctl *)m;
			syscall(SYS_close, fd);
		}
	}
	__atomic_store_n(&ctl, p, __ATOMIC_RELEASE);
	__atomic_store_n(&state, 1, __ATOMIC_RELEASE);
}

// shift turns a real CLOCK_REALTIME reading (ns) into the fake one.
static int64_t shift(int64_t real) {
	load();
	struct ctl *c = __atomic_load_n(&ctl, __ATOMIC_ACQUIRE);
	if (!c)
		return real;
	for (int i = 0; i < 1000; i++) {
		int64_t s1 = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
		if (s1 & 1)
			continue;
		int64_t off = c->offset_ns, rate = c->rate_ppm, anchor = c->anchor_ns;
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&c->seq, __ATOMIC_ACQUIRE) != s1)
			continue;
		if (rate <= 0)
			rate = 1000000;
		__int128 d = (__int128)(real - anchor) * rate / 1000000;
		return anchor + (int64_t)d + off;
	}
	return real;
}

static int realtime(clockid_t id) {
	return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	long r = syscall(SYS_clock_gettime, id, ts);
	if (r != 0 || !realtime(id))
		return (int)r;
	int64_t ns = shift((int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec);
	ts->tv_sec = ns / 1000000000;
	ts->tv_nsec = ns % 1000000000;
	return 0;
}

int gettimeofday(struct timeval *tv, void *tz) {
	struct timespec ts;
	long r = syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts);
	if (r != 0)
		return (int)r;
	int64_t ns = shift((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec);
	if (tv) {
		tv->tv_sec = ns / 1000000000;
		tv->tv_usec = (ns % 1000000000) / 1000;
	}
	(void)tz;
	return 0;
}

time_t time(time_t *t) {
	struct timespec ts;
	if (syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts) != 0)
		return (time_t)-1;
	time_t s = (time_t)(shift((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec) / 1000000000);
	if (t)
		*t = s;
	return s;
}
