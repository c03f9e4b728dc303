/*
 * Balanced redistribution planning for the Data Coordinator
 * (include/distflow/coordinator.h): filter plugins over the sample summaries
 * (df_batch_sample_infos, in batch.c), the plan and the alltoallv send / receive
 * views of it. Pure and deterministic: every rank computes the same plan from
 * the same gathered infos.
 */
#include "distflow/coordinator.h"

#include <stdlib.h>
#include <string.h>

int df_sample_infos_filter(df_sample_info *infos, int64_t n, df_sample_filter_fn fn, void *user,
                           int64_t *n_kept)
{
    if (n < 0 || (n > 0 && !infos) || !n_kept)
        return df_error(DF_EINVAL, "sample filter: bad arguments (n=%lld)", (long long)n);
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        if (!fn || fn(&infos[i], user))
            infos[m++] = infos[i];
    *n_kept = m;
    return DF_OK;
}

/* ---- canonical order and units ---------------------------------------------- */

typedef int (*idx_cmp_fn)(const void *ctx, int64_t a, int64_t b);

/* Stable merge sort of indices with a context (qsort has none; no globals). */
static void sort_idx(int64_t *a, int64_t *tmp, int64_t n, idx_cmp_fn cmp, const void *ctx)
{
    if (n < 2)
        return;
    int64_t h = n / 2;
    sort_idx(a, tmp, h, cmp, ctx);
    sort_idx(a + h, tmp, n - h, cmp, ctx);
    int64_t i = 0, j = h, o = 0;
    while (i < h && j < n)
        tmp[o++] = cmp(ctx, a[j], a[i]) < 0 ? a[j++] : a[i++];
    while (i < h)
        tmp[o++] = a[i++];
    while (j < n)
        tmp[o++] = a[j++];
    memcpy(a, tmp, (size_t)n * sizeof *a);
}

static int cmp_canon(const void *ctx, int64_t ia, int64_t ib)
{
    const df_sample_info *a = (const df_sample_info *)ctx + ia;
    const df_sample_info *b = (const df_sample_info *)ctx + ib;
    if (a->src_rank != b->src_rank)
        return a->src_rank < b->src_rank ? -1 : 1;
    return (a->src_index > b->src_index) - (a->src_index < b->src_index);
}

/* Group key order: uid strings, then integer groups, then ungrouped samples. */
static int key_kind(const df_sample_info *s) { return s->uid ? 0 : s->group >= 0 ? 1 : 2; }

typedef struct key_ctx {
    const df_sample_info *infos;
    const int64_t *canon;
} key_ctx;

/* 0 only when both samples carry the same group key. */
static int key_cmp(const key_ctx *c, int64_t a, int64_t b)
{
    const df_sample_info *x = &c->infos[c->canon[a]], *y = &c->infos[c->canon[b]];
    int kx = key_kind(x), ky = key_kind(y);
    if (kx != ky)
        return kx < ky ? -1 : 1;
    if (kx == 0)
        return strcmp(x->uid, y->uid);
    if (kx == 1)
        return (x->group > y->group) - (x->group < y->group);
    return (a > b) - (a < b); /* ungrouped: each sample is its own group */
}

/* Canonical positions by group key, ties by canonical position (the sort is stable). */
static int cmp_key(const void *ctx, int64_t a, int64_t b) { return key_cmp(ctx, a, b); }

typedef struct units {
    int64_t n_units;
    int64_t *unit_of; /* [n] canonical position -> unit */
    int64_t *first;   /* [n_units + 1] member offsets into members */
    int64_t *members; /* [n] canonical positions, grouped by unit, canonical order within */
    int64_t *work;    /* [n_units] summed sum_tokens */
} units;

static void units_free(units *u)
{
    free(u->unit_of);
    free(u->first);
    free(u->members);
    free(u->work);
}

/* Unit ids follow the canonical position of each unit's first member. */
static int units_build(const df_sample_info *infos, const int64_t *canon, int64_t n,
                       bool keep_groups, units *u)
{
    int64_t *byk = malloc((size_t)(n ? n : 1) * sizeof *byk);
    u->unit_of = malloc((size_t)(n ? n : 1) * sizeof *u->unit_of);
    u->first = calloc((size_t)n + 1, sizeof *u->first);
    u->members = malloc((size_t)(n ? n : 1) * sizeof *u->members);
    u->work = calloc((size_t)(n ? n : 1), sizeof *u->work);
    if (!byk || !u->unit_of || !u->first || !u->members || !u->work) {
        free(byk);
        return df_error(DF_ENOMEM, "redistribution plan: out of memory for %lld samples",
                        (long long)n);
    }
    for (int64_t i = 0; i < n; i++) {
        byk[i] = i;
        u->unit_of[i] = -1;
    }
    key_ctx kc = {infos, canon};
    if (keep_groups)
        sort_idx(byk, u->members /* scratch */, n, cmp_key, &kc);
    /* Each run of equal keys is one group; its leader is its smallest canonical position. */
    int64_t *leader = u->members; /* scratch: leader of each canonical position */
    for (int64_t i = 0; i < n;) {
        int64_t j = i + 1;
        while (keep_groups && j < n && key_cmp(&kc, byk[i], byk[j]) == 0)
            j++;
        for (int64_t t = i; t < j; t++)
            leader[byk[t]] = byk[i];
        i = j;
    }
    free(byk);
    int64_t nu = 0;
    for (int64_t i = 0; i < n; i++) {
        if (leader[i] == i)
            u->unit_of[i] = nu++;
        u->unit_of[i] = u->unit_of[leader[i]];
    }
    for (int64_t i = 0; i < n; i++) {
        u->first[u->unit_of[i] + 1]++;
        u->work[u->unit_of[i]] += infos[canon[i]].sum_tokens;
    }
    for (int64_t x = 0; x < nu; x++)
        u->first[x + 1] += u->first[x];
    int64_t *fill = calloc((size_t)(nu ? nu : 1), sizeof *fill);
    if (!fill)
        return df_error(DF_ENOMEM, "redistribution plan: out of memory for %lld groups",
                        (long long)nu);
    for (int64_t i = 0; i < n; i++) { /* leader[] is dead from here: members reuses it */
        int64_t x = u->unit_of[i];
        u->members[u->first[x] + fill[x]++] = i;
    }
    free(fill);
    u->n_units = nu;
    return DF_OK;
}

/* ---- the plan ------------------------------------------------------------------ */

static int plan_check(const df_sample_info *infos, int64_t n, int dest_dp_size,
                      df_redist_plan **out)
{
    if (!out || dest_dp_size < 1 || n < 0 || (n > 0 && !infos))
        return df_error(DF_EINVAL,
                        "redistribution plan: need dest_dp_size >= 1, n >= 0 and non-NULL "
                        "arrays (dest_dp_size=%d, n=%lld)",
                        dest_dp_size, (long long)n);
    for (int64_t i = 0; i < n; i++)
        if (infos[i].src_rank < 0 || infos[i].src_index < 0 || infos[i].sum_tokens < 0)
            return df_error(DF_EINVAL,
                            "redistribution plan: info %lld has src_rank %d, src_index %lld, "
                            "sum_tokens %lld (none may be negative)",
                            (long long)i, (int)infos[i].src_rank, (long long)infos[i].src_index,
                            (long long)infos[i].sum_tokens);
    return DF_OK;
}

static df_redist_plan *plan_alloc(int64_t n, int k)
{
    df_redist_plan *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->dest_dp_size = k;
    p->n = n;
    p->dest_offsets = calloc((size_t)k + 1, sizeof *p->dest_offsets);
    p->src_rank = malloc((size_t)(n ? n : 1) * sizeof *p->src_rank);
    p->src_index = malloc((size_t)(n ? n : 1) * sizeof *p->src_index);
    p->dest_tokens = calloc((size_t)k, sizeof *p->dest_tokens);
    if (!p->dest_offsets || !p->src_rank || !p->src_index || !p->dest_tokens) {
        df_redist_plan_free(p);
        return NULL;
    }
    return p;
}

void df_redist_plan_free(df_redist_plan *p)
{
    if (!p)
        return;
    free(p->dest_offsets);
    free(p->src_rank);
    free(p->src_index);
    free(p->dest_tokens);
    free(p);
}

typedef struct dest_ctx {
    const int64_t *part;
    const int64_t *work;
} dest_ctx;

/* Destination-major; within one, longest unit first (siiRL's LPT order), then unit id. */
static int cmp_dest(const void *ctx, int64_t a, int64_t b)
{
    const dest_ctx *c = ctx;
    if (c->part[a] != c->part[b])
        return c->part[a] < c->part[b] ? -1 : 1;
    if (c->work[a] != c->work[b])
        return c->work[a] > c->work[b] ? -1 : 1;
    return (a > b) - (a < b);
}

/* Units -> parts, with zero-workload placeholders so the count divides k. */
static int assign_units(const units *u, int k, int64_t *part)
{
    int64_t m = u->n_units, pad = (k - m % k) % k;
    int64_t *w = calloc((size_t)(m + pad), sizeof *w);
    int64_t *po = malloc((size_t)(m + pad) * sizeof *po);
    int rc = (!w || !po) ? df_error(DF_ENOMEM, "redistribution plan: out of memory") : DF_OK;
    if (!rc) {
        memcpy(w, u->work, (size_t)m * sizeof *w);
        rc = df_kk_partition(w, m + pad, k, true, po);
    }
    if (!rc)
        memcpy(part, po, (size_t)m * sizeof *part);
    free(w);
    free(po);
    return rc;
}

static int plan_fill(const df_sample_info *infos, const int64_t *canon, const units *u,
                     df_redist_plan *p)
{
    int64_t m = u->n_units;
    int64_t *part = malloc((size_t)(m ? m : 1) * sizeof *part);
    int64_t *ord = malloc((size_t)(m ? m : 1) * sizeof *ord);
    int64_t *tmp = malloc((size_t)(m ? m : 1) * sizeof *tmp);
    int rc = (!part || !ord || !tmp) ? df_error(DF_ENOMEM, "redistribution plan: out of memory")
                                     : DF_OK;
    if (!rc && m > 0)
        rc = assign_units(u, p->dest_dp_size, part);
    if (!rc) {
        for (int64_t x = 0; x < m; x++)
            ord[x] = x;
        dest_ctx dc = {part, u->work};
        sort_idx(ord, tmp, m, cmp_dest, &dc);
        int64_t o = 0;
        for (int64_t t = 0; t < m; t++) {
            int64_t x = ord[t];
            p->dest_offsets[part[x] + 1] += u->first[x + 1] - u->first[x];
            p->dest_tokens[part[x]] += u->work[x];
            for (int64_t j = u->first[x]; j < u->first[x + 1]; j++, o++) {
                const df_sample_info *s = &infos[canon[u->members[j]]];
                p->src_rank[o] = s->src_rank;
                p->src_index[o] = s->src_index;
                if (s->src_rank + 1 > p->src_size)
                    p->src_size = s->src_rank + 1;
            }
        }
        for (int d = 0; d < p->dest_dp_size; d++)
            p->dest_offsets[d + 1] += p->dest_offsets[d];
    }
    free(part);
    free(ord);
    free(tmp);
    return rc;
}

int df_redistribution_plan(const df_sample_info *infos, int64_t n, int dest_dp_size,
                           bool keep_groups, df_redist_plan **out)
{
    int rc = plan_check(infos, n, dest_dp_size, out);
    if (rc)
        return rc;
    df_redist_plan *p = plan_alloc(n, dest_dp_size);
    int64_t *canon = malloc((size_t)(n ? n : 1) * sizeof *canon);
    int64_t *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
    units u = {0};
    if (!p || !canon || !tmp) {
        rc = df_error(DF_ENOMEM, "redistribution plan: out of memory for %lld samples",
                      (long long)n);
        goto done;
    }
    for (int64_t i = 0; i < n; i++)
        canon[i] = i;
    sort_idx(canon, tmp, n, cmp_canon, infos);
    for (int64_t i = 1; i < n; i++)
        if (cmp_canon(infos, canon[i - 1], canon[i]) == 0) {
            rc = df_error(DF_EINVAL,
                          "redistribution plan: infos %lld and %lld both name row %lld of "
                          "source rank %d",
                          (long long)canon[i - 1], (long long)canon[i],
                          (long long)infos[canon[i]].src_index, (int)infos[canon[i]].src_rank);
            goto done;
        }
    rc = units_build(infos, canon, n, keep_groups, &u);
    if (!rc)
        rc = plan_fill(infos, canon, &u, p);
done:
    units_free(&u);
    free(canon);
    free(tmp);
    if (rc) {
        df_redist_plan_free(p);
        return rc;
    }
    *out = p;
    return DF_OK;
}

/* ---- alltoallv views --------------------------------------------------------- */

int df_redist_plan_send(const df_redist_plan *p, int src_rank, int64_t *send_counts,
                        int64_t **rows, int64_t *n_rows)
{
    if (!p || !send_counts || !rows || !n_rows || src_rank < 0)
        return df_error(DF_EINVAL, "plan send: bad arguments (src_rank=%d)", src_rank);
    int64_t total = 0;
    for (int d = 0; d < p->dest_dp_size; d++) {
        send_counts[d] = 0;
        for (int64_t j = p->dest_offsets[d]; j < p->dest_offsets[d + 1]; j++)
            send_counts[d] += p->src_rank[j] == src_rank;
        total += send_counts[d];
    }
    int64_t *r = malloc((size_t)(total ? total : 1) * sizeof *r);
    if (!r)
        return df_error(DF_ENOMEM, "plan send: out of memory for %lld rows", (long long)total);
    int64_t o = 0;
    for (int64_t j = 0; j < p->n; j++) /* entries are destination-major already */
        if (p->src_rank[j] == src_rank)
            r[o++] = p->src_index[j];
    *rows = r;
    *n_rows = total;
    return DF_OK;
}

int df_redist_plan_recv(const df_redist_plan *p, int dest, int n_src, int64_t *recv_counts,
                        int64_t **perm, int64_t *n_rows)
{
    if (!p || !recv_counts || !perm || !n_rows || dest < 0 || dest >= p->dest_dp_size ||
        n_src < p->src_size)
        return df_error(DF_EINVAL,
                        "plan recv: bad arguments (dest=%d of %d, n_src=%d, plan has %d sources)",
                        dest, p ? p->dest_dp_size : 0, n_src, p ? p->src_size : 0);
    int64_t lo = p->dest_offsets[dest], hi = p->dest_offsets[dest + 1];
    int64_t *base = calloc((size_t)n_src + 1, sizeof *base);
    int64_t *r = malloc((size_t)(hi - lo ? hi - lo : 1) * sizeof *r);
    if (!base || !r) {
        free(base);
        free(r);
        return df_error(DF_ENOMEM, "plan recv: out of memory");
    }
    for (int s = 0; s < n_src; s++)
        recv_counts[s] = 0;
    for (int64_t j = lo; j < hi; j++)
        recv_counts[p->src_rank[j]]++;
    for (int s = 0; s < n_src; s++)
        base[s + 1] = base[s] + recv_counts[s];
    /* Source s sends its rows in this destination's order, so they arrive in it. */
    for (int64_t j = lo; j < hi; j++)
        r[j - lo] = base[p->src_rank[j]]++;
    free(base);
    *perm = r;
    *n_rows = hi - lo;
    return DF_OK;
}
