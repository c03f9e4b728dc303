/*
 * Token sampling: temperature, top-k, top-p, greedy (src/engine/sampling.h).
 * Weights e^(z - zmax) are double (a vectorised exp, df_row_exp_f64); top-k and
 * top-p become thresholds found with a bucket histogram of the values'
 * leading bits plus an exact selection inside the one boundary bucket, so a
 * row costs a few passes whatever the vocabulary. Draws walk the kept
 * tokens in id order (an inverse CDF over the vocabulary, like
 * torch.multinomial on the filtered probabilities).
 */
#include "engine/kernels_rename.h" /* first: a kernel TU (util/kernels.h) */

#include "engine/sampling.h"
#include "model/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

/* A token and its unnormalised weight exp(z - zmax). */
typedef struct {
    double w;
    int32_t id;
} cand;

#define NSUB 4 /* interleaved sub-histograms: neighbouring tokens often share a bucket */

/* Histogram bits for a vocabulary of V: ~log2(V) - 3, 4 .. 12. */
static int bucket_bits(int64_t V)
{
    int bits = 4;
    while (bits < 12 && ((int64_t)8 << bits) < V)
        bits++;
    return bits;
}

/* Work buffer: double w[V] | cand c[V] (boundary bucket) | double mass[NSUB][nb + 1] |
 * uint32 count[NSUB][nb], nb = 2^bucket_bits(V). */
int64_t df_sample_work_bytes(int64_t V)
{
    int64_t nb = (int64_t)1 << bucket_bits(V);
    return V * (int64_t)(sizeof(double) + sizeof(cand)) +
           NSUB * ((nb + 1) * (int64_t)sizeof(double) + nb * (int64_t)sizeof(uint32_t));
}

typedef struct {
    double *w;
    cand *c;
    double *bmass;    /* [NSUB][nb + 1] */
    uint32_t *bcount; /* [NSUB][nb] */
    int64_t nb;       /* buckets: ~V / 8 rounded to a power of two, 16 .. 4096 */
    int shift;        /* bucket = key >> shift */
} work_view;

static work_view view_of(void *work, int64_t V)
{
    work_view v;
    int bits = bucket_bits(V);
    v.nb = (int64_t)1 << bits;
    v.shift = 32 - bits;
    v.w = work;
    v.c = (cand *)(v.w + V);
    v.bmass = (double *)(v.c + V);
    v.bcount = (uint32_t *)(v.bmass + NSUB * (v.nb + 1));
    return v;
}

/* Which tokens survive top-k then top-p, as thresholds tested token by token. */
typedef struct {
    float x_min;  /* top-k: keep x_v >= x_min (-inf: off) */
    double tau;   /* top-p: keep w_v > tau and the first `ties` ids with w_v == tau (-1: off) */
    int64_t ties;
    double mass;  /* sum of the kept weights */
} keep_rule;

void df_sampling_params_defaults(df_sampling_params *sp)
{
    memset(sp, 0, sizeof *sp);
    sp->temperature = 1.0f;
    sp->top_k = -1;
    sp->top_p = 1.0f;
    sp->max_new_tokens = 512;
}

int df_sampling_params_validate(const df_sampling_params *sp, int64_t vocab)
{
    if (!sp)
        return df_error(DF_EINVAL, "sampling params: NULL");
    if (!sp->greedy && !(sp->temperature >= 0.0f && isfinite(sp->temperature)))
        return df_error(DF_EINVAL, "sampling params: temperature must be >= 0 (got %g)",
                        (double)sp->temperature);
    if (!(sp->top_p > 0.0f && sp->top_p <= 1.0f))
        return df_error(DF_EINVAL, "sampling params: top_p must be in (0, 1] (got %g)",
                        (double)sp->top_p);
    if (sp->max_new_tokens < 1)
        return df_error(DF_EINVAL, "sampling params: max_new_tokens must be >= 1 (got %lld)",
                        (long long)sp->max_new_tokens);
    if (sp->n_stop < 0 || (sp->n_stop > 0 && !sp->stop_ids))
        return df_error(DF_EINVAL, "sampling params: n_stop = %d with stop_ids %s", sp->n_stop,
                        sp->stop_ids ? "set" : "NULL");
    for (int i = 0; i < sp->n_stop; i++)
        if (sp->stop_ids[i] < 0 || sp->stop_ids[i] >= vocab)
            return df_error(DF_EINVAL, "sampling params: stop_ids[%d] = %d is outside [0, %lld)",
                            i, sp->stop_ids[i], (long long)vocab);
    if (sp->n_stop_str < 0 || (sp->n_stop_str > 0 && (!sp->stop || !sp->tokenizer)))
        return df_error(DF_EINVAL, "sampling params: %d stop strings need the strings and a tokenizer",
                        sp->n_stop_str);
    for (int i = 0; i < sp->n_stop_str; i++) {
        size_t n = sp->stop[i] ? strlen(sp->stop[i]) : 0;
        if (n < 1 || n > DF_STOP_STR_MAX)
            return df_error(DF_EINVAL, "sampling params: stop string %d has %zu bytes; it must have 1 to %d",
                            i, n, DF_STOP_STR_MAX);
    }
    return DF_OK;
}

static bool is_greedy(const df_sampling_params *sp) { return sp->greedy || sp->temperature == 0.0f; }

/* Lowest index of the largest logit (vector max, then the first lane equal to it). */
static int32_t argmax_lowest(const float *x, int64_t V)
{
    int64_t j = df_row_find(x, V, df_row_max(x, V));
    return j < V ? (int32_t)j : 0; /* all NaN */
}

/* k-th largest (1-based) of x[0..n), reordering x (Hoare selection). */
static double kth_largest(double *x, int64_t n, int64_t k)
{
    int64_t lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        double a = x[lo], b = x[lo + (hi - lo) / 2], c = x[hi];
        double piv = (a > b) == (b > c) ? b : ((b > a) == (a > c) ? a : c); /* median of 3 */
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (x[i] > piv)
                i++;
            while (x[j] < piv)
                j--;
            if (i <= j) {
                double t = x[i];
                x[i++] = x[j];
                x[j--] = t;
            }
        }
        if (want <= j)
            hi = j;
        else if (want >= i)
            lo = i;
        else
            return x[want];
    }
    return x[want];
}

static int cmp_cand_desc(const void *pa, const void *pb)
{
    const cand *a = pa, *b = pb;
    if (a->w != b->w)
        return a->w > b->w ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static int cmp_cand_id(const void *pa, const void *pb)
{
    const cand *a = pa, *b = pb;
    return (a->id > b->id) - (a->id < b->id);
}

/* Take tokens of c[0..n) in the given order until have reaches need. */
static int64_t take_until(const cand *c, int64_t n, double have, double need)
{
    for (int64_t i = 0; i < n; i++) {
        have += c[i].w;
        if (have >= need)
            return i + 1;
    }
    return n;
}

/* Three-way partition of c[0..n) by weight around piv: > piv, == piv, < piv.
 * Stores the ends of the first two parts in *gt, *eq. */
static void partition3(cand *c, int64_t n, double piv, int64_t *gt, int64_t *eq)
{
    int64_t lo = 0, i = 0, hi = n;
    while (i < hi) {
        cand t = c[i];
        if (t.w > piv) {
            c[i++] = c[lo];
            c[lo++] = t;
        } else if (t.w < piv) {
            c[i] = c[--hi];
            c[hi] = t;
        } else {
            i++;
        }
    }
    *gt = lo;
    *eq = hi;
}

static double mass_of(const cand *c, int64_t n)
{
    double m = 0.0;
    for (int64_t i = 0; i < n; i++)
        m += c[i].w;
    return m;
}

/* Move to c[0..return) the most probable tokens of c[0..n) (ties -> lower id)
 * that bring `have` up to `need`. Quickselect-style: expected O(n), no full sort. */
static int64_t nucleus(cand *c, int64_t n, double have, double need)
{
    int64_t lo = 0, hi = n; /* c[0..lo) kept; the boundary lies in [lo, hi) */
    while (hi - lo > 16) {
        cand *r = c + lo;
        int64_t m = hi - lo, gt, eq;
        double a = r[0].w, b = r[m / 2].w, d = r[m - 1].w;
        double piv = (a > b) == (b > d) ? b : ((b > a) == (a > d) ? a : d);
        partition3(r, m, piv, &gt, &eq);
        double mg = mass_of(r, gt);
        if (have + mg >= need) {
            hi = lo + gt;
            continue;
        }
        have += mg;
        double me = mass_of(r + gt, eq - gt);
        if (have + me >= need) { /* boundary among equal weights: lower ids first */
            qsort(r + gt, (size_t)(eq - gt), sizeof *r, cmp_cand_id);
            return lo + gt + take_until(r + gt, eq - gt, have, need);
        }
        have += me;
        lo += eq;
    }
    qsort(c + lo, (size_t)(hi - lo), sizeof *c, cmp_cand_desc);
    return lo + take_until(c + lo, hi - lo, have, need);
}

/* Order key of a float: a < b <=> key(a) < key(b) (NaN aside). */
static uint32_t fkey(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Highest bucket b < nb with above(b) + part[b] >= need, where above(b) sums
 * the buckets over b; *above receives it. -1 if the total stays short. */
static int64_t boundary_bucket(const double *part, int64_t nb, double need, double *above)
{
    double a = 0.0;
    for (int64_t b = nb - 1; b >= 0; b--) {
        if (a + part[b] >= need) {
            *above = a;
            return b;
        }
        a += part[b];
    }
    *above = a;
    return -1;
}

/* Whether any of bk[0 .. 16) is b. */
static inline bool any16(const uint32_t bk[16], uint32_t b)
{
#if defined(__AVX512F__)
    return _mm512_cmpeq_epi32_mask(_mm512_loadu_si512(bk), _mm512_set1_epi32((int)b)) != 0;
#else
    uint32_t hit = 0;
    for (int l = 0; l < 16; l++)
        hit |= bk[l] == b;
    return hit != 0;
#endif
}

/* Buckets (top bits of the order key) of x[0 .. 16). */
static inline void xbuckets16(uint32_t bk[16], const float *x, int shift)
{
#if defined(__AVX512F__)
    __m512i u = _mm512_castps_si512(_mm512_loadu_ps(x)); /* key = u ^ (sign ? ~0 : 1 << 31) */
    __m512i flip = _mm512_or_si512(_mm512_srai_epi32(u, 31), _mm512_set1_epi32((int)0x80000000u));
    _mm512_storeu_si512(bk, _mm512_srl_epi32(_mm512_xor_si512(u, flip), _mm_cvtsi32_si128(shift)));
#else
    for (int l = 0; l < 16; l++)
        bk[l] = fkey(x[l]) >> shift;
#endif
}

/* The k-th largest logit (1 <= k < V): counts per bucket, then an exact
 * selection among the boundary bucket's values. */
static float kth_largest_logit(const float *x, int64_t V, int64_t k, work_view *wv)
{
    const int64_t nb = wv->nb;
    uint32_t *c = wv->bcount, bk[16];
    memset(c, 0, (size_t)(NSUB * nb) * sizeof *c);
    int64_t v = 0;
    for (; v + 16 <= V; v += 16) {
        xbuckets16(bk, x + v, wv->shift);
        for (int l = 0; l < 16; l++)
            c[(l % NSUB) * nb + bk[l]]++;
    }
    for (; v < V; v++)
        c[fkey(x[v]) >> wv->shift]++;
    double *cnt = wv->bmass, above;
    for (int64_t b = 0; b < nb; b++) {
        uint32_t sum = 0;
        for (int l = 0; l < NSUB; l++)
            sum += c[l * nb + b];
        cnt[b] = (double)sum;
    }
    int64_t b = boundary_bucket(cnt, nb, (double)k, &above);
    double *vals = (double *)(void *)wv->c; /* the cand area is free here */
    int64_t n = 0;
    for (v = 0; v + 16 <= V; v += 16) {
        xbuckets16(bk, x + v, wv->shift);
        if (!any16(bk, (uint32_t)b))
            continue;
        for (int l = 0; l < 16; l++)
            if (bk[l] == (uint32_t)b)
                vals[n++] = x[v + l];
    }
    for (; v < V; v++)
        if ((int64_t)(fkey(x[v]) >> wv->shift) == b)
            vals[n++] = x[v];
    return (float)kth_largest(vals, n, k - (int64_t)above);
}

/* Bucket of a weight w >= 0 (its float's order key, top bits). */
static inline uint32_t wbucket(double w, int shift)
{
    float f = (float)w; /* rounding keeps the order of the weights */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (u | 0x80000000u) >> shift;
}

/* Bucket ids of w[0 .. 16) for top-k survivors (x >= x_min), nb (a spare bucket
 * past the end) for the others. */
static inline void wbuckets16(uint32_t bk[16], const double *w, const float *x, float x_min,
                              int shift, uint32_t nb)
{
#if defined(__AVX512F__) && defined(__AVX512DQ__)
    __m256 f0 = _mm512_cvtpd_ps(_mm512_loadu_pd(w)), f1 = _mm512_cvtpd_ps(_mm512_loadu_pd(w + 8));
    __m512i u = _mm512_castps_si512(_mm512_insertf32x8(_mm512_castps256_ps512(f0), f1, 1));
    u = _mm512_srl_epi32(_mm512_or_si512(u, _mm512_set1_epi32((int)0x80000000u)),
                         _mm_cvtsi32_si128(shift));
    __mmask16 keep = _mm512_cmp_ps_mask(_mm512_loadu_ps(x), _mm512_set1_ps(x_min), _CMP_GE_OQ);
    _mm512_storeu_si512(bk, _mm512_mask_blend_epi32(keep, _mm512_set1_epi32((int)nb), u));
#else
    for (int l = 0; l < 16; l++)
        bk[l] = x[l] >= x_min ? wbucket(w[l], shift) : nb;
#endif
}

/* tau / ties of the nucleus among the tokens with x_v >= kr->x_min: the most
 * probable (ties -> lower id) whose mass first reaches top_p of theirs. */
static void nucleus_rule(const float *x, int64_t V, double top_p, work_view *wv, keep_rule *kr)
{
    const int64_t nb = wv->nb;
    double *m = wv->bmass;
    memset(m, 0, (size_t)(NSUB * (nb + 1)) * sizeof *m);
    const double *w = wv->w, mass = kr->mass; /* of the top-k survivors */
    uint32_t bk[16];
    int64_t v = 0;
    for (; v + 16 <= V; v += 16) { /* sub-histograms of nb + 1 (the last for non-survivors) */
        wbuckets16(bk, w + v, x + v, kr->x_min, wv->shift, (uint32_t)nb);
        for (int l = 0; l < 16; l++)
            m[(l % NSUB) * (nb + 1) + bk[l]] += w[v + l];
    }
    for (; v < V; v++)
        if (x[v] >= kr->x_min)
            m[wbucket(w[v], wv->shift)] += w[v];
    for (int64_t b = 0; b < nb; b++)
        for (int l = 1; l < NSUB; l++)
            m[b] += m[l * (nb + 1) + b];
    double have;
    int64_t b = boundary_bucket(m, nb, top_p * mass, &have);
    if (b < 0) /* rounding left the buckets short of the target: keep all */
        return;
    int64_t n = 0;
    for (v = 0; v + 16 <= V; v += 16) { /* in id order, as nucleus() wants for ties */
        wbuckets16(bk, w + v, x + v, kr->x_min, wv->shift, (uint32_t)nb);
        if (!any16(bk, (uint32_t)b))
            continue;
        for (int l = 0; l < 16; l++)
            if (bk[l] == (uint32_t)b)
                wv->c[n++] = (cand){w[v + l], (int32_t)(v + l)};
    }
    for (; v < V; v++)
        if (x[v] >= kr->x_min && (int64_t)wbucket(w[v], wv->shift) == b)
            wv->c[n++] = (cand){w[v], (int32_t)v};
    int64_t taken = nucleus(wv->c, n, have, top_p * mass);
    double tau = INFINITY;
    for (int64_t i = 0; i < taken; i++)
        tau = wv->c[i].w < tau ? wv->c[i].w : tau;
    kr->tau = tau;
    kr->ties = 0;
    for (int64_t i = 0; i < taken; i++)
        kr->ties += wv->c[i].w == tau;
    kr->mass = have + mass_of(wv->c, taken);
}

/* Weights wv->w[v] = exp(z_v - zmax), z = logits * (1 / T) in double, and the
 * rule for the tokens kept by top-k and top-p; *lse = log sum_v exp(z_v) over
 * the whole vocabulary. */
static void filter(const float *logits, int64_t V, const df_sampling_params *sp, work_view *wv,
                   double *lse, keep_rule *kr)
{
    const double inv_t = 1.0 / (double)sp->temperature;
    /* x -> x * inv_t is monotone, so the max of z is that of the float logits. */
    double zmax = (double)df_row_max(logits, V) * inv_t;
    double total = df_row_exp_f64(wv->w, logits, V, inv_t, zmax);
    *lse = zmax + log(total);
    *kr = (keep_rule){-INFINITY, -1.0, 0, total};
    if (sp->top_k > 0 && sp->top_k < V) {
        kr->x_min = kth_largest_logit(logits, V, sp->top_k, wv);
        double part[4] = {0}; /* independent chains: a double add per token is slow */
        for (int64_t v = 0; v < V; v++)
            part[v % 4] += logits[v] >= kr->x_min ? wv->w[v] : 0.0;
        kr->mass = (part[0] + part[1]) + (part[2] + part[3]);
    }
    if (sp->top_p < 1.0f)
        nucleus_rule(logits, V, sp->top_p, wv, kr);
}

/* Whether token v is kept; *ties counts down the tied tokens at tau still allowed. */
static bool kept(const keep_rule *kr, float x, double w, int64_t *ties)
{
    if (!(x >= kr->x_min))
        return false;
    if (w > kr->tau)
        return true;
    if (w == kr->tau && *ties > 0) {
        (*ties)--;
        return true;
    }
    return false;
}

/* Inverse CDF over the kept tokens in id order: the first kept v whose running
 * kept mass exceeds target. Blocks of 8 are summed branch-free and walked one by
 * one only where the boundary or a tie at tau lies. If rounding leaves target
 * beyond the sum, the most probable token (always kept). */
static int64_t draw_kept(const float *x, int64_t V, const double *w, const keep_rule *kr,
                         double target)
{
    double cum = 0.0;
    int64_t ties = kr->ties, v = 0;
    for (; v + 8 <= V; v += 8) {
        double part[8];
        int tie = 0;
        for (int l = 0; l < 8; l++) {
            part[l] = x[v + l] >= kr->x_min && w[v + l] > kr->tau ? w[v + l] : 0.0;
            tie |= w[v + l] == kr->tau;
        }
        double s = ((part[0] + part[1]) + (part[2] + part[3])) +
                   ((part[4] + part[5]) + (part[6] + part[7]));
        if (!tie && cum + s <= target) {
            cum += s;
            continue;
        }
        for (int l = 0; l < 8; l++)
            if (kept(kr, x[v + l], w[v + l], &ties) && (cum += w[v + l]) > target)
                return v + l;
    }
    for (; v < V; v++)
        if (kept(kr, x[v], w[v], &ties) && (cum += w[v]) > target)
            return v;
    return argmax_lowest(x, V);
}

int32_t df_sample_token(const float *logits, int64_t V, const df_sampling_params *sp,
                        df_rng *rng, void *work, float *logp)
{
    return df_sample_token_u(logits, V, sp, is_greedy(sp) ? 0.0 : df_rng_uniform(rng), work, logp);
}

int32_t df_sample_token_u(const float *logits, int64_t V, const df_sampling_params *sp, double u,
                          void *work, float *logp)
{
    work_view wv = view_of(work, V);
    if (is_greedy(sp)) {
        int32_t tok = argmax_lowest(logits, V);
        if (logp) /* log_softmax(logits)[argmax] = -log sum_v e^(x_v - max) */
            *logp = (float)-log(df_row_exp_f64(wv.w, logits, V, 1.0, (double)logits[tok]));
        return tok;
    }
    double lse;
    keep_rule kr;
    filter(logits, V, sp, &wv, &lse, &kr);
    int64_t tok = draw_kept(logits, V, wv.w, &kr, u * kr.mass);
    if (logp)
        *logp = (float)((double)logits[tok] * (1.0 / (double)sp->temperature) - lse);
    return (int32_t)tok;
}

void df_sample_probs(const float *logits, int64_t V, const df_sampling_params *sp, void *work,
                     double *probs)
{
    memset(probs, 0, (size_t)V * sizeof *probs);
    if (is_greedy(sp)) {
        probs[argmax_lowest(logits, V)] = 1.0;
        return;
    }
    work_view wv = view_of(work, V);
    double lse;
    keep_rule kr;
    filter(logits, V, sp, &wv, &lse, &kr);
    int64_t ties = kr.ties;
    for (int64_t v = 0; v < V; v++)
        if (kept(&kr, logits[v], wv.w[v], &ties))
            probs[v] = wv.w[v] / kr.mass;
}
