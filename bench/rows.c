/*
 * bench/rows.c — the rows of `make bench` (issue 14, docs/performance.md): one row per
 * process, the engine and PyTorch (bench/torch_rows.py, run from here in child processes
 * with the same shape, work and thread count) side by side.
 *
 *   gemm     C = A B^T, large square: float32 through oneDNN's sgemm (what every float32
 *            Linear of the engine calls) and bf16 through ops.h df_mm_nt (both operands
 *            rounded to bf16, oneDNN matmul primitive, float32 result): the peak
 *   prefill  B prompts of P tokens through the rollout engine, one token sampled
 *   decode   B = prompts x n sequences decoded together for G tokens (ignore_eos, top_p 1);
 *            decode time: from every sequence's first token (the prefill's, timed by the
 *            progress callback) to the last step, so the prefill is out
 *   logprob  df_model_forward of packed sequences (64..128 tokens each): log-prob and
 *            entropy of every next token (the actor's old_log_prob / reference pass)
 *   update   forward + backward + clip + AdamW on the same batch (the actor update)
 *
 * Usage: bench_rows ROW [--shape qwen2.5-0.5b|demo] [--dtype f32|bf16] [--tokens T]
 *        [--batch B] [--prompt P] [--gen G] [--n N] [--iters K] [--peak-gflops X]
 *        [--torch f32,bf16|f32|bf16|none]
 * --dtype is the engine's path (default: DF_BENCH_DTYPE, else f32); engine_set_train_dtype /
 * engine_rollout_bf16 below are the one place the engine's bf16 paths plug in.
 * --peak-gflops: the bf16 GEMM peak measured by the gemm row of the same run; rows print
 * their achieved GFLOP/s as a fraction of it. Prints `metric: value` lines: medians over
 * --iters timed runs after one warm-up, CPU seconds too (the machine may be shared), the
 * process's peak RSS (getrusage), torch's lines, ratios, and each target with met yes / no.
 */
#include "common/bench_util.h"
#include "distflow/model.h"
#include "distflow/optim.h"
#include "distflow/platform.h"
#include "distflow/rollout.h"
#include "model/acts.h"
#include "model/ops.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the engine's dtype paths: the single plug-in point ------------------------------- */

/* Training activations: bf16 matmuls (both operands rounded per call) when bf16. With the
 * bf16 weight copy of mixed precision, its refresh (df_acts_load_weights) goes here and in
 * engine_weights_changed. */
static int engine_set_train_dtype(df_acts *a, const df_model *m, int bf16)
{
    if (!bf16)
        return 0;
    return df_acts_set_bf16_matmul(a, true) || df_acts_load_weights(a, m);
}

static int engine_weights_changed(df_acts *a, const df_model *m)
{
    return df_acts_load_weights(a, m);
}

/* The rollout engine in bf16 (weights and KV cache): not in this build; the row says so
 * and runs float32. Returns 1 when the engine runs bf16. */
static int engine_rollout_bf16(df_rollout_engine *e, int bf16)
{
    (void)e;
    if (bf16)
        printf("engine_note: the rollout has no bf16 path in this build: float32\n");
    return 0;
}

/* ---- rows ------------------------------------------------------------------------------ */

static double gemm_gflops(int bf16, int64_t n, int iters, double *cpu_s)
{
    float *A = malloc(sizeof(float) * (size_t)(n * n)), *B = malloc(sizeof(float) * (size_t)(n * n));
    float *C = malloc(sizeof(float) * (size_t)(n * n));
    for (int64_t i = 0; i < n * n; i++) {
        A[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
        B[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
    }
    df_mm_ctx *ctx = NULL;
    double *t = malloc(sizeof(double) * (size_t)iters), c0 = 0, gf = -1;
    if (bf16 && df_mm_ctx_create(n * n, &ctx)) {
        printf("engine_note: no bf16 matmul: %s\n", df_last_error());
        goto out;
    }
    for (int it = -1; it < iters; it++) {
        if (it == 0)
            c0 = bench_cpu_s();
        double t0 = bench_now_s();
        df_mm_nt(ctx, n, n, n, 1.0f, A, B, 0.0f, C); /* ctx NULL: df_gemm_nt, oneDNN sgemm */
        if (it >= 0)
            t[it] = bench_now_s() - t0;
    }
    *cpu_s = (bench_cpu_s() - c0) / iters;
    gf = 2.0 * (double)n * (double)n * (double)n / bench_median(t, iters) / 1e9;
    if (ctx && df_mm_ctx_fallbacks(ctx))
        printf("engine_note: %lld bf16 calls fell back to float32\n",
               (long long)df_mm_ctx_fallbacks(ctx));
out:
    df_mm_ctx_free(ctx);
    free(A), free(B), free(C), free(t);
    return gf;
}

static int row_gemm(const bench_args *b)
{
    double cpu;
    double f32 = gemm_gflops(0, b->n, b->iters, &cpu);
    printf("gemm_f32_gflop_per_s: %.1f\n", f32);
    double bf = gemm_gflops(1, b->n, b->iters, &cpu);
    printf("gemm_bf16_gflop_per_s: %.1f\n", bf);
    printf("gemm_bf16_cpu_s_per_call: %.3f\n", cpu);
    bench_torch_result tf, tb;
    if (bench_torch(b, "f32", &tf))
        printf("ratio_gemm_f32_vs_torch_f32: %.2f\n", f32 / tf.value);
    if (bench_torch(b, "bf16", &tb))
        printf("ratio_gemm_bf16_vs_torch_bf16: %.2f\n", bf / tb.value);
    return f32 > 0 ? 0 : 1;
}

/* A rollout engine for b's prompts, bf16 when asked and available. */
static int make_rollout(const bench_args *b, const df_model_config *c, int64_t max_seqs,
                        int64_t max_len, df_rollout_engine **e)
{
    if (df_rollout_engine_create(c, max_seqs, max_len, e))
        return 1;
    int on = engine_rollout_bf16(*e, b->bf16);
    printf("engine_path: rollout %s\n", on ? "bf16" : "f32");
    return 0;
}

/* Progress callback: the time of the first call (after the prefill batch: every sequence
 * has its first token) and of the last (after the last decode step). */
typedef struct {
    double first, last;
} gen_times;

static void on_progress(void *user, int64_t done, int64_t total, int64_t tokens)
{
    gen_times *t = user;
    (void)done, (void)total, (void)tokens;
    t->last = bench_now_s();
    if (t->first == 0)
        t->first = t->last;
}

/* One generate of max_new tokens per sequence: *prefill_s to the first token of every
 * sequence (all prompts fit one prefill batch here), *decode_s from there to the end. */
static int generate(df_rollout_engine *e, const df_model *m, const df_rollout_request *q,
                    int64_t max_new, double *prefill_s, double *decode_s)
{
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.max_new_tokens = max_new;
    sp.ignore_eos = true;
    df_rollout_result res;
    df_rollout_stats st;
    gen_times t = {0, 0};
    double t0 = bench_now_s();
    if (df_rollout_generate(e, m, q, &sp, &res, on_progress, &t))
        return 1;
    df_rollout_engine_stats(e, &st);
    df_rollout_result_free(&res);
    if (st.prefill_batches != 1)
        return df_error(DF_EINVAL, "bench: %lld prefill batches, want 1 (fewer prompt tokens)",
                        (long long)st.prefill_batches);
    *prefill_s = t.first - t0;
    *decode_s = t.last - t.first;
    return 0;
}

/* prefill (decode = 0): B prompts x P tokens, n 1, one new token each.
 * decode: B / n prompts x n samples of P prompt tokens, G new tokens. */
static int row_generate(const bench_args *b, const df_model *m, int decode)
{
    const df_model_config *c = &m->cfg;
    int64_t n = decode ? b->n : 1, np = b->batch / n, P = b->prompt;
    int64_t *off = malloc(sizeof(int64_t) * (size_t)(np + 1));
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(np * P));
    double *tp = malloc(sizeof(double) * (size_t)b->iters), *td = malloc(sizeof(double) * (size_t)b->iters);
    bench_prompts(np, P, c->vocab_size, off, tok);
    df_rollout_request q = {np, off, tok, n, 1, NULL};
    df_rollout_request warm = q;
    warm.n_prompts = 1;
    df_rollout_engine *e = NULL;
    int rc = 1;
    double w0, w1;
    if (make_rollout(b, c, np * n, P + b->gen + 1, &e) || generate(e, m, &warm, 2, &w0, &w1))
        goto out;
    double c0 = bench_cpu_s();
    for (int it = 0; it < b->iters; it++)
        if (generate(e, m, &q, decode ? b->gen : 1, &tp[it], &td[it]))
            goto out;
    double cpu = (bench_cpu_s() - c0) / b->iters;
    double tps, flops;
    if (decode) {
        double s = bench_median(td, b->iters);
        tps = (double)(np * n * (b->gen - 1)) / s;
        flops = bench_decode_flops(c, np * n, P, b->gen) / s;
        printf("decode_sequences: %lld (%lld prompts x n %lld), %lld new tokens each\n",
               (long long)(np * n), (long long)np, (long long)n, (long long)b->gen);
        printf("decode_tokens_per_s: %.1f\n", tps);
    } else {
        double s = bench_median(tp, b->iters);
        tps = (double)(np * P) / s;
        flops = bench_prefill_flops(c, np, P) / s;
        printf("prefill_prompts: %lld x %lld tokens\n", (long long)np, (long long)P);
        printf("prefill_tokens_per_s: %.1f\n", tps);
    }
    printf("%s_cpu_s_per_iter: %.2f\n", decode ? "decode" : "prefill", cpu);
    bench_report(b, decode ? "decode" : "prefill", tps, flops / 1e9);
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "bench_rows: %s\n", df_last_error());
    df_rollout_engine_free(e);
    free(off), free(tok), free(tp), free(td);
    return rc;
}

/* logprob (update = 0) or update: packed sequences of 64..128 tokens, every row but each
 * sequence's last scored, log-prob and entropy; the update adds backward, clip and AdamW. */
static int row_train(const bench_args *b, df_model *m, int update)
{
    bench_batch p;
    bench_make_batch(&p, b->tokens, m->cfg.vocab_size);
    const int64_t n_out = p.b.n_out;
    df_backend cpu = df_backend_cpu();
    df_acts *a = NULL;
    df_adamw *opt = NULL;
    df_adamw_config oc;
    df_adamw_config_defaults(&oc);
    float *logp = malloc(sizeof(float) * (size_t)n_out), *ent = malloc(sizeof(float) * (size_t)n_out);
    float *dl = malloc(sizeof(float) * (size_t)n_out), *de = malloc(sizeof(float) * (size_t)n_out);
    float *grads = NULL;
    double *t = malloc(sizeof(double) * (size_t)b->iters);
    int rc = 1;
    if (df_acts_create_ex(&cpu, &m->cfg, b->tokens, n_out, 0, &a) ||
        engine_set_train_dtype(a, m, b->bf16))
        goto out;
    if (update) {
        grads = aligned_alloc(64, ((size_t)m->n_params * sizeof(float) + 63) / 64 * 64);
        if (!grads || df_adamw_create(&oc, m->n_params, &opt))
            goto out;
    }
    printf("engine_path: %s\n", b->bf16 ? "bf16 matmuls (df_acts_set_bf16_matmul)" : "f32");
    printf("batch: %lld tokens in %lld sequences, %lld scored rows\n", (long long)b->tokens,
           (long long)p.b.n_seqs, (long long)n_out);
    for (int64_t j = 0; j < n_out; j++) {
        dl[j] = -1.0f / (float)n_out; /* mean NLL + 0.01 mean entropy, as the torch side */
        de[j] = 0.01f / (float)n_out;
    }
    double c0 = 0;
    for (int it = -1; it < b->iters; it++) {
        if (it == 0)
            c0 = bench_cpu_s();
        double t0 = bench_now_s();
        if (df_model_forward(m, a, &p.b, 1.0f, logp, ent))
            goto out;
        if (update) {
            memset(grads, 0, sizeof(float) * (size_t)m->n_params);
            if (df_model_backward(m, a, &p.b, 1.0f, dl, de, grads))
                goto out;
            df_clip_grad_norm(grads, m->n_params, 1.0);
            if (df_adamw_step(opt, m->params, grads, 1e-4) || engine_weights_changed(a, m))
                goto out;
        }
        if (it >= 0)
            t[it] = bench_now_s() - t0;
    }
    const char *row = update ? "update" : "logprob";
    double s = bench_median(t, b->iters);
    double flops = bench_forward_flops(&m->cfg, &p.b) * (update ? 3.0 : 1.0);
    printf("%s_tokens_per_s: %.1f\n", row, (double)b->tokens / s);
    printf("%s_cpu_s_per_iter: %.2f\n", row, (bench_cpu_s() - c0) / b->iters);
    bench_report(b, row, (double)b->tokens / s, flops / s / 1e9);
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "bench_rows: %s\n", df_last_error());
    df_acts_free(a), df_adamw_free(opt);
    free(logp), free(ent), free(dl), free(de), free(grads), free(t);
    bench_batch_free(&p);
    return rc;
}

int main(int argc, char **argv)
{
    bench_args b;
    if (bench_parse(argc, argv, &b))
        return 2;
    bench_print_setup(&b);
    if (!strcmp(b.row, "gemm"))
        return bench_finish(row_gemm(&b));
    df_model *m = NULL;
    if (df_model_create(&b.cfg, &m) || df_model_init_random(m, 1)) {
        fprintf(stderr, "bench_rows: %s\n", df_last_error());
        return 1;
    }
    printf("model_params: %lld\n", (long long)m->n_params);
    int rc = !strcmp(b.row, "prefill")   ? row_generate(&b, m, 0)
             : !strcmp(b.row, "decode")  ? row_generate(&b, m, 1)
             : !strcmp(b.row, "logprob") ? row_train(&b, m, 0)
                                         : row_train(&b, m, 1);
    df_model_free(m);
    return bench_finish(rc);
}
