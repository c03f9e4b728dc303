/*
 * Softmax statistics over the vocabulary (ops.h): the large-vocabulary kernel
 * behind the LM head and rollout sampling. With a small hidden size the logits
 * GEMM costs ~2 H flops per logit, so the per-logit work after it (max, exp,
 * sums) must be a few vector instructions on data still in cache: each thread
 * computes one [rows, cols] tile of logits into a stack buffer (L2-resident)
 * and reduces it at once with 16-lane loops (df_v16_exp_softmax, no libm calls).
 * Tiles of a (row item, column group) work item are folded into the group's
 * statistics with an online log-sum-exp (Milakov & Gimelshein 2018).
 */
#include "model/kernels_rename.h" /* first: a kernel TU (util/kernels.h) */

#include "model/ops.h"
#include "model/ops_math.h"

#include <math.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

/* ISO C mode (-std=c11) disables FMA contraction; the exp polynomial wants it. */
#if defined(__clang__)
#pragma clang fp contract(fast)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=fast")
#endif

#define ALWAYS_INLINE inline __attribute__((always_inline))

df_vocab_tiling df_vocab_tiling_default(void)
{
    return (df_vocab_tiling){DF_LMHEAD_ROWS, DF_LMHEAD_COLS, DF_LMHEAD_GROUP,
                             DF_LMHEAD_ITEM_ROWS};
}

df_vocab_tiling df_vocab_tiling_for(int64_t V, int64_t H)
{
    df_vocab_tiling t = df_vocab_tiling_default();
    /* A weight tile (cols x H floats) of at most 512 KiB stays in L2 while the
     * item's row blocks pass over it. */
    while (t.cols > 64 && t.cols * H > 131072)
        t.cols /= 2;
    /* The backward's partial dh, G x item_rows x H floats, stays under 16 MiB. */
    int64_t G = (V + t.group - 1) / t.group;
    while (t.item_rows > t.rows && G * t.item_rows * H > ((int64_t)1 << 22))
        t.item_rows /= 2;
    return t;
}

df_vocab_tiling df_vocab_tiling_clamp(const df_vocab_tiling *t)
{
    df_vocab_tiling c = *t;
    c.rows = c.rows < 1 ? 1 : (c.rows > DF_LMHEAD_ROWS ? DF_LMHEAD_ROWS : c.rows);
    int64_t max_cols = DF_LMHEAD_TILE_MAX / c.rows;
    c.cols = c.cols < 1 ? 1 : (c.cols > max_cols ? max_cols : c.cols);
    c.group = c.group < c.cols ? c.cols : (c.group + c.cols - 1) / c.cols * c.cols;
    c.item_rows = c.item_rows < c.rows ? c.rows : (c.item_rows + c.rows - 1) / c.rows * c.rows;
    return c;
}

int64_t df_vocab_groups(int64_t V, const df_vocab_tiling *t)
{
    df_vocab_tiling c = df_vocab_tiling_clamp(t);
    return (V + c.group - 1) / c.group;
}

/* ---- 16-lane row kernels ------------------------------------------------------ */

float df_row_max(const float *z, int64_t n)
{
    df_v16 a = df_v16_set1(-INFINITY), b = a, c = a, d = a;
    int64_t j = 0;
    for (; j + 64 <= n; j += 64) { /* four chains hide the compare latency */
        a = df_v16_max(a, df_v16_load(z + j));
        b = df_v16_max(b, df_v16_load(z + j + 16));
        c = df_v16_max(c, df_v16_load(z + j + 32));
        d = df_v16_max(d, df_v16_load(z + j + 48));
    }
    for (; j + 16 <= n; j += 16)
        a = df_v16_max(a, df_v16_load(z + j));
    float m = df_v16_hmax(df_v16_max(df_v16_max(a, b), df_v16_max(c, d)));
    for (; j < n; j++)
        m = z[j] > m ? z[j] : m;
    return m;
}

int64_t df_row_find(const float *z, int64_t n, float m)
{
    int64_t j = 0;
#if defined(__AVX512F__)
    __m512 mv = _mm512_set1_ps(m);
    for (; j + 16 <= n; j += 16) {
        __mmask16 k = _mm512_cmp_ps_mask(_mm512_loadu_ps(z + j), mv, _CMP_EQ_OQ);
        if (k)
            return j + __builtin_ctz((unsigned)k);
    }
#endif
    for (; j < n; j++)
        if (z[j] == m)
            return j;
    return n;
}

/* s0 += sum e^(z - m); with ENT s1 += sum e^(z - m) (z - m), with SQ s2 += sum e^(2 (z - m));
 * two chains each. */
static ALWAYS_INLINE void row_expsum(const float *z, int64_t n, float m, int ent, int sq, float *s)
{
    const df_v16 mv = df_v16_set1(m);
    df_v16 a0 = df_v16_set1(0.0f), a1 = a0, a2 = a0, b0 = a0, b1 = a0, b2 = a0;
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        df_v16 d = df_v16_load(z + j) - mv, e = df_v16_exp_softmax(d);
        df_v16 d2 = df_v16_load(z + j + 16) - mv, e2 = df_v16_exp_softmax(d2);
        a0 += e;
        b0 += e2;
        if (ent) {
            a1 += e * d;
            b1 += e2 * d2;
        }
        if (sq) {
            a2 += e * e;
            b2 += e2 * e2;
        }
    }
    for (; j + 16 <= n; j += 16) {
        df_v16 d = df_v16_load(z + j) - mv, e = df_v16_exp_softmax(d);
        a0 += e;
        if (ent)
            a1 += e * d;
        if (sq)
            a2 += e * e;
    }
    float t0 = df_v16_hsum(a0 + b0), t1 = ent ? df_v16_hsum(a1 + b1) : 0.0f;
    float t2 = sq ? df_v16_hsum(a2 + b2) : 0.0f;
    for (; j < n; j++) {
        float d = z[j] - m, e = df_expf(d);
        t0 += e;
        t1 += ent ? e * d : 0.0f;
        t2 += sq ? e * e : 0.0f;
    }
    s[0] = t0;
    s[1] = t1;
    s[2] = t2;
}

double df_row_exp(float *w, const float *x, int64_t n, float shift)
{
    const df_v16 sv = df_v16_set1(shift);
    double sum = 0.0;
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        df_v16 e = df_v16_exp_softmax(df_v16_load(x + j) - sv);
        if (w)
            df_v16_store(w + j, e);
        sum += (double)df_v16_hsum(e);
    }
    for (; j < n; j++) {
        float e = df_expf(x[j] - shift);
        if (w)
            w[j] = e;
        sum += (double)e;
    }
    return sum;
}

#if defined(__AVX512F__)
/* e^x on 8 double lanes: Cody-Waite reduction by ln2 (fdlibm's split), Taylor
 * series to r^12 (truncation < 2e-16 relative on |r| <= ln2 / 2), vscalefpd for
 * 2^n with gradual underflow. Within a few ulp of libm's exp. */
static inline __m512d v8d_exp(__m512d x)
{
    static const double c[13] = {1.0 / 479001600, 1.0 / 39916800, 1.0 / 3628800, 1.0 / 362880,
                                 1.0 / 40320,     1.0 / 5040,     1.0 / 720,     1.0 / 120,
                                 1.0 / 24,        1.0 / 6,        0.5,           1.0,
                                 1.0};
    x = _mm512_max_pd(x, _mm512_set1_pd(-746.0));
    x = _mm512_min_pd(x, _mm512_set1_pd(710.0));
    __m512d n = _mm512_roundscale_pd(_mm512_mul_pd(x, _mm512_set1_pd(1.4426950408889634)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512d r = _mm512_fnmadd_pd(n, _mm512_set1_pd(6.93147180369123816490e-01), x);
    r = _mm512_fnmadd_pd(n, _mm512_set1_pd(1.90821492927058770002e-10), r);
    __m512d p = _mm512_set1_pd(c[0]);
    for (int i = 1; i < 13; i++)
        p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(c[i]));
    return _mm512_scalef_pd(p, n);
}
#endif

double df_row_exp_f64(double *w, const float *x, int64_t n, double scale, double shift)
{
    double sum = 0.0;
    int64_t j = 0;
#if defined(__AVX512F__)
    __m512d acc = _mm512_setzero_pd();
    const __m512d sc = _mm512_set1_pd(scale), sh = _mm512_set1_pd(shift);
    for (; j + 8 <= n; j += 8) {
        __m512d z = _mm512_mul_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + j)), sc);
        __m512d e = v8d_exp(_mm512_sub_pd(z, sh));
        _mm512_storeu_pd(w + j, e);
        acc = _mm512_add_pd(acc, e);
    }
    sum = _mm512_reduce_add_pd(acc);
#endif
    for (; j < n; j++) {
        double z = (double)x[j] * scale;
        w[j] = exp(z - shift);
        sum += w[j];
    }
    return sum;
}

/* ---- statistics of one work item ---------------------------------------------- */

/* Fold one tile row z[0..ns) (vocabulary columns c0..) into r. */
static void fold_tile_row(df_vstat *r, const float *z, int64_t ns, int64_t c0, unsigned flags)
{
    float mb = df_row_max(z, ns);
    if (mb > r->m) {
        if (r->s0 > 0.0) { /* rescale to the new max: z - m_new = (z - m_old) + dm */
            double dm = (double)r->m - (double)mb, a = exp(dm);
            r->s1 = a * (r->s1 + dm * r->s0);
            r->s0 *= a;
            r->s2 *= a * a;
        }
        r->m = mb;
        if (flags & DF_VSTAT_ARGMAX)
            r->arg = (int32_t)(c0 + df_row_find(z, ns, mb));
    }
    float s[3];
    switch (flags & (DF_VSTAT_ENTROPY | DF_VSTAT_SUMSQ)) { /* constant flags: four loops */
    case DF_VSTAT_ENTROPY | DF_VSTAT_SUMSQ: row_expsum(z, ns, r->m, 1, 1, s); break;
    case DF_VSTAT_ENTROPY: row_expsum(z, ns, r->m, 1, 0, s); break;
    case DF_VSTAT_SUMSQ: row_expsum(z, ns, r->m, 0, 1, s); break;
    default: row_expsum(z, ns, r->m, 0, 0, s); break;
    }
    r->s0 += s[0];
    r->s1 += s[1];
    r->s2 += s[2];
}

typedef struct {
    df_vstat *st;
    float *zt;
    const int32_t *target;
    const float *h, *W;
    const df_vocab16 *b; /* mixed precision: bf16 tiles; NULL: float32 (h, W) */
    int64_t n, V, H, G;
    float inv_t;
    float softcap; /* Gemma 2's final-logit cap (0: none) */
    unsigned flags;
    df_vocab_tiling t;
    int failed;
} stats_job;

/* The factor of a logits tile's GEMM: inv_t, or with a soft-cap C 1 / C (the tile then holds
 * y / C, which df_softcap_row turns into (C / T) tanh(y / C)). */
static inline float tile_alpha(float inv_t, float softcap)
{
    return softcap > 0.0f ? 1.0f / softcap : inv_t;
}

/* C[M, nc] = alpha A W[c0 .. c0 + nc)^T on b's bf16 head, row-major or packed. */
static int head16_tile(const df_vocab16 *b, int64_t M, int64_t c0, int64_t nc, int64_t H,
                       float alpha, const uint16_t *A, float *C)
{
    if (b->packed_stride)
        return df_mm16_tile_packed(b->mm, M, nc, H, alpha, A, b->W + c0 * b->packed_stride, C);
    return df_mm16_tile(b->mm, false, true, M, nc, H, alpha, A, b->W + c0 * H, 0.0f, C);
}

/* tile[nr, ns] = alpha h[rb.., :] W[cs.., :]^T: oneDNN sgemm, or the bf16 tile matmul. */
static int logits_tile(const df_vocab16 *b, const float *h, const float *W, int64_t rb,
                       int64_t cs, int64_t nr, int64_t ns, int64_t H, float alpha, float *tile)
{
    if (!b) {
        df_gemm_nt(nr, ns, H, alpha, h + rb * H, W + cs * H, 0.0f, tile);
        return 0;
    }
    return head16_tile(b, nr, cs, ns, H, alpha, b->h + rb * H, tile);
}

int64_t df_vocab16_rows(int64_t n, const df_vocab_tiling *t)
{
    df_vocab_tiling c = df_vocab_tiling_clamp(t);
    return (n + c.rows - 1) / c.rows * c.rows;
}

/* Rows [r0, r1) of group g: tiles outer, row blocks inner, so each weight tile
 * is read from memory once and stays in cache for all the item's rows. bf16 tiles always
 * have t.rows rows (h is padded): one primitive shape whatever n is. */
static int stats_item(const stats_job *j, int64_t r0, int64_t r1, int64_t g)
{
    float tile[DF_LMHEAD_TILE_MAX] __attribute__((aligned(64)));
    const int64_t H = j->H, G = j->G, c0 = g * j->t.group;
    const int64_t c1 = c0 + j->t.group < j->V ? c0 + j->t.group : j->V;
    for (int64_t r = r0; r < r1; r++)
        j->st[r * G + g] = (df_vstat){.m = -INFINITY, .arg = (int32_t)c0};
    for (int64_t cs = c0; cs < c1; cs += j->t.cols) {
        const int64_t ns = c1 - cs < j->t.cols ? c1 - cs : j->t.cols;
        for (int64_t rb = r0; rb < r1; rb += j->t.rows) {
            const int64_t nr = r1 - rb < j->t.rows ? r1 - rb : j->t.rows;
            if (logits_tile(j->b, j->h, j->W, rb, cs, j->b ? j->t.rows : nr, ns, H,
                            tile_alpha(j->inv_t, j->softcap), tile))
                return -1;
            if (j->softcap > 0.0f)
                df_softcap_row(tile, nr * ns, j->softcap * j->inv_t);
            for (int64_t i = 0; i < nr; i++) {
                const float *z = tile + i * ns;
                fold_tile_row(&j->st[(rb + i) * G + g], z, ns, cs, j->flags);
                if (j->zt) {
                    int64_t tg = j->target[rb + i];
                    if (tg >= cs && tg < cs + ns)
                        j->zt[rb + i] = z[tg - cs];
                }
            }
        }
    }
    return 0;
}

static int stats_run(stats_job *j)
{
    j->G = df_vocab_groups(j->V, &j->t);
    const int64_t IR = j->t.item_rows, n = j->n, n_ib = (n + IR - 1) / IR, items = n_ib * j->G;
    /* Each item owns column g of st for its rows, so the schedule cannot change
     * any value. */
#pragma omp parallel for schedule(dynamic, 1) if (items > 1)
    for (int64_t it = 0; it < items; it++) {
        int64_t r0 = it / j->G * IR, r1 = r0 + IR < n ? r0 + IR : n;
        if (stats_item(j, r0, r1, it % j->G)) {
#pragma omp atomic write
            j->failed = 1;
        }
    }
    return j->failed;
}

void df_vocab_stats(df_vstat *st, float *zt, const int32_t *target, const float *h,
                    const float *W, int64_t n, int64_t V, int64_t H, float inv_t, float softcap,
                    unsigned flags, const df_vocab_tiling *t)
{
    stats_job j = {st, zt, target, h, W, NULL, n, V, H, 0, inv_t, softcap, flags,
                   df_vocab_tiling_clamp(t), 0};
    (void)stats_run(&j); /* float32 sgemm cannot fail */
}

int df_vocab_stats16(df_vstat *st, float *zt, const int32_t *target, const df_vocab16 *b,
                     int64_t n, int64_t V, int64_t H, float inv_t, float softcap, unsigned flags,
                     const df_vocab_tiling *t)
{
    stats_job j = {st, zt, target, NULL, NULL, b, n, V, H, 0, inv_t, softcap, flags,
                   df_vocab_tiling_clamp(t), 0};
    return stats_run(&j) ? DF_EINTERNAL : DF_OK;
}

void df_vstat_merge(const df_vstat *st, int64_t G, df_vrow *out)
{
    double m = -INFINITY, s0 = 0.0, s1 = 0.0, s2 = 0.0;
    int32_t arg = st[0].arg;
    for (int64_t g = 0; g < G; g++)
        if (st[g].m > m) { /* strict: on ties the lower group (lower ids) wins */
            m = st[g].m;
            arg = st[g].arg;
        }
    for (int64_t g = 0; g < G; g++) {
        if (!(st[g].s0 > 0.0))
            continue;
        double dm = (double)st[g].m - m, a = exp(dm);
        s0 += a * st[g].s0;
        s1 += a * (st[g].s1 + dm * st[g].s0);
        s2 += a * a * st[g].s2;
    }
    *out = (df_vrow){.m = m, .s0 = s0, .s1 = s1, .s2 = s2, .arg = arg};
}

/* ---- inverse-CDF draw ------------------------------------------------------------ */

/* Index of the last positive w[j], j < n, or -1. */
static int64_t last_positive(const float *w, int64_t n)
{
    for (int64_t j = n - 1; j >= 0; j--)
        if (w[j] > 0.0f)
            return j;
    return -1;
}

int64_t df_row_cdf_find(const float *w, int64_t n, double target)
{
    /* Sequential on purpose: exactly the running sum the doc promises, and a
     * draw scans only one group. */
    double cum = 0.0;
    for (int64_t j = 0; j < n; j++)
        if ((cum += (double)w[j]) > target)
            return j;
    int64_t last = last_positive(w, n);
    return last >= 0 ? last : n - 1;
}

/* df_vocab_draw over float32 (b NULL: h_row, W) or bf16 operands (row r of b->h). */
static int32_t draw(const df_vstat *st, int64_t G, const df_vrow *row, double u,
                    const float *h_row, const float *W, const df_vocab16 *b, int64_t r,
                    int64_t V, int64_t H, float inv_t, float softcap, const df_vocab_tiling *t,
                    float *buf, float *z_tok)
{
    df_vocab_tiling c = df_vocab_tiling_clamp(t);
    /* Group masses as df_vstat_merge sums them, so their prefix sums reach
     * row->s0 exactly and any u < 1 lands in some group. */
    const double M = row->m, target = u * row->s0;
    double cum = 0.0, scale = 1.0;
    int64_t gs = -1;
    for (int64_t g = 0; g < G; g++) {
        if (!(st[g].s0 > 0.0))
            continue;
        double a = exp((double)st[g].m - M), w = a * st[g].s0;
        gs = g, scale = a; /* the last group with mass, should rounding leave u past it */
        if (cum + w > target)
            break;
        cum += w;
    }
    if (gs < 0)
        gs = 0;
    /* Within the group, in its own scale e^(z - m_g). */
    double tg = (target - cum) / scale;
    int64_t c0 = gs * c.group, nc = V - c0 < c.group ? V - c0 : c.group;
    if (!b)
        df_gemm_nt(1, nc, H, tile_alpha(inv_t, softcap), h_row, W + c0 * H, 0.0f, buf);
    else if (head16_tile(b, 1, c0, nc, H, tile_alpha(inv_t, softcap), b->h + r * H, buf))
        return -1;
    if (softcap > 0.0f) /* as df_vocab_stats made them */
        df_softcap_row(buf, nc, softcap * inv_t);
    float *w = buf + c.group; /* weights e^(z - m_g) of the group */
    df_row_exp(w, buf, nc, st[gs].m);
    int64_t j = df_row_cdf_find(w, nc, tg);
    *z_tok = buf[j];
    return (int32_t)(c0 + j);
}

int32_t df_vocab_draw(const df_vstat *st, int64_t G, const df_vrow *row, double u,
                      const float *h_row, const float *W, int64_t V, int64_t H, float inv_t,
                      float softcap, const df_vocab_tiling *t, float *buf, float *z_tok)
{
    return draw(st, G, row, u, h_row, W, NULL, 0, V, H, inv_t, softcap, t, buf, z_tok);
}

int32_t df_vocab_draw16(const df_vstat *st, int64_t G, const df_vrow *row, double u,
                        const df_vocab16 *b, int64_t row_index, int64_t V, int64_t H,
                        float inv_t, float softcap, const df_vocab_tiling *t, float *buf,
                        float *z_tok)
{
    return draw(st, G, row, u, NULL, NULL, b, row_index, V, H, inv_t, softcap, t, buf, z_tok);
}
