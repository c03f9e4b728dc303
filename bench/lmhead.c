/*
 * bench/lmhead.c — the large-vocabulary path on its own: LM-head forward
 * (log-prob + entropy), backward, and rollout sampling from hidden states, for a
 * Qwen2.5-sized vocabulary (151,936) and a small hidden size (default 64, the
 * shape where the per-logit work after the GEMM dominates).
 *
 * Baselines measured in the same run:
 *  - naive: the obvious C of verl's logprobs_from_logits / entropy_from_logits
 *    and of a multinomial draw: logits of a few rows at a time through the same
 *    oneDNN GEMM into a [rows, V] buffer, then scalar double-precision loops
 *    with libm exp / log over each row (parallel over rows).
 *  - gemm: the logits GEMM alone in the kernel's tiles (the floor for the
 *    forward: every kernel computes at least these products).
 *
 * Usage: bench_lmhead [--rows N (2048)] [--vocab V (151936)] [--hidden H (64)]
 *        [--decode-rows R (64)] [--iters N (2)] [--tile ROWS COLS GROUP ITEM_ROWS]
 * Prints `metric: value` lines; ns_per_logit is wall time / (rows * vocab).
 */
#include "distflow/platform.h"
#include "distflow/rng.h"
#include "engine/sampling.h"
#include "model/ops.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    int64_t n, V, H, dec;
    int iters;
    df_vocab_tiling t;
} bench_cfg;

static int parse(int argc, char **argv, bench_cfg *b)
{
    *b = (bench_cfg){2048, 151936, 64, 64, 2, {0, 0, 0, 0}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--rows") && i + 1 < argc)
            b->n = atoll(argv[++i]);
        else if (!strcmp(a, "--vocab") && i + 1 < argc)
            b->V = atoll(argv[++i]);
        else if (!strcmp(a, "--hidden") && i + 1 < argc)
            b->H = atoll(argv[++i]);
        else if (!strcmp(a, "--decode-rows") && i + 1 < argc)
            b->dec = atoll(argv[++i]);
        else if (!strcmp(a, "--iters") && i + 1 < argc)
            b->iters = atoi(argv[++i]);
        else if (!strcmp(a, "--tile") && i + 4 < argc) {
            b->t.rows = atoll(argv[++i]);
            b->t.cols = atoll(argv[++i]);
            b->t.group = atoll(argv[++i]);
            b->t.item_rows = atoll(argv[++i]);
        } else {
            fprintf(stderr, "unknown or incomplete argument: %s\n", a);
            return 1;
        }
    }
    if (b->t.rows == 0)
        b->t = df_vocab_tiling_for(b->V, b->H); /* what the library uses */
    return b->n < 1 || b->V < 1 || b->H < 1 || b->dec < 1 || b->iters < 1;
}

static float *falloc(int64_t n)
{
    float *p = aligned_alloc(64, ((size_t)n * sizeof(float) + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "out of memory (%lld floats)\n", (long long)n);
        exit(1);
    }
    return p;
}

static void fill(float *x, int64_t n, uint64_t seed, float scale)
{
    df_rng r;
    df_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++)
        x[i] = scale * (float)df_rng_normal(&r);
}

/* CPU seconds of all threads: on a machine shared with other jobs the work
 * done, whatever the waiting (wall time is printed too). */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Wall and CPU time of one call, keeping the best (lowest CPU) of several. */
typedef struct {
    double wall, cpu;
} timing;

static void keep_best(timing *best, double w0, double c0)
{
    double w = omp_get_wtime() - w0, c = cpu_s() - c0;
    if (c < best->cpu)
        *best = (timing){w, c};
}

/* ---- naive baselines -------------------------------------------------------------- */

#define NAIVE_ROWS 16

static void naive_fwd(float *logp, float *ent, const float *h, const float *W,
                      const int32_t *tgt, int64_t n, int64_t V, int64_t H, float *logits)
{
    for (int64_t r0 = 0; r0 < n; r0 += NAIVE_ROWS) {
        int64_t nr = n - r0 < NAIVE_ROWS ? n - r0 : NAIVE_ROWS;
        df_gemm_nt(nr, V, H, 1.0f, h + r0 * H, W, 0.0f, logits);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < nr; i++) {
            const float *z = logits + i * V;
            double m = -INFINITY, s = 0.0, pz = 0.0;
            for (int64_t v = 0; v < V; v++)
                m = z[v] > m ? z[v] : m;
            for (int64_t v = 0; v < V; v++) {
                double e = exp(z[v] - m);
                s += e;
                pz += e * (z[v] - m);
            }
            logp[r0 + i] = (float)(z[tgt[r0 + i]] - m - log(s));
            ent[r0 + i] = (float)(log(s) - pz / s);
        }
    }
}

static void naive_bwd(float *dh, float *dW, const float *dlogp, const float *h, const float *W,
                      const int32_t *tgt, const float *logp, int64_t n, int64_t V, int64_t H,
                      float *logits)
{
    for (int64_t r0 = 0; r0 < n; r0 += NAIVE_ROWS) {
        int64_t nr = n - r0 < NAIVE_ROWS ? n - r0 : NAIVE_ROWS;
        df_gemm_nt(nr, V, H, 1.0f, h + r0 * H, W, 0.0f, logits);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < nr; i++) {
            float *z = logits + i * V;
            double lse = z[tgt[r0 + i]] - logp[r0 + i];
            for (int64_t v = 0; v < V; v++)
                z[v] = (float)(-dlogp[r0 + i] * exp(z[v] - lse));
            z[tgt[r0 + i]] += dlogp[r0 + i];
        }
        df_gemm_nn(nr, H, V, 1.0f, logits, W, 0.0f, dh + r0 * H);
        df_gemm_tn(V, H, nr, 1.0f, logits, h + r0 * H, 1.0f, dW);
    }
}

/* Multinomial draw per row: softmax in double, then a sequential CDF scan. */
static void naive_sample(int32_t *tok, float *lp, const float *h, const float *W, int64_t n,
                         int64_t V, int64_t H, const double *u, float *logits)
{
    for (int64_t r0 = 0; r0 < n; r0 += NAIVE_ROWS) {
        int64_t nr = n - r0 < NAIVE_ROWS ? n - r0 : NAIVE_ROWS;
        df_gemm_nt(nr, V, H, 1.0f, h + r0 * H, W, 0.0f, logits);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < nr; i++) {
            const float *z = logits + i * V;
            double m = -INFINITY, s = 0.0, c = 0.0;
            for (int64_t v = 0; v < V; v++)
                m = z[v] > m ? z[v] : m;
            for (int64_t v = 0; v < V; v++)
                s += exp(z[v] - m);
            double target = u[r0 + i] * s;
            int64_t k = V - 1;
            for (int64_t v = 0; v < V; v++)
                if ((c += exp(z[v] - m)) > target) {
                    k = v;
                    break;
                }
            tok[r0 + i] = (int32_t)k;
            lp[r0 + i] = (float)(z[k] - m - log(s));
        }
    }
}

/* The rollout's filtered sampler (top-k / top-p on materialised logits rows). */
static void filtered_sample(int32_t *tok, float *lp, const float *h, const float *W, int64_t n,
                            int64_t V, int64_t H, const df_sampling_params *sp, float *logits,
                            char *work, int64_t work_bytes)
{
    for (int64_t r0 = 0; r0 < n; r0 += NAIVE_ROWS) {
        int64_t nr = n - r0 < NAIVE_ROWS ? n - r0 : NAIVE_ROWS;
        df_gemm_nt(nr, V, H, 1.0f, h + r0 * H, W, 0.0f, logits);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < nr; i++) {
            df_rng r;
            df_rng_seed(&r, (uint64_t)(r0 + i));
            tok[r0 + i] = df_sample_token(logits + i * V, V, sp, &r,
                                          work + (int64_t)omp_get_thread_num() * work_bytes,
                                          &lp[r0 + i]);
        }
    }
}

/* ---- the kernels ---------------------------------------------------------------------- */

static void fused_sample(int32_t *tok, float *lp, const float *h, const float *W, int64_t n,
                         int64_t V, int64_t H, const double *u, df_vstat *st,
                         const df_vocab_tiling *t, float *bufs)
{
    int64_t G = df_vocab_groups(V, t), gcols = df_vocab_tiling_clamp(t).group;
    df_vocab_stats(st, NULL, NULL, h, W, n, V, H, 1.0f, 0.0f, 0u, t);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        df_vrow r;
        float zt;
        df_vstat_merge(st + i * G, G, &r);
        tok[i] = df_vocab_draw(st + i * G, G, &r, u[i], h + i * H, W, V, H, 1.0f, 0.0f, t,
                               bufs + (int64_t)omp_get_thread_num() * 2 * gcols, &zt);
        lp[i] = (float)((double)zt - r.m - log(r.s0));
    }
}

/* The logits GEMM alone, in the kernels' work items and tile order. */
static void gemm_only(const float *h, const float *W, int64_t n, int64_t V, int64_t H,
                      const df_vocab_tiling *t)
{
    df_vocab_tiling c = df_vocab_tiling_clamp(t);
    int64_t G = df_vocab_groups(V, &c), nib = (n + c.item_rows - 1) / c.item_rows;
#pragma omp parallel
    {
        float *tile = falloc(c.rows * c.cols);
#pragma omp for schedule(dynamic, 1)
        for (int64_t it = 0; it < nib * G; it++) {
            int64_t r0 = it / G * c.item_rows, r1 = r0 + c.item_rows < n ? r0 + c.item_rows : n;
            int64_t c0 = it % G * c.group, c1 = c0 + c.group < V ? c0 + c.group : V;
            for (int64_t cs = c0; cs < c1; cs += c.cols)
                for (int64_t rb = r0; rb < r1; rb += c.rows) {
                    int64_t nr = r1 - rb < c.rows ? r1 - rb : c.rows;
                    int64_t nc = c1 - cs < c.cols ? c1 - cs : c.cols;
                    df_gemm_nt(nr, nc, H, 1.0f, h + rb * H, W + cs * H, 0.0f, tile);
                }
        }
        free(tile);
    }
}

static double max_abs_diff(const float *a, const float *b, int64_t n)
{
    double d = 0.0;
    for (int64_t i = 0; i < n; i++)
        d = fabs((double)a[i] - b[i]) > d ? fabs((double)a[i] - b[i]) : d;
    return d;
}

static double rel_l2(const float *a, const float *b, int64_t n)
{
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

int main(int argc, char **argv)
{
    bench_cfg b;
    if (parse(argc, argv, &b)) {
        fprintf(stderr, "usage: bench_lmhead [--rows N] [--vocab V] [--hidden H] "
                        "[--decode-rows R] [--iters N] [--tile ROWS COLS GROUP ITEM_ROWS]\n");
        return 2;
    }
    const int64_t n = b.n, V = b.V, H = b.H, R = b.dec;
    const df_vocab_tiling tc = df_vocab_tiling_clamp(&b.t);
    const int nt = omp_get_max_threads();
    float *h = falloc(n * H), *W = falloc(V * H), *dW = falloc(V * H), *dW0 = falloc(V * H);
    float *dh = falloc(n * H), *dh0 = falloc(n * H), *logits = falloc(NAIVE_ROWS * V);
    float *lp = falloc(n), *lp0 = falloc(n), *ent = falloc(n), *ent0 = falloc(n), *spq = falloc(n);
    float *lse = falloc(n), *dl = falloc(n);
    float *scratch = falloc(df_lmhead_scratch_floats_tiled(n, V, H, &b.t));
    int32_t *tgt = malloc((size_t)n * sizeof(int32_t));
    fill(h, n * H, 1, 1.0f);
    fill(W, V * H, 2, 0.5f); /* logits ~ N(0, 16): a realistic spread of probabilities */
    df_rng r;
    df_rng_seed(&r, 3);
    for (int64_t i = 0; i < n; i++) {
        tgt[i] = (int32_t)df_rng_below(&r, (uint64_t)V);
        dl[i] = -1.0f / (float)n;
    }
    printf("config: rows %lld vocab %lld hidden %lld decode_rows %lld threads %d tile %lldx%lld "
           "group %lld item_rows %lld\n",
           (long long)n, (long long)V, (long long)H, (long long)R, nt, (long long)tc.rows,
           (long long)tc.cols, (long long)tc.group, (long long)tc.item_rows);
    printf("kernels: %s (%s)\n", df_kernels_active(), df_kernels_reason());
    const double logits_n = (double)n * (double)V;
    timing t_fwd = {1e30, 1e30}, t_fwd_ne = t_fwd, t_bwd = t_fwd, t_gemm = t_fwd, t_nf = t_fwd;
    timing t_nb = t_fwd, t_fwd_sq = t_fwd;
    for (int it = 0; it < b.iters; it++) { /* best of iters: the machine is shared */
        double w0 = omp_get_wtime(), c0 = cpu_s();
        gemm_only(h, W, n, V, H, &b.t);
        keep_best(&t_gemm, w0, c0);
        w0 = omp_get_wtime(), c0 = cpu_s();
        df_lmhead_fwd_tiled(lp, ent, NULL, lse, h, W, tgt, n, V, H, 1.0f, 0.0f, &b.t, scratch);
        keep_best(&t_fwd, w0, c0);
        w0 = omp_get_wtime(), c0 = cpu_s();
        df_lmhead_fwd_tiled(lp, NULL, NULL, lse, h, W, tgt, n, V, H, 1.0f, 0.0f, &b.t, scratch);
        keep_best(&t_fwd_ne, w0, c0);
        w0 = omp_get_wtime(), c0 = cpu_s(); /* the old-log-prob pass of the optimal token baseline */
        df_lmhead_fwd_tiled(lp, ent, spq, lse, h, W, tgt, n, V, H, 1.0f, 0.0f, &b.t, scratch);
        keep_best(&t_fwd_sq, w0, c0);
        memset(dW, 0, (size_t)(V * H) * sizeof(float));
        w0 = omp_get_wtime(), c0 = cpu_s();
        df_lmhead_bwd_tiled(dh, dW, dl, NULL, h, W, tgt, lse, NULL, n, V, H, 1.0f, 0.0f, &b.t,
                            scratch);
        keep_best(&t_bwd, w0, c0);
    }
    df_lmhead_fwd_tiled(lp, ent, NULL, lse, h, W, tgt, n, V, H, 1.0f, 0.0f, &b.t, scratch);
    {
        double w0 = omp_get_wtime(), c0 = cpu_s();
        naive_fwd(lp0, ent0, h, W, tgt, n, V, H, logits);
        keep_best(&t_nf, w0, c0);
        memset(dW0, 0, (size_t)(V * H) * sizeof(float));
        w0 = omp_get_wtime(), c0 = cpu_s();
        naive_bwd(dh0, dW0, dl, h, W, tgt, lp0, n, V, H, logits);
        keep_best(&t_nb, w0, c0);
    }
    const struct {
        const char *name;
        timing t;
    } rows[] = {{"gemm_only", t_gemm}, {"fwd", t_fwd},   {"fwd_no_entropy", t_fwd_ne},
                {"fwd_sum_pi_sq", t_fwd_sq}, {"bwd", t_bwd}, {"naive_fwd", t_nf}, {"naive_bwd", t_nb}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        printf("%s_ns_per_logit: %.3f\n", rows[i].name, 1e9 * rows[i].t.wall / logits_n);
        printf("%s_cpu_ns_per_logit: %.3f\n", rows[i].name, 1e9 * rows[i].t.cpu / logits_n);
    }
    printf("fwd_tokens_per_s: %.0f\n", (double)n / t_fwd.wall);
    printf("bwd_tokens_per_s: %.0f\n", (double)n / t_bwd.wall);
    printf("ratio_fwd_vs_naive: %.2f (cpu %.2f)\n", t_nf.wall / t_fwd.wall, t_nf.cpu / t_fwd.cpu);
    printf("ratio_fwd_sum_pi_sq_vs_fwd: %.3f (cpu %.3f)\n", t_fwd_sq.wall / t_fwd.wall,
           t_fwd_sq.cpu / t_fwd.cpu);
    printf("ratio_bwd_vs_naive: %.2f (cpu %.2f)\n", t_nb.wall / t_bwd.wall, t_nb.cpu / t_bwd.cpu);
    printf("fwd_vs_naive_max_abs_diff: logp %.2e entropy %.2e\n", max_abs_diff(lp, lp0, n),
           max_abs_diff(ent, ent0, n));
    printf("bwd_vs_naive_rel_l2: dh %.2e dW %.2e\n", rel_l2(dh, dh0, n * H),
           rel_l2(dW, dW0, V * H));

    /* Sampling: R rows (a decode step) drawn at temperature 1 from the same uniforms. */
    df_vocab_tiling ts = {b.t.rows, b.t.cols, b.t.cols, b.t.item_rows}; /* short rescans */
    int64_t G = df_vocab_groups(V, &ts);
    df_vstat *st = malloc((size_t)(R * G) * sizeof *st);
    float *bufs = falloc(nt * 2 * df_vocab_tiling_clamp(&ts).group);
    float *hs = falloc(R * H), *slp = falloc(R), *slp0 = falloc(R);
    int32_t *tok = malloc((size_t)R * sizeof(int32_t)), *tok0 = malloc((size_t)R * sizeof(int32_t));
    double *u = malloc((size_t)R * sizeof(double));
    fill(hs, R * H, 4, 1.0f);
    for (int64_t i = 0; i < R; i++)
        u[i] = df_rng_uniform(&r);
    timing t_s = {1e30, 1e30}, t_s0 = t_s, t_f = t_s;
    const int64_t wbytes = (df_sample_work_bytes(V) + 63) / 64 * 64;
    char *work = aligned_alloc(64, (size_t)(nt * wbytes));
    df_sampling_params fsp;
    df_sampling_params_defaults(&fsp);
    fsp.top_p = 0.95f;
    for (int it = 0; it < b.iters; it++) {
        double w0 = omp_get_wtime(), c0 = cpu_s();
        fused_sample(tok, slp, hs, W, R, V, H, u, st, &ts, bufs);
        keep_best(&t_s, w0, c0);
        w0 = omp_get_wtime(), c0 = cpu_s();
        naive_sample(tok0, slp0, hs, W, R, V, H, u, logits);
        keep_best(&t_s0, w0, c0);
        w0 = omp_get_wtime(), c0 = cpu_s();
        filtered_sample(tok0, slp0, hs, W, R, V, H, &fsp, logits, work, wbytes);
        keep_best(&t_f, w0, c0);
    }
    printf("top_p_0.95_sample_tokens_per_s: %.0f (cpu %.0f)\n", (double)R / t_f.wall,
           (double)R / t_f.cpu);
    naive_sample(tok0, slp0, hs, W, R, V, H, u, logits);
    int64_t same = 0;
    for (int64_t i = 0; i < R; i++)
        same += tok[i] == tok0[i];
    printf("sample_tokens_per_s: %.0f (cpu %.0f)\n", (double)R / t_s.wall, (double)R / t_s.cpu);
    printf("naive_sample_tokens_per_s: %.0f (cpu %.0f)\n", (double)R / t_s0.wall,
           (double)R / t_s0.cpu);
    printf("ratio_sample_vs_naive: %.2f (cpu %.2f)\n", t_s0.wall / t_s.wall, t_s0.cpu / t_s.cpu);
    printf("sample_same_tokens_as_naive: %lld/%lld (logp max abs diff %.2e)\n", (long long)same,
           (long long)R, max_abs_diff(slp, slp0, R));
    free(h), free(W), free(dW), free(dW0), free(dh), free(dh0), free(logits), free(lp), free(lp0);
    free(ent), free(ent0), free(spq), free(lse), free(dl), free(scratch), free(tgt), free(st), free(bufs);
    free(hs), free(slp), free(slp0), free(tok), free(tok0), free(u), free(work);
    return 0;
}
