/*
 * Tests that drive a transport's put and get themselves: a descriptor for
 * one contiguous local buffer and one remote range, ready for the caller
 * to name its callback and start.
 */
#ifndef FERRY_TEST_BTL_RDMA_H
#define FERRY_TEST_BTL_RDMA_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "btl/ctx.h"

/* A put (put) of local's len bytes to the peer's raddr under key, or a get
 * of them from there into local, prepared on btl's descriptors for ep. */
static inline ferry_btl_desc_t *test_rdma_desc(ferry_btl_module_t *btl, ferry_btl_endpoint_t *ep,
                                               bool put, void *local, size_t len, uint64_t raddr,
                                               const uint8_t *key)
{
    ferry_convertor_t conv;
    ferry_convertor_init_contig(&conv, local, len);
    size_t size = len;
    ferry_btl_desc_t *des = NULL;
    int rc = put ? btl->ops->prepare_src(btl, ep, NULL, &conv, 0, &size, FERRY_BTL_PREP_RDMA, &des)
                 : btl->ops->prepare_dst(btl, ep, NULL, &conv, 0, &size, FERRY_BTL_PREP_RDMA, &des);
    CHECK(rc == FERRY_OK && size == len);
    ferry_btl_segment_t *remote = put ? des->dst : des->src;
    remote->addr = raddr;
    remote->len = len;
    memcpy(remote->key, key, FERRY_BTL_KEY_MAX);
    if (put)
        des->dst_cnt = 1;
    else
        des->src_cnt = 1;
    return des;
}

#endif
