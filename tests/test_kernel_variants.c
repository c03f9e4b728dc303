/*
 * test_kernel_variants.c — the kernel variants (generic / avx2 / avx512,
 * include/distflow/platform.h) compute the same functions. Each multi-compiled
 * op of ops_basic.c and ops_attention*.c runs under every variant this CPU
 * supports on the same inputs; any two results must differ by at most twice a
 * bound on one variant's rounding error, derived per element from the op's
 * arithmetic and the magnitudes of its terms (kvariants.h, tolerance.h), with
 * the exact values computed in double. test_kernel_variants_vocab.c covers the
 * LM head, sampling, decode attention and the optimizer.
 * A build or CPU with one variant skips these tests.
 */
#include "kvariants.h"

#include "geglu_ref.h"
#include "model/ops.h"
#include "model/ops_attention_vec.h"

#define PAIRS(l, a, b)                                                                            \
    for (int a = 0; a < (l).n; a++)                                                               \
        for (int b = a + 1; b < (l).n; b++)

/* ---- RMSNorm -------------------------------------------------------------------- */

/*
 * rstd = 1 / sqrt(sum x^2 / H + eps): the sum of squares is a dot product
 * (gamma_H, all terms positive), then / H, + eps, sqrt (halves a relative
 * error), 1 / . : |rstd error| <= gamma_{H+4} rstd. out = w (x rstd): two more
 * roundings, gamma_{H+6} |w x| rstd.
 */
static void test_rmsnorm_fwd(void **state)
{
    (void)state;
    kv_list l = kv_runnable();
    KV_REQUIRE_TWO(l);
    const int64_t T = 37, H = 96;
    const float eps = 1e-6f;
    float *x = kv_fvec(T * H), *w = kv_fvec(H), *out[KV_MAX], *rstd[KV_MAX];
    kv_fill(x, T * H, 1, -3.0, 3.0);
    kv_fill(w, H, 2, 0.5, 1.5);
    for (int v = 0; v < l.n; v++) {
        out[v] = kv_fvec(T * H), rstd[v] = kv_fvec(T);
        kv_use(l.name[v]);
        df_rmsnorm_fwd(out[v], rstd[v], x, w, T, H, eps);
    }
    kv_restore();
    double *bo = kv_dvec(T * H), *br = kv_dvec(T);
    for (int64_t t = 0; t < T; t++) {
        double ss = 0.0;
        for (int64_t i = 0; i < H; i++)
            ss += (double)x[t * H + i] * x[t * H + i];
        double r = 1.0 / sqrt(ss / (double)H + eps);
        br[t] = kv_g((double)H + 4) * r;
        for (int64_t i = 0; i < H; i++)
            bo[t * H + i] = kv_g((double)H + 6) * fabs((double)w[i] * x[t * H + i]) * r;
    }
    PAIRS(l, a, b)
    {
        kv_check_f("rmsnorm out", l.name[a], out[a], l.name[b], out[b], bo, T * H);
        kv_check_f("rmsnorm rstd", l.name[a], rstd[a], l.name[b], rstd[b], br, T);
    }
    for (int v = 0; v < l.n; v++)
        free(out[v]), free(rstd[v]);
    free(x), free(w), free(bo), free(br);
}

/*
 * dot = sum_i dout w x (two products a term: gamma_{H+1}); c = dot rstd^2 / H
 * (three roundings); dx = rstd (dout w - x c) (four roundings on the terms);
 * dw = sum_t dout x rstd (two products a term, T terms: gamma_{T+2}).
 */
static void test_rmsnorm_bwd(void **state)
{
    (void)state;
    kv_list l = kv_runnable();
    KV_REQUIRE_TWO(l);
    const int64_t T = 29, H = 80;
    float *x = kv_fvec(T * H), *w = kv_fvec(H), *dout = kv_fvec(T * H), *rstd = kv_fvec(T);
    float *dx[KV_MAX], *dw[KV_MAX];
    kv_fill(x, T * H, 3, -2.0, 2.0);
    kv_fill(w, H, 4, 0.5, 1.5);
    kv_fill(dout, T * H, 5, -1.0, 1.0);
    kv_fill(rstd, T, 6, 0.5, 1.0);
    for (int v = 0; v < l.n; v++) {
        dx[v] = kv_fvec(T * H), dw[v] = kv_fvec(H);
        memset(dx[v], 0, (size_t)(T * H) * sizeof(float));
        memset(dw[v], 0, (size_t)H * sizeof(float));
        kv_use(l.name[v]);
        df_rmsnorm_bwd(dx[v], dw[v], dout, x, w, rstd, T, H);
    }
    kv_restore();
    double *bx = kv_dvec(T * H), *bw = kv_dvec(H);
    for (int64_t t = 0; t < T; t++) {
        const float *xr = x + t * H, *dr = dout + t * H;
        double r = rstd[t], dot = 0.0, adot = 0.0;
        for (int64_t i = 0; i < H; i++) {
            dot += (double)dr[i] * w[i] * xr[i];
            adot += fabs((double)dr[i] * w[i] * xr[i]);
        }
        double c = dot * r * r / (double)H;
        double dc = (kv_g((double)H + 1) * adot + kv_g(3) * fabs(dot)) * r * r / (double)H;
        for (int64_t i = 0; i < H; i++) {
            double g = fabs((double)dr[i] * w[i]), xc = fabs((double)xr[i] * c);
            bx[t * H + i] = r * (fabs((double)xr[i]) * dc + kv_g(4) * (g + xc + fabs(xr[i]) * dc));
            bw[i] += kv_g((double)T + 2) * fabs((double)dr[i] * xr[i] * r);
        }
    }
    PAIRS(l, a, b)
    {
        kv_check_f("rmsnorm dx", l.name[a], dx[a], l.name[b], dx[b], bx, T * H);
        kv_check_f("rmsnorm dw", l.name[a], dw[a], l.name[b], dw[b], bw, H);
    }
    for (int v = 0; v < l.n; v++)
        free(dx[v]), free(dw[v]);
    free(x), free(w), free(dout), free(rstd), free(bx), free(bw);
}

/* ---- RoPE and SwiGLU ---------------------------------------------------------------- */

/* x' = x0 c - x1 s with c, s from the same table: three roundings, gamma_3 (|x0 c| + |x1 s|). */
static void test_rope(void **state)
{
    (void)state;
    kv_list l = kv_runnable();
    KV_REQUIRE_TWO(l);
    const int64_t T = 19, nh = 3, hd = 64, P = 40, half = hd / 2;
    float *x = kv_fvec(T * nh * hd), *cs = kv_fvec(P * half), *sn = kv_fvec(P * half);
    int32_t pos[19];
    for (int64_t t = 0; t < T; t++)
        pos[t] = (int32_t)((t * 7) % P);
    kv_fill(x, T * nh * hd, 7, -2.0, 2.0);
    df_rope_table(cs, sn, P, hd, 10000.0); /* the same table for every variant */
    float *y[KV_MAX];
    for (int v = 0; v < l.n; v++) {
        y[v] = kv_fvec(T * nh * hd);
        memcpy(y[v], x, (size_t)(T * nh * hd) * sizeof(float));
        kv_use(l.name[v]);
        df_rope_apply(y[v], pos, T, nh, hd, hd, cs, sn, false);
    }
    kv_restore();
    double *bd = kv_dvec(T * nh * hd);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < nh; h++)
            for (int64_t i = 0; i < half; i++) {
                int64_t o = t * nh * hd + h * hd + i;
                double c = cs[pos[t] * half + i], s = sn[pos[t] * half + i];
                double m = fabs(x[o] * c) + fabs(x[o + half] * s);
                bd[o] = kv_g(3) * m;
                bd[o + half] = kv_g(3) * (fabs(x[o + half] * c) + fabs(x[o] * s));
            }
    PAIRS(l, a, b)
    kv_check_f("rope", l.name[a], y[a], l.name[b], y[b], bd, T * nh * hd);
    for (int v = 0; v < l.n; v++)
        free(y[v]);
    free(x), free(cs), free(sn), free(bd);
}

/*
 * out = g / (1 + e^-g) up: e^-g within E (kv_exp_err), 1 + e within E + u,
 * then a division and a product: (E + gamma_3) |out|. The backward with
 * s = sigmoid(g) (within E + gamma_2): dup = dout g s (two more roundings);
 * dgate = dout up s A, A = 1 + g (1 - s), where 1 - s cancels: |dA| <= |g|
 * (ds + u |1 - s|) + gamma_2 |A| + ..., then three products.
 */
static void test_swiglu(void **state)
{
    (void)state;
    kv_list l = kv_runnable();
    KV_REQUIRE_TWO(l);
    const int64_t n = 1000;
    float *g = kv_fvec(n), *up = kv_fvec(n), *dout = kv_fvec(n);
    float *out[KV_MAX], *dg[KV_MAX], *du[KV_MAX];
    kv_fill(g, n, 8, -12.0, 12.0);
    kv_fill(up, n, 9, -2.0, 2.0);
    kv_fill(dout, n, 10, -1.0, 1.0);
    for (int v = 0; v < l.n; v++) {
        out[v] = kv_fvec(n), dg[v] = kv_fvec(n), du[v] = kv_fvec(n);
        kv_use(l.name[v]);
        df_swiglu_fwd(out[v], g, up, n);
        df_swiglu_bwd(dg[v], du[v], dout, g, up, n);
    }
    kv_restore();
    const double E = kv_exp_err();
    double *bo = kv_dvec(n), *bg = kv_dvec(n), *bu = kv_dvec(n);
    for (int64_t i = 0; i < n; i++) {
        double gi = g[i], s = 1.0 / (1.0 + exp(-gi)), ds = s * (E + kv_g(2));
        bo[i] = (E + kv_g(3)) * fabs(gi * s * up[i]);
        bu[i] = (E + kv_g(4)) * fabs(dout[i] * gi * s);
        double A = 1.0 + gi * (1.0 - s);
        double dA = fabs(gi) * (ds + KV_U * (1.0 - s)) + kv_g(2) * (fabs(A) + fabs(gi * (1.0 - s)));
        double du_ = fabs((double)dout[i] * up[i]);
        bg[i] = du_ * (ds * fabs(A) + s * dA + ds * dA) + kv_g(3) * du_ * (s + ds) * (fabs(A) + dA);
    }
    PAIRS(l, a, b)
    {
        kv_check_f("swiglu out", l.name[a], out[a], l.name[b], out[b], bo, n);
        kv_check_f("swiglu dgate", l.name[a], dg[a], l.name[b], dg[b], bg, n);
        kv_check_f("swiglu dup", l.name[a], du[a], l.name[b], du[b], bu, n);
    }
    for (int v = 0; v < l.n; v++)
        free(out[v]), free(dg[v]), free(du[v]);
    free(g), free(up), free(dout), free(bo), free(bg), free(bu);
}

/* GeGLU: each variant within tests/geglu_ref.h's bound of the exact value, so two within the
 * sum of theirs. */
static void test_geglu(void **state)
{
    (void)state;
    kv_list l = kv_runnable();
    KV_REQUIRE_TWO(l);
    const int64_t n = 1000;
    float *g = kv_fvec(n), *up = kv_fvec(n), *dout = kv_fvec(n);
    float *out[KV_MAX], *dg[KV_MAX], *du[KV_MAX];
    kv_fill(g, n, 11, -12.0, 12.0);
    kv_fill(up, n, 12, -2.0, 2.0);
    kv_fill(dout, n, 13, -1.0, 1.0);
    for (int v = 0; v < l.n; v++) {
        out[v] = kv_fvec(n), dg[v] = kv_fvec(n), du[v] = kv_fvec(n);
        kv_use(l.name[v]);
        df_geglu_fwd(out[v], g, up, n);
        df_geglu_bwd(dg[v], du[v], dout, g, up, n);
    }
    kv_restore();
    double *bo = kv_dvec(n), *bg = kv_dvec(n), *bu = kv_dvec(n);
    for (int64_t i = 0; i < n; i++) {
        const geglu_ref r = geglu_ref_at(g[i], up[i], dout[i], kv_exp_err(), KV_U);
        bo[i] = 2 * r.bout, bg[i] = 2 * r.bdgate, bu[i] = 2 * r.bdup;
    }
    PAIRS(l, a, b)
    {
        kv_check_f("geglu out", l.name[a], out[a], l.name[b], out[b], bo, n);
        kv_check_f("geglu dgate", l.name[a], dg[a], l.name[b], dg[b], bg, n);
        kv_check_f("geglu dup", l.name[a], du[a], l.name[b], du[b], bu, n);
    }
    for (int v = 0; v < l.n; v++)
        free(out[v]), free(dg[v]), free(du[v]);
    free(g), free(up), free(dout), free(bo), free(bg), free(bu);
}

/* ---- attention ------------------------------------------------------------------- */

typedef struct {
    int64_t n_seqs, nh, nkv, hd, T;
    const int64_t *off;
    float *q, *k, *v, *dout;
} att_in;

static att_in att_make(const int64_t *off, int64_t n_seqs, int64_t nh, int64_t nkv, int64_t hd,
                       uint64_t seed)
{
    att_in a = {n_seqs, nh, nkv, hd, off[n_seqs], off, NULL, NULL, NULL, NULL};
    a.q = kv_fvec(a.T * nh * hd), a.dout = kv_fvec(a.T * nh * hd);
    a.k = kv_fvec(a.T * nkv * hd), a.v = kv_fvec(a.T * nkv * hd);
    kv_fill(a.q, a.T * nh * hd, seed, -1.5, 1.5);
    kv_fill(a.k, a.T * nkv * hd, seed + 1, -1.5, 1.5);
    kv_fill(a.v, a.T * nkv * hd, seed + 2, -1.0, 1.0);
    kv_fill(a.dout, a.T * nh * hd, seed + 3, -1.0, 1.0);
    return a;
}

static void att_free(att_in *a) { free(a->q), free(a->k), free(a->v), free(a->dout); }

/* Exact score of query row R (head h) against key row J, and the sum of |terms|, both scaled. */
static double att_score(const att_in *a, int64_t R, int64_t J, int64_t h, double *abs_sum)
{
    const int64_t hd = a->hd, g = h / (a->nh / a->nkv);
    const float *q = a->q + R * a->nh * hd + h * hd, *k = a->k + J * a->nkv * hd + g * hd;
    double s = 0.0, m = 0.0, scale = 1.0 / sqrt((double)hd);
    for (int64_t d = 0; d < hd; d++) {
        s += (double)q[d] * k[d];
        m += fabs((double)q[d] * k[d]);
    }
    *abs_sum = m * scale;
    return s * scale;
}

/*
 * One query row (R, head h) of a sequence starting at r0: exact out, lse, and
 * bounds on one variant's error. A score carries gamma_{hd+1} D (D = the
 * scaled sum of |q_d k_d|); the shift by the running max cancels between
 * numerator and denominator, so a weight w_j = e^(s_j - m) is off by a factor
 * within e^(eps_j + u |s_j - m| + E) and each of the nt tiles' rescalings by
 * e^(E + u (range + 2)). Sums of i + 1 weighted rows: gamma_{i+3} (numerator),
 * gamma_{i+1+nt} (denominator), then out = N / l in two roundings.
 */
static void att_row_ref(const att_in *a, int64_t r0, int64_t i, int64_t h, double *out,
                        double *bout, double *lse, double *blse)
{
    const int64_t hd = a->hd, g = h / (a->nh / a->nkv), R = r0 + i;
    double s[256], D[256], m = -INFINITY, emax = 0.0, range = 0.0, W = 0.0;
    for (int64_t j = 0; j <= i; j++) {
        s[j] = att_score(a, R, r0 + j, h, &D[j]);
        m = s[j] > m ? s[j] : m;
        emax = fmax(emax, kv_g((double)hd + 1) * D[j]);
    }
    for (int64_t j = 0; j <= i; j++) {
        range = fmax(range, m - s[j]);
        W += exp(s[j] - m);
    }
    const double E = kv_exp_err(), nt = (double)((i + DF_ATTN_BK) / DF_ATTN_BK);
    const double eta = kv_grow(emax + KV_U * range + E + nt * (E + KV_U * (range + 2)));
    const double gn = kv_g((double)i + 3), gd = kv_g((double)i + 1 + nt);
    for (int64_t d = 0; d < hd; d++) {
        double num = 0.0, A = 0.0;
        for (int64_t j = 0; j <= i; j++) {
            double vj = a->v[(r0 + j) * a->nkv * hd + g * hd + d], w = exp(s[j] - m);
            num += w * vj;
            A += w * fabs(vj);
        }
        out[d] = num / W;
        A /= W;
        bout[d] = ((eta + gn) * A + (eta + gd) * fabs(out[d])) / (1.0 - eta - gd) +
                  kv_g(2) * fabs(out[d]);
    }
    *lse = m + log(W);
    *blse = emax + 2.0 * (eta + gd) / (1.0 - eta - gd) + kv_g(2) * (fabs(m) + fabs(log(W)));
}

static void check_attention_fwd(const int64_t *off, int64_t n_seqs, int64_t hd)
{
    kv_list l = kv_runnable();
    KV_REQUIRE_TWO(l);
    const int64_t nh = 4, nkv = 2;
    att_in a = att_make(off, n_seqs, nh, nkv, hd, 11 + (uint64_t)hd);
    const int64_t T = a.T, no = T * nh * hd;
    float *out[KV_MAX], *lse[KV_MAX];
    for (int v = 0; v < l.n; v++) {
        out[v] = kv_fvec(no), lse[v] = kv_fvec(T * nh);
        kv_use(l.name[v]);
        df_attention_fwd(out[v], lse[v], a.q, a.k, a.v, off, n_seqs, nh, nkv, hd, 0, 0.0f);
    }
    kv_restore();
    double *bo = kv_dvec(no), *bl = kv_dvec(T * nh), ref[DF_MAX_HEAD_DIM], x;
    for (int64_t sq = 0; sq < n_seqs; sq++)
        for (int64_t i = 0; i < off[sq + 1] - off[sq]; i++)
            for (int64_t h = 0; h < nh; h++) {
                int64_t R = off[sq] + i;
                att_row_ref(&a, off[sq], i, h, ref, bo + R * nh * hd + h * hd, &x,
                            bl + R * nh + h);
            }
    PAIRS(l, p, q)
    {
        kv_check_f("attention out", l.name[p], out[p], l.name[q], out[q], bo, no);
        kv_check_f("attention lse", l.name[p], lse[p], l.name[q], lse[q], bl, T * nh);
    }
    for (int v = 0; v < l.n; v++)
        free(out[v]), free(lse[v]);
    free(bo), free(bl);
    att_free(&a);
}

/* Register-blocked kernels (hd a multiple of 16) and the generic ones (hd = 24). */
static void test_attention_fwd(void **state)
{
    (void)state;
    const int64_t off[4] = {0, 1, 34, 104};
    check_attention_fwd(off, 3, 64);
    check_attention_fwd(off, 3, 24);
}

/* Per (query row, key) quantities of the backward, exact, with the bound on dS. */
typedef struct {
    double P, dS, bP, bdS; /* bP: bound on |P error| */
} att_pair;

/*
 * P = e^(s - lse) within pi = e^(eps_s + u |s - lse| + E) - 1; dP = dout . v and
 * D = dout . out within gamma_hd of their |terms|; dS = P (dP - D) scale in three
 * roundings.
 */
static att_pair att_pair_ref(const att_in *a, const float *out, const float *lse, int64_t R,
                             int64_t J, int64_t h)
{
    const int64_t hd = a->hd, g = h / (a->nh / a->nkv);
    const float *dr = a->dout + R * a->nh * hd + h * hd, *orow = out + R * a->nh * hd + h * hd;
    const float *vj = a->v + J * a->nkv * hd + g * hd;
    double Ds, s = att_score(a, R, J, h, &Ds), L = lse[R * a->nh + h];
    double dP = 0, aP = 0, Dd = 0, aD = 0, scale = 1.0 / sqrt((double)hd);
    for (int64_t d = 0; d < hd; d++) {
        dP += (double)dr[d] * vj[d], aP += fabs((double)dr[d] * vj[d]);
        Dd += (double)dr[d] * orow[d], aD += fabs((double)dr[d] * orow[d]);
    }
    att_pair p;
    p.P = exp(s - L);
    double pi = kv_grow(kv_g((double)hd + 1) * Ds + KV_U * fabs(s - L) + kv_exp_err());
    p.bP = p.P * pi;
    p.dS = p.P * (dP - Dd) * scale;
    double e = kv_g((double)hd) * (aP + aD);
    p.bdS = scale * (p.P * fabs(dP - Dd) * (pi + kv_g(3)) + (p.P + p.bP) * e * (1 + kv_g(3)));
    return p;
}

/* Bounds of dq, dk, dv (accumulated sums of the pairs' terms; n terms: gamma_{n+1}). */
static void att_bwd_bounds(const att_in *a, const float *out, const float *lse, double *bq,
                           double *bk, double *bv)
{
    const int64_t hd = a->hd, nh = a->nh, nkv = a->nkv, grp = nh / nkv;
    for (int64_t sq = 0; sq < a->n_seqs; sq++) {
        const int64_t r0 = a->off[sq], L = a->off[sq + 1] - r0;
        for (int64_t h = 0; h < nh; h++)
            for (int64_t i = 0; i < L; i++)
                for (int64_t j = 0; j <= i; j++) {
                    att_pair p = att_pair_ref(a, out, lse, r0 + i, r0 + j, h);
                    const int64_t g = h / grp, Q = (r0 + i) * nh * hd + h * hd;
                    const int64_t K = (r0 + j) * nkv * hd + g * hd;
                    const double gq = kv_g((double)L + 1), gk = kv_g((double)(grp * L) + 1);
                    for (int64_t d = 0; d < hd; d++) {
                        double kd = fabs(a->k[K + d]), qd = fabs(a->q[Q + d]);
                        double od = fabs(a->dout[Q + d]);
                        bq[Q + d] += p.bdS * kd * (1 + gq) + gq * fabs(p.dS) * kd;
                        bk[K + d] += p.bdS * qd * (1 + gk) + gk * fabs(p.dS) * qd;
                        bv[K + d] += p.bP * od * (1 + gk) + gk * p.P * od;
                    }
                }
    }
}

static void check_attention_bwd(const int64_t *off, int64_t n_seqs, int64_t hd)
{
    kv_list l = kv_runnable();
    KV_REQUIRE_TWO(l);
    const int64_t nh = 4, nkv = 2;
    att_in a = att_make(off, n_seqs, nh, nkv, hd, 31 + (uint64_t)hd);
    const int64_t T = a.T, nq = T * nh * hd, nk = T * nkv * hd;
    float *out = kv_fvec(nq), *lse = kv_fvec(T * nh);
    kv_use(l.name[0]); /* the same forward results feed every variant's backward */
    df_attention_fwd(out, lse, a.q, a.k, a.v, off, n_seqs, nh, nkv, hd, 0, 0.0f);
    float *dq[KV_MAX], *dk[KV_MAX], *dv[KV_MAX];
    for (int v = 0; v < l.n; v++) {
        dq[v] = kv_fvec(nq), dk[v] = kv_fvec(nk), dv[v] = kv_fvec(nk);
        kv_use(l.name[v]);
        df_attention_bwd(dq[v], dk[v], dv[v], a.dout, out, lse, a.q, a.k, a.v, off, n_seqs, nh,
                         nkv, hd, 0, 0.0f);
    }
    kv_restore();
    double *bq = kv_dvec(nq), *bk = kv_dvec(nk), *bv = kv_dvec(nk);
    att_bwd_bounds(&a, out, lse, bq, bk, bv);
    PAIRS(l, p, q)
    {
        kv_check_f("attention dq", l.name[p], dq[p], l.name[q], dq[q], bq, nq);
        kv_check_f("attention dk", l.name[p], dk[p], l.name[q], dk[q], bk, nk);
        kv_check_f("attention dv", l.name[p], dv[p], l.name[q], dv[q], bv, nk);
    }
    for (int v = 0; v < l.n; v++)
        free(dq[v]), free(dk[v]), free(dv[v]);
    free(out), free(lse), free(bq), free(bk), free(bv);
    att_free(&a);
}

static void test_attention_bwd(void **state)
{
    (void)state;
    const int64_t off[4] = {0, 1, 34, 80};
    check_attention_bwd(off, 3, 64);
    check_attention_bwd(off, 3, 24);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm_fwd),   cmocka_unit_test(test_rmsnorm_bwd),
        cmocka_unit_test(test_rope),          cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_geglu),
        cmocka_unit_test(test_attention_fwd), cmocka_unit_test(test_attention_bwd),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
