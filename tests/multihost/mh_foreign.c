/*
 * A process outside the job that tries to talk to a rank's tcp listener:
 *   mh_foreign ADDR PORT
 * 1. a well-formed OPEN (right magic and version, claiming rank 1 and
 *    wanting rank 0) of a job it made up, then a data frame: the rank must
 *    close the connection without answering or accepting the frame;
 * 2. bytes that are no hello at all;
 * 3. a connection that says nothing and closes.
 * It prints what happened to each and exits 0 when the rank gave nothing
 * away (the job itself checks that nothing was delivered), 1 otherwise.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "btl/tcp/tcp.h"

static int dial(const char *addr, int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) {
        fprintf(stderr, "mh_foreign: bad address %s\n", addr);
        exit(2);
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        fprintf(stderr, "mh_foreign: connect %s:%d: %s\n", addr, port, strerror(errno));
        exit(2);
    }
    return fd;
}

/* Reads what the rank sends within 3 s; returns the byte count, and sets
 * *closed when it closed the connection. */
static size_t drain(int fd, unsigned char *buf, size_t cap, int *closed)
{
    size_t have = 0;
    *closed = 0;
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 3000) <= 0)
            return have;
        ssize_t n = read(fd, buf + have, cap - have);
        if (n <= 0) {
            *closed = 1;
            return have;
        }
        have += (size_t)n;
        if (have == cap)
            return have;
    }
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: mh_foreign ADDR PORT\n");
        return 2;
    }
    int port = atoi(argv[2]);
    int bad = 0;
    unsigned char buf[4096];
    int closed;

    /* 1: an OPEN of a made-up job, then a frame. */
    int fd = dial(argv[1], port);
    tcp_hello_t h;
    tcp_hello_fill(&h, TCP_HELLO_OPEN, 1, 0, 2, tcp_job_hash("a-job-made-up"));
    for (size_t i = 0; i < sizeof(h.nonce); i++)
        h.nonce[i] = (uint8_t)(0xa5 ^ i);
    (void)send(fd, &h, sizeof(h), MSG_NOSIGNAL);
    tcp_hdr_t hdr = {.len = 8, .type = TCP_T_DATA, .tag = 40};
    unsigned char frame[sizeof(hdr) + 8];
    memcpy(frame, &hdr, sizeof(hdr));
    memset(frame + sizeof(hdr), 0x42, 8);
    (void)send(fd, frame, sizeof(frame), MSG_NOSIGNAL);
    size_t n = drain(fd, buf, sizeof(buf), &closed);
    printf("mh_foreign: hello of another job: %zu bytes back, %s\n", n,
           closed ? "connection closed" : "connection left open");
    if (n > 0) {
        printf("mh_foreign: the rank answered a hello of another job\n");
        bad = 1;
    }
    if (!closed) {
        printf("mh_foreign: the rank kept a connection of another job\n");
        bad = 1;
    }
    close(fd);

    /* 2: garbage. */
    fd = dial(argv[1], port);
    memset(buf, 0xff, 512);
    (void)send(fd, buf, 512, MSG_NOSIGNAL);
    n = drain(fd, buf, sizeof(buf), &closed);
    printf("mh_foreign: garbage: %zu bytes back, %s\n", n,
           closed ? "connection closed" : "connection left open");
    if (n > 0) {
        printf("mh_foreign: the rank answered garbage\n");
        bad = 1;
    }
    close(fd);

    /* 3: silence. */
    fd = dial(argv[1], port);
    close(fd);
    printf("mh_foreign: %s\n", bad ? "the rank gave something away" : "nothing given away");
    return bad;
}
