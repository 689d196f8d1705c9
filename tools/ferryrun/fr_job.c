/*
 * The job as a whole: its clock, signalling and ending it, and ferryrun's
 * messages about what others sent it, rate-limited so that a stranger or a
 * rank sending junk costs a few lines and a count, never one line each.
 */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "ferryrun.h"

long long fr_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void fr_signal_ranks(fr_job_t *job, int sig)
{
    for (int i = 0; i < job->opt.np; i++) {
        fr_rank_t *r = &job->ranks[i];
        /* pid 0 is a rank never started: kill(0) would signal our group. */
        if (r->pid > 0 && !r->reaped) {
            (void)kill(r->pid, sig);
        }
    }
}

void fr_job_fail(fr_job_t *job, int exit_code)
{
    if (job->ending) {
        return;
    }
    job->ending = true;
    job->exit_code = exit_code;
    job->term_ms = fr_now_ms();
    fr_signal_ranks(job, SIGTERM);
}

void fr_complain(rt_ratelimit_t *rl, const char *fmt, ...)
{
    unsigned long held = 0;
    if (!rt_ratelimit_allow(rl, fr_now_ms(), &held)) {
        return;
    }
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* One write per line, so that lines do not mix with the ranks'. */
    if (held > 0) {
        fprintf(stderr, "ferryrun: %s (%lu similar messages suppressed)\n", msg, held);
    } else {
        fprintf(stderr, "ferryrun: %s\n", msg);
    }
}

void fr_complain_flush(rt_ratelimit_t *rl, const char *what)
{
    unsigned long held = rt_ratelimit_take(rl);
    if (held > 0) {
        fprintf(stderr, "ferryrun: %lu more %s not shown\n", held, what);
    }
}
