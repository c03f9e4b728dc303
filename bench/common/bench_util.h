/*
 * bench/common/bench_util.h — what the rows of `make bench` share (bench/rows.c,
 * bench/grpo_step.c): the model shapes, arguments, wall / CPU clocks and medians,
 * synthetic prompts and packed batches, FLOP counts, the PyTorch side
 * (bench/torch_rows.py in a child process) and the issue-14 targets.
 */
#ifndef DF_BENCH_UTIL_H
#define DF_BENCH_UTIL_H

#include "distflow/model.h"

#include <stdint.h>

typedef struct {
    const char *row;   /* gemm | prefill | decode | logprob | update */
    const char *shape; /* qwen2.5-0.5b | demo | qwen3-moe-demo | qwen3-moe-e64 */
    df_model_config cfg;
    int bf16;          /* the engine's path: 1 mixed precision / bf16 rollout, 0 float32 */
    int bf16_native;   /* this CPU runs bf16 matmuls natively (df_model_bf16_available) */
    int checkpoint;    /* logprob / update: activation checkpointing per layer (train's default) */
    int plain_weights; /* prefill / decode in bf16: the row-major weight copy, not the packed one */
    int dtype_forced;  /* --dtype or DF_BENCH_DTYPE chose the path; else distflow train's default */
    int64_t tokens;    /* logprob / update: packed tokens per step */
    int64_t batch;     /* prefill: prompts; decode: sequences (prompts x n) */
    int64_t prompt;    /* prompt tokens */
    int64_t gen;       /* decode: new tokens per sequence */
    int64_t n;         /* decode: samples per prompt; gemm: the square size */
    int iters;
    double peak_gflops;   /* the bf16 GEMM peak of the same run, 0: not given */
    const char *torch;    /* "f32,bf16", "bf16", "f32" or "none" */
    int torch_iters;
} bench_args;

/** Parse argv (usage in bench/rows.c); defaults depend on the row and the shape. 0 ok. */
int bench_parse(int argc, char **argv, bench_args *b);
/** The shape's config: "qwen2.5-0.5b" (examples/models/qwen2.5-0.5b.json), "demo"
 *  (examples/demo/model_config.json) or "mid" (vocab 512, hidden 512, 8 layers, 8 heads / 2 KV
 *  heads, intermediate 1536: about 25 M parameters, bench_async's long-tailed workload), or a
 *  Qwen3-MoE at the demo's sizes (model_type qwen3_moe: q/k norms, no biases, head_dim 48, every
 *  layer sparse, norm_topk_prob): "qwen3-moe-demo" (16 experts, top 4, moe_intermediate_size
 *  128) or "qwen3-moe-e64" (64 experts, top 8, width 64); the k active experts are as wide as the
 *  demo's dense MLP. 0 ok, 1 for an unknown name. */
int bench_shape(const char *name, df_model_config *c);
/** config, threads, kernels and oneDNN's implementations, as `metric: value` lines. */
void bench_print_setup(const bench_args *b);

double bench_now_s(void);
/** CPU seconds of all threads of this process. */
double bench_cpu_s(void);
/** Median of t[n] (n >= 1; reorders t). */
double bench_median(double *t, int n);
/** Peak resident memory of this process (ru_maxrss), MiB. */
double bench_peak_rss_mib(void);

/** n prompts of P tokens each, ids below min(vocab, 512); off [n+1], tok [n*P]. */
void bench_prompts(int64_t n, int64_t P, int64_t vocab, int64_t *off, int32_t *tok);

/** Packed sequences of 64..128 tokens (fixed seed, the last trimmed) filling T tokens, every
 *  row but each sequence's last scored (bench/torch_model_step.py's Batch has the same law). */
typedef struct {
    int32_t *tokens, *targets;
    int64_t *offsets, *rows;
    df_seq_batch b;
} bench_batch;
void bench_make_batch(bench_batch *p, int64_t T, int64_t vocab);
void bench_batch_free(bench_batch *p);

/** FLOPs (2 per multiply-add) of one forward over b: the layers' matmuls (a sparse MoE layer's
 *  router and the k experts of each token), attention over the causal pairs (QK^T and PV) and the
 *  LM head on the scored rows. */
double bench_forward_flops(const df_model_config *c, const df_seq_batch *b);
/** FLOPs of prefilling n prompts of P tokens (the LM head on each prompt's last row). */
double bench_prefill_flops(const df_model_config *c, int64_t n, int64_t P);
/** FLOPs of decode steps 1..G-1 of B sequences after a P-token prompt (one token each). */
double bench_decode_flops(const df_model_config *c, int64_t B, int64_t P, int64_t G);

/** One run of bench/torch_rows.py: the row's tokens/s (gemm: GFLOP/s) over the median wall
 *  time, the same per CPU-second (all threads), and its peak RSS. */
typedef struct {
    double value, value_cpu, rss_mib;
} bench_torch_result;
/**
 * Run bench/torch_rows.py for b's row and shape with dtype "f32" or "bf16" and the same
 * thread count; echo its lines with `torch_` turned into `torch_<dtype>_` (its torch_info_*
 * lines only on the first call). 1 when it ran and reported, 0 when torch is unavailable,
 * failed, or b->torch does not list dtype.
 */
int bench_torch(const bench_args *b, const char *dtype, bench_torch_result *r);

/**
 * After the engine's row (tokens/s over the median wall time, tokens per CPU-second, GFLOP/s):
 * print them (and the fraction of b->peak_gflops), run the torch side in each dtype b->torch
 * lists, print the ratios (wall and CPU), RSS lines and the row's issue-14 targets as
 * `target_<name>: <goal> measured <x> met yes|no` (wall-time ratios).
 */
void bench_report(const bench_args *b, const char *row, double tokens_per_s,
                  double tokens_per_cpu_s, double gflops);

/** Print peak_rss_mib and return rc. */
int bench_finish(int rc);

#endif /* DF_BENCH_UTIL_H */
