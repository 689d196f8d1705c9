/*
 * An interval tree over address ranges [start, end): a treap ordered by
 * (start, node address) whose nodes also keep the largest end in their
 * subtree, so that "which intervals overlap this range" and "which interval
 * contains this range" cost O(log n + answers) on average. Intervals may
 * overlap and repeat. The tree never allocates: callers embed a node in
 * their own object.
 */
#ifndef MEM_ITREE_H
#define MEM_ITREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct mem_itree_node {
    uintptr_t start;
    uintptr_t end; /* exclusive; start < end */
    uintptr_t max_end; /* largest end in this subtree */
    uint32_t prio;     /* heap order of the treap (max at the root) */
    struct mem_itree_node *left, *right;
} mem_itree_node_t;

typedef struct mem_itree {
    mem_itree_node_t *root;
    size_t count;
    uint64_t rng; /* priorities; a fixed seed keeps runs reproducible */
} mem_itree_t;

void mem_itree_init(mem_itree_t *tree);

/* Inserts node, whose start and end the caller has set (start < end). */
void mem_itree_insert(mem_itree_t *tree, mem_itree_node_t *node);

/* Removes node, which must be in the tree. */
void mem_itree_remove(mem_itree_t *tree, mem_itree_node_t *node);

/* Called for each match; returning false stops the walk. */
typedef bool (*mem_itree_visit_t)(mem_itree_node_t *node, void *arg);

/* Visits every node overlapping [start, end), in start order. The visitor
 * must not change the tree. */
void mem_itree_overlaps(const mem_itree_t *tree, uintptr_t start, uintptr_t end,
                        mem_itree_visit_t visit, void *arg);

/* Visits every node containing [start, end) (node->start <= start and
 * end <= node->end). The visitor must not change the tree. */
void mem_itree_containing(const mem_itree_t *tree, uintptr_t start, uintptr_t end,
                          mem_itree_visit_t visit, void *arg);

#endif /* MEM_ITREE_H */
