/*
 * bench/model_step.c — training-step throughput of the model engine on a small
 * Qwen2 (default: hidden 256, 4 layers, 4 heads / 2 kv heads, intermediate 512,
 * vocab 600, ~2.7M parameters), packed sequences of 64..128 tokens filling
 * ~8k tokens per micro-batch, every row but each sequence's last scored.
 *
 * Prints `metric: value` lines: forward tokens/s, forward+backward tokens/s,
 * AdamW step ms (clip + AdamW; with --bf16 also the bf16 weight copy's conversion
 * from the new weights, as train runs it), and the same for PyTorch
 * (bench/torch_model_step.py, run in the same invocation with
 * torch.set_num_threads(= OpenMP threads)) and the ratios; which kernels ran: the
 * engine's `kernels:` line and torch's torch_info_* lines (bench/torch_rows.py info).
 *
 * Usage: bench_model_step [--hidden N] [--layers N] [--heads N] [--kv-heads N]
 *        [--inter N] [--vocab N] [--tokens N] [--iters N] [--torch-iters N] [--tied]
 *        [--bf16] [--checkpoint] [--lora R] [--no-torch]
 * Times are medians over --iters steps after one warm-up; *_cpu_s_per_step are means.
 * --lora R (docs/lora.md) first times the LoRA step as distflow train runs it: rank R,
 * alpha 2R on every linear layer (all-linear), the forward through the merged weights, the
 * backward with the adapter attached and no base gradient (df_acts_set_lora, grads NULL),
 * clip + AdamW over the adapter, df_lora_merge; its rows are the full mode's prefixed lora_
 * (lora_peak_rss_mib before the full mode allocates its gradients and moments). Then the full
 * fine-tuning rows on the same model and activations, and ratio_lora_vs_full_* from the two.
 * The PyTorch side gets --lora R too (a PEFT-style unmerged adapter, torch_lora_* lines).
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
#include "distflow/lora.h"
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
    int64_t lora; /* rank; 0: full fine-tuning only */
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
    *b = (bench_cfg){256, 4, 4, 2, 512, 600, 8192, 0, 5, 0, 1, 1, 0, 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int64_t *dst = !strcmp(a, "--hidden")     ? &b->hidden
                       : !strcmp(a, "--layers")   ? &b->layers
                       : !strcmp(a, "--heads")    ? &b->heads
                       : !strcmp(a, "--kv-heads") ? &b->kv
                       : !strcmp(a, "--inter")    ? &b->inter
                       : !strcmp(a, "--vocab")    ? &b->vocab
                       : !strcmp(a, "--tokens")   ? &b->tokens
                       : !strcmp(a, "--lora")     ? &b->lora
                                                  : NULL;
        if (dst && i + 1 < argc) {
            *dst = atoll(argv[++i]);
            if (dst == &b->lora && b->lora <= 0) {
                fprintf(stderr, "--lora: the rank must be > 0 (got %s)\n", argv[i]);
                return 1;
            }
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

/* The directory of this source file (the Python scripts beside it). */
static void bench_dir(char *dir, size_t n)
{
    snprintf(dir, n, "%s", __FILE__);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, n, "bench");
}

/* Which kernels torch runs (bench/torch_rows.py info: the BLAS mapped, oneDNN's
 * implementations): echoes its torch_info_* lines, nothing when torch is missing. */
static void torch_info(void)
{
    char dir[1024], cmd[2048], line[1024];
    bench_dir(dir, sizeof dir);
    snprintf(cmd, sizeof cmd,
             "OPENBLAS_NUM_THREADS=%d /usr/bin/python3 %s/torch_rows.py info --threads %d 2>/dev/null",
             omp_get_max_threads(), dir, omp_get_max_threads());
    FILE *f = popen(cmd, "r");
    if (!f)
        return;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "torch_info_", 11))
            fputs(line, stdout);
    pclose(f);
}

typedef struct {
    double fwd, step, opt_ms; /* tokens/s, tokens/s, ms */
} torch_result;

/* Run bench/torch_model_step.py (with --lora R when lora > 0: its torch_lora_* lines) and
 * pick its metrics; 0 when unavailable. */
static int run_torch(const bench_cfg *b, int64_t lora, torch_result *r)
{
    char dir[1024];
    bench_dir(dir, sizeof dir);
    char cmd[2048], lora_arg[64] = "";
    if (lora > 0)
        snprintf(lora_arg, sizeof lora_arg, " --lora %lld", (long long)lora);
    /* OpenBLAS sizes its pool when torch loads it: the engine's thread count, as bench_rows */
    snprintf(cmd, sizeof cmd,
             "OPENBLAS_NUM_THREADS=%d /usr/bin/python3 %s/torch_model_step.py --hidden %lld "
             "--layers %lld --heads %lld --kv-heads %lld --inter %lld --vocab %lld --tokens %lld "
             "--iters %d --warmup 0 --threads %d%s%s 2>/dev/null",
             omp_get_max_threads(), dir, (long long)b->hidden, (long long)b->layers,
             (long long)b->heads, (long long)b->kv, (long long)b->inter, (long long)b->vocab,
             (long long)b->tokens, b->torch_iters, omp_get_max_threads(), b->tied ? " --tied" : "",
             lora_arg);
    const char *pre = lora > 0 ? "torch_lora_" : "torch_";
    char f_fwd[64], f_step[64], f_opt[64];
    snprintf(f_fwd, sizeof f_fwd, "%sforward_tokens_per_s: %%lf", pre);
    snprintf(f_step, sizeof f_step, "%sfwd_bwd_tokens_per_s: %%lf", pre);
    snprintf(f_opt, sizeof f_opt, "%sadamw_ms: %%lf", pre);
    FILE *f = popen(cmd, "r");
    if (!f)
        return 0;
    char line[512];
    int got = 0;
    while (fgets(line, sizeof line, f)) {
        fputs(line, stdout);
        got |= sscanf(line, f_fwd, &r->fwd) == 1 ? 1 : 0;
        got |= sscanf(line, f_step, &r->step) == 1 ? 2 : 0;
        got |= sscanf(line, f_opt, &r->opt_ms) == 1 ? 4 : 0;
    }
    return pclose(f) == 0 && got == 7;
}

/* What every step of both modes reads. */
typedef struct {
    df_model *m;
    df_acts *a;
    bench_batch p;
    float *logp, *ent, *dl, *de;
    int bf16;
} step_ctx;

/* Medians over the timed steps (s), and mean CPU seconds per step. */
typedef struct {
    double fwd, step, opt, merge, cpu_fwd, cpu_step;
} step_times;

/*
 * One warm-up and `iters` timed training steps: the forward alone (a log-prob pass), forward +
 * backward into grads [n_grads], clip + AdamW over params [n_grads] (opt). With `lora` (attached
 * to x->a) the backward gets NULL base gradients and the optimizer phase ends with
 * df_lora_merge; with bf16 matmuls it ends, as train's does, with the bf16 weight copy
 * converted from the new weights (merge covers the merge and that conversion).
 */
static int time_steps(step_ctx *x, const df_lora *lora, float *grads, int64_t n_grads,
                      df_adamw *opt, float *params, int iters, step_times *out)
{
    const int n = iters > 0 ? iters : 1;
    double *t = calloc(4 * (size_t)n, sizeof *t);
    if (!t)
        return df_error(DF_ENOMEM, "bench: timings");
    double *tf = t, *ts = t + n, *to = t + 2 * n, *tm = t + 3 * n;
    *out = (step_times){0};
    int rc = DF_OK;
    for (int it = -1; it < iters && !rc; it++) { /* iteration -1 warms up */
        double t0 = now_s(), c0 = cpu_s();
        rc = df_model_forward(x->m, x->a, &x->p.b, 1.0f, x->logp, x->ent);
        double t1 = now_s(), c1 = cpu_s();
        memset(grads, 0, sizeof(float) * (size_t)n_grads);
        if (!rc)
            rc = df_model_forward(x->m, x->a, &x->p.b, 1.0f, x->logp, x->ent);
        if (!rc)
            rc = df_model_backward(x->m, x->a, &x->p.b, 1.0f, x->dl, x->de, lora ? NULL : grads);
        double t2 = now_s(), c2 = cpu_s();
        df_clip_grad_norm(grads, n_grads, 1.0);
        if (!rc)
            rc = df_adamw_step(opt, params, grads, 1e-4);
        double t3 = now_s();
        if (!rc && lora)
            rc = df_lora_merge(lora, x->m);
        if (!rc && x->bf16) {
            df_model_weights_changed(x->m);
            rc = df_acts_load_weights(x->a, x->m);
        }
        double t4 = now_s();
        if (it >= 0) {
            tf[it] = t1 - t0, ts[it] = t2 - t1, to[it] = t4 - t2, tm[it] = t4 - t3;
            out->cpu_fwd += (c1 - c0) / n;
            out->cpu_step += (c2 - c1) / n;
        }
    }
    if (!rc && iters > 0) {
        out->fwd = bench_median(tf, n), out->step = bench_median(ts, n);
        out->opt = bench_median(to, n), out->merge = bench_median(tm, n);
    }
    free(t);
    return rc;
}

/* The rows of one mode: `pre` "" (full) or "lora_"; fb_flops of one forward + backward. */
static void print_rows(const char *pre, const step_times *s, int64_t tokens, double fwd_flops,
                       double fb_flops)
{
    printf("%sforward_tokens_per_s: %.0f\n", pre, (double)tokens / s->fwd);
    printf("%sfwd_bwd_tokens_per_s: %.0f\n", pre, (double)tokens / s->step);
    printf("%s%s_ms: %.2f\n", pre, *pre ? "adamw_merge" : "adamw", 1e3 * s->opt);
    if (*pre)
        printf("%smerge_ms: %.2f\n", pre, 1e3 * s->merge);
    printf("%sstep_ms: %.2f\n", pre, 1e3 * (s->step + s->opt));
    printf("%sforward_gflop_per_s: %.1f\n", pre, fwd_flops / s->fwd / 1e9);
    printf("%sfwd_bwd_gflop_per_s: %.1f\n", pre, fb_flops / s->step / 1e9);
    printf("%sforward_cpu_s_per_step: %.3f\n", pre, s->cpu_fwd);
    printf("%sfwd_bwd_cpu_s_per_step: %.3f\n", pre, s->cpu_step);
}

static double peak_rss_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru); /* ru_maxrss: KiB on Linux */
    return (double)ru.ru_maxrss / 1024.0;
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
    step_ctx x = {.bf16 = bc.bf16};
    df_adamw *opt = NULL, *lopt = NULL;
    df_lora *lora = NULL;
    float *grads = NULL, *lgrads = NULL;
    df_adamw_config oc;
    df_adamw_config_defaults(&oc);
    df_backend cpu = df_backend_cpu();
    if (df_model_create(&c, &x.m) || df_model_init_random(x.m, 1) ||
        df_acts_create_ex(&cpu, &c, bc.tokens, bc.tokens, bc.ckpt ? DF_ACTS_CHECKPOINT : 0, &x.a)) {
        fprintf(stderr, "bench setup: %s\n", df_last_error());
        return 1;
    }
    df_model *m = x.m;
    if (bc.bf16 && (df_acts_set_bf16_matmul(x.a, true) || df_acts_load_weights(x.a, m))) {
        fprintf(stderr, "bench setup: %s\n", df_last_error());
        return 1;
    }
    bench_make_batch(&x.p, bc.tokens, bc.vocab);
    const int64_t n_out = x.p.b.n_out;
    x.logp = malloc(sizeof(float) * (size_t)n_out), x.ent = malloc(sizeof(float) * (size_t)n_out);
    x.dl = malloc(sizeof(float) * (size_t)n_out), x.de = malloc(sizeof(float) * (size_t)n_out);
    for (int64_t j = 0; j < n_out; j++) {
        x.dl[j] = -1.0f / (float)n_out; /* mean NLL */
        x.de[j] = 0.01f / (float)n_out;
    }
    int64_t n_train = 0; /* the model's tensors, without the blob's alignment padding */
    for (int i = 0; i < m->n_tensors; i++)
        n_train += m->tensors[i].numel;
    printf("config: hidden %lld layers %lld heads %lld/%lld inter %lld vocab %lld%s params %lld "
           "matmul %s\n",
           (long long)bc.hidden, (long long)bc.layers, (long long)bc.heads, (long long)bc.kv,
           (long long)bc.inter, (long long)bc.vocab, bc.tied ? " tied" : "",
           (long long)m->n_params, bc.bf16 ? "bf16" : "f32");
    printf("batch: %lld tokens in %lld sequences, %lld scored rows, %d threads\n",
           (long long)bc.tokens, (long long)x.p.b.n_seqs, (long long)n_out, omp_get_max_threads());
    printf("kernels: %s (%s)\n", df_kernels_active(), df_kernels_reason());
    printf("checkpoint: %s\n", bc.ckpt ? "per decoder layer" : "off");
    printf("acts_mib: %.1f\n", (double)df_acts_size(x.a) / 1048576.0);

    /* FLOPs of one forward: matmuls (2 per multiply-add) and attention (QK^T and PV over
     * the causal pairs); forward + backward is three times that. */
    const double T = (double)bc.tokens, hd = (double)c.head_dim;
    const double qd = (double)(bc.heads * c.head_dim), kvd = (double)(bc.kv * c.head_dim);
    double pairs = 0;
    for (int64_t s = 0; s < x.p.b.n_seqs; s++) {
        double len = (double)(x.p.b.seq_offsets[s + 1] - x.p.b.seq_offsets[s]);
        pairs += len * (len + 1) / 2;
    }
    double layer_mm = (double)bc.hidden * (qd + 2 * kvd) + qd * (double)bc.hidden +
                      3.0 * (double)bc.hidden * (double)bc.inter;
    double head_mm = (double)n_out * (double)bc.hidden * (double)bc.vocab;
    double flops = (double)bc.layers * (2 * T * layer_mm + 4 * pairs * hd * (double)bc.heads) +
                   2.0 * head_mm;

    step_times st_lora = {0}, st = {0};
    if (bc.lora > 0) {
        /* PEFT's target_modules="all-linear" with lora_alpha = 2r (scale 2). Made before any
         * step: the adapter copies the base weights it targets. */
        df_lora_config lc = {bc.lora, 2.0 * (double)bc.lora, DF_LORA_ALL_LINEAR};
        if (df_lora_create(m, &lc, 1, &lora) || df_adamw_create(&oc, lora->n_params, &lopt))
            goto fail;
        lgrads = aligned_alloc(64, ((size_t)lora->n_params * sizeof(float) + 63) / 64 * 64);
        if (!lgrads) {
            df_error(DF_ENOMEM, "adapter gradients");
            goto fail;
        }
        if (df_acts_set_lora(x.a, lora, lgrads))
            goto fail;
        int64_t n_lora = 0;
        for (int i = 0; i < lora->n_tensors; i++)
            n_lora += lora->tensors[i].numel;
        /* The backward without the base weights' gradients (dW = dY^T X: the forward's matmul
         * FLOPs, and the LM head's) and with the adapters' four rank-r GEMMs per target. */
        double adapter = 0;
        for (int t = 0; t < DF_LORA_N_TARGETS; t++) {
            int64_t od, id;
            df_lora_target_shape(&c, (df_lora_target)t, &od, &id);
            adapter += 4.0 * T * (double)bc.lora * (double)(od + id);
        }
        double lora_fb = 3 * flops - ((double)bc.layers * 2 * T * layer_mm + 2 * head_mm) +
                         (double)bc.layers * adapter;
        printf("lora: rank %lld alpha %g targets all-linear (q/k/v/o_proj, gate/up/down_proj)\n",
               (long long)bc.lora, lc.alpha);
        printf("lora_trainable_params: %lld\n", (long long)n_lora);
        printf("lora_w0_copy_mib: %.1f\n", (double)lora->n_base * 4.0 / 1048576.0);
        printf("lora_adapter_state_mib: %.1f\n", (double)lora->n_params * 16.0 / 1048576.0);
        if (time_steps(&x, lora, lgrads, lora->n_params, lopt, lora->params, bc.iters, &st_lora))
            goto fail;
        /* before the full mode's gradients and moments exist: the LoRA step's own peak */
        printf("lora_peak_rss_mib: %.1f\n", peak_rss_mib());
        if (bc.iters > 0)
            print_rows("lora_", &st_lora, bc.tokens, flops, lora_fb);
        df_acts_set_lora(x.a, NULL, NULL); /* detach: the full mode trains every weight */
    }

    grads = aligned_alloc(64, ((size_t)m->n_params * sizeof(float) + 63) / 64 * 64);
    if (!grads || df_adamw_create(&oc, m->n_params, &opt)) {
        fprintf(stderr, "bench setup: %s\n", grads ? df_last_error() : "out of memory");
        return 1;
    }
    printf("trainable_params: %lld\n", (long long)n_train);
    if (time_steps(&x, NULL, grads, m->n_params, opt, m->params, bc.iters, &st))
        goto fail;
    printf("peak_rss_mib: %.1f\n", peak_rss_mib());
    if (bc.iters <= 0) /* the warm-up step only: no timing */
        goto done;
    print_rows("", &st, bc.tokens, flops, 3 * flops);
    if (bc.lora > 0) { /* > 1: the LoRA step takes less time */
        printf("ratio_lora_vs_full_fwd_bwd: %.2f\n", st.step / st_lora.step);
        printf("ratio_lora_vs_full_optimizer: %.2f\n", st.opt / st_lora.opt);
        printf("ratio_lora_vs_full_step: %.2f\n", (st.step + st.opt) / (st_lora.step + st_lora.opt));
        /* per CPU-second of all threads: steadier than wall time on a shared machine */
        printf("ratio_lora_vs_full_fwd_bwd_cpu: %.2f\n", st.cpu_step / st_lora.cpu_step);
    }
    torch_result tr, tl;
    if (bc.torch)
        torch_info();
    int have_full = bc.torch && run_torch(&bc, 0, &tr);
    if (have_full) {
        printf("ratio_forward_vs_torch: %.2f\n", bc.tokens / st.fwd / tr.fwd);
        printf("ratio_fwd_bwd_vs_torch: %.2f\n", bc.tokens / st.step / tr.step);
        printf("ratio_adamw_vs_torch: %.2f\n", tr.opt_ms / (1e3 * st.opt));
    } else if (bc.torch) {
        printf("torch_baseline: unavailable\n");
    }
    if (bc.torch && bc.lora > 0 && run_torch(&bc, bc.lora, &tl)) {
        /* torch's LoRA optimizer phase has no merge: PEFT runs the adapter unmerged */
        const double eng_ms = 1e3 * (st_lora.step + st_lora.opt);
        const double t_ms = 1e3 * bc.tokens / tl.step + tl.opt_ms;
        printf("ratio_lora_forward_vs_torch: %.2f\n", bc.tokens / st_lora.fwd / tl.fwd);
        printf("ratio_lora_fwd_bwd_vs_torch: %.2f\n", bc.tokens / st_lora.step / tl.step);
        printf("ratio_lora_adamw_merge_vs_torch: %.2f\n", tl.opt_ms / (1e3 * st_lora.opt));
        printf("ratio_lora_step_vs_torch: %.2f\n", t_ms / eng_ms);
        if (have_full) /* what LoRA saves PyTorch, beside ratio_lora_vs_full_step */
            printf("torch_ratio_lora_vs_full_step: %.2f\n",
                   (1e3 * bc.tokens / tr.step + tr.opt_ms) / t_ms);
    } else if (bc.torch && bc.lora > 0) {
        printf("torch_lora_baseline: unavailable\n");
    }
done:
    df_acts_free(x.a), df_model_free(m), df_adamw_free(opt), df_adamw_free(lopt), df_lora_free(lora);
    free(x.logp), free(x.ent), free(x.dl), free(x.de), free(grads), free(lgrads);
    bench_batch_free(&x.p);
    return 0;
fail:
    fprintf(stderr, "bench: %s\n", df_last_error());
    return 1;
}
