/*
 * ferry tagged messaging: send and receive matched on (context, source,
 * tag), in the manner of MPI's point-to-point layer, over ferry's active
 * messages of any size (ferry.h).
 *
 * Matching. A receive names a context id (exact: libraries keep their
 * traffic apart, as MPI's communicators do), a source rank or
 * FERRY_MSG_ANY_SOURCE, and a tag with a mask: a message with tag t
 * matches when (t & mask) == (tag & mask), so mask FERRY_MSG_TAG_EXACT
 * wants exactly tag and mask 0 (FERRY_MSG_ANY_TAG) takes any tag. Receives
 * are matched in the order they were posted, messages in the order they
 * arrived; two messages from one sender that both match a receive are
 * received in the order sent (no overtaking), whatever their sizes.
 * Messages that arrive before a matching receive wait in an unexpected
 * queue (small ones copied, large ones announced only: their data stays at
 * the sender until a receive takes it).
 *
 * Protocols. A message that fits one fragment of the path with its 16-byte
 * header goes eagerly; a larger one by rendezvous straight into the
 * receive buffer (ferry_am_sizes gives the sizes). A receive buffer
 * shorter than the message gets what fits and the status
 * FERRY_ERR_TRUNCATE; nothing past the buffer is written.
 *
 * Progress. As everywhere in ferry, nothing moves unless the application
 * calls ferry_progress, ferry_msg_progress, or a call that waits (wait,
 * waitany, recv, send, probe). ferry_msg_test and ferry_msg_iprobe progress
 * once.
 *
 * Called from inside a ferry callback (an active-message handler, a
 * completion), where progress does nothing, ferry_msg_send and
 * ferry_msg_recv are FERRY_ERR_BUSY, and so are wait, waitany and probe
 * when they would have to wait; the non-blocking calls work there. A send
 * started there that the transport has no room for is held in ferry's
 * callback queue, as an active message is (ferry.h): a small one copied
 * (its request is complete at once), a large one's announcement only; it
 * leaves with ferry_progress, in order with what is sent to that peer
 * afterwards, and past FERRY_CB_QUEUE_MAX the send is refused with
 * FERRY_ERR_NO_RESOURCE (no request made, nothing sent). A receive posted
 * there is never refused for lack of resources, nor is any answer of the
 * rendezvous it starts lost: ferry queues those per peer, one per message
 * received, bounded by what the peer may have open here (twice
 * FERRY_AM_LARGE_INFLIGHT, see ferry.h; a peer past it is taken as
 * failed).
 *
 * Threading: as the context it was made from.
 */
#ifndef FERRY_MSG_H
#define FERRY_MSG_H

#include <stddef.h>
#include <stdint.h>

#include <ferry/dt.h>
#include <ferry/ferry.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Any source rank. */
#define FERRY_MSG_ANY_SOURCE (-1)
/* Tag masks: every bit must match; no bit need match. */
#define FERRY_MSG_TAG_EXACT UINT64_MAX
#define FERRY_MSG_ANY_TAG ((uint64_t)0)

typedef struct ferry_msg ferry_msg_t;
typedef struct ferry_msg_req ferry_msg_req_t;

/* What a completed receive or a probe reports. */
typedef struct ferry_msg_status {
    int source;       /* the sender's rank */
    uint64_t tag;     /* the message's tag */
    uint32_t context; /* its context id */
    size_t len;       /* the message's length as sent */
    size_t received;  /* bytes written into the buffer: min(len, space) */
    int error;        /* FERRY_OK, FERRY_ERR_TRUNCATE, FERRY_ERR_CANCELED, ... */
} ferry_msg_status_t;

/*
 * Starts the tagged layer on ctx (one per context: a second is
 * FERRY_ERR_BUSY). Every rank that takes part calls it before peers may
 * send to it (before a ferry_barrier, say): a tagged message arriving
 * where it has not been called is dropped with a warning.
 */
int ferry_msg_init(ferry_ctx_t *ctx, ferry_msg_t **msg_out);

/*
 * Stops it: FERRY_ERR_BUSY while requests are not completed and freed
 * (sends still going, receives posted: wait for or cancel them first).
 * Messages still unexpected are discarded (the senders of large ones
 * complete with FERRY_ERR_CANCELED). Sets *msg_p to NULL; NULL is
 * FERRY_OK. Call it before ferry_finalize.
 */
int ferry_msg_fini(ferry_msg_t **msg_p);

/*
 * Non-blocking send of len bytes at buf (or of conv's data from its cursor)
 * to dst with context id ctx_id and tag. *req_out is a request to test,
 * wait for or cancel; the buffer (and a convertor's iovec array) must stay
 * untouched until it completes. dst outside [0, size) is
 * FERRY_ERR_INVALID; an unreachable dst FERRY_ERR_UNREACH. A message that
 * cannot leave at once for lack of resources waits, in order, and leaves
 * from progress. Inside a ferry callback it waits in ferry's callback
 * queue instead (see the top of this file), and FERRY_ERR_NO_RESOURCE
 * means that queue is at FERRY_CB_QUEUE_MAX: nothing was sent, *req_out
 * is untouched.
 */
int ferry_msg_isend(ferry_msg_t *msg, int dst, uint32_t ctx_id, uint64_t tag, const void *buf,
                    size_t len, ferry_msg_req_t **req_out);
int ferry_msg_isend_conv(ferry_msg_t *msg, int dst, uint32_t ctx_id, uint64_t tag,
                         ferry_convertor_t *conv, ferry_msg_req_t **req_out);

/* As ferry_msg_isend, then ferry_msg_wait: returns the send's status. */
int ferry_msg_send(ferry_msg_t *msg, int dst, uint32_t ctx_id, uint64_t tag, const void *buf,
                   size_t len);

/*
 * Non-blocking receive into [buf, buf + len) (or conv's layout from its
 * cursor) of the first message that matches (ctx_id, src, tag & mask).
 * The buffer must stay untouched until the request completes.
 */
int ferry_msg_irecv(ferry_msg_t *msg, int src, uint32_t ctx_id, uint64_t tag, uint64_t mask,
                    void *buf, size_t len, ferry_msg_req_t **req_out);
int ferry_msg_irecv_conv(ferry_msg_t *msg, int src, uint32_t ctx_id, uint64_t tag, uint64_t mask,
                         ferry_convertor_t *conv, ferry_msg_req_t **req_out);

/* As ferry_msg_irecv, then ferry_msg_wait. status may be NULL. */
int ferry_msg_recv(ferry_msg_t *msg, int src, uint32_t ctx_id, uint64_t tag, uint64_t mask,
                   void *buf, size_t len, ferry_msg_status_t *status);

/*
 * Progresses once and reports whether *req has completed. When it has:
 * *done is 1, *status (may be NULL) is filled, the request is freed, *req
 * set to NULL, and the request's outcome (status->error) is returned. When
 * not: *done is 0 and FERRY_OK is returned. *req NULL: done, FERRY_OK.
 */
int ferry_msg_test(ferry_msg_t *msg, ferry_msg_req_t **req, int *done, ferry_msg_status_t *status);

/* Progresses until *req completes; then as ferry_msg_test. A peer that
 * fails completes what is pending with it (FERRY_ERR_UNREACH). */
int ferry_msg_wait(ferry_msg_t *msg, ferry_msg_req_t **req, ferry_msg_status_t *status);

/* Progresses until one of reqs[0..n) (NULL entries are skipped) completes:
 * *index is its position, the rest as ferry_msg_wait on it. All NULL:
 * *index is -1 and FERRY_OK. */
int ferry_msg_waitany(ferry_msg_t *msg, size_t n, ferry_msg_req_t **reqs, int *index,
                      ferry_msg_status_t *status);

/*
 * Looks for a message that a receive (ctx_id, src, tag & mask) would take
 * now, without taking it: the first in the unexpected queue. iprobe
 * progresses once and sets *found to 0 or 1 (status filled when 1, with
 * received 0); probe progresses until there is one. A receive posted next
 * with the status's source and tag takes the message probed.
 */
int ferry_msg_iprobe(ferry_msg_t *msg, int src, uint32_t ctx_id, uint64_t tag, uint64_t mask,
                     int *found, ferry_msg_status_t *status);
int ferry_msg_probe(ferry_msg_t *msg, int src, uint32_t ctx_id, uint64_t tag, uint64_t mask,
                    ferry_msg_status_t *status);

/*
 * Cancels a request that has not been matched: a receive still posted, or
 * a send still waiting in this process for resources. It then completes
 * with FERRY_ERR_CANCELED (wait or test for it as usual) and FERRY_OK is
 * returned. A receive already matched, or a send already handed to the
 * transport, cannot be canceled: FERRY_ERR_BUSY, and it completes as it
 * would have.
 */
int ferry_msg_cancel(ferry_msg_t *msg, ferry_msg_req_t *req);

/* Progresses once (the transports, then sends waiting for resources);
 * returns events handled or a negative status. */
int ferry_msg_progress(ferry_msg_t *msg);

#ifdef __cplusplus
}
#endif

#endif /* FERRY_MSG_H */
