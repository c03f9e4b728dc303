/*
 * Recording routes (df_rollout_options.record_routes; R3, "Rollout Routing Replay", arXiv
 * 2507.18071): for every token of every sequence, the experts each sparse layer routed it to,
 * so training can replay them (df_seq_batch.routes_in; docs/rollout.md "Recording routes (R3)").
 *
 * Every forward of the engine (prefill batch, chunk, decode step, a turn's continuation, a
 * stream's recomputation) records its rows' routes (df_infer_batch.routes_out into b_routes,
 * -1 where a row did not reach a layer's MLP); they are stored at each row's slot and position,
 * as its K / V are in the cache, so a position holds what the last forward writing its K / V
 * routed. kv_copy's prompt copies copy them too. When a sequence finishes its prompt and
 * response rows are read back from its slot; its last token, sampled and never fed back, has
 * no route (-1). A slot's routes are stored as int16 (int32 past 32767 experts).
 */
#include "engine/rollout_engine.h"
#include "util/pages.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static int64_t elem_of(const df_model_config *cfg) { return cfg->num_experts > INT16_MAX ? 4 : 2; }

static size_t store_bytes(const df_rollout_engine *e)
{
    return (size_t)(e->max_num_seqs * e->max_seq_len * e->route_w * e->route_elem);
}

int64_t df_rollout_routes_bytes(const df_model_config *cfg, const df_rollout_options *o,
                                int64_t rows_cap)
{
    const int64_t W = o->record_routes ? df_model_route_width(cfg) : 0;
    return W * (o->max_num_seqs * o->max_seq_len * elem_of(cfg) + rows_cap * 4);
}

int df_rollout_routes_init(df_rollout_engine *e, int64_t rows_cap)
{
    if (!e->opt.record_routes)
        return DF_OK;
    e->route_w = df_model_route_width(&e->cfg);
    e->route_elem = elem_of(&e->cfg);
    const size_t bytes = store_bytes(e);
    /* a mapping of its own, as the KV cache's: pages taken as written, given back between calls */
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    e->routes = p == MAP_FAILED ? NULL : p;
    e->b_routes = malloc((size_t)(rows_cap * e->route_w) * sizeof(int32_t));
    if (!e->routes || !e->b_routes) {
        df_rollout_routes_free(e);
        return df_error(DF_ENOMEM, "out of memory for the rollout's routes (record_routes: %zu bytes)",
                        bytes);
    }
    return DF_OK;
}

void df_rollout_routes_free(df_rollout_engine *e)
{
    if (e->routes)
        munmap(e->routes, store_bytes(e));
    free(e->b_routes);
    e->routes = NULL;
    e->b_routes = NULL;
}

void df_rollout_routes_drop(df_rollout_engine *e, int64_t rows_cap)
{
    if (!e->routes)
        return;
    df_pages_release(e->routes, store_bytes(e));
    df_pages_release(e->b_routes, (size_t)(rows_cap * e->route_w) * sizeof(int32_t));
}

int32_t *df_rollout_routes_out(df_rollout_engine *e) { return e->b_routes; }

/* Slot si's row of position pos in the store. */
static void *row_at(const df_rollout_engine *e, int64_t si, int64_t pos)
{
    return (char *)e->routes + ((si * e->max_seq_len + pos) * e->route_w) * e->route_elem;
}

void df_rollout_routes_store(df_rollout_engine *e, int64_t n)
{
    if (!e->routes)
        return;
    const int64_t W = e->route_w;
    for (int64_t i = 0; i < n; i++) {
        const int32_t *src = e->b_routes + i * W;
        void *dst = row_at(e, e->b_slot[i], e->b_pos[i]);
        if (e->route_elem == 4) {
            memcpy(dst, src, (size_t)W * sizeof(int32_t));
            continue;
        }
        int16_t *d = dst;
        for (int64_t j = 0; j < W; j++)
            d[j] = (int16_t)src[j];
    }
}

void df_rollout_routes_copy(df_rollout_engine *e, int32_t from, int32_t to, int64_t n)
{
    if (e->routes)
        memcpy(row_at(e, to, 0), row_at(e, from, 0), (size_t)(n * e->route_w * e->route_elem));
}

void df_rollout_routes_read(const df_rollout_engine *e, int64_t si, int32_t *out)
{
    const slot_state *s = &e->slots[si];
    const int64_t W = e->route_w, rows = s->prompt_len + s->n_gen;
    if (e->route_elem == 4) {
        memcpy(out, row_at(e, si, 0), (size_t)((rows - 1) * W) * sizeof(int32_t));
    } else {
        const int16_t *src = row_at(e, si, 0);
        for (int64_t i = 0; i < (rows - 1) * W; i++)
            out[i] = src[i];
    }
    /* the last token was sampled, never fed back: no forward routed it */
    for (int64_t j = 0; j < W; j++)
        out[(rows - 1) * W + j] = -1;
}

int df_rollout_routes_ctx_init(gen_ctx *g)
{
    const df_rollout_engine *e = g->e;
    if (!e->routes)
        return DF_OK;
    if (g->hooks)
        g->route_buf = malloc((size_t)(e->max_seq_len * e->route_w) * sizeof(int32_t));
    else
        g->route_start = calloc((size_t)g->n_seqs + 1, sizeof *g->route_start);
    if (g->hooks ? !g->route_buf : !g->route_start)
        return df_error(DF_ENOMEM, "rollout: out of memory for the routes of %lld sequences",
                        (long long)g->n_seqs);
    return DF_OK;
}

void df_rollout_routes_ctx_release(gen_ctx *g)
{
    free(g->a_route);
    free(g->route_start);
    free(g->route_buf);
}

int df_rollout_routes_retire(gen_ctx *g, int64_t si)
{
    const df_rollout_engine *e = g->e;
    if (!e->routes)
        return DF_OK;
    const slot_state *s = &e->slots[si];
    const int64_t rows = s->prompt_len + s->n_gen, W = e->route_w;
    if (g->a_route_len + rows > g->a_route_cap) {
        int64_t cap = g->a_route_cap ? g->a_route_cap : 1024;
        while (cap < g->a_route_len + rows)
            cap *= 2;
        int32_t *r = realloc(g->a_route, (size_t)(cap * W) * sizeof(int32_t));
        if (!r)
            return df_error(DF_ENOMEM, "rollout: out of memory storing the routes of %lld tokens",
                            (long long)cap);
        g->a_route = r;
        g->a_route_cap = cap;
    }
    df_rollout_routes_read(e, si, g->a_route + g->a_route_len * W);
    g->route_start[s->seq] = g->a_route_len;
    g->a_route_len += rows;
    return DF_OK;
}

int df_rollout_routes_pack(const gen_ctx *g, df_rollout_result *res)
{
    const df_rollout_engine *e = g->e;
    if (!e->routes)
        return DF_OK;
    const int64_t n = g->n_seqs, W = e->route_w, ns = g->req->n_samples;
    const int64_t *po = g->req->prompt_offsets;
    res->route_offsets = malloc((size_t)(n + 1) * sizeof(int64_t));
    if (!res->route_offsets)
        return df_error(DF_ENOMEM, "rollout: out of memory for the route offsets");
    res->route_offsets[0] = 0;
    for (int64_t s = 0; s < n; s++)
        res->route_offsets[s + 1] = res->route_offsets[s] + (po[s / ns + 1] - po[s / ns]) +
                                    (res->offsets[s + 1] - res->offsets[s]);
    const int64_t total = res->route_offsets[n];
    res->routes = malloc((size_t)(total * W > 0 ? total * W : 1) * sizeof(int32_t));
    if (!res->routes)
        return df_error(DF_ENOMEM, "rollout: out of memory for the routes of %lld tokens",
                        (long long)total);
    for (int64_t s = 0; s < n; s++)
        memcpy(res->routes + res->route_offsets[s] * W, g->a_route + g->route_start[s] * W,
               (size_t)((res->route_offsets[s + 1] - res->route_offsets[s]) * W) * sizeof(int32_t));
    return DF_OK;
}
