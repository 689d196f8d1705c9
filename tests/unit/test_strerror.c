/*
 * The status table (FERRY_STATUS_MAP): every code's enum constant has the
 * table's value, ferry_strerror gives its message and ferry_status_name its
 * name; the codes are distinct and exactly FERRY_ERR_LAST + 1 .. 0; values
 * released once never change; anything else is "unknown status". Then
 * rt_status_from_errno maps errno values as documented.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <string.h>

#include <ferry/ferry.h>

#include "check.h"
#include "rt/log.h"

typedef struct status_row {
    int value;
    int constant; /* the enum constant of that name */
    const char *name;
    const char *message;
} status_row_t;

#define ROW(name, value, message) {(value), FERRY_##name, "FERRY_" #name, (message)},
static const status_row_t table[] = {FERRY_STATUS_MAP(ROW)};
#undef ROW
#define N_ROWS (sizeof(table) / sizeof(table[0]))

/* Released values, written out by hand on purpose: applications compiled
 * against an older ferry.h hold them, so the table may grow but never
 * renumber. A change to the table that moves one fails here. */
static const struct {
    int constant;
    int value;
} released[] = {
    {FERRY_OK, 0},
    {FERRY_ERR, -1},
    {FERRY_ERR_NO_RESOURCE, -2},
    {FERRY_ERR_INVALID, -3},
    {FERRY_ERR_NOT_SUPPORTED, -4},
    {FERRY_ERR_UNREACH, -5},
    {FERRY_ERR_NO_MEMORY, -6},
    {FERRY_ERR_ACCESS, -7},
    {FERRY_ERR_TRUNCATE, -8},
    {FERRY_ERR_TIMEOUT, -9},
    {FERRY_ERR_PROTO, -10},
    {FERRY_ERR_IO, -11},
    {FERRY_ERR_BUSY, -12},
    {FERRY_ERR_NOT_FOUND, -13},
    {FERRY_ERR_CANCELED, -14},
    {FERRY_ERR_LAUNCHER, -15},
};

static void test_table(void)
{
    CHECK(N_ROWS == (size_t)-FERRY_ERR_LAST);
    bool seen[N_ROWS] = {false};
    for (size_t i = 0; i < N_ROWS; i++) {
        const status_row_t *r = &table[i];
        CHECK(r->value == r->constant);
        CHECK(r->value <= 0 && r->value > FERRY_ERR_LAST);
        CHECK(!seen[-r->value]); /* distinct, hence dense */
        seen[-r->value] = true;
        CHECK(strcmp(ferry_strerror(r->value), r->message) == 0);
        CHECK(strcmp(ferry_status_name(r->value), r->name) == 0);
        CHECK(r->message[0] != '\0' && strcmp(r->message, "unknown status") != 0);
        for (size_t j = 0; j < i; j++) {
            CHECK(strcmp(table[j].message, r->message) != 0);
            CHECK(strcmp(table[j].name, r->name) != 0);
        }
    }
    CHECK(table[0].value == FERRY_OK && strcmp(ferry_status_name(0), "FERRY_OK") == 0);
    for (size_t i = 0; i < sizeof(released) / sizeof(released[0]); i++)
        CHECK(released[i].constant == released[i].value);
}

static void test_unknown(void)
{
    static const int unknown[] = {FERRY_ERR_LAST, FERRY_ERR_LAST - 1, 1, 2, 100, -1000,
                                  INT_MIN, INT_MAX};
    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        const char *s = ferry_strerror(unknown[i]);
        CHECK(s != NULL);
        CHECK(strcmp(s, "unknown status") == 0);
        CHECK(strcmp(ferry_status_name(unknown[i]), "FERRY_UNKNOWN") == 0);
    }
}

int main(void)
{
    test_table();
    test_unknown();

    CHECK(rt_status_from_errno(ENOMEM) == FERRY_ERR_NO_MEMORY);
    CHECK(rt_status_from_errno(EAGAIN) == FERRY_ERR_NO_RESOURCE);
    CHECK(rt_status_from_errno(EWOULDBLOCK) == FERRY_ERR_NO_RESOURCE);
    CHECK(rt_status_from_errno(ENOBUFS) == FERRY_ERR_NO_RESOURCE);
    CHECK(rt_status_from_errno(EINVAL) == FERRY_ERR_INVALID);
    CHECK(rt_status_from_errno(ENOENT) == FERRY_ERR_NOT_FOUND);
    CHECK(rt_status_from_errno(ETIMEDOUT) == FERRY_ERR_TIMEOUT);
    CHECK(rt_status_from_errno(ECONNREFUSED) == FERRY_ERR_UNREACH);
    CHECK(rt_status_from_errno(ECONNRESET) == FERRY_ERR_UNREACH);
    CHECK(rt_status_from_errno(EPIPE) == FERRY_ERR_UNREACH);
    CHECK(rt_status_from_errno(EHOSTUNREACH) == FERRY_ERR_UNREACH);
    CHECK(rt_status_from_errno(ENETUNREACH) == FERRY_ERR_UNREACH);
    CHECK(rt_status_from_errno(EACCES) == FERRY_ERR_ACCESS);
    CHECK(rt_status_from_errno(EPERM) == FERRY_ERR_ACCESS);
    CHECK(rt_status_from_errno(EFAULT) == FERRY_ERR_ACCESS);
    CHECK(rt_status_from_errno(ENOSYS) == FERRY_ERR_NOT_SUPPORTED);
    CHECK(rt_status_from_errno(EOPNOTSUPP) == FERRY_ERR_NOT_SUPPORTED);
    CHECK(rt_status_from_errno(EIO) == FERRY_ERR_IO);
    CHECK(rt_status_from_errno(EBADF) == FERRY_ERR_IO);
    /* A failure without errno must not read as success. */
    CHECK(rt_status_from_errno(0) == FERRY_ERR_IO);
    CHECK(rt_status_from_errno(-1) == FERRY_ERR_IO);
    return 0;
}
