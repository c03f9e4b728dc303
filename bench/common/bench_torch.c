/* The PyTorch side of a row and the row's report: ratios and issue-14 targets (bench_util.h). */
#include "bench_util.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int lists(const char *list, const char *dtype)
{
    size_t n = strlen(dtype);
    for (const char *p = list; (p = strstr(p, dtype)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == '\0' || p[n] == ','))
            return 1;
    return 0;
}

/* The command line of bench/torch_rows.py for b's row in dtype. A qwen3_moe shape adds its
 * experts (--experts --topk --moe-inter, --norm-topk): torch_rows.py then builds Qwen3-MoE (q/k
 * norms, no biases, every MLP sparse), bench/torch_moe.py. */
static void torch_cmd(const bench_args *b, const char *dtype, char *cmd, size_t n)
{
    const df_model_config *c = &b->cfg;
    const char *py = getenv("DF_BENCH_PYTHON");
    char moe[160] = "";
    if (c->num_experts > 0)
        snprintf(moe, sizeof moe, " --experts %lld --topk %lld --moe-inter %lld%s",
                 (long long)c->num_experts, (long long)c->num_experts_per_tok,
                 (long long)c->moe_intermediate_size, c->norm_topk_prob ? " --norm-topk" : "");
    snprintf(cmd, n,
             "%s %s/torch_rows.py %s --dtype %s --hidden %lld --layers %lld --heads %lld "
             "--kv-heads %lld --inter %lld --vocab %lld --tied --rope-theta %g --tokens %lld "
             "--batch %lld --prompt %lld --gen %lld --n %lld --iters %d --threads %d%s 2>&1",
             py ? py : "/usr/bin/python3", DF_BENCH_DIR, b->row, dtype,
             (long long)c->hidden_size, (long long)c->num_hidden_layers,
             (long long)c->num_attention_heads, (long long)c->num_key_value_heads,
             (long long)c->intermediate_size, (long long)c->vocab_size, (double)c->rope_theta,
             (long long)b->tokens, (long long)b->batch, (long long)b->prompt, (long long)b->gen,
             (long long)b->n, b->torch_iters,
             omp_get_max_threads(), moe);
}

int bench_torch(const bench_args *b, const char *dtype, bench_torch_result *r)
{
    static int info_shown;
    if (!lists(b->torch, dtype))
        return 0;
    char cmd[2048], key[96], key_cpu[96], line[1024];
    const char *unit = !strcmp(b->row, "gemm") ? "gflop" : "tokens";
    torch_cmd(b, dtype, cmd, sizeof cmd);
    snprintf(key, sizeof key, "torch_%s_%s_per_s: %%lf", b->row, unit);
    snprintf(key_cpu, sizeof key_cpu, "torch_%s_%s_per_cpu_s: %%lf", b->row, unit);
    fflush(stdout);
    FILE *f = popen(cmd, "r");
    if (!f) {
        printf("torch_%s: unavailable (popen failed)\n", dtype);
        return 0;
    }
    int got = 0;
    *r = (bench_torch_result){0, 0, 0};
    while (fgets(line, sizeof line, f)) {
        got |= sscanf(line, key, &r->value) == 1;
        sscanf(line, key_cpu, &r->value_cpu);
        sscanf(line, "torch_peak_rss_mib: %lf", &r->rss_mib);
        if (!strncmp(line, "torch_info_", 11)) {
            if (!info_shown)
                fputs(line, stdout);
        } else if (!strncmp(line, "torch_", 6)) {
            printf("torch_%s_%s", dtype, line + 6);
        } else { /* a traceback or warning: keep it visible, marked */
            printf("torch_%s_output: %s", dtype, line);
        }
    }
    info_shown = 1;
    int rc = pclose(f);
    if (rc != 0 || !got || !(r->value > 0)) {
        printf("torch_%s: failed or unavailable (exit status %d): %s\n", dtype, rc, cmd);
        return 0;
    }
    return 1;
}

/* One target line; the engine's path in brackets (a forced float32 row is not the default). */
static void target(const bench_args *b, const char *name, const char *goal, double measured,
                   double bound)
{
    printf("target_%s: %s [engine %s] measured %.2f met %s\n", name, goal, b->bf16 ? "bf16" : "f32",
           measured, measured >= bound ? "yes" : "no");
}

/* A ratio target against PyTorch bf16, with its ceiling: the ratio the engine would reach if
 * every FLOP of the row ran at the bf16 GEMM peak measured in the same run (a roofline: the row's
 * FLOPs / peak is a lower bound on its time). A target above its ceiling cannot be met on this
 * machine by any kernel, and the line says so rather than leave it to be read as a gap. */
static void vs_torch_target(const bench_args *b, const char *row, double goal, double tps,
                            double gflops, double torch_tps)
{
    char name[64], what[64];
    snprintf(name, sizeof name, "%s_vs_torch_bf16", row);
    snprintf(what, sizeof what, ">= %gx PyTorch bf16", goal);
    target(b, name, what, tps / torch_tps, goal);
    if (b->peak_gflops > 0 && gflops > 0) {
        double ceiling = tps * (b->peak_gflops / gflops) / torch_tps;
        printf("ceiling_%s: %.2f (at 100%% of the bf16 GEMM peak; target %s)\n", name, ceiling,
               ceiling >= goal ? "attainable" : "above the peak: unattainable on this machine");
    }
}

void bench_report(const bench_args *b, const char *row, double tps, double tps_cpu,
                  double gflops)
{
    printf("%s_tokens_per_s: %.1f\n", row, tps);
    printf("%s_tokens_per_cpu_s: %.1f\n", row, tps_cpu);
    printf("%s_gflop_per_s: %.1f\n", row, gflops);
    if (b->peak_gflops > 0)
        printf("%s_fraction_of_bf16_gemm_peak: %.2f\n", row, gflops / b->peak_gflops);
    printf("%s_peak_rss_mib: %.1f\n", row, bench_peak_rss_mib());
    bench_torch_result tf = {0, 0, 0}, tb = {0, 0, 0};
    int has_f = bench_torch(b, "f32", &tf), has_b = bench_torch(b, "bf16", &tb);
    if (has_f) {
        printf("ratio_%s_vs_torch_f32: %.2f\n", row, tps / tf.value);
        printf("ratio_%s_cpu_vs_torch_f32: %.2f\n", row, tps_cpu / tf.value_cpu);
    }
    if (has_b) {
        printf("ratio_%s_vs_torch_bf16: %.2f\n", row, tps / tb.value);
        printf("ratio_%s_cpu_vs_torch_bf16: %.2f\n", row, tps_cpu / tb.value_cpu);
        printf("torch_bf16_%s_gflop_per_s: %.1f\n", row, gflops * tb.value / tps);
    }
    if (has_f && has_b)
        printf("ratio_%s_vs_torch_best: %.2f\n", row,
               tps / (tf.value > tb.value ? tf.value : tb.value));
    if (!strcmp(row, "update")) {
        if (b->peak_gflops > 0)
            target(b, "update_peak_fraction", ">= 0.60 of the bf16 GEMM peak",
                   gflops / b->peak_gflops, 0.60);
        if (has_b)
            vs_torch_target(b, row, 4.0, tps, gflops, tb.value);
    } else if (!strcmp(row, "logprob") && has_b) {
        vs_torch_target(b, row, 1.5, tps, gflops, tb.value);
    } else if (!strcmp(row, "decode") && has_b) {
        vs_torch_target(b, row, 3.0, tps, gflops, tb.value);
    }
}
