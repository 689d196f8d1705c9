/*
 * Helpers for the loops that wait on progress (rt/progress.h).
 */
#include "rt/progress.h"

#include <sched.h>

void rt_idle(unsigned *idle)
{
    /* A short spin keeps latency when the peer answers at once. */
    if (++*idle >= 64) {
        sched_yield();
        *idle = 0;
    }
}
