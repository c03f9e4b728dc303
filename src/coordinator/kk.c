/*
 * Karmarkar–Karp largest differencing into k parts (include/distflow/coordinator.h),
 * the algorithm of verl's karmarkar_karp (verl/utils/seqlen_balancing.py), with a
 * total order on ties so every rank reaches the same partition.
 *
 * A state is k sets kept sorted heaviest first; items live in linked lists so a
 * merge is O(k) plus a sort of k sets. States wait in a binary heap keyed by
 * spread (heaviest minus lightest set).
 */
#include "distflow/coordinator.h"

#include <stdlib.h>
#include <string.h>

typedef struct kk_set {
    int64_t sum;
    int64_t cnt;
    int64_t head, tail; /* item list through next[]; -1 when empty */
    int64_t min_idx;    /* smallest item index, INT64_MAX when empty */
} kk_set;

typedef struct kk {
    int k;
    kk_set *sets;  /* [n_states * k]: state s owns sets[s*k .. s*k + k) */
    int64_t *next; /* [n] item list links */
    int64_t *heap; /* state ids */
    int64_t heap_n;
} kk;

/* Heaviest first: sum, then item count, then the set holding the smaller index. */
static int set_before(const kk_set *a, const kk_set *b)
{
    if (a->sum != b->sum)
        return a->sum > b->sum;
    if (a->cnt != b->cnt)
        return a->cnt > b->cnt;
    return a->min_idx < b->min_idx;
}

static void sort_sets(kk_set *s, int k)
{
    for (int i = 1; i < k; i++) { /* insertion sort: k is a DP size, and mostly sorted */
        kk_set v = s[i];
        int j = i - 1;
        while (j >= 0 && set_before(&v, &s[j])) {
            s[j + 1] = s[j];
            j--;
        }
        s[j + 1] = v;
    }
}

static int64_t spread(const kk *g, int64_t s)
{
    const kk_set *x = g->sets + s * g->k;
    return x[0].sum - x[g->k - 1].sum;
}

/* True when state a should be popped before state b (verl's State.__lt__ plus ids). */
static int state_before(const kk *g, int64_t a, int64_t b)
{
    int64_t sa = spread(g, a), sb = spread(g, b);
    if (sa != sb)
        return sa > sb;
    const kk_set *ta = g->sets + a * g->k, *tb = g->sets + b * g->k;
    if (ta->sum != tb->sum)
        return ta->sum > tb->sum;
    if (ta->cnt != tb->cnt)
        return ta->cnt > tb->cnt;
    return a < b;
}

static void heap_push(kk *g, int64_t s)
{
    int64_t i = g->heap_n++;
    g->heap[i] = s;
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!state_before(g, g->heap[i], g->heap[p]))
            break;
        int64_t t = g->heap[i];
        g->heap[i] = g->heap[p];
        g->heap[p] = t;
        i = p;
    }
}

static int64_t heap_pop(kk *g)
{
    int64_t top = g->heap[0];
    g->heap[0] = g->heap[--g->heap_n];
    int64_t i = 0;
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < g->heap_n && state_before(g, g->heap[l], g->heap[m]))
            m = l;
        if (r < g->heap_n && state_before(g, g->heap[r], g->heap[m]))
            m = r;
        if (m == i)
            break;
        int64_t t = g->heap[i];
        g->heap[i] = g->heap[m];
        g->heap[m] = t;
        i = m;
    }
    return top;
}

static void set_add(kk *g, kk_set *s, int64_t item, int64_t w)
{
    s->sum += w;
    s->cnt++;
    if (s->tail >= 0)
        g->next[s->tail] = item;
    else
        s->head = item;
    s->tail = item;
    g->next[item] = -1;
    if (item < s->min_idx)
        s->min_idx = item;
}

/* The heaviest set of a takes the lightest of b, and so on; a stays sorted. */
static void state_merge(kk *g, int64_t a, int64_t b)
{
    kk_set *x = g->sets + a * g->k, *y = g->sets + b * g->k;
    for (int i = 0; i < g->k; i++) {
        kk_set *d = &x[i], *s = &y[g->k - 1 - i];
        if (s->cnt == 0)
            continue;
        if (d->tail >= 0)
            g->next[d->tail] = s->head;
        else
            d->head = s->head;
        d->tail = s->tail;
        d->sum += s->sum;
        d->cnt += s->cnt;
        if (s->min_idx < d->min_idx)
            d->min_idx = s->min_idx;
    }
    sort_sets(x, g->k);
}

static int cmp_pair(const void *pa, const void *pb)
{
    const int64_t *a = pa, *b = pb; /* {workload, index} */
    if (a[0] != b[0])
        return a[0] < b[0] ? -1 : 1;
    return (a[1] > b[1]) - (a[1] < b[1]);
}

static int kk_check(const int64_t *w, int64_t n, int k, bool equal_size, const int64_t *part_of)
{
    if (n < 0 || k < 1)
        return df_error(DF_EINVAL, "kk partition: need n >= 0 and k >= 1 (got n=%lld, k=%d)",
                        (long long)n, k);
    if (n > 0 && (!w || !part_of))
        return df_error(DF_EINVAL, "kk partition: NULL workloads or part_of");
    if (equal_size && n % k != 0)
        return df_error(DF_EINVAL, "kk partition: equal_size needs n %% k == 0 (n=%lld, k=%d)",
                        (long long)n, k);
    for (int64_t i = 0; i < n; i++)
        if (w[i] < 0)
            return df_error(DF_EINVAL, "kk partition: workload %lld of item %lld is negative",
                            (long long)w[i], (long long)i);
    return DF_OK;
}

int df_kk_partition(const int64_t *workloads, int64_t n, int k, bool equal_size,
                    int64_t *part_of)
{
    int rc = kk_check(workloads, n, k, equal_size, part_of);
    if (rc || n == 0)
        return rc;
    int64_t per = equal_size ? k : 1; /* items per initial state */
    int64_t n_states = n / per;
    kk g = {.k = k, .heap_n = 0};
    int64_t *sorted = malloc((size_t)n * 2 * sizeof *sorted);
    g.sets = malloc((size_t)n_states * (size_t)k * sizeof *g.sets);
    g.next = malloc((size_t)n * sizeof *g.next);
    g.heap = malloc((size_t)n_states * sizeof *g.heap);
    if (!sorted || !g.sets || !g.next || !g.heap) {
        rc = df_error(DF_ENOMEM, "kk partition: out of memory for %lld items into %d parts",
                      (long long)n, k);
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        sorted[2 * i] = workloads[i];
        sorted[2 * i + 1] = i;
    }
    qsort(sorted, (size_t)n, 2 * sizeof *sorted, cmp_pair);
    for (int64_t s = 0; s < n_states; s++) {
        kk_set *x = g.sets + s * k;
        for (int i = 0; i < k; i++)
            x[i] = (kk_set){0, 0, -1, -1, INT64_MAX};
        for (int64_t j = 0; j < per; j++) {
            const int64_t *it = sorted + 2 * (s * per + j);
            set_add(&g, &x[j], it[1], it[0]);
        }
        sort_sets(x, k);
        heap_push(&g, s);
    }
    while (g.heap_n > 1) {
        int64_t a = heap_pop(&g), b = heap_pop(&g);
        state_merge(&g, a, b);
        heap_push(&g, a);
    }
    const kk_set *fin = g.sets + g.heap[0] * k;
    for (int p = 0; p < k; p++)
        for (int64_t it = fin[p].head; it >= 0; it = g.next[it])
            part_of[it] = p;
done:
    free(sorted);
    free(g.sets);
    free(g.next);
    free(g.heap);
    return rc;
}
