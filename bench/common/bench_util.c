/* What the rows of make bench share (bench_util.h). */
#include "bench_util.h"

#include "distflow/platform.h"
#include "distflow/rng.h"
#include "model/dnnl_info.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

/* ---- shapes and arguments ---------------------------------------------------------------- */

int bench_shape(const char *name, df_model_config *c)
{
    df_model_config_defaults(c);
    c->tie_word_embeddings = true;
    c->num_key_value_heads = 2;
    c->n_eos = 0;
    if (!strcmp(name, "qwen2.5-0.5b")) {
        c->vocab_size = 151936;
        c->hidden_size = 896;
        c->intermediate_size = 4864;
        c->num_hidden_layers = 24;
        c->num_attention_heads = 14;
        c->rope_theta = 1e6;
    } else if (!strcmp(name, "mid")) { /* between the two: bench_async's long-tailed workload */
        c->vocab_size = 512;
        c->hidden_size = 512;
        c->intermediate_size = 1536;
        c->num_hidden_layers = 8;
        c->num_attention_heads = 8;
    } else if (!strcmp(name, "demo")) {
        c->vocab_size = 512;
        c->hidden_size = 192;
        c->intermediate_size = 512;
        c->num_hidden_layers = 4;
        c->num_attention_heads = 4;
    } else if (!strcmp(name, "qwen3-moe-demo") || !strcmp(name, "qwen3-moe-e64")) {
        /* the demo's sizes with Qwen3-MoE's layer (Qwen3MoeDecoderLayer): Qwen3's attention (q/k
           RMSNorms per head, no biases) and every MLP sparse, k experts a token renormalised (as
           Qwen3-30B-A3B's file sets norm_topk_prob). The k active experts together are as wide as
           the demo's dense MLP (k moe_I = 512): 16 experts top 4 of width 128, or 64 top 8 of 64
           (Qwen3-30B-A3B routes 8 of 128; top 8 of 64 keeps its k and a fraction of the weights
           a token reads, 1/8, near its 1/16 at a size two cores run) */
        const bool e64 = !strcmp(name, "qwen3-moe-e64");
        snprintf(c->model_type, sizeof c->model_type, "qwen3_moe");
        c->vocab_size = 512;
        c->hidden_size = 192;
        c->intermediate_size = 512; /* no dense layer uses it (every layer sparse) */
        c->num_hidden_layers = 4;
        c->num_attention_heads = 4;
        c->attention_bias = false;
        c->qk_norm = true;
        c->num_experts = e64 ? 64 : 16;
        c->num_experts_per_tok = e64 ? 8 : 4;
        c->moe_intermediate_size = e64 ? 64 : 128;
        c->norm_topk_prob = true;
        c->decoder_sparse_step = 1;
    } else {
        return 1;
    }
    c->head_dim = c->hidden_size / c->num_attention_heads;
    c->max_position_embeddings = 4096;
    return df_model_config_validate(c) != DF_OK;
}

/* Work per row: enough for a stable median, small enough for 2 cores (docs/performance.md). */
static void row_defaults(bench_args *b)
{
    int big = !strcmp(b->shape, "qwen2.5-0.5b");
    int decode = !strcmp(b->row, "decode");
    b->tokens = big ? 512 : 8192;
    b->batch = decode ? 64 : big ? 4 : 64;
    b->prompt = decode ? 64 : 128;
    b->gen = big ? 16 : 64;
    b->n = !strcmp(b->row, "gemm") ? 2048 : 8;
    b->iters = !strcmp(b->row, "gemm") ? 10 : big ? 3 : 5;
}

static int64_t *int_arg(bench_args *b, const char *a)
{
    return !strcmp(a, "--tokens")   ? &b->tokens
           : !strcmp(a, "--batch")  ? &b->batch
           : !strcmp(a, "--prompt") ? &b->prompt
           : !strcmp(a, "--gen")    ? &b->gen
           : !strcmp(a, "--n")      ? &b->n
                                    : NULL;
}

int bench_parse(int argc, char **argv, bench_args *b)
{
    static const char *rows[] = {"gemm", "prefill", "decode", "logprob", "update"};
    memset(b, 0, sizeof *b);
    /* distflow train's defaults (param_dtype bf16, rollout.dtype bfloat16) where this CPU runs
     * bf16 matmuls natively, else float32 as train falls back; DF_BENCH_DTYPE / --dtype force */
    const char *dt = getenv("DF_BENCH_DTYPE");
    b->bf16_native = df_model_bf16_available() == DF_OK;
    df_clear_error();
    b->bf16 = dt && (!strcmp(dt, "bf16") || !strcmp(dt, "f32")) ? !strcmp(dt, "bf16") : b->bf16_native;
    b->dtype_forced = dt && (!strcmp(dt, "bf16") || !strcmp(dt, "f32"));
    b->shape = "demo";
    b->torch = "f32,bf16";
    b->torch_iters = -1;
    int ok = argc > 1;
    for (int i = 0; ok && i < 5; i++)
        if (!strcmp(argv[1], rows[i]))
            b->row = rows[i];
    for (int i = 2; ok && b->row && i + 1 < argc; i += 2) /* the shape first: it sets defaults */
        if (!strcmp(argv[i], "--shape"))
            b->shape = argv[i + 1];
    if (!ok || !b->row || bench_shape(b->shape, &b->cfg))
        goto usage;
    row_defaults(b);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t *dst = int_arg(b, a);
        if (!v)
            goto usage;
        if (dst)
            *dst = atoll(v);
        else if (!strcmp(a, "--iters"))
            b->iters = atoi(v);
        else if (!strcmp(a, "--torch-iters"))
            b->torch_iters = atoi(v);
        else if (!strcmp(a, "--peak-gflops"))
            b->peak_gflops = atof(v);
        else if (!strcmp(a, "--torch"))
            b->torch = v;
        else if (!strcmp(a, "--checkpoint") && (!strcmp(v, "0") || !strcmp(v, "1")))
            b->checkpoint = !strcmp(v, "1");
        else if (!strcmp(a, "--packed") && (!strcmp(v, "0") || !strcmp(v, "1")))
            b->plain_weights = !strcmp(v, "0");
        else if (!strcmp(a, "--dtype") && (!strcmp(v, "f32") || !strcmp(v, "bf16")))
            b->bf16 = !strcmp(v, "bf16"), b->dtype_forced = 1;
        else if (strcmp(a, "--shape"))
            goto usage;
        i++;
    }
    if (b->torch_iters < 0)
        b->torch_iters = b->iters;
    if (b->iters < 1 || b->tokens < 2 || b->batch < 1 || b->prompt < 1 || b->gen < 2 ||
        b->n < 1 || b->batch % (!strcmp(b->row, "decode") ? b->n : 1))
        goto usage;
    return 0;
usage:
    fprintf(stderr, "usage: bench_rows gemm|prefill|decode|logprob|update [--shape "
                    "qwen2.5-0.5b|demo|qwen3-moe-demo|qwen3-moe-e64] [--dtype f32|bf16] [--checkpoint 0|1] [--packed 0|1] [--tokens T] [--batch B] "
                    "[--prompt P] [--gen G] [--n N] [--iters K] [--torch-iters K] [--peak-gflops X] "
                    "[--torch f32,bf16|f32|bf16|none]  (decode: B a multiple of N)\n");
    return 1;
}

void bench_print_setup(const bench_args *b)
{
    const df_model_config *c = &b->cfg;
    char isa[32], f32[128] = "?", bf[128] = "?";
    int64_t H = c->hidden_size;
    df_dnnl_matmul_impl(false, 512, c->intermediate_size, H, f32, sizeof f32);
    if (df_dnnl_matmul_impl(true, 512, c->intermediate_size, H, bf, sizeof bf))
        snprintf(bf, sizeof bf, "none (%s)", df_last_error());
    printf("row: %s\n", b->row);
    if (c->num_experts > 0)
        printf("shape: %s (%s: vocab %lld hidden %lld layers %lld heads %lld/%lld head_dim %lld q/k "
               "norms, experts %lld top %lld%s moe_inter %lld, every layer sparse, tied)\n",
               b->shape, c->model_type, (long long)c->vocab_size, (long long)H,
               (long long)c->num_hidden_layers, (long long)c->num_attention_heads,
               (long long)c->num_key_value_heads, (long long)c->head_dim, (long long)c->num_experts,
               (long long)c->num_experts_per_tok, c->norm_topk_prob ? " renormalised" : "",
               (long long)c->moe_intermediate_size);
    else
        printf("shape: %s (vocab %lld hidden %lld layers %lld heads %lld/%lld inter %lld tied)\n",
               b->shape, (long long)c->vocab_size, (long long)H, (long long)c->num_hidden_layers,
               (long long)c->num_attention_heads, (long long)c->num_key_value_heads,
               (long long)c->intermediate_size);
    printf("engine_dtype: %s (%s)\n", b->bf16 ? "bf16" : "f32",
           b->dtype_forced ? "forced by --dtype / DF_BENCH_DTYPE"
           : b->bf16_native ? "the default of distflow train here: native bf16 matmuls"
                            : "the default of distflow train here: no native bf16 matmuls");
    printf("threads: %d\n", omp_get_max_threads());
    printf("kernels: %s (%s)\n", df_kernels_active(), df_kernels_reason());
    printf("onednn_isa: %s\n", df_dnnl_effective_isa(isa, sizeof isa));
    printf("onednn_f32: dnnl_sgemm (a float32 matmul primitive would be %s)\n", f32);
    printf("onednn_bf16_matmul: %s\n", bf);
}

/* ---- clocks ---------------------------------------------------------------------------------- */

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double bench_now_s(void) { return clock_s(CLOCK_MONOTONIC); }
double bench_cpu_s(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

double bench_peak_rss_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru); /* ru_maxrss: KiB on Linux */
    return (double)ru.ru_maxrss / 1024.0;
}

int bench_finish(int rc)
{
    printf("peak_rss_mib: %.1f\n", bench_peak_rss_mib());
    return rc;
}

/* ---- inputs ---------------------------------------------------------------------------------- */

void bench_prompts(int64_t n, int64_t P, int64_t vocab, int64_t *off, int32_t *tok)
{
    df_rng r;
    df_rng_seed(&r, 2024);
    uint64_t lim = (uint64_t)(vocab < 512 ? vocab : 512);
    for (int64_t i = 0; i <= n; i++)
        off[i] = i * P;
    for (int64_t t = 0; t < n * P; t++)
        tok[t] = (int32_t)df_rng_below(&r, lim);
}

void bench_make_batch(bench_batch *p, int64_t T, int64_t V)
{
    df_rng r;
    df_rng_seed(&r, df_rng_key(7, 0, 0, 0));
    p->tokens = malloc(sizeof(int32_t) * (size_t)T);
    p->targets = malloc(sizeof(int32_t) * (size_t)T);
    p->rows = malloc(sizeof(int64_t) * (size_t)T);
    p->offsets = malloc(sizeof(int64_t) * (size_t)(T / 64 + 2));
    int64_t n = 0, t = 0, n_out = 0;
    p->offsets[0] = 0;
    while (t < T) {
        int64_t len = 64 + (int64_t)df_rng_below(&r, 65);
        if (t + len > T)
            len = T - t;
        for (int64_t i = 0; i < len; i++)
            p->tokens[t + i] = (int32_t)df_rng_below(&r, (uint64_t)V);
        for (int64_t i = 0; i + 1 < len; i++) {
            p->rows[n_out] = t + i;
            p->targets[n_out++] = p->tokens[t + i + 1];
        }
        t += len;
        p->offsets[++n] = t;
    }
    p->b = (df_seq_batch){.n_tokens = T, .tokens = p->tokens, .n_seqs = n, .seq_offsets = p->offsets,
                          .n_out = n_out, .out_rows = p->rows, .out_targets = p->targets};
}

void bench_batch_free(bench_batch *p)
{
    free(p->tokens), free(p->targets), free(p->rows), free(p->offsets);
}

/* ---- FLOPs ----------------------------------------------------------------------------------- */

/* Per token: the layers' matmuls (a sparse MoE layer: its router and the k experts the token is
 * routed to, as verl's _estimate_qwen2_moe_flops; the rows the engine pads an expert's GEMMs with in
 * bf16 are not work); per causal pair per layer: QK^T and PV; per head row: LM head. */
static double flops(const df_model_config *c, double tokens, double pairs, double head_rows)
{
    double H = (double)c->hidden_size, I = (double)c->intermediate_size;
    double qd = (double)(c->num_attention_heads * c->head_dim);
    double kvd = (double)(c->num_key_value_heads * c->head_dim);
    double layers = 0;
    for (int64_t l = 0; l < c->num_hidden_layers; l++)
        layers += H * (qd + 2 * kvd) + qd * H +
                  (df_model_layer_moe(c, l)
                       ? H * ((double)c->num_experts +
                              3.0 * (double)c->num_experts_per_tok * (double)c->moe_intermediate_size)
                       : 3 * H * I);
    double L = (double)c->num_hidden_layers;
    return 2 * tokens * layers + L * 4 * pairs * qd + 2 * head_rows * H * (double)c->vocab_size;
}

double bench_forward_flops(const df_model_config *c, const df_seq_batch *b)
{
    double pairs = 0;
    for (int64_t s = 0; s < b->n_seqs; s++) {
        double len = (double)(b->seq_offsets[s + 1] - b->seq_offsets[s]);
        pairs += len * (len + 1) / 2;
    }
    return flops(c, (double)b->n_tokens, pairs, (double)b->n_out);
}

double bench_prefill_flops(const df_model_config *c, int64_t n, int64_t P)
{
    return flops(c, (double)(n * P), (double)n * (double)P * (double)(P + 1) / 2, (double)n);
}

double bench_decode_flops(const df_model_config *c, int64_t B, int64_t P, int64_t G)
{
    double pairs = 0; /* step s attends over P + s positions */
    for (int64_t s = 1; s < G; s++)
        pairs += (double)(P + s);
    double steps = (double)(G - 1);
    return flops(c, (double)B * steps, (double)B * pairs, (double)B * steps);
}
