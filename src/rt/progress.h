/*
 * Helpers for the loops that wait on progress.
 */
#ifndef RT_PROGRESS_H
#define RT_PROGRESS_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds on CLOCK_MONOTONIC: for deadlines and timing. */
static inline uint64_t rt_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The same on CLOCK_MONOTONIC_COARSE (a few ms of resolution, no system
 * call's cost): for liveness checks on progress paths. */
static inline uint64_t rt_now_coarse_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* For waiting loops: after a run of idle polls, give the core away, so that
 * more ranks than cores still make progress. Reset *idle when work was done. */
void rt_idle(unsigned *idle);

#endif /* RT_PROGRESS_H */
