/*
 * Output forwarding: each rank's stdout and stderr arrive on pipes and go to
 * ferryrun's own stdout and stderr, in whole lines, so that lines of
 * different ranks never mix; with --tag-output each line also carries its
 * rank's "[R] " prefix. An unfinished line is held until its newline comes,
 * the stream ends, it grows past FR_LINE_MAX, or it has waited FR_STALE_MS
 * (a prompt must show up even without a newline). The bytes are passed on
 * unchanged, except that a tagged line cut short gets a newline so that the
 * next one starts with its prefix.
 *
 * Input goes the other way only for a remote rank 0 whose agent's standard
 * input first carried the job's secret (fr_hosts.c): ferryrun's own
 * standard input follows the secret there, as it would reach the agent
 * directly otherwise.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ferryrun.h"

void fr_stream_init(fr_stream_t *s, int fd, int out_fd)
{
    memset(s, 0, sizeof(*s));
    s->fd = fd;
    s->out_fd = out_fd;
}

/* Writes everything, waiting when the descriptor is non-blocking and full.
 * A reader that went away (EPIPE, SIGPIPE being ignored) or another error
 * marks the output broken, and from then on it is dropped: the job itself
 * goes on. */
static void fr_write_out(fr_job_t *job, int out_fd, const char *data, size_t len)
{
    bool *broken = out_fd == STDOUT_FILENO ? &job->stdout_broken : &job->stderr_broken;
    while (len > 0 && !*broken) {
        ssize_t n = write(out_fd, data, len);
        if (n > 0) {
            data += n;
            len -= (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pfd = {.fd = out_fd, .events = POLLOUT};
            (void)poll(&pfd, 1, 1000);
        } else {
            *broken = true;
        }
    }
}

/* Writes the held partial line and data as whole lines, prefixed with the
 * rank under --tag-output; keeps an unfinished last line for later, unless
 * flush is set or it has grown past FR_LINE_MAX. */
static void fr_write_lines(fr_job_t *job, fr_rank_t *r, fr_stream_t *s, const char *data,
                           size_t len, bool flush)
{
    char prefix[32];
    int plen = 0;
    if (job->opt.tag_output) {
        plen = snprintf(prefix, sizeof(prefix), "[%d] ", r->rank);
    }
    /* The held partial line and the new data, as one sequence. */
    size_t total = s->partial_len + len;
    char *all = malloc(total + 1);
    /* Worst case every byte is a newline and every line gets a prefix. */
    char *out = malloc(total + (total + 1) * (size_t)plen + 2);
    if (all == NULL || out == NULL) {
        free(all);
        free(out);
        /* Out of memory: pass the bytes on untagged rather than lose them. */
        fr_write_out(job, s->out_fd, s->partial, s->partial_len);
        fr_write_out(job, s->out_fd, data, len);
        s->partial_len = 0;
        return;
    }
    if (s->partial_len > 0) {
        memcpy(all, s->partial, s->partial_len);
    }
    if (len > 0) {
        memcpy(all + s->partial_len, data, len);
    }
    size_t o = 0;
    size_t start = 0;
    for (size_t i = 0; i < total; i++) {
        if (all[i] == '\n') {
            memcpy(out + o, prefix, (size_t)plen);
            o += (size_t)plen;
            memcpy(out + o, all + start, i + 1 - start);
            o += i + 1 - start;
            start = i + 1;
        }
    }
    size_t rest = total - start;
    if (rest > 0 && (flush || rest >= FR_LINE_MAX)) {
        memcpy(out + o, prefix, (size_t)plen);
        o += (size_t)plen;
        memcpy(out + o, all + start, rest);
        o += rest;
        if (job->opt.tag_output) {
            out[o++] = '\n';
        }
        rest = 0;
        start = total;
    }
    fr_write_out(job, s->out_fd, out, o);
    free(out);
    free(s->partial);
    s->partial = NULL;
    s->partial_len = 0;
    if (start > 0 || rest == 0) {
        /* Something was written: a partial line left now is a new one. */
        s->partial_ms = 0;
    }
    if (rest > 0) {
        s->partial = malloc(rest);
        if (s->partial != NULL) {
            memcpy(s->partial, all + start, rest);
            s->partial_len = rest;
            if (s->partial_ms == 0) {
                s->partial_ms = fr_now_ms();
            }
        } else {
            fr_write_out(job, s->out_fd, all + start, rest);
        }
    }
    free(all);
}

void fr_stream_close(fr_job_t *job, fr_rank_t *r, fr_stream_t *s)
{
    if (s->fd < 0) {
        return;
    }
    if (s->partial_len > 0) {
        fr_write_lines(job, r, s, NULL, 0, true);
    }
    free(s->partial);
    s->partial = NULL;
    s->partial_len = 0;
    close(s->fd);
    s->fd = -1;
}

void fr_stream_readable(fr_job_t *job, fr_rank_t *r, fr_stream_t *s)
{
    char buf[65536];
    /* A few reads per wakeup keep one chatty rank from starving the PMI
     * service of the others. */
    for (int round = 0; round < 4 && s->fd >= 0; round++) {
        ssize_t n = read(s->fd, buf, sizeof(buf));
        if (n > 0) {
            fr_write_lines(job, r, s, buf, (size_t)n, false);
            continue;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        }
        /* End of file, or an error that ends the stream all the same. */
        fr_stream_close(job, r, s);
    }
}

long long fr_stream_flush_stale(fr_job_t *job, fr_rank_t *r, fr_stream_t *s, long long now)
{
    if (s->partial_len == 0) {
        return 0;
    }
    if (now - s->partial_ms >= FR_STALE_MS) {
        fr_write_lines(job, r, s, NULL, 0, true);
        return 0;
    }
    return s->partial_ms + FR_STALE_MS;
}

void fr_stdin_close(fr_stdin_t *in)
{
    if (in->out_fd >= 0) {
        close(in->out_fd);
    }
    in->out_fd = -1;
    in->len = 0;
    in->off = 0;
}

void fr_stdin_readable(fr_stdin_t *in)
{
    if (in->out_fd < 0 || in->len > in->off) {
        return;
    }
    ssize_t n = read(STDIN_FILENO, in->buf, sizeof(in->buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) {
        return;
    }
    if (n <= 0) {
        /* The end of the input is the end of the agent's, too. */
        in->in_eof = true;
        fr_stdin_close(in);
        return;
    }
    in->len = (size_t)n;
    in->off = 0;
    fr_stdin_writable(in);
}

void fr_stdin_writable(fr_stdin_t *in)
{
    while (in->out_fd >= 0 && in->off < in->len) {
        ssize_t n = write(in->out_fd, in->buf + in->off, in->len - in->off);
        if (n > 0) {
            in->off += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        } else {
            /* The agent stopped reading (it ended): the input has nowhere
             * to go. */
            fr_stdin_close(in);
            return;
        }
    }
    in->len = 0;
    in->off = 0;
}
