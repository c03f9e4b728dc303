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
 * Shapes (bench_util.c bench_shape): qwen2.5-0.5b, demo, and Qwen3-MoE at the demo's sizes,
 * qwen3-moe-demo (16 experts, top 4) and qwen3-moe-e64 (64 experts, top 8): the same rows, the
 * torch side then Qwen3-MoE with HF's Qwen3MoeSparseMoeBlock (bench/torch_moe.py).
 *
 * Usage: bench_rows ROW [--shape qwen2.5-0.5b|demo|qwen3-moe-demo|qwen3-moe-e64] [--dtype f32|bf16] [--checkpoint 0|1]
 *        [--packed 0|1] [--tokens T] [--batch B] [--prompt P] [--gen G] [--n N] [--iters K] [--peak-gflops X]
 *        [--torch f32,bf16|f32|bf16|none]
 * --dtype is the engine's path (default: DF_BENCH_DTYPE, else what `distflow train` runs by
 * default on this CPU: bf16 where its matmuls are native, else f32; --dtype f32 is the forced
 * float32 of param_dtype fp32 / rollout.dtype float32); engine_set_train_dtype /
 * engine_rollout below are the one place the engine's dtype paths plug in. --packed 0: the bf16
 * rollout decodes from the row-major weight copy instead of the packed one (for the A/B).
 * --peak-gflops: the bf16 GEMM peak (gemm_bf16_best_gflop_per_s) of the same run; rows print
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

/* Mixed-precision training as the actor runs it (src/engine/train_core.c,
 * docs/mixed_precision.md): activations made with DF_ACTS_BF16 read one bf16 copy of the
 * layers' matmul weights and of the LM head that the role owns (df_weights16 with
 * DF_W16_LM_HEAD, as train_core makes it: the head's logits tiles in bf16), converted from the
 * float32 master weights once and after every optimizer step. float32: no copy. */
static unsigned engine_train_flags(const bench_args *b)
{
    return (b->bf16 ? DF_ACTS_BF16 : 0) | (b->checkpoint ? DF_ACTS_CHECKPOINT : 0);
}

static int engine_set_train_dtype(df_acts *a, const df_model *m, int bf16, df_weights16 **w16)
{
    int rc = bf16 ? df_weights16_create_ex(&m->cfg, DF_W16_LM_HEAD | DF_W16_EMBED, w16) : DF_OK;
    if (!rc && bf16 && !(rc = df_weights16_refresh_model(*w16, m)))
        rc = df_acts_share_weights16(a, *w16, m);
    if (!rc)
        rc = df_acts_load_weights(a, m);
    if (!rc)
        printf("engine_path: %s\n",
               bf16 ? "mixed precision (DF_ACTS_BF16: bf16 matmuls over a shared df_weights16 "
                      "copy of the layers and the LM head, refreshed per optimizer step; float32 "
                      "master weights)"
                    : "f32 (param_dtype fp32 forced, or no native bf16 here)");
    if (!rc && bf16)
        printf("engine_bf16_weight_copy_mib: %.1f\n", (double)df_weights16_bytes(*w16) / (1 << 20));
    return rc;
}

/* After an optimizer step: a new weight version, and the bf16 copy follows the master weights
 * (train_core's step and df_train_core_weights_changed). */
static int engine_weights_changed(df_acts *a, df_model *m, df_weights16 *w16)
{
    df_model_weights_changed(m);
    int rc = w16 ? df_weights16_refresh_model(w16, m) : DF_OK;
    return rc ? rc : df_acts_load_weights(a, m);
}

/* The rollout engine as distflow train makes it (dag_worker.c's create_rollout): dtype
 * bf16 gives it its own bf16 copy of the layers' weights (filled by the weight sync,
 * df_rollout_engine_load_weights) and a bf16 KV cache; float32 reads m's weights. */
static int engine_rollout(const bench_args *b, const df_model *m, int64_t max_seqs,
                          int64_t max_len, df_rollout_engine **e)
{
    df_rollout_options o = {.max_num_seqs = max_seqs, .max_seq_len = max_len,
                            .dtype = b->bf16 ? DF_ROLLOUT_BF16 : DF_ROLLOUT_F32,
                            .plain_weights = b->plain_weights};
    if (df_rollout_engine_create_ex(&m->cfg, &o, e) || df_rollout_engine_load_weights(*e, m))
        return 1;
    int64_t kv, total;
    df_rollout_engine_memory(*e, &kv, &total);
    printf("engine_path: rollout %s\n",
           b->bf16 ? "bf16 (rollout.dtype bfloat16: the engine's bf16 weight copy, bf16 KV cache)"
                   : "f32 (rollout.dtype float32 forced, or no native bf16 here)");
    printf("engine_rollout_kv_mib: %.1f of %.1f allocated\n", (double)kv / (1 << 20),
           (double)total / (1 << 20));
    if (b->bf16)
        printf("engine_rollout_weights: %s\n", b->plain_weights ? "row-major bf16 (--packed 0)"
               : m->cfg.num_experts > 0
                   ? "row-major bf16 (a model with experts has no packed copy: packed16.c, "
                     "docs/models.md)"
                   : "packed per weight version into oneDNN's blocked layout (plain_weights false)");
    return 0;
}

/* ---- rows ------------------------------------------------------------------------------ */

/* A model row's engine side, reported (beside PyTorch) once its memory is freed. */
typedef struct {
    const char *row;
    double tps, tps_cpu, gflops;
} row_result;

/* GFLOP/s of C = A B^T [n, n] over the median wall time of iters calls; *best over the
 * fastest call (the ceiling the other rows are held to: on a shared machine the median
 * carries the other jobs' load), *per_cpu_s per CPU-second. bf16: df_mm_nt's bf16 path;
 * else oneDNN's sgemm (df_gemm_nt). */
static double gemm_gflops(int bf16, int64_t n, int iters, double *best, double *per_cpu_s)
{
    float *A = malloc(sizeof(float) * (size_t)(n * n)), *B = malloc(sizeof(float) * (size_t)(n * n));
    float *C = malloc(sizeof(float) * (size_t)(n * n));
    for (int64_t i = 0; i < n * n; i++) {
        A[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
        B[i] = (float)((i * 104729) % 1000) / 1000.0f - 0.5f;
    }
    df_mm_ctx *ctx = NULL;
    double *t = malloc(sizeof(double) * (size_t)iters), c0 = 0, gf = -1;
    const double work = 2.0 * (double)n * (double)n * (double)n / 1e9;
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
    *per_cpu_s = work * iters / (bench_cpu_s() - c0);
    gf = work / bench_median(t, iters); /* sorts t */
    *best = work / t[0];
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
    double f32_cpu, bf_cpu, f32_best, bf_best;
    double f32 = gemm_gflops(0, b->n, b->iters, &f32_best, &f32_cpu);
    double bf = gemm_gflops(1, b->n, b->iters, &bf_best, &bf_cpu);
    printf("gemm_size: %lld x %lld x %lld\n", (long long)b->n, (long long)b->n, (long long)b->n);
    printf("gemm_f32_gflop_per_s: %.1f\n", f32);
    printf("gemm_f32_best_gflop_per_s: %.1f\n", f32_best);
    printf("gemm_f32_gflop_per_cpu_s: %.1f\n", f32_cpu);
    printf("gemm_bf16_gflop_per_s: %.1f\n", bf);
    printf("gemm_bf16_best_gflop_per_s: %.1f\n", bf_best);
    printf("gemm_bf16_gflop_per_cpu_s: %.1f\n", bf_cpu);
    bench_torch_result tf, tb;
    if (bench_torch(b, "f32", &tf)) {
        printf("ratio_gemm_f32_vs_torch_f32: %.2f\n", f32 / tf.value);
        printf("ratio_gemm_f32_cpu_vs_torch_f32: %.2f\n", f32_cpu / tf.value_cpu);
    }
    if (bench_torch(b, "bf16", &tb)) {
        printf("ratio_gemm_bf16_vs_torch_bf16: %.2f\n", bf / tb.value);
        printf("ratio_gemm_bf16_cpu_vs_torch_bf16: %.2f\n", bf_cpu / tb.value_cpu);
    }
    return f32 > 0 ? 0 : 1;
}

/* Progress callback: wall and CPU clocks at the first call (after the prefill batch: every
 * sequence has its first token) and at the last (after the last decode step). */
typedef struct {
    double first, last, first_cpu, last_cpu;
} gen_times;

static void on_progress(void *user, int64_t done, int64_t total, int64_t tokens)
{
    gen_times *t = user;
    (void)done, (void)total, (void)tokens;
    t->last = bench_now_s();
    t->last_cpu = bench_cpu_s();
    if (t->first == 0)
        t->first = t->last, t->first_cpu = t->last_cpu;
}

/* Wall and CPU seconds of one phase of a generate call. */
typedef struct {
    double wall, cpu;
} phase;

/* One generate of max_new tokens per sequence. max_new 1: *pre is the whole call (every
 * prefill batch and its sampled token). Otherwise all prompts must fit one prefill batch:
 * *pre up to the first token of every sequence, *dec from there to the end. */
static int generate(df_rollout_engine *e, const df_model *m, const df_rollout_request *q,
                    int64_t max_new, phase *pre, phase *dec)
{
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.max_new_tokens = max_new;
    sp.ignore_eos = true;
    df_rollout_result res;
    df_rollout_stats st;
    gen_times t = {0, 0, 0, 0};
    double t0 = bench_now_s(), c0 = bench_cpu_s();
    if (df_rollout_generate(e, m, q, &sp, &res, on_progress, &t))
        return 1;
    df_rollout_engine_stats(e, &st);
    df_rollout_result_free(&res);
    if (max_new == 1) { /* prefill only, in as many token-budgeted batches as it takes */
        *pre = (phase){t.last - t0, t.last_cpu - c0};
        *dec = (phase){0, 0};
        return 0;
    }
    if (st.prefill_batches != 1)
        return df_error(DF_EINVAL, "bench: %lld prefill batches, want 1 (fewer prompt tokens)",
                        (long long)st.prefill_batches);
    *pre = (phase){t.first - t0, t.first_cpu - c0};
    *dec = (phase){t.last - t.first, t.last_cpu - t.first_cpu};
    return 0;
}

/* Median wall seconds and mean CPU seconds of ph[n] (reorders nothing it needs later). */
static phase phase_stats(const phase *ph, int n)
{
    double *w = malloc(sizeof(double) * (size_t)n), cpu = 0;
    for (int i = 0; i < n; i++)
        w[i] = ph[i].wall, cpu += ph[i].cpu;
    phase r = {bench_median(w, n), cpu / n};
    free(w);
    return r;
}

/* prefill (decode = 0): B prompts x P tokens, n 1, one new token each.
 * decode: B / n prompts x n samples of P prompt tokens, G new tokens. */
static int row_generate(const bench_args *b, const df_model *m, int decode, row_result *out)
{
    const df_model_config *c = &m->cfg;
    int64_t n = decode ? b->n : 1, np = b->batch / n, P = b->prompt;
    int64_t *off = malloc(sizeof(int64_t) * (size_t)(np + 1));
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(np * P));
    phase *pre = malloc(sizeof(phase) * (size_t)b->iters), *dec = malloc(sizeof(phase) * (size_t)b->iters);
    bench_prompts(np, P, c->vocab_size, off, tok);
    df_rollout_request q = {np, off, tok, n, 1, NULL, NULL};
    df_rollout_request warm = q;
    warm.n_prompts = 1;
    df_rollout_engine *e = NULL;
    int rc = 1;
    if (engine_rollout(b, m, np * n, P + b->gen + 1, &e) || generate(e, m, &warm, 2, pre, dec))
        goto out;
    for (int it = 0; it < b->iters; it++)
        if (generate(e, m, &q, decode ? b->gen : 1, &pre[it], &dec[it]))
            goto out;
    const char *row = decode ? "decode" : "prefill";
    phase s = phase_stats(decode ? dec : pre, b->iters);
    double work = decode ? (double)(np * n * (b->gen - 1)) : (double)(np * P);
    double flops = decode ? bench_decode_flops(c, np * n, P, b->gen) : bench_prefill_flops(c, np, P);
    if (decode)
        printf("decode_sequences: %lld (%lld prompts x n %lld), %lld new tokens each\n",
               (long long)(np * n), (long long)np, (long long)n, (long long)b->gen);
    else
        printf("prefill_prompts: %lld x %lld tokens\n", (long long)np, (long long)P);
    *out = (row_result){row, work / s.wall, work / s.cpu, flops / s.wall / 1e9};
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "bench_rows: %s\n", df_last_error());
    df_rollout_engine_free(e);
    free(off), free(tok), free(pre), free(dec);
    return rc;
}

/* logprob (update = 0) or update: packed sequences of 64..128 tokens, every row but each
 * sequence's last scored, log-prob and entropy; the update adds backward, clip and AdamW. */
static int row_train(const bench_args *b, df_model *m, int update, row_result *out)
{
    bench_batch p;
    bench_make_batch(&p, b->tokens, m->cfg.vocab_size);
    const int64_t n_out = p.b.n_out;
    df_backend be = df_backend_cpu();
    df_acts *a = NULL;
    df_weights16 *w16 = NULL;
    df_adamw *opt = NULL;
    df_adamw_config oc;
    df_adamw_config_defaults(&oc);
    float *logp = malloc(sizeof(float) * (size_t)n_out), *ent = malloc(sizeof(float) * (size_t)n_out);
    float *dl = malloc(sizeof(float) * (size_t)n_out), *de = malloc(sizeof(float) * (size_t)n_out);
    float *grads = NULL;
    double *t = malloc(sizeof(double) * (size_t)b->iters);
    int rc = 1;
    if (df_acts_create_ex(&be, &m->cfg, b->tokens, n_out, engine_train_flags(b), &a) ||
        engine_set_train_dtype(a, m, b->bf16, &w16))
        goto out;
    if (update) {
        grads = aligned_alloc(64, ((size_t)m->n_params * sizeof(float) + 63) / 64 * 64);
        if (!grads || df_adamw_create(&oc, m->n_params, &opt))
            goto out;
    }
    printf("engine_checkpoint: %s\n", b->checkpoint ? "per layer (DF_ACTS_CHECKPOINT)" : "off");
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
            if (df_adamw_step(opt, m->params, grads, 1e-4) || engine_weights_changed(a, m, w16))
                goto out;
        }
        if (it >= 0)
            t[it] = bench_now_s() - t0;
    }
    const char *row = update ? "update" : "logprob";
    double s = bench_median(t, b->iters), cpu = (bench_cpu_s() - c0) / b->iters;
    double flops = bench_forward_flops(&m->cfg, &p.b) * (update ? 3.0 : 1.0);
    *out = (row_result){row, (double)b->tokens / s, (double)b->tokens / cpu, flops / s / 1e9};
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "bench_rows: %s\n", df_last_error());
    df_acts_free(a), df_weights16_free(w16), df_adamw_free(opt);
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
    if (b.cfg.num_experts > 0) /* what a token runs of the MLP weights (router + k experts) */
        printf("engine_moe: router + %lld of %lld experts a token (src/model/moe.c: routing on the "
               "host, each expert's GEMMs over its own rows%s)\n",
               (long long)b.cfg.num_experts_per_tok, (long long)b.cfg.num_experts,
               b.bf16 ? "; bf16: from the df_weights16 copy, rows padded to a power of two" : "");
    row_result r;
    int rc = !strcmp(b.row, "prefill")   ? row_generate(&b, m, 0, &r)
             : !strcmp(b.row, "decode")  ? row_generate(&b, m, 1, &r)
             : !strcmp(b.row, "logprob") ? row_train(&b, m, 0, &r)
                                         : row_train(&b, m, 1, &r);
    df_model_free(m); /* before PyTorch runs: the two sides never hold their memory together */
    if (!rc)
        bench_report(&b, r.row, r.tps, r.tps_cpu, r.gflops);
    return bench_finish(rc);
}
