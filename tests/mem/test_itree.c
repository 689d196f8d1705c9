/*
 * The interval tree against a brute-force model: random inserts and removes
 * (repeated and nested intervals included), and after each step random
 * overlap and containment queries whose answers must equal the model's.
 */
#include <stdlib.h>
#include <string.h>

#include "../unit/check.h"
#include "mem/itree.h"

#define NODES 400
#define STEPS 20000

static unsigned long long rng_state = 0x9e3779b97f4a7c15ull; /* fixed: failures reproduce */

static unsigned long long rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static mem_itree_node_t nodes[NODES];
static bool in_tree[NODES];

struct seen {
    bool hit[NODES];
    size_t n;
    uintptr_t last_start;
    bool ordered;
};

static bool visit(mem_itree_node_t *n, void *arg)
{
    struct seen *s = arg;
    size_t i = (size_t)(n - nodes);
    CHECK(i < NODES && in_tree[i] && !s->hit[i]);
    if (n->start < s->last_start)
        s->ordered = false;
    s->last_start = n->start;
    s->hit[i] = true;
    s->n++;
    return true;
}

static void query(const mem_itree_t *t, bool contain)
{
    uintptr_t a = 1 + rng() % 1000, b = a + 1 + rng() % (contain ? 20 : 200);
    struct seen s = {.ordered = true};
    if (contain)
        mem_itree_containing(t, a, b, visit, &s);
    else
        mem_itree_overlaps(t, a, b, visit, &s);
    size_t want = 0;
    for (size_t i = 0; i < NODES; i++) {
        bool match = in_tree[i] && (contain ? nodes[i].start <= a && b <= nodes[i].end
                                            : nodes[i].start < b && a < nodes[i].end);
        CHECK(match == s.hit[i]);
        want += match;
    }
    CHECK(want == s.n);
    CHECK(s.ordered);
}

/* A visitor that stops at the first answer: the walk must stop too. */
static bool stop_first(mem_itree_node_t *n, void *arg)
{
    (void)n;
    (*(int *)arg)++;
    return false;
}

int main(void)
{
    mem_itree_t t;
    mem_itree_init(&t);
    size_t count = 0;
    for (int step = 0; step < STEPS; step++) {
        size_t i = rng() % NODES;
        if (in_tree[i]) {
            mem_itree_remove(&t, &nodes[i]);
            in_tree[i] = false;
            count--;
        } else {
            /* Some intervals repeat exactly, to test equal keys. */
            if (rng() % 8 == 0 && i > 0 && in_tree[i - 1]) {
                nodes[i].start = nodes[i - 1].start;
                nodes[i].end = nodes[i - 1].end;
            } else {
                nodes[i].start = 1 + rng() % 1000;
                nodes[i].end = nodes[i].start + 1 + rng() % 100;
            }
            mem_itree_insert(&t, &nodes[i]);
            in_tree[i] = true;
            count++;
        }
        CHECK(t.count == count);
        query(&t, false);
        query(&t, true);
    }
    int calls = 0;
    mem_itree_overlaps(&t, 0, UINTPTR_MAX, stop_first, &calls);
    CHECK(calls == (count > 0 ? 1 : 0));
    printf("itree: %d random steps, %zu intervals at the end, every query matched the model\n",
           STEPS, count);
    return 0;
}
