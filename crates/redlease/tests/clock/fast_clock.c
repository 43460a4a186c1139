/* An LD_PRELOAD library that makes a process' wall clock run FAST_CLOCK_RATE times as fast
 * as the real one (from the moment it is loaded), for tests of what a client does when a
 * Redis server's clock runs fast. libfaketime makes redis-server abort; this scales only
 * CLOCK_REALTIME (clock_gettime), gettimeofday and time, which Redis' expiry and TIME read.
 * Built by tests/clock_rate.rs with the system's C compiler. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static int (*real_clock_gettime)(clockid_t, struct timespec *);
static double rate = 1.0;
static long long start_ns = -1;

static long long now_real_ns(void) {
    struct timespec ts;
    if (!real_clock_gettime) {
        real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
    }
    real_clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long scaled_ns(void) {
    long long real = now_real_ns();
    if (start_ns < 0) {
        const char *r = getenv("FAST_CLOCK_RATE");
        rate = r ? atof(r) : 1.0;
        start_ns = real;
    }
    return start_ns + (long long)((double)(real - start_ns) * rate);
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    if (!real_clock_gettime) {
        real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
    }
    if (clock != CLOCK_REALTIME) {
        return real_clock_gettime(clock, ts);
    }
    long long ns = scaled_ns();
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
    return 0;
}

int gettimeofday(struct timeval *tv, void *tz) {
    (void)tz;
    long long ns = scaled_ns();
    tv->tv_sec = ns / 1000000000LL;
    tv->tv_usec = (ns % 1000000000LL) / 1000;
    return 0;
}

time_t time(time_t *out) {
    time_t t = (time_t)(scaled_ns() / 1000000000LL);
    if (out) {
        *out = t;
    }
    return t;
}
