/*
 * Op tests (src/model/ops.h): every forward against a naive double-precision
 * reference written here, every backward against central finite differences
 * of that double reference (so the differences are exact to ~1e-9 and the
 * tolerance only has to absorb the op's float32 rounding). Shapes are small
 * and odd: packed sequences of lengths 1, 5, 33 and 70 (crossing the 32-key
 * and 64-query tiles), GQA with nh / nkv = 2, vocabularies that are not a
 * multiple of the LM-head tile, temperature != 1 and entropy gradients.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "distflow/common.h"
#include "distflow/rng.h"
#include "model/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------ */

static float *fvec(int64_t n)
{
    float *p = aligned_alloc(64, ((size_t)n * sizeof(float) + 63) / 64 * 64);
    assert_non_null(p);
    return p;
}

static double *dvec(int64_t n)
{
    double *p = calloc((size_t)n, sizeof(double));
    assert_non_null(p);
    return p;
}

static void fill(float *x, int64_t n, uint64_t seed, double scale)
{
    df_rng r;
    df_rng_seed(&r, df_rng_key(seed, 7, 0, 0));
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(df_rng_normal(&r) * scale);
}

static double *to_d(const float *x, int64_t n)
{
    double *d = dvec(n);
    for (int64_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
}

/* ||a - b|| / ||b|| over n elements. */
static double rel_err(const float *a, const double *b, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return sqrt(num) / (sqrt(den) + 1e-30);
}

static double dot_fd(const float *a, const double *b, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

/* A scalar loss of the double reference, over inputs that the FD code perturbs. */
typedef double (*loss_fn)(void *ctx);

/* Central difference of loss w.r.t. x[i]. */
static double fd_at(loss_fn f, void *ctx, double *x, int64_t i)
{
    const double h = 1e-5;
    double keep = x[i];
    x[i] = keep + h;
    double lp = f(ctx);
    x[i] = keep - h;
    double lm = f(ctx);
    x[i] = keep;
    return (lp - lm) / (2 * h);
}

/* Full finite-difference gradient of loss w.r.t. x[n]. */
static double *fd_grad(loss_fn f, void *ctx, double *x, int64_t n)
{
    double *g = dvec(n);
    for (int64_t i = 0; i < n; i++)
        g[i] = fd_at(f, ctx, x, i);
    return g;
}

/* Directional derivative along u of several input arrays perturbed together. */
static double fd_dir(loss_fn f, void *ctx, double **xs, double **us, const int64_t *ns, int k)
{
    const double h = 1e-5;
    double l[2];
    for (int s = 0; s < 2; s++) {
        double sg = s ? -h : h;
        for (int a = 0; a < k; a++)
            for (int64_t i = 0; i < ns[a]; i++)
                xs[a][i] += sg * us[a][i];
        l[s] = f(ctx);
        for (int a = 0; a < k; a++)
            for (int64_t i = 0; i < ns[a]; i++)
                xs[a][i] -= sg * us[a][i];
    }
    return (l[0] - l[1]) / (2 * h);
}

/* ---- gemm / linear --------------------------------------------------------------- */

static void test_gemm(void **state)
{
    (void)state;
    const int64_t M = 13, N = 7, K = 19;
    float *A = fvec(M * K), *At = fvec(K * M), *B = fvec(N * K), *Bn = fvec(K * N);
    float *C = fvec(M * N), *C0 = fvec(M * N);
    fill(A, M * K, 1, 1.0);
    fill(B, N * K, 2, 1.0);
    fill(C0, M * N, 3, 1.0);
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++)
            At[k * M + i] = A[i * K + k];
    for (int64_t j = 0; j < N; j++)
        for (int64_t k = 0; k < K; k++)
            Bn[k * N + j] = B[j * K + k];
    double *ref = dvec(M * N);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++)
                s += (double)A[i * K + k] * B[j * K + k];
            ref[i * N + j] = 0.5 * s + 2.0 * C0[i * N + j];
        }
    memcpy(C, C0, sizeof(float) * M * N);
    df_gemm_nt(M, N, K, 0.5f, A, B, 2.0f, C);
    assert_true(rel_err(C, ref, M * N) < 1e-6);
    memcpy(C, C0, sizeof(float) * M * N);
    df_gemm_nn(M, N, K, 0.5f, A, Bn, 2.0f, C);
    assert_true(rel_err(C, ref, M * N) < 1e-6);
    memcpy(C, C0, sizeof(float) * M * N);
    df_gemm_tn(M, N, K, 0.5f, At, Bn, 2.0f, C);
    assert_true(rel_err(C, ref, M * N) < 1e-6);
    /* K = 0: C = beta C. */
    memcpy(C, C0, sizeof(float) * M * N);
    df_gemm_nt(M, N, 0, 1.0f, A, B, 0.0f, C);
    for (int64_t i = 0; i < M * N; i++)
        assert_true(C[i] == 0.0f);
    free(A), free(At), free(B), free(Bn), free(C), free(C0), free(ref);
}

typedef struct {
    int64_t M, N, K;
    double *x, *W, *b, *R;
} lin_ctx;

static void ref_linear(double *y, const lin_ctx *c)
{
    for (int64_t i = 0; i < c->M; i++)
        for (int64_t j = 0; j < c->N; j++) {
            double s = c->b[j];
            for (int64_t k = 0; k < c->K; k++)
                s += c->x[i * c->K + k] * c->W[j * c->K + k];
            y[i * c->N + j] = s;
        }
}

static double lin_loss(void *p)
{
    lin_ctx *c = p;
    double *y = dvec(c->M * c->N), l = 0;
    ref_linear(y, c);
    for (int64_t i = 0; i < c->M * c->N; i++)
        l += y[i] * c->R[i];
    free(y);
    return l;
}

static void test_linear(void **state)
{
    (void)state;
    const int64_t M = 9, N = 5, K = 11;
    float *x = fvec(M * K), *W = fvec(N * K), *b = fvec(N), *R = fvec(M * N), *y = fvec(M * N);
    float *dx = fvec(M * K), *dW = fvec(N * K), *db = fvec(N);
    fill(x, M * K, 10, 1.0);
    fill(W, N * K, 11, 0.5);
    fill(b, N, 12, 1.0);
    fill(R, M * N, 13, 1.0);
    lin_ctx c = {M, N, K, to_d(x, M * K), to_d(W, N * K), to_d(b, N), to_d(R, M * N)};
    double *yr = dvec(M * N);
    ref_linear(yr, &c);
    df_linear_fwd(y, x, W, b, M, N, K);
    assert_true(rel_err(y, yr, M * N) < 1e-6);
    /* Backward accumulates: start from 1.0 and subtract it again. */
    for (int64_t i = 0; i < M * K; i++)
        dx[i] = 1.0f;
    for (int64_t i = 0; i < N * K; i++)
        dW[i] = 1.0f;
    for (int64_t i = 0; i < N; i++)
        db[i] = 1.0f;
    df_linear_bwd(dx, dW, db, R, x, W, M, N, K);
    for (int64_t i = 0; i < M * K; i++)
        dx[i] -= 1.0f;
    for (int64_t i = 0; i < N * K; i++)
        dW[i] -= 1.0f;
    for (int64_t i = 0; i < N; i++)
        db[i] -= 1.0f;
    double *gx = fd_grad(lin_loss, &c, c.x, M * K), *gW = fd_grad(lin_loss, &c, c.W, N * K);
    double *gb = fd_grad(lin_loss, &c, c.b, N);
    assert_true(rel_err(dx, gx, M * K) < 1e-5);
    assert_true(rel_err(dW, gW, N * K) < 1e-5);
    assert_true(rel_err(db, gb, N) < 1e-5);
    free(x), free(W), free(b), free(R), free(y), free(dx), free(dW), free(db);
    free(c.x), free(c.W), free(c.b), free(c.R), free(yr), free(gx), free(gW), free(gb);
}

/* ---- bf16 matmuls ------------------------------------------------------------------ */

static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void test_bf16_rounding(void **state)
{
    (void)state;
    const uint32_t in[] = {0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f808001u,
                           0xbf7fffffu, 0x7f7fffffu, 0x7f800000u, 0x00000001u};
    const uint16_t want[] = {0x3f80, 0x3f80, 0x3f82, 0x3f81, 0xbf80, 0x7f80, 0x7f80, 0x0000};
    float f[9];
    uint16_t h[9];
    for (int i = 0; i < 8; i++)
        memcpy(&f[i], &in[i], sizeof f[i]);
    f[8] = NAN;
    df_bf16_from_f32(h, f, 9);
    for (int i = 0; i < 8; i++)
        assert_int_equal(h[i], want[i]); /* ties to even, overflow to inf */
    assert_true(isnan(bf16_to_f32(h[8])));
}

static void test_bf16_matmul(void **state)
{
    (void)state;
    df_mm_ctx *c = NULL;
    int rc = df_mm_ctx_create(4096, &c);
    if (rc == DF_EUNSUPPORTED) {
        print_message("bf16 matmul unsupported here: %s\n", df_last_error());
        skip();
    }
    assert_int_equal(rc, DF_OK);
    const int64_t M = 37, N = 29, K = 41;
    float *A = fvec(M * K), *B = fvec(N * K), *C = fvec(M * N), *C0 = fvec(M * N);
    float *At = fvec(K * M), *Bn = fvec(K * N);
    uint16_t *a16 = malloc(sizeof(uint16_t) * M * K), *b16 = malloc(sizeof(uint16_t) * N * K);
    fill(A, M * K, 150, 1.0);
    fill(B, N * K, 151, 1.0);
    fill(C0, M * N, 152, 1.0);
    df_bf16_from_f32(a16, A, M * K);
    df_bf16_from_f32(b16, B, N * K);
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++)
            At[k * M + i] = A[i * K + k];
    for (int64_t j = 0; j < N; j++)
        for (int64_t k = 0; k < K; k++)
            Bn[k * N + j] = B[j * K + k];
    /* Reference: products of the bf16-rounded operands, in double. */
    double *ref = dvec(M * N), *ref32 = dvec(M * N);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0, s32 = 0;
            for (int64_t k = 0; k < K; k++) {
                s += (double)bf16_to_f32(a16[i * K + k]) * bf16_to_f32(b16[j * K + k]);
                s32 += (double)A[i * K + k] * B[j * K + k];
            }
            ref[i * N + j] = s + C0[i * N + j];
            ref32[i * N + j] = s32 + C0[i * N + j];
        }
    for (int variant = 0; variant < 3; variant++) {
        memcpy(C, C0, sizeof(float) * M * N);
        if (variant == 0)
            df_mm_nt(c, M, N, K, 1.0f, A, B, 1.0f, C);
        else if (variant == 1)
            df_mm_nn(c, M, N, K, 1.0f, A, Bn, 1.0f, C);
        else
            df_mm_tn(c, M, N, K, 1.0f, At, Bn, 1.0f, C);
        assert_true(rel_err(C, ref, M * N) < 1e-6);   /* exactly bf16 inputs, f32 sums */
        assert_true(rel_err(C, ref32, M * N) > 1e-5); /* and visibly not float32 */
        assert_true(rel_err(C, ref32, M * N) < 1e-2);
    }
    /* beta = 0 and alpha != 1 get their own primitives. */
    df_mm_nt(c, M, N, K, 0.5f, A, B, 0.0f, C);
    for (int64_t i = 0; i < M * N; i++)
        ref[i] = 0.5 * (ref[i] - C0[i]);
    assert_true(rel_err(C, ref, M * N) < 1e-6);
    /* Operands larger than the context: float32 fallback, same as df_gemm_nt. */
    const int64_t M2 = 200;
    float *A2 = fvec(M2 * K), *C2 = fvec(M2 * N), *C3 = fvec(M2 * N);
    fill(A2, M2 * K, 153, 1.0);
    df_mm_nt(c, M2, N, K, 1.0f, A2, B, 0.0f, C2);
    df_gemm_nt(M2, N, K, 1.0f, A2, B, 0.0f, C3);
    assert_memory_equal(C2, C3, sizeof(float) * M2 * N);
    assert_int_equal(df_mm_ctx_fallbacks(c), 0);
    /* NULL context: float32. */
    df_mm_nt(NULL, M, N, K, 1.0f, A, B, 0.0f, C);
    for (int64_t i = 0; i < M * N; i++)
        ref32[i] -= C0[i];
    assert_true(rel_err(C, ref32, M * N) < 1e-6);
    df_mm_ctx_free(c);
    free(A), free(B), free(C), free(C0), free(At), free(Bn), free(a16), free(b16), free(ref);
    free(ref32), free(A2), free(C2), free(C3);
}

/* ---- embedding ------------------------------------------------------------------ */

static void test_embedding(void **state)
{
    (void)state;
    const int64_t V = 6, H = 70, T = 5; /* H > 64 spans two column blocks */
    int32_t ids[5] = {3, 0, 3, 5, 3};
    float *tab = fvec(V * H), *out = fvec(T * H), *dout = fvec(T * H), *dtab = fvec(V * H);
    fill(tab, V * H, 20, 1.0);
    fill(dout, T * H, 21, 1.0);
    df_embedding_fwd(out, ids, tab, T, H);
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < H; i++)
            assert_true(out[t * H + i] == tab[ids[t] * H + i]);
    for (int64_t i = 0; i < V * H; i++)
        dtab[i] = 0.5f;
    df_embedding_bwd(dtab, dout, ids, T, H);
    for (int64_t i = 0; i < H; i++) {
        double want3 = 0.5 + (double)dout[0 * H + i] + dout[2 * H + i] + dout[4 * H + i];
        assert_true(fabs(dtab[3 * H + i] - want3) < 1e-6);
        assert_true(fabs(dtab[0 * H + i] - (0.5 + dout[1 * H + i])) < 1e-6);
        assert_true(dtab[1 * H + i] == 0.5f && dtab[2 * H + i] == 0.5f);
    }
    free(tab), free(out), free(dout), free(dtab);
}

/* ---- RMSNorm ---------------------------------------------------------------------- */

typedef struct {
    int64_t T, H;
    double eps;
    double *x, *w, *R;
} rms_ctx;

static void ref_rmsnorm(double *out, const rms_ctx *c)
{
    for (int64_t t = 0; t < c->T; t++) {
        double ss = 0;
        for (int64_t i = 0; i < c->H; i++)
            ss += c->x[t * c->H + i] * c->x[t * c->H + i];
        double r = 1.0 / sqrt(ss / c->H + c->eps);
        for (int64_t i = 0; i < c->H; i++)
            out[t * c->H + i] = c->w[i] * c->x[t * c->H + i] * r;
    }
}

static double rms_loss(void *p)
{
    rms_ctx *c = p;
    double *o = dvec(c->T * c->H), l = 0;
    ref_rmsnorm(o, c);
    for (int64_t i = 0; i < c->T * c->H; i++)
        l += o[i] * c->R[i];
    free(o);
    return l;
}

static void test_rmsnorm(void **state)
{
    (void)state;
    const int64_t T = 7, H = 67;
    const float eps = 1e-6f;
    float *x = fvec(T * H), *w = fvec(H), *R = fvec(T * H), *out = fvec(T * H), *rstd = fvec(T);
    float *dx = fvec(T * H), *dw = fvec(H);
    fill(x, T * H, 30, 1.5);
    fill(w, H, 31, 1.0);
    fill(R, T * H, 32, 1.0);
    rms_ctx c = {T, H, eps, to_d(x, T * H), to_d(w, H), to_d(R, T * H)};
    double *ref = dvec(T * H);
    ref_rmsnorm(ref, &c);
    df_rmsnorm_fwd(out, rstd, x, w, T, H, eps);
    assert_true(rel_err(out, ref, T * H) < 1e-6);
    for (int64_t i = 0; i < T * H; i++)
        dx[i] = 0.25f;
    for (int64_t i = 0; i < H; i++)
        dw[i] = -0.5f;
    df_rmsnorm_bwd(dx, dw, R, x, w, rstd, T, H);
    for (int64_t i = 0; i < T * H; i++)
        dx[i] -= 0.25f;
    for (int64_t i = 0; i < H; i++)
        dw[i] += 0.5f;
    double *gx = fd_grad(rms_loss, &c, c.x, T * H), *gw = fd_grad(rms_loss, &c, c.w, H);
    assert_true(rel_err(dx, gx, T * H) < 1e-5);
    assert_true(rel_err(dw, gw, H) < 1e-5);
    free(x), free(w), free(R), free(out), free(rstd), free(dx), free(dw);
    free(c.x), free(c.w), free(c.R), free(ref), free(gx), free(gw);
}

/* ---- RoPE ------------------------------------------------------------------------------ */

typedef struct {
    int64_t T, nh, hd;
    const int32_t *pos;
    double theta;
    double *x, *R;
} rope_ctx;

static void ref_rope(double *out, const rope_ctx *c)
{
    int64_t half = c->hd / 2;
    for (int64_t t = 0; t < c->T; t++)
        for (int64_t h = 0; h < c->nh; h++)
            for (int64_t i = 0; i < half; i++) {
                /* HF: inv_freq and pos * inv_freq in float32. */
                float inv = 1.0f / powf((float)c->theta, (float)(2 * i) / (float)c->hd);
                double a = (double)((float)c->pos[t] * inv);
                const double *xr = c->x + (t * c->nh + h) * c->hd;
                double *o = out + (t * c->nh + h) * c->hd;
                o[i] = xr[i] * cos(a) - xr[i + half] * sin(a);
                o[i + half] = xr[i + half] * cos(a) + xr[i] * sin(a);
            }
}

static double rope_loss(void *p)
{
    rope_ctx *c = p;
    int64_t n = c->T * c->nh * c->hd;
    double *o = dvec(n), l = 0;
    ref_rope(o, c);
    for (int64_t i = 0; i < n; i++)
        l += o[i] * c->R[i];
    free(o);
    return l;
}

static void test_rope(void **state)
{
    (void)state;
    const int64_t T = 6, nh = 3, hd = 8, n = T * nh * hd;
    const int32_t pos[6] = {0, 1, 2, 0, 57, 1999};
    const double theta = 1e6;
    float *x = fvec(n), *y = fvec(n), *y2 = fvec(n), *R = fvec(n), *dx = fvec(n);
    float *ct = fvec(2000 * hd / 2), *st = fvec(2000 * hd / 2);
    fill(x, n, 40, 1.0);
    fill(R, n, 41, 1.0);
    rope_ctx c = {T, nh, hd, pos, theta, to_d(x, n), to_d(R, n)};
    double *ref = dvec(n);
    ref_rope(ref, &c);
    memcpy(y, x, sizeof(float) * n);
    df_rope_fwd(y, pos, T, nh, hd, theta);
    assert_true(rel_err(y, ref, n) < 1e-6);
    df_rope_table(ct, st, 2000, hd, theta);
    memcpy(y2, x, sizeof(float) * n);
    df_rope_apply(y2, pos, T, nh, hd, ct, st, false);
    for (int64_t i = 0; i < n; i++)
        assert_true(y2[i] == y[i]); /* table and direct paths agree exactly */
    /* Position 0 is the identity. */
    for (int64_t i = 0; i < nh * hd; i++)
        assert_true(y[i] == x[i]);
    memcpy(dx, R, sizeof(float) * n);
    df_rope_bwd(dx, pos, T, nh, hd, theta);
    double *g = fd_grad(rope_loss, &c, c.x, n);
    assert_true(rel_err(dx, g, n) < 1e-6);
    memcpy(y2, R, sizeof(float) * n);
    df_rope_apply(y2, pos, T, nh, hd, ct, st, true);
    assert_true(rel_err(y2, g, n) < 1e-6);
    free(x), free(y), free(y2), free(R), free(dx), free(ct), free(st), free(c.x), free(c.R);
    free(ref), free(g);
}

/* ---- attention -------------------------------------------------------------------------- */

typedef struct {
    const int64_t *off;
    int64_t n_seqs, nh, nkv, hd, T;
    double *q, *k, *v, *R;
    double *out, *lse; /* filled by ref_attention */
} att_ctx;

static void ref_attention(att_ctx *c)
{
    const int64_t nh = c->nh, nkv = c->nkv, hd = c->hd, grp = nh / nkv;
    double *s = dvec(c->T);
    for (int64_t sq = 0; sq < c->n_seqs; sq++)
        for (int64_t h = 0; h < nh; h++)
            for (int64_t i = c->off[sq]; i < c->off[sq + 1]; i++) {
                double m = -INFINITY, z = 0;
                for (int64_t j = c->off[sq]; j <= i; j++) {
                    double d = 0;
                    for (int64_t e = 0; e < hd; e++)
                        d += c->q[(i * nh + h) * hd + e] * c->k[(j * nkv + h / grp) * hd + e];
                    s[j] = d / sqrt((double)hd);
                    m = s[j] > m ? s[j] : m;
                }
                for (int64_t j = c->off[sq]; j <= i; j++)
                    z += exp(s[j] - m);
                double *o = c->out + (i * nh + h) * hd;
                for (int64_t e = 0; e < hd; e++)
                    o[e] = 0;
                for (int64_t j = c->off[sq]; j <= i; j++) {
                    double p = exp(s[j] - m) / z;
                    for (int64_t e = 0; e < hd; e++)
                        o[e] += p * c->v[(j * nkv + h / grp) * hd + e];
                }
                c->lse[i * nh + h] = m + log(z);
            }
    free(s);
}

static double att_loss(void *p)
{
    att_ctx *c = p;
    ref_attention(c);
    double l = 0;
    for (int64_t i = 0; i < c->T * c->nh * c->hd; i++)
        l += c->out[i] * c->R[i];
    return l;
}

static void check_attention(const int64_t *off, int64_t n_seqs, int64_t nh, int64_t nkv,
                            int64_t hd, int n_samples, uint64_t seed)
{
    const int64_t T = off[n_seqs], nq = T * nh * hd, nk = T * nkv * hd;
    float *q = fvec(nq), *k = fvec(nk), *v = fvec(nk), *R = fvec(nq), *out = fvec(nq);
    float *lse = fvec(T * nh), *dq = fvec(nq), *dk = fvec(nk), *dv = fvec(nk);
    fill(q, nq, seed, 1.0);
    fill(k, nk, seed + 1, 1.0);
    fill(v, nk, seed + 2, 1.0);
    fill(R, nq, seed + 3, 1.0);
    att_ctx c = {off, n_seqs, nh, nkv, hd, T, to_d(q, nq), to_d(k, nk), to_d(v, nk),
                 to_d(R, nq), dvec(nq), dvec(T * nh)};
    ref_attention(&c);
    df_attention_fwd(out, lse, q, k, v, off, n_seqs, nh, nkv, hd);
    assert_true(rel_err(out, c.out, nq) < 1e-5);
    assert_true(rel_err(lse, c.lse, T * nh) < 1e-6);
    /* A length-1 sequence attends only to itself: out == v of its kv head. */
    for (int64_t s = 0; s < n_seqs; s++)
        if (off[s + 1] - off[s] == 1)
            for (int64_t h = 0; h < nh; h++)
                for (int64_t e = 0; e < hd; e++)
                    assert_true(fabsf(out[(off[s] * nh + h) * hd + e] -
                                      v[(off[s] * nkv + h / (nh / nkv)) * hd + e]) < 1e-6f);
    /* Outputs are overwritten: poison them first. */
    for (int64_t i = 0; i < nq; i++)
        dq[i] = NAN;
    for (int64_t i = 0; i < nk; i++)
        dk[i] = dv[i] = NAN;
    df_attention_bwd(dq, dk, dv, R, out, lse, q, k, v, off, n_seqs, nh, nkv, hd);
    /* Three random directions over (q, k, v) together. */
    for (int d = 0; d < 3; d++) {
        float *uq = fvec(nq), *uk = fvec(nk), *uv = fvec(nk);
        fill(uq, nq, seed + 10 + d, 1.0);
        fill(uk, nk, seed + 20 + d, 1.0);
        fill(uv, nk, seed + 30 + d, 1.0);
        double *xs[3] = {c.q, c.k, c.v};
        double *us[3] = {to_d(uq, nq), to_d(uk, nk), to_d(uv, nk)};
        int64_t ns[3] = {nq, nk, nk};
        double fd = fd_dir(att_loss, &c, xs, us, ns, 3);
        double an = dot_fd(dq, us[0], nq) + dot_fd(dk, us[1], nk) + dot_fd(dv, us[2], nk);
        assert_true(fabs(fd - an) < 1e-4 * fabs(fd) + 1e-6);
        free(uq), free(uk), free(uv), free(us[0]), free(us[1]), free(us[2]);
    }
    /* Sampled coordinates, always including the first and last rows. */
    df_rng r;
    df_rng_seed(&r, seed);
    double num = 0, den = 0;
    for (int i = 0; i < n_samples; i++) {
        int which = i % 3;
        int64_t n = which == 0 ? nq : nk;
        int64_t idx = i < 6 ? (i < 3 ? 0 : n - 1) : (int64_t)df_rng_below(&r, (uint64_t)n);
        double *x = which == 0 ? c.q : which == 1 ? c.k : c.v;
        float an = (which == 0 ? dq : which == 1 ? dk : dv)[idx];
        double fd = fd_at(att_loss, &c, x, idx);
        num += (an - fd) * (an - fd);
        den += fd * fd;
    }
    assert_true(sqrt(num) < 1e-4 * sqrt(den) + 1e-7);
    free(q), free(k), free(v), free(R), free(out), free(lse), free(dq), free(dk), free(dv);
    free(c.q), free(c.k), free(c.v), free(c.R), free(c.out), free(c.lse);
}

static void test_attention_small_heads(void **state)
{
    (void)state;
    const int64_t off[5] = {0, 1, 6, 39, 109}; /* lengths 1, 5, 33, 70 */
    check_attention(off, 4, 4, 2, 8, 150, 50); /* generic head-dim path */
}

static void test_attention_specialised(void **state)
{
    (void)state;
    const int64_t off[4] = {0, 40, 41, 75};
    check_attention(off, 3, 2, 1, 32, 60, 60);
    check_attention(off, 3, 2, 2, 64, 30, 70);
    const int64_t off1[3] = {0, 1, 20};
    check_attention(off1, 2, 4, 2, 128, 30, 80);
    const int64_t off2[4] = {0, 70, 71, 100}; /* hd 48: vector kernel, runtime head dim */
    check_attention(off2, 3, 2, 1, 48, 30, 90);
    const int64_t off3[3] = {0, 150, 151}; /* longer than one 128-row query block */
    check_attention(off3, 2, 2, 1, 32, 30, 95);
}

/* ---- SwiGLU ---------------------------------------------------------------------------- */

typedef struct {
    int64_t n;
    double *g, *u, *R;
} swi_ctx;

static double swi_loss(void *p)
{
    swi_ctx *c = p;
    double l = 0;
    for (int64_t i = 0; i < c->n; i++)
        l += c->g[i] / (1 + exp(-c->g[i])) * c->u[i] * c->R[i];
    return l;
}

static void test_swiglu(void **state)
{
    (void)state;
    const int64_t n = 203;
    float *g = fvec(n), *u = fvec(n), *R = fvec(n), *o = fvec(n), *dg = fvec(n), *du = fvec(n);
    fill(g, n, 90, 3.0);
    fill(u, n, 91, 1.0);
    fill(R, n, 92, 1.0);
    g[0] = -100.0f; /* exp overflow side: silu -> -0 */
    g[1] = 100.0f;
    swi_ctx c = {n, to_d(g, n), to_d(u, n), to_d(R, n)};
    double *ref = dvec(n);
    for (int64_t i = 0; i < n; i++)
        ref[i] = c.g[i] / (1 + exp(-c.g[i])) * c.u[i];
    df_swiglu_fwd(o, g, u, n);
    assert_true(rel_err(o, ref, n) < 1e-6);
    assert_true(fabsf(o[0]) < 1e-30f && fabsf(o[1] - 100.0f * u[1]) < 1e-4f);
    df_swiglu_bwd(dg, du, R, g, u, n);
    double *gg = fd_grad(swi_loss, &c, c.g, n), *gu = fd_grad(swi_loss, &c, c.u, n);
    assert_true(rel_err(dg, gg, n) < 1e-5);
    assert_true(rel_err(du, gu, n) < 1e-5);
    free(g), free(u), free(R), free(o), free(dg), free(du), free(c.g), free(c.u), free(c.R);
    free(ref), free(gg), free(gu);
}

/* ---- LM head ---------------------------------------------------------------------------- */

typedef struct {
    int64_t n, V, H;
    double temp;
    const int32_t *tgt;
    double *h, *W, *cl, *ce;
    double *logp, *ent; /* filled by ref_lmhead */
} lm_ctx;

static void ref_lmhead(lm_ctx *c)
{
    double *z = dvec(c->V);
    for (int64_t i = 0; i < c->n; i++) {
        double m = -INFINITY, s = 0, pz = 0;
        for (int64_t v = 0; v < c->V; v++) {
            double d = 0;
            for (int64_t e = 0; e < c->H; e++)
                d += c->h[i * c->H + e] * c->W[v * c->H + e];
            z[v] = d / c->temp;
            m = z[v] > m ? z[v] : m;
        }
        for (int64_t v = 0; v < c->V; v++)
            s += exp(z[v] - m);
        double lse = m + log(s);
        for (int64_t v = 0; v < c->V; v++)
            pz += exp(z[v] - lse) * z[v];
        c->logp[i] = z[c->tgt[i]] - lse;
        c->ent[i] = lse - pz;
    }
    free(z);
}

static double lm_loss(void *p)
{
    lm_ctx *c = p;
    ref_lmhead(c);
    double l = 0;
    for (int64_t i = 0; i < c->n; i++)
        l += c->cl[i] * c->logp[i] + c->ce[i] * c->ent[i];
    return l;
}

static void check_lmhead(int64_t n, int64_t V, int64_t H, float temp, int64_t rt, int64_t ctile,
                         int64_t group, int with_entropy, uint64_t seed)
{
    float *h = fvec(n * H), *W = fvec(V * H), *cl = fvec(n), *ce = fvec(n);
    float *logp = fvec(n), *ent = fvec(n), *lse = fvec(n), *dh = fvec(n * H), *dW = fvec(V * H);
    int32_t *tgt = malloc(sizeof(int32_t) * (size_t)n);
    fill(h, n * H, seed, 1.0);
    fill(W, V * H, seed + 1, 1.0);
    fill(cl, n, seed + 2, 1.0);
    fill(ce, n, seed + 3, with_entropy ? 1.0 : 0.0);
    df_rng r;
    df_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++)
        tgt[i] = (int32_t)df_rng_below(&r, (uint64_t)V);
    tgt[0] = (int32_t)(V - 1); /* last column of the last, partial tile */
    lm_ctx c = {n, V, H, temp, tgt, to_d(h, n * H), to_d(W, V * H), to_d(cl, n), to_d(ce, n),
                dvec(n), dvec(n)};
    ref_lmhead(&c);
    df_vocab_tiling tl = {rt, ctile, group, 2 * rt + 1};
    float *scratch = fvec(df_lmhead_scratch_floats_tiled(n, V, H, &tl));
    df_lmhead_fwd_tiled(logp, ent, lse, h, W, tgt, n, V, H, temp, &tl, scratch);
    assert_true(rel_err(logp, c.logp, n) < 1e-5);
    assert_true(rel_err(ent, c.ent, n) < 1e-5);
    for (int64_t i = 0; i < V * H; i++)
        dW[i] = 2.0f;
    for (int64_t i = 0; i < n * H; i++)
        dh[i] = NAN; /* overwritten */
    df_lmhead_bwd_tiled(dh, dW, cl, with_entropy ? ce : NULL, h, W, tgt, lse, ent, n, V, H,
                        temp, &tl, scratch);
    for (int64_t i = 0; i < V * H; i++)
        dW[i] -= 2.0f;
    double *gh = fd_grad(lm_loss, &c, c.h, n * H), *gW = fd_grad(lm_loss, &c, c.W, V * H);
    assert_true(rel_err(dh, gh, n * H) < 1e-4);
    assert_true(rel_err(dW, gW, V * H) < 1e-4);
    free(h), free(W), free(cl), free(ce), free(logp), free(ent), free(lse), free(dh), free(dW);
    free(tgt), free(scratch), free(c.h), free(c.W), free(c.cl), free(c.ce), free(c.logp);
    free(c.ent), free(gh), free(gW);
}

static void test_lmhead_tiles(void **state)
{
    (void)state;
    /* 11 rows in tiles of 4, vocabulary 50 in tiles of 7 and groups of 14: every
     * edge is partial, and groups merge across tiles and across each other. */
    check_lmhead(11, 50, 6, 0.7f, 4, 7, 14, 1, 100);
    check_lmhead(5, 23, 4, 1.0f, 256, 4096, 8192, 1, 110); /* one tile */
    check_lmhead(6, 31, 5, 1.3f, 2, 8, 8, 0, 120);         /* no entropy gradient */
    check_lmhead(7, 53, 3, 0.8f, 3, 16, 10, 1, 150);       /* group rounded up to 16 */
}

static void test_lmhead_default_tiles(void **state)
{
    (void)state;
    /* Default tiles with a vocabulary of two groups, not a multiple of DF_LMHEAD_COLS. */
    const int64_t n = 3, V = DF_LMHEAD_GROUP + DF_LMHEAD_COLS + 37, H = 3;
    float *h = fvec(n * H), *W = fvec(V * H), *logp = fvec(n), *ent = fvec(n), *lse = fvec(n);
    float *scratch = fvec(df_lmhead_scratch_floats(n, V, H));
    int32_t tgt[3] = {5, (int32_t)V - 1, DF_LMHEAD_GROUP};
    fill(h, n * H, 130, 2.0);
    fill(W, V * H, 131, 1.0);
    lm_ctx c = {n, V, H, 0.7, tgt, to_d(h, n * H), to_d(W, V * H), dvec(n), dvec(n), dvec(n),
                dvec(n)};
    ref_lmhead(&c);
    df_lmhead_fwd(logp, ent, lse, h, W, tgt, n, V, H, 0.7f, scratch);
    assert_true(rel_err(logp, c.logp, n) < 1e-5);
    assert_true(rel_err(ent, c.ent, n) < 1e-5);
    /* A large logit range: entropy stays accurate (no lse - E[z] cancellation). */
    for (int64_t i = 0; i < H; i++)
        h[i] *= 40.0f, c.h[i] = h[i];
    ref_lmhead(&c);
    df_lmhead_fwd(logp, ent, lse, h, W, tgt, n, V, H, 0.7f, scratch);
    assert_true(fabs(ent[0] - c.ent[0]) < 1e-4 * fabs(c.ent[0]) + 1e-6);
    assert_true(fabs(logp[0] - c.logp[0]) < 1e-5 * fabs(c.logp[0]) + 1e-4);
    free(h), free(W), free(logp), free(ent), free(lse), free(scratch), free(c.h), free(c.W);
    free(c.cl), free(c.ce), free(c.logp), free(c.ent);
}

static void test_lmhead_many_rows(void **state)
{
    (void)state;
    /* More rows than DF_LMHEAD_ROWS: the row-tile loop with the default tile. */
    const int64_t n = DF_LMHEAD_ROWS + 9, V = 17, H = 4;
    check_lmhead(n, V, H, 0.9f, DF_LMHEAD_ROWS, DF_LMHEAD_COLS, DF_LMHEAD_GROUP, 1, 140);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_linear),
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_bf16_matmul),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_attention_small_heads),
        cmocka_unit_test(test_attention_specialised),
        cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_lmhead_tiles),
        cmocka_unit_test(test_lmhead_default_tiles),
        cmocka_unit_test(test_lmhead_many_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
