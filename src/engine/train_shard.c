/*
 * ZeRO-1 (train_core.h, df_train_core_shard): AdamW's moments spread over the data-parallel
 * group, each rank stepping its slice of the weights and broadcasting it (the optimizer on a
 * device shares its slices in train_core.c, device_share).
 * Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter
 * Models" (arXiv 1910.02054), stage 1 (P_os); FSDP's sharded optimizer state, as verl's
 * fsdp_config.fsdp_size asks for.
 */
#include "engine/train_core.h"

#include "model/safetensors.h"

#include <stdlib.h>
#include <string.h>

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

bool df_train_core_sharded(const df_train_core *c)
{
    if (c->shard_decided)
        return c->shard != NULL;
    const int k = c->dp ? df_comm_size(c->dp) : 1;
    /* at least 32 floats a rank: every slice is then non-empty */
    return c->trainable && c->o.shard_optim && k > 1 && df_train_core_n_train(c) >= 32 * (int64_t)k;
}

int df_train_core_shard(df_train_core *c)
{
    if (c->shard_decided || !c->trainable)
        return DF_OK;
    const int k = c->dp ? df_comm_size(c->dp) : 1;
    const int64_t n = df_train_core_n_train(c);
    int64_t lo = 0, hi = n;
    const bool shard = df_train_core_sharded(c);
    if (shard)
        df_train_core_shard_range(n, df_comm_rank(c->dp), k, &lo, &hi);
    df_adamw_config cfg = {.beta1 = c->o.beta1, .beta2 = c->o.beta2, .eps = c->o.adam_eps,
                           .weight_decay = c->o.weight_decay};
    int rc = df_adamw_create(&cfg, hi - lo, &c->opt);
    if (rc)
        return shard ? df_error_wrap(rc, "%s: AdamW's state for optimizer shard %d of %d", c->who,
                                     df_comm_rank(c->dp), k)
                     : df_error_wrap(rc, "%s: AdamW's state", c->who);
    c->shard = shard ? c->dp : NULL;
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

/*
 * The save streams the moments: rank 0 of the group writes its own slice from memory and receives
 * every other slice, PIECE floats a message, while the safetensors writer pulls the tensor (so no
 * rank ever holds the whole moments); the others post all their messages at once (isend) and wait.
 * Messages of m and v carry their own tags; each rank's go out in element order.
 */
enum { TAG_M = 7301, TAG_V = 7302, PIECE = 4 << 20 }; /* PIECE: floats a message, unless c->stream_piece */

typedef struct gather_src { /* the root's cursor over one moment (m or v) */
    struct df_core_gather *g;
    const float *mine; /* the root's own slice */
    int tag;
    int64_t pos;       /* the next element the writer takes */
} gather_src;

struct df_core_gather {
    df_comm *comm;
    int k;
    int64_t n, lo, hi; /* the trained floats; this rank's slice */
    int64_t piece;     /* floats a message */
    bool root;
    gather_src src[2]; /* root: exp_avg, exp_avg_sq */
    float *stage;      /* root: the piece received last, [stage_lo, stage_lo + stage_n) of stage_of */
    const gather_src *stage_of;
    int64_t stage_lo, stage_n;
    df_comm_request **req; /* the others: their isends */
    int n_req;
};

/* Root: the piece that starts at s->pos, from the rank whose slice holds it, into the stage. */
static int receive_piece(gather_src *s)
{
    struct df_core_gather *g = s->g;
    int64_t lo = 0, hi = 0;
    int r = 0;
    for (; r < g->k; r++) {
        df_train_core_shard_range(g->n, r, g->k, &lo, &hi);
        if (s->pos < hi)
            break;
    }
    const int64_t len = hi - s->pos < g->piece ? hi - s->pos : g->piece;
    int rc = df_comm_recv(g->comm, g->stage, len * (int64_t)sizeof(float), r, s->tag);
    if (rc)
        return df_error_wrap(rc, "receiving AdamW's moments [%lld, %lld) from data-parallel rank %d",
                             (long long)s->pos, (long long)(s->pos + len), r);
    g->stage_of = s;
    g->stage_lo = s->pos;
    g->stage_n = len;
    return DF_OK;
}

/* df_st_source_fn of a moment: the next n elements, the root's own or received. out NULL: skip. */
static int pull(void *user, float *out, int64_t n)
{
    gather_src *s = user;
    struct df_core_gather *g = s->g;
    while (n > 0) {
        const bool own = s->pos >= g->lo && s->pos < g->hi;
        const bool staged = g->stage_of == s && s->pos >= g->stage_lo && s->pos < g->stage_lo + g->stage_n;
        int rc = own || staged ? DF_OK : receive_piece(s);
        if (rc)
            return rc;
        const float *from = own ? s->mine + (s->pos - g->lo) : g->stage + (s->pos - g->stage_lo);
        const int64_t end = own ? g->hi : g->stage_lo + g->stage_n;
        const int64_t take = end - s->pos < n ? end - s->pos : n;
        if (out) {
            memcpy(out, from, (size_t)take * sizeof *out);
            out += take;
        }
        s->pos += take;
        n -= take;
    }
    return DF_OK;
}

/* Another rank: every piece of its slices of m and v on its way to the root. */
static int post_sends(struct df_core_gather *g, const df_adamw *o)
{
    const int64_t per = (o->n + g->piece - 1) / g->piece;
    g->req = calloc((size_t)(2 * per), sizeof *g->req);
    if (!g->req)
        return df_error(DF_ENOMEM, "out of memory");
    for (int t = 0; t < 2; t++)
        for (int64_t off = 0; off < o->n; off += g->piece) {
            const int64_t len = o->n - off < g->piece ? o->n - off : g->piece;
            int rc = df_comm_isend(g->comm, (t ? o->v : o->m) + off, len * (int64_t)sizeof(float), 0,
                                   t ? TAG_V : TAG_M, &g->req[g->n_req]);
            if (rc)
                return rc;
            g->n_req++;
        }
    return DF_OK;
}

void df_train_core_gather_free(df_train_core *c)
{
    if (c->gather) {
        free(c->gather->stage);
        free(c->gather->req);
        free(c->gather);
        c->gather = NULL;
    }
}

int df_train_core_gather_begin(df_train_core *c, bool saver)
{
    int rc = df_train_core_shard(c);
    if (rc || !c->shard)
        return rc;
    const int me = df_comm_rank(c->shard);
    const int64_t piece = c->stream_piece > 0 ? c->stream_piece : PIECE;
    float *stage = NULL; /* the root's */
    unsigned char what = 0; /* the root's: 0 no save there, 1 stream, 2 out of memory */
    if (me == 0 && saver)
        what = (stage = malloc((size_t)piece * sizeof *stage)) ? 1 : 2;
    rc = df_comm_broadcast(c->shard, &what, 1, 0);
    struct df_core_gather *g = !rc && what == 1 ? malloc(sizeof *g) : NULL;
    if (!rc && what == 2)
        rc = df_error(DF_ENOMEM, "out of memory on data-parallel rank 0");
    else if (!rc && what == 1 && !g)
        rc = df_error(DF_ENOMEM, "out of memory");
    if (rc || what != 1) {
        free(stage);
        free(g);
        return rc ? df_error_wrap(rc, "%s: streaming AdamW's sharded moments to the checkpoint", c->who) : DF_OK;
    }
    *g = (struct df_core_gather){.comm = c->shard, .k = df_comm_size(c->shard), .n = df_train_core_n_train(c),
                                 .lo = c->shard_lo, .hi = c->shard_lo + c->opt->n, .piece = piece,
                                 .root = me == 0, .stage = stage};
    g->src[0] = (gather_src){.g = g, .mine = c->opt->m, .tag = TAG_M};
    g->src[1] = (gather_src){.g = g, .mine = c->opt->v, .tag = TAG_V};
    c->gather = g;
    rc = g->root ? DF_OK : df_train_core_moments_to_host(c); /* a device's, before they are sent */
    if (!rc && !g->root)
        rc = post_sends(g, c->opt);
    return rc ? df_error_wrap(rc, "%s: streaming AdamW's sharded moments to the checkpoint", c->who) : DF_OK;
}

int df_train_core_add_moments(df_train_core *c, df_st_writer *w, const int64_t shape[1])
{
    if (!c->shard) {
        int rc = df_st_writer_add_borrowed(w, "exp_avg", DF_DTYPE_F32, 1, shape, c->opt->m);
        return rc ? rc : df_st_writer_add_borrowed(w, "exp_avg_sq", DF_DTYPE_F32, 1, shape, c->opt->v);
    }
    if (!c->gather || !c->gather->root)
        return df_error(DF_EINVAL, "the %s's AdamW state is sharded, and this rank is not the one "
                        "df_train_core_gather_begin streams it to", c->who);
    int rc = df_st_writer_add_stream(w, "exp_avg", shape[0], pull, &c->gather->src[0]);
    return rc ? rc : df_st_writer_add_stream(w, "exp_avg_sq", shape[0], pull, &c->gather->src[1]);
}

int df_train_core_gather_end(df_train_core *c)
{
    struct df_core_gather *g = c->gather;
    int rc = DF_OK;
    for (int t = 0; g && g->root && t < 2; t++) { /* what the save did not take: every rank sent it */
        int e = pull(&g->src[t], NULL, g->n - g->src[t].pos);
        rc = rc ? rc : e;
    }
    for (int i = 0; g && i < g->n_req; i++) {
        int e = df_comm_wait(&g->req[i]);
        if (e)
            df_comm_request_free(&g->req[i]);
        rc = rc ? rc : e;
    }
    df_train_core_gather_free(c);
    return rc ? df_error_wrap(rc, "%s: streaming AdamW's sharded moments to the checkpoint", c->who) : DF_OK;
}
