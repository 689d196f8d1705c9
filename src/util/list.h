/*
 * Intrusive doubly linked list. An item lives in at most one list at a time;
 * the list does not own its items.
 */
#ifndef UTIL_LIST_H
#define UTIL_LIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct util_list_item {
    struct util_list_item *next;
    struct util_list_item *prev;
} util_list_item_t;

typedef struct util_list {
    util_list_item_t head; /* sentinel: head.next is the first item */
    size_t len;
} util_list_t;

#define UTIL_CONTAINER_OF(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

static inline void util_list_init(util_list_t *l)
{
    l->head.next = &l->head;
    l->head.prev = &l->head;
    l->len = 0;
}

static inline bool util_list_empty(const util_list_t *l)
{
    return l->head.next == &l->head;
}

static inline size_t util_list_len(const util_list_t *l)
{
    return l->len;
}

static inline void util_list_insert_after(util_list_t *l, util_list_item_t *pos,
                                          util_list_item_t *it)
{
    it->prev = pos;
    it->next = pos->next;
    pos->next->prev = it;
    pos->next = it;
    l->len++;
}

static inline void util_list_append(util_list_t *l, util_list_item_t *it)
{
    util_list_insert_after(l, l->head.prev, it);
}

static inline void util_list_prepend(util_list_t *l, util_list_item_t *it)
{
    util_list_insert_after(l, &l->head, it);
}

static inline void util_list_remove(util_list_t *l, util_list_item_t *it)
{
    it->prev->next = it->next;
    it->next->prev = it->prev;
    it->next = it->prev = NULL;
    l->len--;
}

/* The first item, or NULL when empty. */
static inline util_list_item_t *util_list_first(const util_list_t *l)
{
    return util_list_empty(l) ? NULL : l->head.next;
}

/* Removes and returns the first item, or NULL when empty. */
static inline util_list_item_t *util_list_pop_front(util_list_t *l)
{
    util_list_item_t *it = util_list_first(l);
    if (it != NULL)
        util_list_remove(l, it);
    return it;
}

/* The item after it, or NULL at the end. */
static inline util_list_item_t *util_list_next(const util_list_t *l, const util_list_item_t *it)
{
    return it->next == &l->head ? NULL : it->next;
}

#endif /* UTIL_LIST_H */
