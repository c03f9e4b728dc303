/*
 * bench/model_step.c — training-step throughput of the model engine on a small
 * Qwen2 (default: hidden 256, 4 layers, 4 heads / 2 kv heads, intermediate 512,
 * vocab 600, ~2.7M parameters), packed sequences of 64..128 tokens filling
 * ~8k tokens per micro-batch, every row but each sequence's last scored.
 *
 * Prints `metric: value` lines: forward tokens/s, forward+backward tokens/s,
 * AdamW step ms, and the same for PyTorch (bench/torch_model_step.py, run in the
 * same invocation with torch.set_num_threads(= OpenMP threads)) and the ratios.
 *
 * Usage: bench_model_step [--hidden N] [--layers N] [--heads N] [--kv-heads N]
 *        [--inter N] [--vocab N] [--tokens N] [--iters N] [--torch-iters N] [--tied]
 *        [--bf16] [--checkpoint] [--no-torch]
 * --bf16 runs the decoder layers' matmuls in bf16 (AMX) against the same float32
 * PyTorch baseline. --checkpoint checkpoints activations per decoder layer
 * (DF_ACTS_CHECKPOINT: the backward recomputes each layer). acts_mib is the
 * activations' layout, peak_rss_mib the process's peak resident memory
 * (getrusage; parameters, gradients, AdamW moments and activations of one step).
 * --iters 0 runs the warm-up step only (for peak_rss_mib of a large shape).
 * Debian's python3-torch links the reference (netlib) BLAS, so its matmuls run
 * at ~1 GFLOP/s: it gets one iteration by default and the GFLOP/s lines give
 * the engine's absolute efficiency. On a machine shared with other jobs, run
 * with OMP_WAIT_POLICY=passive (spinning OpenMP threads then lose their core)
 * and read the *_cpu_s_per_step lines too.
 */
#include "distflow/model.h"
#include "distflow/optim.h"
#include "distflow/platform.h"
#include "distflow/rng.h"
#include "model/acts.h"
#include "common/bench_util.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

typedef struct {
    int64_t hidden, layers, heads, kv, inter, vocab, tokens;
    int iters, tied, torch, torch_iters, bf16, ckpt;
} bench_cfg;

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }
/* CPU seconds of all threads: on a shared machine, the work done regardless of waiting. */
static double cpu_s(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

static int parse_args(int argc, char **argv, bench_cfg *b)
{
    *b = (bench_cfg){256, 4, 4, 2, 512, 600, 8192, 5, 0, 1, 1, 0, 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int64_t *dst = !strcmp(a, "--hidden")     ? &b->hidden
                       : !strcmp(a, "--layers")   ? &b->layers
                       : !strcmp(a, "--heads")    ? &b->heads
                       : !strcmp(a, "--kv-heads") ? &b->kv
                       : !strcmp(a, "--inter")    ? &b->inter
                       : !strcmp(a, "--vocab")    ? &b->vocab
                       : !strcmp(a, "--tokens")   ? &b->tokens
                                                  : NULL;
        if (dst && i + 1 < argc) {
            *dst = atoll(argv[++i]);
        } else if (!strcmp(a, "--iters") && i + 1 < argc) {
            b->iters = atoi(argv[++i]);
        } else if (!strcmp(a, "--torch-iters") && i + 1 < argc) {
            b->torch_iters = atoi(argv[++i]);
        } else if (!strcmp(a, "--bf16")) {
            b->bf16 = 1;
        } else if (!strcmp(a, "--checkpoint")) {
            b->ckpt = 1;
        } else if (!strcmp(a, "--tied")) {
            b->tied = 1;
        } else if (!strcmp(a, "--no-torch")) {
            b->torch = 0;
        } else {
            fprintf(stderr, "unknown or incomplete argument: %s\n", a);
            return 1;
        }
    }
    return 0;
}

/* Run bench/torch_model_step.py and pick its metrics; 0 when unavailable. */
static int run_torch(const bench_cfg *b, double *fwd, double *step, double *opt_ms)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", __FILE__);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, "bench");
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 %s/torch_model_step.py --hidden %lld --layers %lld --heads %lld "
             "--kv-heads %lld --inter %lld --vocab %lld --tokens %lld --iters %d --warmup 0 "
             "--threads %d%s "
             "2>/dev/null",
             dir, (long long)b->hidden, (long long)b->layers, (long long)b->heads,
             (long long)b->kv, (long long)b->inter, (long long)b->vocab, (long long)b->tokens,
             b->torch_iters, omp_get_max_threads(), b->tied ? " --tied" : "");
    FILE *f = popen(cmd, "r");
    if (!f)
        return 0;
    char line[512];
    int got = 0;
    while (fgets(line, sizeof line, f)) {
        fputs(line, stdout);
        got |= sscanf(line, "torch_forward_tokens_per_s: %lf", fwd) == 1 ? 1 : 0;
        got |= sscanf(line, "torch_fwd_bwd_tokens_per_s: %lf", step) == 1 ? 2 : 0;
        got |= sscanf(line, "torch_adamw_ms: %lf", opt_ms) == 1 ? 4 : 0;
    }
    return pclose(f) == 0 && got == 7;
}

int main(int argc, char **argv)
{
    bench_cfg bc;
    if (parse_args(argc, argv, &bc))
        return 2;
    df_model_config c;
    df_model_config_defaults(&c);
    c.vocab_size = bc.vocab;
    c.hidden_size = bc.hidden;
    c.intermediate_size = bc.inter;
    c.num_hidden_layers = bc.layers;
    c.num_attention_heads = bc.heads;
    c.num_key_value_heads = bc.kv;
    c.head_dim = bc.hidden / bc.heads;
    c.max_position_embeddings = 2048;
    c.tie_word_embeddings = bc.tied;
    df_model *m;
    df_acts *a;
    df_adamw *opt;
    df_adamw_config oc;
    df_adamw_config_defaults(&oc);
    df_backend cpu = df_backend_cpu();
    if (df_model_create(&c, &m) || df_model_init_random(m, 1) ||
        df_acts_create_ex(&cpu, &c, bc.tokens, bc.tokens, bc.ckpt ? DF_ACTS_CHECKPOINT : 0, &a) ||
        df_adamw_create(&oc, m->n_params, &opt)) {
        fprintf(stderr, "bench setup: %s\n", df_last_error());
        return 1;
    }
    if (bc.bf16 && (df_acts_set_bf16_matmul(a, true) || df_acts_load_weights(a, m))) {
        fprintf(stderr, "bench setup: %s\n", df_last_error());
        return 1;
    }
    bench_batch p;
    bench_make_batch(&p, bc.tokens, bc.vocab);
    const int64_t n_out = p.b.n_out;
    float *logp = malloc(sizeof(float) * (size_t)n_out), *ent = malloc(sizeof(float) * (size_t)n_out);
    float *dl = malloc(sizeof(float) * (size_t)n_out), *de = malloc(sizeof(float) * (size_t)n_out);
    float *grads = aligned_alloc(64, ((size_t)m->n_params * sizeof(float) + 63) / 64 * 64);
    for (int64_t j = 0; j < n_out; j++) {
        dl[j] = -1.0f / (float)n_out; /* mean NLL */
        de[j] = 0.01f / (float)n_out;
    }
    printf("config: hidden %lld layers %lld heads %lld/%lld inter %lld vocab %lld%s params %lld "
           "matmul %s\n",
           (long long)bc.hidden, (long long)bc.layers, (long long)bc.heads, (long long)bc.kv,
           (long long)bc.inter, (long long)bc.vocab, bc.tied ? " tied" : "",
           (long long)m->n_params, bc.bf16 ? "bf16" : "f32");
    printf("batch: %lld tokens in %lld sequences, %lld scored rows, %d threads\n",
           (long long)bc.tokens, (long long)p.b.n_seqs, (long long)n_out, omp_get_max_threads());
    printf("kernels: %s (%s)\n", df_kernels_active(), df_kernels_reason());
    printf("checkpoint: %s\n", bc.ckpt ? "per decoder layer" : "off");
    printf("acts_mib: %.1f\n", (double)df_acts_size(a) / 1048576.0);

    double t_fwd = 0, t_step = 0, t_opt = 0, c_fwd = 0, c_step = 0;
    for (int it = -1; it < bc.iters; it++) { /* iteration -1 warms up */
        double t0 = now_s(), c0 = cpu_s();
        if (df_model_forward(m, a, &p.b, 1.0f, logp, ent))
            goto fail;
        double t1 = now_s(), c1 = cpu_s();
        memset(grads, 0, sizeof(float) * (size_t)m->n_params);
        if (df_model_forward(m, a, &p.b, 1.0f, logp, ent) ||
            df_model_backward(m, a, &p.b, 1.0f, dl, de, grads))
            goto fail;
        double t2 = now_s(), c2 = cpu_s();
        df_clip_grad_norm(grads, m->n_params, 1.0);
        if (df_adamw_step(opt, m->params, grads, 1e-4))
            goto fail;
        double t3 = now_s();
        if (it >= 0) {
            t_fwd += t1 - t0;
            t_step += t2 - t1;
            t_opt += t3 - t2;
            c_fwd += c1 - c0;
            c_step += c2 - c1;
        }
    }
    /* FLOPs of one forward: matmuls (2 per multiply-add) and attention (QK^T and PV over
     * the causal pairs); forward + backward is three times that. */
    const double T = (double)bc.tokens, hd = (double)c.head_dim;
    const double qd = (double)(bc.heads * c.head_dim), kvd = (double)(bc.kv * c.head_dim);
    double pairs = 0;
    for (int64_t s = 0; s < p.b.n_seqs; s++) {
        double len = (double)(p.b.seq_offsets[s + 1] - p.b.seq_offsets[s]);
        pairs += len * (len + 1) / 2;
    }
    double layer_mm = (double)bc.hidden * (qd + 2 * kvd) + qd * (double)bc.hidden +
                      3.0 * (double)bc.hidden * (double)bc.inter;
    double flops = (double)bc.layers * (2 * T * layer_mm + 4 * pairs * hd * (double)bc.heads) +
                   2.0 * (double)n_out * (double)bc.hidden * (double)bc.vocab;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru); /* ru_maxrss: KiB on Linux */
    printf("peak_rss_mib: %.1f\n", (double)ru.ru_maxrss / 1024.0);
    if (bc.iters <= 0) /* the warm-up step only: no timing */
        goto done;
    double fwd = (double)bc.tokens * bc.iters / t_fwd, step = (double)bc.tokens * bc.iters / t_step;
    double opt_ms = 1e3 * t_opt / bc.iters;
    printf("forward_tokens_per_s: %.0f\n", fwd);
    printf("fwd_bwd_tokens_per_s: %.0f\n", step);
    printf("adamw_ms: %.2f\n", opt_ms);
    printf("forward_gflop_per_s: %.1f\n", flops * bc.iters / t_fwd / 1e9);
    printf("fwd_bwd_gflop_per_s: %.1f\n", 3 * flops * bc.iters / t_step / 1e9);
    printf("forward_cpu_s_per_step: %.3f\n", c_fwd / bc.iters);
    printf("fwd_bwd_cpu_s_per_step: %.3f\n", c_step / bc.iters);
    double tf, ts, to;
    if (bc.torch && run_torch(&bc, &tf, &ts, &to)) {
        printf("ratio_forward_vs_torch: %.2f\n", fwd / tf);
        printf("ratio_fwd_bwd_vs_torch: %.2f\n", step / ts);
        printf("ratio_adamw_vs_torch: %.2f\n", to / opt_ms);
    } else if (bc.torch) {
        printf("torch_baseline: unavailable\n");
    }
done:
    df_model_free(m), df_acts_free(a), df_adamw_free(opt);
    free(logp), free(ent), free(dl), free(de), free(grads);
    bench_batch_free(&p);
    return 0;
fail:
    fprintf(stderr, "bench: %s\n", df_last_error());
    return 1;
}
