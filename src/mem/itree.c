/*
 * Interval tree as an augmented treap. Rotations keep max_end right by
 * recomputing it bottom-up for the two nodes they move.
 */
#include "mem/itree.h"

static uintptr_t max3(uintptr_t a, uintptr_t b, uintptr_t c)
{
    uintptr_t m = a > b ? a : b;
    return m > c ? m : c;
}

static void fix(mem_itree_node_t *n)
{
    n->max_end = max3(n->end, n->left != NULL ? n->left->max_end : 0,
                      n->right != NULL ? n->right->max_end : 0);
}

/* Strict order of nodes: by start, then by address, so equal intervals
 * are distinct keys and removal finds exactly the node asked for. */
static bool before(const mem_itree_node_t *a, const mem_itree_node_t *b)
{
    return a->start < b->start || (a->start == b->start && (uintptr_t)a < (uintptr_t)b);
}

static mem_itree_node_t *rotate_right(mem_itree_node_t *n)
{
    mem_itree_node_t *l = n->left;
    n->left = l->right;
    l->right = n;
    fix(n);
    fix(l);
    return l;
}

static mem_itree_node_t *rotate_left(mem_itree_node_t *n)
{
    mem_itree_node_t *r = n->right;
    n->right = r->left;
    r->left = n;
    fix(n);
    fix(r);
    return r;
}

void mem_itree_init(mem_itree_t *tree)
{
    tree->root = NULL;
    tree->count = 0;
    tree->rng = 0x9e3779b97f4a7c15ull;
}

static uint32_t next_prio(mem_itree_t *tree)
{
    tree->rng ^= tree->rng << 13;
    tree->rng ^= tree->rng >> 7;
    tree->rng ^= tree->rng << 17;
    return (uint32_t)(tree->rng >> 32);
}

static mem_itree_node_t *insert(mem_itree_node_t *root, mem_itree_node_t *node)
{
    if (root == NULL)
        return node;
    if (before(node, root)) {
        root->left = insert(root->left, node);
        if (root->left->prio > root->prio)
            return rotate_right(root);
    } else {
        root->right = insert(root->right, node);
        if (root->right->prio > root->prio)
            return rotate_left(root);
    }
    fix(root);
    return root;
}

void mem_itree_insert(mem_itree_t *tree, mem_itree_node_t *node)
{
    node->left = node->right = NULL;
    node->max_end = node->end;
    node->prio = next_prio(tree);
    tree->root = insert(tree->root, node);
    tree->count++;
}

/* Joins two treaps whose keys are all ordered (every key of a before b's). */
static mem_itree_node_t *merge(mem_itree_node_t *a, mem_itree_node_t *b)
{
    if (a == NULL)
        return b;
    if (b == NULL)
        return a;
    if (a->prio > b->prio) {
        a->right = merge(a->right, b);
        fix(a);
        return a;
    }
    b->left = merge(a, b->left);
    fix(b);
    return b;
}

static mem_itree_node_t *remove_node(mem_itree_node_t *root, mem_itree_node_t *node)
{
    if (root == NULL)
        return NULL;
    if (root == node)
        return merge(root->left, root->right);
    if (before(node, root))
        root->left = remove_node(root->left, node);
    else
        root->right = remove_node(root->right, node);
    fix(root);
    return root;
}

void mem_itree_remove(mem_itree_t *tree, mem_itree_node_t *node)
{
    tree->root = remove_node(tree->root, node);
    node->left = node->right = NULL;
    tree->count--;
}

/* In-order walk pruned by max_end (nothing to the left ends after start)
 * and by start (nothing to the right starts before end). */
static bool overlaps(mem_itree_node_t *n, uintptr_t start, uintptr_t end,
                     mem_itree_visit_t visit, void *arg)
{
    if (n == NULL || n->max_end <= start)
        return true;
    if (!overlaps(n->left, start, end, visit, arg))
        return false;
    if (n->start >= end)
        return true;
    if (n->end > start && !visit(n, arg))
        return false;
    return overlaps(n->right, start, end, visit, arg);
}

void mem_itree_overlaps(const mem_itree_t *tree, uintptr_t start, uintptr_t end,
                        mem_itree_visit_t visit, void *arg)
{
    if (start < end)
        overlaps(tree->root, start, end, visit, arg);
}

/* A containing node starts at or before start and ends at or after end. */
static bool containing(mem_itree_node_t *n, uintptr_t start, uintptr_t end,
                       mem_itree_visit_t visit, void *arg)
{
    if (n == NULL || n->max_end < end)
        return true;
    if (!containing(n->left, start, end, visit, arg))
        return false;
    if (n->start > start)
        return true;
    if (n->end >= end && !visit(n, arg))
        return false;
    return containing(n->right, start, end, visit, arg);
}

void mem_itree_containing(const mem_itree_t *tree, uintptr_t start, uintptr_t end,
                          mem_itree_visit_t visit, void *arg)
{
    if (start < end)
        containing(tree->root, start, end, visit, arg);
}
