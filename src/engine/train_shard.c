/*
 * ZeRO-1 for the host optimizer (train_core.h, df_train_core_shard): AdamW's moments spread over
 * the data-parallel group, each rank stepping its slice of the weights and broadcasting it.
 * Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter
 * Models" (arXiv 1910.02054), stage 1 (P_os); FSDP's sharded optimizer state, as verl's
 * fsdp_config.fsdp_size asks for.
 */
#include "engine/train_core.h"

#include <stdlib.h>
#include <string.h>

enum { GATHER_TAG = 7301 };

/* Slice boundary r of k: n r / k rounded up to 16 floats, at most n. */
static int64_t bound(int64_t n, int r, int k)
{
    if (r >= k)
        return n;
    int64_t b = (n / k * r + n % k * r / k + 15) / 16 * 16; /* n r / k without n r's overflow */
    return b < n ? b : n;
}

void df_train_core_shard_range(int64_t n, int r, int k, int64_t *lo, int64_t *hi)
{
    *lo = bound(n, r, k);
    *hi = bound(n, r + 1, k);
}

int df_train_core_shard(df_train_core *c)
{
    if (c->shard_decided)
        return DF_OK;
    const int k = c->dp ? df_comm_size(c->dp) : 1;
    const int64_t n = df_train_core_n_train(c);
    /* at least 32 floats a rank: every slice is then non-empty */
    if (!c->trainable || !c->o.shard_optim || c->dev_optim || k < 2 || n < 32 * (int64_t)k) {
        c->shard_decided = true;
        return DF_OK;
    }
    int64_t lo, hi;
    df_train_core_shard_range(n, df_comm_rank(c->dp), k, &lo, &hi);
    df_adamw *o = NULL;
    int rc = df_adamw_create(&c->opt->cfg, hi - lo, &o);
    if (rc)
        return df_error_wrap(rc, "%s: AdamW's state for optimizer shard %d of %d", c->who, df_comm_rank(c->dp), k);
    memcpy(o->m, c->opt->m + lo, (size_t)(hi - lo) * sizeof(float));
    memcpy(o->v, c->opt->v + lo, (size_t)(hi - lo) * sizeof(float));
    o->step = c->opt->step;
    df_adamw_free(c->opt);
    c->opt = o;
    c->shard = c->dp;
    c->shard_lo = lo;
    c->shard_decided = true;
    return DF_OK;
}

int df_train_core_share_slices(df_train_core *c, float *p)
{
    const int k = df_comm_size(c->shard);
    const int64_t n = df_train_core_n_train(c);
    for (int r = 0; r < k; r++) {
        int64_t lo, hi;
        df_train_core_shard_range(n, r, k, &lo, &hi);
        int rc = df_comm_broadcast(c->shard, p + lo, (hi - lo) * (int64_t)sizeof(float), r);
        if (rc)
            return df_error_wrap(rc, "%s: the new weights of optimizer shard %d of %d", c->who, r, k);
    }
    return DF_OK;
}

/* Rank 0 of the group: every other rank's slices of m and v into gm / gv beside its own. */
static int receive_slices(df_train_core *c, int k, int64_t n)
{
    memcpy(c->gm + c->shard_lo, c->opt->m, (size_t)c->opt->n * sizeof(float));
    memcpy(c->gv + c->shard_lo, c->opt->v, (size_t)c->opt->n * sizeof(float));
    int rc = DF_OK;
    for (int r = 1; r < k && !rc; r++) {
        int64_t lo, hi;
        df_train_core_shard_range(n, r, k, &lo, &hi);
        const int64_t bytes = (hi - lo) * (int64_t)sizeof(float);
        rc = df_comm_recv(c->shard, c->gm + lo, bytes, r, GATHER_TAG);
        if (!rc)
            rc = df_comm_recv(c->shard, c->gv + lo, bytes, r, GATHER_TAG);
    }
    return rc;
}

int df_train_core_gather_state(df_train_core *c, bool saver)
{
    int rc = df_train_core_shard(c);
    if (rc || !c->shard)
        return rc;
    const int k = df_comm_size(c->shard), me = df_comm_rank(c->shard);
    const int64_t n = df_train_core_n_train(c);
    unsigned char what = 0; /* the root's: 0 no save there, 1 gather, 2 out of memory */
    if (me == 0 && saver) {
        c->gm = malloc((size_t)n * sizeof(float));
        c->gv = malloc((size_t)n * sizeof(float));
        what = c->gm && c->gv ? 1 : 2;
    }
    rc = df_comm_broadcast(c->shard, &what, 1, 0);
    if (!rc && what == 2)
        rc = df_error(DF_ENOMEM, "%s: out of memory on data-parallel rank 0 for AdamW's whole moments "
                      "(%lld floats each) to save", c->who, (long long)n);
    if (!rc && what == 1)
        rc = me == 0 ? receive_slices(c, k, n)
                     : df_comm_send(c->shard, c->opt->m, c->opt->n * (int64_t)sizeof(float), 0, GATHER_TAG);
    if (!rc && what == 1 && me != 0)
        rc = df_comm_send(c->shard, c->opt->v, c->opt->n * (int64_t)sizeof(float), 0, GATHER_TAG);
    if (rc)
        df_train_core_drop_gathered(c);
    return rc ? df_error_wrap(rc, "%s: gathering AdamW's sharded moments for the checkpoint", c->who) : DF_OK;
}

void df_train_core_drop_gathered(df_train_core *c)
{
    free(c->gm);
    free(c->gv);
    c->gm = c->gv = NULL;
}
