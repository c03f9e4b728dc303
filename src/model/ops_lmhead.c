/*
 * LM head: log-probabilities of given tokens and entropies (ops.h). The
 * forward is df_vocab_stats (per-group online log-sum-exp with a running sum
 * of p (z - m) for the entropy) and a merge per row; the backward recomputes
 * each logits tile in cache, turns it into dL/dlogits in place and feeds the
 * two gradient GEMMs from there. Matches verl's logprobs_from_logits +
 * entropy_from_logits on logits / temperature.
 */
#include "model/kernels_rename.h" /* first: a kernel TU (util/kernels.h) */

#include "model/ops.h"
#include "model/ops_math.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ISO C mode (-std=c11) disables FMA contraction; the exp polynomial wants it. */
#if defined(__clang__)
#pragma clang fp contract(fast)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=fast")
#endif

int64_t df_lmhead_scratch_floats_tiled(int64_t n, int64_t V, int64_t H, const df_vocab_tiling *t)
{
    df_vocab_tiling c = df_vocab_tiling_clamp(t);
    int64_t G = df_vocab_groups(V, &c);
    int64_t fwd = n * G * (int64_t)(sizeof(df_vstat) / sizeof(float)); /* group statistics */
    int64_t rows = n < c.item_rows ? n : c.item_rows;
    int64_t bwd = G * (rows > 0 ? rows : 1) * H; /* partial dh per group */
    int64_t f = fwd > bwd ? fwd : bwd;
    return f > 0 ? f : 1;
}

int64_t df_lmhead_scratch_floats(int64_t n, int64_t V, int64_t H)
{
    df_vocab_tiling t = df_vocab_tiling_for(V, H);
    return df_lmhead_scratch_floats_tiled(n, V, H, &t);
}

int64_t df_lmhead_scratch_floats16(int64_t n, int64_t V, int64_t H, const df_vocab_tiling *t)
{
    /* The dh parts are written for whole tiles of rows. */
    return df_lmhead_scratch_floats_tiled(df_vocab16_rows(n, t), V, H, t);
}

/* logp[i] = z[i, target[i]] - lse[i] (z_t already in logp), entropy, sum of p^2, from the
 * statistics. */
static void fwd_merge(float *logp, float *entropy, float *sum_pi_sq, float *lse, const df_vstat *st,
                      int64_t n, int64_t G)
{
    for (int64_t i = 0; i < n; i++) {
        df_vrow r;
        df_vstat_merge(st + i * G, G, &r);
        double ls = log(r.s0), l = r.m + ls;
        lse[i] = (float)l;
        logp[i] = (float)((double)logp[i] - l);
        if (entropy)
            entropy[i] = (float)(ls - r.s1 / r.s0);
        if (sum_pi_sq)
            sum_pi_sq[i] = (float)(r.s2 / (r.s0 * r.s0));
    }
}

/* The statistics the outputs asked for. */
static unsigned fwd_flags(const float *entropy, const float *sum_pi_sq)
{
    return (entropy ? DF_VSTAT_ENTROPY : 0u) | (sum_pi_sq ? DF_VSTAT_SUMSQ : 0u);
}

void df_lmhead_fwd_tiled(float *logp, float *entropy, float *sum_pi_sq, float *lse, const float *h,
                         const float *W, const int32_t *target, int64_t n, int64_t V, int64_t H,
                         float temperature, float softcap, const df_vocab_tiling *t, float *scratch)
{
    df_vocab_tiling c = df_vocab_tiling_clamp(t);
    const int64_t G = df_vocab_groups(V, &c);
    df_vstat *st = (df_vstat *)(void *)scratch;
    /* z[i, target[i]] lands in logp first. */
    df_vocab_stats(st, logp, target, h, W, n, V, H, 1.0f / temperature, softcap,
                   fwd_flags(entropy, sum_pi_sq), &c);
    fwd_merge(logp, entropy, sum_pi_sq, lse, st, n, G);
}

int df_lmhead_fwd16(float *logp, float *entropy, float *sum_pi_sq, float *lse, const df_vocab16 *b,
                    const int32_t *target, int64_t n, int64_t V, int64_t H, float temperature,
                    float softcap, const df_vocab_tiling *t, float *scratch)
{
    df_vocab_tiling c = df_vocab_tiling_clamp(t);
    const int64_t G = df_vocab_groups(V, &c);
    df_vstat *st = (df_vstat *)(void *)scratch;
    int rc = df_vocab_stats16(st, logp, target, b, n, V, H, 1.0f / temperature, softcap,
                              fwd_flags(entropy, sum_pi_sq), &c);
    if (!rc)
        fwd_merge(logp, entropy, sum_pi_sq, lse, st, n, G);
    return rc;
}

/* In place on a tile row: z -> dL/dlogits = dz / temperature (chain rule through
 * z = logits / t); gl, ge are dlogp, dentropy already divided by t. With Gemma 2's soft-cap
 * (kc = T / C > 0; 0: none) z = (C / T) tanh(y / C) and dL/dy gains the factor
 * 1 - tanh^2 = 1 - (z kc)^2, done by cap_grad_row. */
static void dlogits_row(float *z, int64_t nv, float l, float gl, float ge, float ent)
{
    const df_v16 lv = df_v16_set1(l), glv = df_v16_set1(gl), gev = df_v16_set1(ge);
    const df_v16 entv = df_v16_set1(ent);
    int64_t j = 0;
    if (ge != 0.0f) {
        for (; j + 16 <= nv; j += 16) {
            df_v16 lp = df_v16_load(z + j) - lv, p = df_v16_exp_softmax(lp);
            df_v16_store(z + j, -glv * p - gev * p * (lp + entv));
        }
    } else {
        for (; j + 16 <= nv; j += 16) {
            df_v16 p = df_v16_exp_softmax(df_v16_load(z + j) - lv);
            df_v16_store(z + j, -glv * p);
        }
    }
    for (; j < nv; j++) {
        float lp = z[j] - l, p = df_expf(lp);
        z[j] = -gl * p - ge * p * (lp + ent);
    }
}

/* The soft-cap's factor on a row of dL/dz (d, in place) from its capped logits' tanh values
 * t[j] = tanh(y_j / C), which the caller saved: d *= 1 - t^2. */
static void cap_grad_row(float *d, const float *t, int64_t nv)
{
#pragma omp simd
    for (int64_t j = 0; j < nv; j++)
        d[j] *= 1.0f - t[j] * t[j];
}

typedef struct {
    float *dW, *part;
    const float *dlogp, *dentropy, *h, *W, *lse, *entropy;
    const int32_t *target;
    int64_t V, H, r0, nr, stride; /* stride: floats between groups' dh parts */
    float inv_t;
    df_vocab_tiling t;
    const df_vocab16 *b; /* mixed precision: bf16 tiles; NULL: float32 */
    int failed;
    float softcap; /* Gemma 2's final-logit cap C (0: none) */
} bwd_job;

/* A tile's GEMM factor (inv_t; with a cap 1 / C, the tile then capped by cap_tile). */
static inline float bwd_alpha(const bwd_job *j)
{
    return j->softcap > 0.0f ? 1.0f / j->softcap : j->inv_t;
}

/* With a cap: tile[n] holds y / C; t[n] = tanh(y / C) and tile = (C / T) t, the forward's values
 * (df_softcap_row's formula). */
static void cap_tile(const bwd_job *j, float *tile, float *t, int64_t n)
{
    memcpy(t, tile, (size_t)n * sizeof(float));
    df_softcap_row(t, n, 1.0f); /* tanh */
    df_softcap_row(tile, n, j->softcap * j->inv_t);
}

/* dL/dlogits of tile rows [rb, rb + nr) x columns [cs, cs + ns), in place; th: the tile's tanh
 * values with a cap (cap_tile), else NULL. */
static void dlogits_tile(const bwd_job *j, float *tile, const float *th, int64_t rb, int64_t nr,
                         int64_t cs, int64_t ns)
{
    for (int64_t i = 0; i < nr; i++) {
        int64_t r = rb + i;
        float gl = j->dlogp ? j->dlogp[r] * j->inv_t : 0.0f;
        float ge = j->dentropy ? j->dentropy[r] * j->inv_t : 0.0f;
        float ent = ge != 0.0f ? j->entropy[r] : 0.0f;
        float *z = tile + i * ns;
        dlogits_row(z, ns, j->lse[r], gl, ge, ent);
        int64_t tg = j->target[r];
        if (tg >= cs && tg < cs + ns)
            z[tg - cs] += gl;
        if (th) /* through the cap: dL/dy = dL/dz (1 - tanh^2) */
            cap_grad_row(z, th + i * ns, ns);
    }
}

/* Column group g over the rows of the job: the group's dW rows (owned) and its
 * partial dh (part[g], [nr, H]). Weight tiles outer, row blocks inner: each W
 * and dW tile stays in cache while all the rows pass. */
static void bwd_item(const bwd_job *j, int64_t g)
{
    float tile[DF_LMHEAD_TILE_MAX] __attribute__((aligned(64)));
    float thb[DF_LMHEAD_TILE_MAX] __attribute__((aligned(64))); /* tanh values with a cap */
    float *th = j->softcap > 0.0f ? thb : NULL;
    const int64_t H = j->H, c0 = g * j->t.group;
    const int64_t c1 = c0 + j->t.group < j->V ? c0 + j->t.group : j->V;
    float *part = j->part + g * j->stride;
    for (int64_t cs = c0; cs < c1; cs += j->t.cols) {
        const int64_t ns = c1 - cs < j->t.cols ? c1 - cs : j->t.cols;
        for (int64_t rb = j->r0; rb < j->r0 + j->nr; rb += j->t.rows) {
            const int64_t nr = j->r0 + j->nr - rb < j->t.rows ? j->r0 + j->nr - rb : j->t.rows;
            df_gemm_nt(nr, ns, H, bwd_alpha(j), j->h + rb * H, j->W + cs * H, 0.0f, tile);
            if (th)
                cap_tile(j, tile, th, nr * ns);
            dlogits_tile(j, tile, th, rb, nr, cs, ns);
            if (j->dW) /* NULL: a frozen head (LoRA) */
                df_gemm_tn(ns, H, nr, 1.0f, tile, j->h + rb * H, 1.0f, j->dW + cs * H);
            df_gemm_nn(nr, H, ns, 1.0f, tile, j->W + cs * H, cs == c0 ? 0.0f : 1.0f,
                       part + (rb - j->r0) * H);
        }
    }
}

/* Columns of dL/dlogits the bf16 backward gathers before its two gradient GEMMs. */
#define BWD16_CHUNK 1024

/* The chunk's columns: a multiple of the tiles' columns within one group. */
static int64_t bwd16_chunk(const df_vocab_tiling *t)
{
    int64_t c = BWD16_CHUNK / t->cols * t->cols;
    c = c < t->cols ? t->cols : c;
    return c < t->group ? c : t->group;
}

/* bwd_item in mixed precision. Per chunk of up to BWD16_CHUNK columns, the item's dL/dlogits
 * are gathered in bf16 (d16 [item rows, chunk], from logits tiles of t.rows rows: b->h is
 * padded with zero rows, whose logits and so d16 rows are 0) and then go through two GEMMs
 * whose reductions span the whole item (dW += d16^T h) and the whole chunk (dh += d16 W).
 * Per tile (reductions of t.rows rows or t.cols columns) they ran at half the bf16 peak in
 * place: every call re-read a dW tile, and every row item the whole dW. The two GEMMs have
 * one primitive per item row count (a multiple of t.rows) and chunk width. */
static int bwd_item16_th(const bwd_job *j, int64_t g, uint16_t *d16, float *th)
{
    float tile[DF_LMHEAD_TILE_MAX] __attribute__((aligned(64)));
    const df_vocab16 *b = j->b;
    const int64_t H = j->H, R = j->t.rows, c0 = g * j->t.group;
    const int64_t c1 = c0 + j->t.group < j->V ? c0 + j->t.group : j->V;
    const int64_t rows = df_vocab16_rows(j->nr, &j->t), C = bwd16_chunk(&j->t);
    const uint16_t *h = b->h + j->r0 * H;
    float *part = j->part + g * j->stride;
    for (int64_t cc = c0; cc < c1; cc += C) {
        const int64_t nc = c1 - cc < C ? c1 - cc : C;
        for (int64_t cs = cc; cs < cc + nc; cs += j->t.cols) {
            const int64_t ns = cc + nc - cs < j->t.cols ? cc + nc - cs : j->t.cols;
            for (int64_t rb = 0; rb < rows; rb += R) {
                const int64_t nr = j->nr - rb < R ? j->nr - rb : R; /* real rows */
                if (df_mm16_tile(b->mm, false, true, R, ns, H, bwd_alpha(j), h + rb * H,
                                 b->W + cs * H, 0.0f, tile))
                    return -1;
                if (j->softcap > 0.0f) /* the padded rows' zeros stay zero */
                    cap_tile(j, tile, th, R * ns);
                if (nr > 0)
                    dlogits_tile(j, tile, j->softcap > 0.0f ? th : NULL, j->r0 + rb, nr, cs, ns);
                for (int64_t i = 0; i < R; i++)
                    df_bf16_from_f32_serial(d16 + (rb + i) * nc + (cs - cc), tile + i * ns, ns);
            }
        }
        if ((j->dW &&
             df_mm16_tile(b->mm, true, false, nc, H, rows, 1.0f, d16, h, 1.0f, j->dW + cc * H)) ||
            df_mm16_tile(b->mm, false, false, rows, H, nc, 1.0f, d16, b->W + cc * H,
                         cc == c0 ? 0.0f : 1.0f, part))
            return -1;
    }
    return 0;
}

/* bwd_item16 with a soft-cap's tanh buffer (heap: a second tile does not belong on the stack). */
static int bwd_item16(const bwd_job *j, int64_t g, uint16_t *d16)
{
    float *th = j->softcap > 0.0f ? aligned_alloc(64, DF_LMHEAD_TILE_MAX * sizeof(float)) : NULL;
    int rc = j->softcap > 0.0f && !th ? -1 : bwd_item16_th(j, g, d16, th);
    free(th);
    return rc;
}

/* Row items of IR rows; per item the groups in parallel, then their dh parts summed in
 * group order. */
static void bwd_run(bwd_job *j, float *dh, float *scratch, int64_t n)
{
    const int64_t G = df_vocab_groups(j->V, &j->t), IR = j->t.item_rows;
    const int64_t first = n < IR ? n : IR;
    j->stride = (j->b ? df_vocab16_rows(first, &j->t) : first) * j->H;
    /* bf16: each thread's dL/dlogits chunk (bwd_item16). */
    const size_t d16_bytes = j->b ? ((size_t)(df_vocab16_rows(first, &j->t) *
                                              bwd16_chunk(&j->t)) * sizeof(uint16_t) + 63) /
                                        64 * 64
                                  : 0;
    for (j->r0 = 0; j->r0 < n; j->r0 += IR) {
        j->nr = n - j->r0 < IR ? n - j->r0 : IR;
        /* Groups own disjoint dW rows; their dh parts are summed in group order. */
#pragma omp parallel if (G > 1)
        {
            uint16_t *d16 = d16_bytes ? aligned_alloc(64, d16_bytes) : NULL;
#pragma omp for schedule(dynamic, 1)
            for (int64_t g = 0; g < G; g++) {
                if (!j->b)
                    bwd_item(j, g);
                else if (!d16 || bwd_item16(j, g, d16)) {
#pragma omp atomic write
                    j->failed = 1;
                }
            }
            free(d16);
        }
        const int64_t len = j->nr * j->H;
        float *out = dh + j->r0 * j->H;
        memcpy(out, scratch, (size_t)len * sizeof(float));
        for (int64_t g = 1; g < G; g++) {
            const float *p = scratch + g * j->stride;
#pragma omp simd
            for (int64_t i = 0; i < len; i++)
                out[i] += p[i];
        }
    }
}

void df_lmhead_bwd_tiled(float *dh, float *dW, const float *dlogp, const float *dentropy,
                         const float *h, const float *W, const int32_t *target, const float *lse,
                         const float *entropy, int64_t n, int64_t V, int64_t H, float temperature,
                         float softcap, const df_vocab_tiling *t, float *scratch)
{
    bwd_job j = {dW, scratch, dlogp, dentropy, h, W, lse, entropy, target, V, H, 0, 0, 0,
                 1.0f / temperature, df_vocab_tiling_clamp(t), NULL, 0, softcap};
    bwd_run(&j, dh, scratch, n);
}

int df_lmhead_bwd16(float *dh, float *dW, const float *dlogp, const float *dentropy,
                    const df_vocab16 *b, const int32_t *target, const float *lse,
                    const float *entropy, int64_t n, int64_t V, int64_t H, float temperature,
                    float softcap, const df_vocab_tiling *t, float *scratch)
{
    bwd_job j = {dW, scratch, dlogp, dentropy, NULL, NULL, lse, entropy, target, V, H, 0, 0, 0,
                 1.0f / temperature, df_vocab_tiling_clamp(t), b, 0, softcap};
    bwd_run(&j, dh, scratch, n);
    return j.failed ? DF_EINTERNAL : DF_OK;
}

void df_lmhead_fwd(float *logp, float *entropy, float *sum_pi_sq, float *lse, const float *h, const float *W,
                   const int32_t *target, int64_t n, int64_t V, int64_t H, float temperature,
                   float softcap, float *scratch)
{
    df_vocab_tiling t = df_vocab_tiling_for(V, H);
    df_lmhead_fwd_tiled(logp, entropy, sum_pi_sq, lse, h, W, target, n, V, H, temperature, softcap, &t,
                        scratch);
}

void df_lmhead_bwd(float *dh, float *dW, const float *dlogp, const float *dentropy,
                   const float *h, const float *W, const int32_t *target, const float *lse,
                   const float *entropy, int64_t n, int64_t V, int64_t H, float temperature,
                   float softcap, float *scratch)
{
    df_vocab_tiling t = df_vocab_tiling_for(V, H);
    df_lmhead_bwd_tiled(dh, dW, dlogp, dentropy, h, W, target, lse, entropy, n, V, H,
                        temperature, softcap, &t, scratch);
}
