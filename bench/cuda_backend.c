/*
 * bench/cuda_backend.c — the CUDA backend's operators on the Qwen2.5-0.5B shape (hidden 896,
 * 14 heads / 2 kv heads of 64, intermediate 4864, vocab 151936), each against the ceiling
 * measured in the same run: the device-to-device copy bandwidth for memory-bound ops, the
 * cuBLAS matmul rate for matmul-bound ones (docs/cuda.md, docs/performance.md).
 * bench/torch_cuda_ops.py times PyTorch on the same ops and shapes; scripts/device-cuda.sh
 * runs both and prints the ratios.
 *
 * Usage: bench_cuda_backend [--tokens T (4096)] [--quick]
 * Prints `metric: value` lines: *_ms the median of 7 timed trials (each the mean of several
 * calls, after a warm-up), *_tflops / *_tbps achieved rates, *_frac the fraction of the
 * measured ceiling. Exit 77 with a SKIP line when no GPU is present.
 */
#include "backend/cuda/cuda_backend.h"
#include "distflow/rng.h"
#include "model/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static df_cuda *cu;

static void die(const char *what)
{
    fprintf(stderr, "bench_cuda_backend: %s: %s\n", what, df_last_error());
    exit(1);
}
#define OK(call) \
    do {                   \
        if ((call) != DF_OK) \
            die(#call);    \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef void (*op_fn)(void *arg);

/* Median over 7 trials of the mean time of `reps` calls, in seconds (device-synchronised). */
static double time_op(op_fn f, void *arg, int reps)
{
    f(arg); /* warm-up: module load, cuBLAS heuristics */
    OK(df_cuda_sync(cu));
    double t[7];
    for (int k = 0; k < 7; k++) {
        double t0 = now_s();
        for (int r = 0; r < reps; r++)
            f(arg);
        OK(df_cuda_sync(cu));
        t[k] = (now_s() - t0) / reps;
    }
    qsort(t, 7, sizeof t[0], cmp_d);
    return t[3];
}

/* Device buffer of n floats, uniform in [lo, hi). */
static float *dev_rand(int64_t n, uint64_t seed, float lo, float hi)
{
    float *h = malloc((size_t)n * 4), *d;
    if (!h)
        die("host malloc");
    df_rng r;
    df_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++)
        h[i] = lo + (hi - lo) * (float)df_rng_uniform(&r);
    OK(df_cuda_alloc(cu, (size_t)n * 4, (void **)&d));
    OK(df_cuda_upload(cu, d, h, (size_t)n * 4));
    OK(df_cuda_sync(cu));
    free(h);
    return d;
}

static void *dev_alloc(size_t bytes)
{
    void *d;
    OK(df_cuda_alloc(cu, bytes, &d));
    return d;
}

/* ---- the ops under test, as closures ---------------------------------------------- */

typedef struct {
    int64_t M, N, K;
    df_cuda_dtype dt;
    bool ta, tb;
    const void *A, *B;
    float *C;
} gemm_arg;
static void run_gemm(void *p)
{
    gemm_arg *g = p;
    OK(df_cuda_gemm(cu, g->ta, g->tb, g->M, g->N, g->K, 1.0f, g->A, g->B, g->dt, 0.0f, g->C));
}

typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
} copy_arg;
static void run_copy(void *p)
{
    copy_arg *c = p;
    OK(df_cuda_copy(cu, c->dst, c->src, c->bytes));
}

typedef struct {
    int64_t T, H, nh, nkv, hd, I, V, n_seqs, max_len;
    float *x, *y, *w, *rstd, *gate, *up, *act, *q, *k, *v, *o, *lse, *dq, *dk, *dv;
    float *cos_t, *sin_t, *logp, *ent, *lse_v, *W, *scratch;
    int32_t *pos, *target;
    int64_t *offs;
} layer_arg;

static void run_rmsnorm(void *p)
{
    layer_arg *a = p;
    OK(df_cuda_rmsnorm_fwd(cu, a->y, a->rstd, a->x, a->w, a->T, a->H, 1e-6f));
}
static void run_swiglu(void *p)
{
    layer_arg *a = p;
    OK(df_cuda_swiglu_fwd(cu, a->act, a->gate, a->up, a->T * a->I));
}
static void run_rope(void *p)
{
    layer_arg *a = p;
    OK(df_cuda_rope_apply(cu, a->q, a->pos, a->T, a->nh, a->hd, a->hd, a->cos_t, a->sin_t, false));
}
static void run_attn_fwd(void *p)
{
    layer_arg *a = p;
    OK(df_cuda_attention_fwd(cu, a->o, a->lse, a->q, a->k, a->v, a->offs, a->n_seqs, a->T,
                             a->max_len, a->nh, a->nkv, a->hd, 0, 0.0f));
}
static void run_attn_bwd(void *p)
{
    layer_arg *a = p; /* dout = out: any tensor of the right shape times the same */
    OK(df_cuda_attention_bwd(cu, a->dq, a->dk, a->dv, a->o, a->o, a->lse, a->q, a->k, a->v,
                             a->offs, a->n_seqs, a->T, a->max_len, a->nh, a->nkv, a->hd, 0, 0.0f));
}
static void run_lmhead(void *p)
{
    layer_arg *a = p;
    OK(df_cuda_lmhead_fwd(cu, a->logp, a->ent, NULL, a->lse_v, a->x, a->W, a->target, a->T, a->V,
                          a->H, 1.0f, 0.0f, a->scratch));
}

typedef struct {
    float *p, *g, *m, *v;
    int64_t n, step;
    df_adamw_config cfg;
} adam_arg;
static void run_adamw(void *p)
{
    adam_arg *a = p;
    OK(df_cuda_adamw_step(cu, a->p, a->g, a->m, a->v, a->n, &a->cfg, ++a->step, 1e-6));
}

/* ---- report -------------------------------------------------------------------------- */

static void report_mem(const char *name, double s, double bytes, double bw)
{
    printf("%s_ms: %.4f\n%s_tbps: %.3f\n%s_frac_of_copy_bw: %.3f\n", name, s * 1e3, name,
           bytes / s / 1e12, name, bytes / s / bw);
}

static void report_flops(const char *name, double s, double flops, double peak, const char *of)
{
    printf("%s_ms: %.4f\n%s_tflops: %.2f\n%s_frac_of_%s: %.3f\n", name, s * 1e3, name,
           flops / s / 1e12, name, of, flops / s / peak);
}

int main(int argc, char **argv)
{
    int64_t T = 4096;
    bool quick = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
            T = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--quick"))
            quick = true;
        else {
            fprintf(stderr, "usage: bench_cuda_backend [--tokens T] [--quick]\n");
            return 2;
        }
    }
    int ndev = 0;
    df_cuda_device_count(&ndev);
    if (ndev == 0) {
        printf("SKIP: bench_cuda_backend: no CUDA device on this machine\n");
        return 77;
    }
    OK(df_cuda_create(0, &cu));
    df_cuda_info in;
    df_cuda_get_info(cu, &in);
    printf("device: %s (cc %d.%d, %d SMs, %.1f GiB, CUDA runtime %d, driver %d)\n", in.name,
           in.cc_major, in.cc_minor, in.n_sm, in.mem_bytes / 1073741824.0, in.runtime_version,
           in.driver_version);
    printf("kernels: matmul cuBLAS cublasGemmEx (CUBLAS_COMPUTE_32F; bf16 operands on tensor "
           "cores, f32 without TF32); other ops distflow's kernels (src/backend/cuda)\n");

    /* ceilings: bandwidth and matmul rates */
    size_t cbytes = (size_t)1 << 30;
    void *c_src = dev_alloc(cbytes), *c_dst = dev_alloc(cbytes);
    copy_arg cp = {c_dst, c_src, cbytes};
    double bw = 2.0 * cbytes / time_op(run_copy, &cp, 5);
    printf("copy_bw_tbps: %.3f\n", bw / 1e12);
    df_cuda_release(cu, c_dst), df_cuda_release(cu, c_src);

    int64_t G = quick ? 4096 : 8192;
    float *A = dev_rand(G * G, 1, -1, 1), *B = dev_rand(G * G, 2, -1, 1), *C = dev_alloc(G * G * 4);
    uint16_t *Ah = dev_alloc(G * G * 2), *Bh = dev_alloc(G * G * 2);
    OK(df_cuda_f32_to_bf16(cu, Ah, A, G * G));
    OK(df_cuda_f32_to_bf16(cu, Bh, B, G * G));
    gemm_arg g16 = {G, G, G, DF_CUDA_BF16, false, true, Ah, Bh, C};
    gemm_arg g32 = {G, G, G, DF_CUDA_F32, false, true, A, B, C};
    double fl = 2.0 * G * G * G;
    double s16 = time_op(run_gemm, &g16, 10), s32 = time_op(run_gemm, &g32, 3);
    double peak16 = fl / s16, peak32 = fl / s32;
    printf("gemm_bf16_%lld_ms: %.4f\ngemm_bf16_%lld_tflops: %.1f\n", (long long)G, s16 * 1e3,
           (long long)G, peak16 / 1e12);
    printf("gemm_f32_%lld_ms: %.4f\ngemm_f32_%lld_tflops: %.1f\n", (long long)G, s32 * 1e3,
           (long long)G, peak32 / 1e12);
    df_cuda_release(cu, A), df_cuda_release(cu, B), df_cuda_release(cu, C);
    df_cuda_release(cu, Ah), df_cuda_release(cu, Bh);

    /* the Qwen2.5-0.5B layer's ops at T tokens (sequences of 256) */
    layer_arg a = {.T = T, .H = 896, .nh = 14, .nkv = 2, .hd = 64, .I = 4864, .V = 151936};
    a.max_len = T < 256 ? T : 256;
    a.n_seqs = (T + a.max_len - 1) / a.max_len;
    printf("shape: T %lld tokens in %lld sequences of <= %lld, hidden %lld, heads %lld/%lld x %lld, "
           "intermediate %lld, vocab %lld\n", (long long)T, (long long)a.n_seqs,
           (long long)a.max_len, (long long)a.H, (long long)a.nh, (long long)a.nkv,
           (long long)a.hd, (long long)a.I, (long long)a.V);
    int64_t qd = a.nh * a.hd, kvd = a.nkv * a.hd;
    a.x = dev_rand(T * a.H, 3, -1, 1), a.y = dev_alloc(T * a.H * 4);
    a.w = dev_rand(a.H, 4, 0.5f, 1.5f), a.rstd = dev_alloc(T * 4);
    a.gate = dev_rand(T * a.I, 5, -3, 3), a.up = dev_rand(T * a.I, 6, -1, 1);
    a.act = dev_alloc(T * a.I * 4);
    a.q = dev_rand(T * qd, 7, -1, 1), a.k = dev_rand(T * kvd, 8, -1, 1);
    a.v = dev_rand(T * kvd, 9, -1, 1), a.o = dev_alloc(T * qd * 4), a.lse = dev_alloc(T * a.nh * 4);
    a.dq = dev_alloc(T * qd * 4), a.dk = dev_alloc(T * kvd * 4), a.dv = dev_alloc(T * kvd * 4);
    int32_t *pos = malloc(T * 4), *tgt = malloc(T * 4);
    int64_t *offs = malloc((a.n_seqs + 1) * 8);
    for (int64_t t = 0; t < T; t++)
        pos[t] = (int32_t)(t % a.max_len), tgt[t] = (int32_t)((t * 7919) % a.V);
    for (int64_t s = 0; s <= a.n_seqs; s++)
        offs[s] = s * a.max_len < T ? s * a.max_len : T;
    a.pos = dev_alloc(T * 4), a.target = dev_alloc(T * 4), a.offs = dev_alloc((a.n_seqs + 1) * 8);
    OK(df_cuda_upload(cu, a.pos, pos, T * 4));
    OK(df_cuda_upload(cu, a.target, tgt, T * 4));
    OK(df_cuda_upload(cu, a.offs, offs, (a.n_seqs + 1) * 8));
    float *ct = malloc(a.max_len * a.hd / 2 * 4), *st = malloc(a.max_len * a.hd / 2 * 4);
    df_rope_table(ct, st, a.max_len, a.hd, 1e6);
    a.cos_t = dev_alloc(a.max_len * a.hd / 2 * 4), a.sin_t = dev_alloc(a.max_len * a.hd / 2 * 4);
    OK(df_cuda_upload(cu, a.cos_t, ct, a.max_len * a.hd / 2 * 4));
    OK(df_cuda_upload(cu, a.sin_t, st, a.max_len * a.hd / 2 * 4));
    a.W = dev_rand(a.V * a.H, 10, -0.05f, 0.05f);
    a.logp = dev_alloc(T * 4), a.ent = dev_alloc(T * 4), a.lse_v = dev_alloc(T * 4);
    a.scratch = dev_alloc((size_t)df_cuda_vocab_scratch_floats(T, a.V, a.H) * 4);
    OK(df_cuda_sync(cu));

    report_mem("rmsnorm_fwd", time_op(run_rmsnorm, &a, 20), 2.0 * T * a.H * 4, bw);
    report_mem("swiglu_fwd", time_op(run_swiglu, &a, 20), 3.0 * T * a.I * 4, bw);
    report_mem("rope_q", time_op(run_rope, &a, 20), 2.0 * T * qd * 4, bw);
    /* causal: each sequence of L does L (L + 1) / 2 score rows of hd for QK^T and for PV */
    double pairs = 0;
    for (int64_t s = 0; s < a.n_seqs; s++) {
        double L = (double)(offs[s + 1] - offs[s]);
        pairs += L * (L + 1) / 2;
    }
    double att_fl = 4.0 * pairs * a.hd * a.nh;
    report_flops("attention_fwd_f32", time_op(run_attn_fwd, &a, 10), att_fl, peak32, "gemm_f32");
    report_flops("attention_bwd_f32", time_op(run_attn_bwd, &a, 5), 2.5 * att_fl, peak32,
                 "gemm_f32");
    double lm_s = time_op(run_lmhead, &a, quick ? 1 : 3);
    report_flops("lmhead_fwd_f32", lm_s, 2.0 * T * a.V * a.H, peak32, "gemm_f32");
    printf("lmhead_fwd_f32_tokens_per_s: %.0f\n", T / lm_s);

    /* AdamW over the 0.5B model's parameters: p, m, v read and written, g read */
    adam_arg ad = {.n = 494032768};
    df_adamw_config_defaults(&ad.cfg);
    ad.p = dev_rand(ad.n, 11, -1, 1), ad.g = dev_rand(ad.n, 12, -1, 1);
    ad.m = dev_alloc(ad.n * 4), ad.v = dev_alloc(ad.n * 4);
    OK(df_cuda_fill(cu, ad.m, ad.n, 0));
    OK(df_cuda_fill(cu, ad.v, ad.n, 0));
    report_mem("adamw_0.5b", time_op(run_adamw, &ad, 3), 7.0 * ad.n * 4, bw);
    df_cuda_free(cu);
    free(pos), free(tgt), free(offs), free(ct), free(st);
    return 0;
}
