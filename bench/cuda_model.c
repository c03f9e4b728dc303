/*
 * bench/cuda_model.c — the whole decoder on the GPU through the engine's backend seam
 * (df_acts_create_on + df_backend_cuda: src/model/forward.c and backward.c, the code that
 * trains on the CPU), on the Qwen2.5-0.5B shape with random weights (docs/cuda.md):
 *
 *   logprob   df_model_forward with entropy over T tokens (verl's compute_log_prob)
 *   update    forward + backward + global-norm clip + AdamW, weights, gradients and moments
 *             on the GPU (one actor micro-batch and optimizer step)
 *   prefill   the rollout engine on the GPU (df_rollout_generate with the CUDA backend: weights,
 *             KV cache, logits and sampling there; tokens and log-probs downloaded): B prompts
 *             of P tokens, one new token each
 *   decode    the same with N more tokens per prompt (ignore_eos): the extra time over the
 *             prefill run, per generated token, and the weight bytes read per decode step
 *             per second (a float32 decode step reads every weight once: compare with the
 *             device copy bandwidth bench_cuda_backend measures)
 *
 * Each in bf16 (mixed precision, what `trainer.device=cuda` runs by default: bf16 matmuls with
 * float32 accumulation from a bf16 copy of the weights refreshed on the GPU after each step;
 * the rollout's own bf16 copy, its head and sampler float32) and in float32, next to the cuBLAS
 * matmul rate of that dtype measured in the same run (the model's matmul FLOPs over time, as
 * a fraction of it); metrics are named <stage>_<bf16|f32>_..., as bench/torch_cuda_model.py's
 * torch_<stage>_<bf16|f32>_... for HF transformers' Qwen2 on the same shapes and GPU.
 * Usage: bench_cuda_model [--tokens T (4096)] [--seq L (256)] [--layers N (24)]
 *        [--prompts B (64)] [--prompt-len P (256)] [--new N (128)]
 * Prints `metric: value` lines (medians of 7 trials); exit 77 with a SKIP line without a GPU.
 */
#include "backend/cuda/cuda_backend.h"
#include "distflow/model.h"
#include "distflow/optim.h"
#include "distflow/rollout.h"
#include "model/acts.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static df_cuda *cu;

#define OK(call)                                                                           \
    do {                                                                                   \
        if ((call) != DF_OK) {                                                             \
            fprintf(stderr, "bench_cuda_model: %s: %s\n", #call, df_last_error());         \
            exit(1);                                                                       \
        }                                                                                  \
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

typedef struct {
    df_model *m;
    df_acts *a;
    df_seq_batch b;
    float *lp, *en, *c, *d; /* host [n_out] */
    float *d_grads, *d_m, *d_v;
    df_adamw_config oc;
    int64_t step;
    bool bf16; /* mixed precision: the bf16 copy refreshed after each AdamW step */
} run_arg;

static void run_logprob(run_arg *r)
{
    OK(df_model_forward(r->m, r->a, &r->b, 1.0f, r->lp, r->en));
}

static void run_update(run_arg *r)
{
    const int64_t np = r->m->n_params;
    OK(df_cuda_fill(cu, r->d_grads, np, 0.0f));
    OK(df_model_forward(r->m, r->a, &r->b, 1.0f, r->lp, r->en));
    OK(df_model_backward(r->m, r->a, &r->b, 1.0f, r->c, r->d, r->d_grads));
    double ss;
    OK(df_cuda_sumsq(cu, r->d_grads, np, &ss));
    double norm = sqrt(ss);
    if (norm > 1.0)
        OK(df_cuda_scale(cu, r->d_grads, np, (float)(1.0 / (norm + 1e-6))));
    OK(df_cuda_adamw_step(cu, r->a->wdev.blob, r->d_grads, r->d_m, r->d_v, np, &r->oc, ++r->step,
                          1e-6));
    if (r->bf16) /* the trainer's weight sync: converted on the GPU from the new weights */
        OK(df_weights16_refresh_dev(r->a->w16, r->m, &r->a->wdev.view));
}

/* Median of 7 timed calls after a warm-up, seconds (each call ends with a device sync). */
static double time_it(void (*f)(run_arg *), run_arg *r)
{
    f(r);
    OK(df_cuda_sync(cu));
    double t[7];
    for (int k = 0; k < 7; k++) {
        double t0 = now_s();
        f(r);
        OK(df_cuda_sync(cu));
        t[k] = now_s() - t0;
    }
    qsort(t, 7, sizeof t[0], cmp_d);
    return t[3];
}

/* Seconds of one df_rollout_generate of B prompts of P tokens, `new_tokens` each (median of 3
 * after a warm-up); the engine made once per call of this function. */
static double time_generate(const df_model *m, const df_backend *be, df_rollout_dtype dt, int64_t B,
                            int64_t P, int64_t new_tokens, int64_t max_new)
{
    df_rollout_options o = {.max_num_seqs = B, .max_seq_len = P + max_new, .max_num_batched_tokens = 8192,
                            .dtype = dt, .backend = be};
    df_rollout_engine *e;
    OK(df_rollout_engine_create_ex(&m->cfg, &o, &e));
    int64_t *off = malloc(sizeof(int64_t) * (size_t)(B + 1));
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(B * P));
    for (int64_t i = 0; i <= B; i++)
        off[i] = i * P;
    for (int64_t t = 0; t < B * P; t++)
        tok[t] = (int32_t)((t * 7919 + 13) % m->cfg.vocab_size);
    df_rollout_request q = {B, off, tok, 1, 7, NULL, NULL};
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.max_new_tokens = new_tokens;
    sp.ignore_eos = true;
    sp.top_k = 50; /* verl's rollouts sample; top-k keeps the logits path (the device's) */
    double t[3];
    for (int k = -1; k < 3; k++) {
        df_rollout_result res;
        double t0 = now_s();
        OK(df_rollout_generate(e, m, &q, &sp, &res, NULL, NULL));
        if (k >= 0)
            t[k] = now_s() - t0;
        df_rollout_result_free(&res);
    }
    qsort(t, 3, sizeof t[0], cmp_d);
    df_rollout_engine_free(e);
    free(off), free(tok);
    return t[1];
}

/* cuBLAS rate on an 8192^3 product of dtype dt (the ceiling of a model computing in it). */
static double gemm_peak(df_cuda_dtype dt)
{
    const int64_t G = 8192;
    float *A, *B, *C;
    uint16_t *A16, *B16;
    OK(df_cuda_alloc(cu, (size_t)(G * G) * 4, (void **)&A));
    OK(df_cuda_alloc(cu, (size_t)(G * G) * 4, (void **)&B));
    OK(df_cuda_alloc(cu, (size_t)(G * G) * 4, (void **)&C));
    OK(df_cuda_alloc(cu, (size_t)(G * G) * 2, (void **)&A16));
    OK(df_cuda_alloc(cu, (size_t)(G * G) * 2, (void **)&B16));
    OK(df_cuda_fill(cu, A, G * G, 0.5f));
    OK(df_cuda_fill(cu, B, G * G, 0.25f));
    OK(df_cuda_f32_to_bf16(cu, A16, A, G * G));
    OK(df_cuda_f32_to_bf16(cu, B16, B, G * G));
    const void *a = dt == DF_CUDA_BF16 ? (const void *)A16 : A, *b = dt == DF_CUDA_BF16 ? (const void *)B16 : B;
    OK(df_cuda_gemm(cu, false, true, G, G, G, 1.0f, a, b, dt, 0.0f, C));
    OK(df_cuda_sync(cu));
    double t[5];
    for (int k = 0; k < 5; k++) {
        double t0 = now_s();
        OK(df_cuda_gemm(cu, false, true, G, G, G, 1.0f, a, b, dt, 0.0f, C));
        OK(df_cuda_sync(cu));
        t[k] = now_s() - t0;
    }
    qsort(t, 5, sizeof t[0], cmp_d);
    df_cuda_release(cu, A), df_cuda_release(cu, B), df_cuda_release(cu, C);
    df_cuda_release(cu, A16), df_cuda_release(cu, B16);
    return 2.0 * G * G * G / t[2];
}

/* The log-prob forward, the update and the rollout in one dtype ("bf16": mixed precision);
 * fwd: the matmul FLOPs of one forward; peak: cuBLAS's rate in that dtype. */
static void bench_dtype(run_arg *r, const df_backend *be, const char *dt, double fwd, double peak,
                        int64_t B, int64_t P, int64_t N)
{
    const int64_t np = r->m->n_params, T = r->b.n_tokens;
    r->bf16 = !strcmp(dt, "bf16");
    r->step = 0;
    OK(df_acts_create_ex(be, &r->m->cfg, T, r->b.n_out, r->bf16 ? DF_ACTS_BF16 : 0, &r->a));
    OK(df_acts_load_weights(r->a, r->m));
    OK(df_cuda_fill(cu, r->d_m, np, 0.0f));
    OK(df_cuda_fill(cu, r->d_v, np, 0.0f));
    double s_lp = time_it(run_logprob, r);
    printf("logprob_%s_ms: %.3f\nlogprob_%s_tokens_per_s: %.0f\nlogprob_%s_frac_of_gemm_%s: %.3f\n", dt,
           s_lp * 1e3, dt, T / s_lp, dt, dt, fwd / s_lp / peak);
    double s_up = time_it(run_update, r);
    printf("update_%s_ms: %.3f\nupdate_%s_tokens_per_s: %.0f\nupdate_%s_frac_of_gemm_%s: %.3f\n", dt,
           s_up * 1e3, dt, T / s_up, dt, dt, 3 * fwd / s_up / peak);
    df_acts_free(r->a);
    r->a = NULL;
    /* the rollout: prefill alone, then N more tokens per prompt */
    const df_rollout_dtype rd = r->bf16 ? DF_ROLLOUT_BF16 : DF_ROLLOUT_F32;
    const double s_pf = time_generate(r->m, be, rd, B, P, 1, N + 1);
    const double s_gen = time_generate(r->m, be, rd, B, P, N + 1, N + 1);
    printf("rollout %s: %lld prompts x %lld tokens, %lld new tokens each, top-k 50; sampled on the "
           "GPU (df_cuda_sample)\n", dt, (long long)B, (long long)P, (long long)N);
    printf("prefill_%s_ms: %.3f\nprefill_%s_tokens_per_s: %.0f\n", dt, s_pf * 1e3, dt, B * P / s_pf);
    const double s_dec = s_gen - s_pf, wbytes = r->bf16 ? 2.0 : 4.0;
    printf("decode_%s_ms_per_step: %.3f\ndecode_%s_tokens_per_s: %.0f\ndecode_%s_weight_read_gb_per_s: "
           "%.0f\n", dt, s_dec / N * 1e3, dt, B * N / s_dec, dt, np * wbytes * N / s_dec / 1e9);
}

int main(int argc, char **argv)
{
    int64_t T = 4096, Ls = 256, layers = 24, B = 64, P = 256, N = 128;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
            T = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--seq") && i + 1 < argc)
            Ls = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--layers") && i + 1 < argc)
            layers = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--prompts") && i + 1 < argc)
            B = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--prompt-len") && i + 1 < argc)
            P = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--new") && i + 1 < argc)
            N = atoll(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_cuda_model [--tokens T] [--seq L] [--layers N] "
                            "[--prompts B] [--prompt-len P] [--new N]\n");
            return 2;
        }
    }
    int ndev = 0;
    df_cuda_device_count(&ndev);
    if (ndev == 0) {
        printf("SKIP: bench_cuda_model: no CUDA device on this machine\n");
        return 77;
    }
    OK(df_cuda_create(0, &cu));
    df_cuda_info in;
    df_cuda_get_info(cu, &in);
    printf("device: %s (cc %d.%d, %d SMs)\n", in.name, in.cc_major, in.cc_minor, in.n_sm);
    printf("kernels: matmul cuBLAS cublasGemmEx, bf16 x bf16 -> f32 accumulation (mixed precision) "
           "or f32 (no TF32); attention, norms, LM head, AdamW: distflow's (src/backend/cuda), "
           "driven by src/model/forward.c / backward.c\n");
    const double peak16 = gemm_peak(DF_CUDA_BF16), peak32 = gemm_peak(DF_CUDA_F32);
    printf("gemm_bf16_8192_tflops: %.1f\ngemm_f32_8192_tflops: %.1f\n", peak16 / 1e12, peak32 / 1e12);

    df_model_config cfg;
    df_model_config_defaults(&cfg);
    cfg.vocab_size = 151936, cfg.hidden_size = 896, cfg.intermediate_size = 4864;
    cfg.num_hidden_layers = layers, cfg.num_attention_heads = 14, cfg.num_key_value_heads = 2;
    cfg.head_dim = 64, cfg.tie_word_embeddings = true, cfg.rope_theta = 1e6;
    cfg.max_position_embeddings = 32768;
    run_arg r = {0};
    OK(df_model_create(&cfg, &r.m));
    OK(df_model_init_random(r.m, 1));
    const int64_t S = (T + Ls - 1) / Ls;
    int64_t *off = malloc(sizeof(int64_t) * (size_t)(S + 1)), *rows = malloc(sizeof(int64_t) * (size_t)T);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)T), *tgt = malloc(sizeof(int32_t) * (size_t)T);
    int64_t n = 0;
    for (int64_t s = 0; s <= S; s++)
        off[s] = s * Ls < T ? s * Ls : T;
    for (int64_t t = 0; t < T; t++)
        tok[t] = (int32_t)((t * 7919 + 13) % cfg.vocab_size);
    for (int64_t s = 0; s < S; s++)
        for (int64_t t = off[s]; t + 1 < off[s + 1]; t++)
            rows[n] = t, tgt[n++] = tok[t + 1];
    r.b = (df_seq_batch){.n_tokens = T, .tokens = tok, .n_seqs = S, .seq_offsets = off, .n_out = n,
                         .out_rows = rows, .out_targets = tgt};
    r.lp = malloc(sizeof(float) * (size_t)n), r.en = malloc(sizeof(float) * (size_t)n);
    /* the loss: the mean log-prob, no entropy term (verl's default entropy_coeff 0) */
    r.c = malloc(sizeof(float) * (size_t)n);
    for (int64_t j = 0; j < n; j++)
        r.c[j] = 1.0f / (float)n;

    df_backend be = df_backend_cuda(cu);
    const int64_t np = r.m->n_params;
    OK(df_cuda_alloc(cu, (size_t)np * 4, (void **)&r.d_grads));
    OK(df_cuda_alloc(cu, (size_t)np * 4, (void **)&r.d_m));
    OK(df_cuda_alloc(cu, (size_t)np * 4, (void **)&r.d_v));
    df_adamw_config_defaults(&r.oc);
    printf("shape: %lld layers, hidden 896, heads 14/2 x 64, intermediate 4864, vocab 151936 "
           "(tied), %lld parameters; %lld tokens in %lld sequences of %lld, %lld scored\n",
           (long long)layers, (long long)np, (long long)T, (long long)S, (long long)Ls,
           (long long)n);

    /* matmul FLOPs of one forward: the layers' projections, attention's two products (causal
     * halves), the LM head over the scored rows */
    const double H = 896, I = 4864, qd = 14 * 64, kvd = 2 * 64;
    double pairs = 0;
    for (int64_t s = 0; s < S; s++) {
        double L = (double)(off[s + 1] - off[s]);
        pairs += L * (L + 1) / 2;
    }
    const double fwd = layers * (2.0 * T * H * (2 * qd + 2 * kvd) + 6.0 * T * H * I +
                                 4.0 * pairs * qd) +
                       2.0 * n * 151936 * H;
    bench_dtype(&r, &be, "bf16", fwd, peak16, B, P, N); /* train's default on the GPU first */
    bench_dtype(&r, &be, "f32", fwd, peak32, B, P, N);
    df_cuda_release(cu, r.d_grads), df_cuda_release(cu, r.d_m), df_cuda_release(cu, r.d_v);
    df_model_free(r.m);
    df_cuda_free(cu);
    free(off), free(rows), free(tok), free(tgt), free(r.lp), free(r.en), free(r.c);
    return 0;
}
