/*
 * bench/grpo_step.c — one whole GRPO step of `distflow train` (rollout, reward,
 * advantages, old and reference log-probs, actor update), bf16 against forced float32,
 * each run its own process: wall time, the trainer's per-stage timing_s/... metrics, and the
 * process's peak RSS (wait4's ru_maxrss). Issue 14: the bf16 step >= 1.8x faster than forced
 * float32; peak RSS <= 10 GiB for the Qwen2.5-0.5B shape.
 *
 * Inputs, made once in the work directory and reused: synthetic arithmetic prompts
 * (`distflow data synth`), a byte-level BPE of 512 tokens trained on them, and a random model
 * of the shape (`distflow init-model` on the shape's config.json, bench_util.c's bench_shape:
 * examples/models/qwen2.5-0.5b.json's sizes or examples/demo/model_config.json's; the
 * tokenizer's ids fit either vocabulary and give the EOS id). No network.
 * The step: P prompts x n responses of exactly R tokens (ignore_eos), GRPO with the low-var
 * KL loss against a reference (so the reference pass runs), dynamic micro-batches by token
 * budget and gradient checkpointing (verl's defaults for its GRPO examples).
 *
 * Usage: bench_grpo_step [--shape qwen2.5-0.5b|demo] [--prompts P (8)] [--n N (8)]
 *        [--response R (256)] [--runs bf16,f32] [--workdir DIR] [--distflow PATH]
 *        [--device cpu|cuda (cpu)]   (trainer.device of both runs: the whole step on the GPU)
 * The two runs differ only by their config overrides, kept in one place: DF_BENCH_BF16_OVERRIDES
 * and DF_BENCH_F32_OVERRIDES (space-separated key=value; defaults below). The bf16 run is
 * distflow train's defaults (mixed-precision actor and reference, bf16 rollout where the CPU
 * has native bf16 matmuls) plus the reference's parameters offloaded between its passes, as
 * verl's examples/grpo_trainer scripts set (ref.fsdp_config.param_offload=True: here the bf16
 * reference's copy goes to a file, docs/mixed_precision.md; only where the CPU computes in bf16,
 * a float32 reference keeps its weights); each run prints the precision notices train gave.
 */
#include "common/bench_proc.h"
#include "common/bench_util.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


/* The engine's dtype paths as config overrides: the one place they plug in. bf16 is the
 * default of every key (param_dtype bf16, the reference's model_dtype null = bf16 storage,
 * rollout.dtype bfloat16); forced float32 sets the compute dtype of each role (the reference's
 * model_dtype null then resolves to fp32). The bf16 run adds verl's GRPO-example offload of the
 * reference (where the CPU has bf16 kernels; a float32 reference refuses it). */
static const char *const BF16_OVERRIDES_DEFAULT = "actor_rollout_ref.ref.fsdp_config.param_offload=true";
static const char *const F32_OVERRIDES_DEFAULT =
    "actor_rollout_ref.rollout.dtype=float32 "
    "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32 "
    "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=fp32";

typedef struct {
    const char *shape, *runs, *workdir, *distflow, *device;
    int64_t prompts, n, response;
} grpo_args;

static int parse(int argc, char **argv, grpo_args *g, char *exe_dir, size_t n)
{
    ssize_t len = readlink("/proc/self/exe", exe_dir, n - 1);
    exe_dir[len > 0 ? len : 0] = '\0';
    char *slash = strrchr(exe_dir, '/');
    if (slash)
        *slash = '\0';
    *g = (grpo_args){"qwen2.5-0.5b", "bf16,f32", NULL, NULL, "cpu", 8, 8, 256};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--shape"))
            g->shape = v;
        else if (!strcmp(a, "--runs"))
            g->runs = v;
        else if (!strcmp(a, "--workdir"))
            g->workdir = v;
        else if (!strcmp(a, "--distflow"))
            g->distflow = v;
        else if (!strcmp(a, "--device"))
            g->device = v;
        else if (!strcmp(a, "--prompts"))
            g->prompts = atoll(v);
        else if (!strcmp(a, "--n"))
            g->n = atoll(v);
        else if (!strcmp(a, "--response"))
            g->response = atoll(v);
        else
            return 1;
    }
    df_model_config c;
    return argc % 2 == 0 || bench_shape(g->shape, &c) || g->prompts < 1 || g->n < 1 ||
           g->response < 1;
}

static int write_yaml(const grpo_args *g, const char *dir)
{
    char path[1100];
    bench_join(path, sizeof path, dir, "/grpo.yaml");
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "bench_grpo_step: %s: %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(f,
            "# written by bench_grpo_step: one GRPO step, %lld prompts x n %lld, %lld response "
            "tokens\n"
            "data: {train_files: [%s/data/train.jsonl], val_files: [%s/data/train.jsonl],\n"
            "       train_batch_size: %lld, max_prompt_length: 128, max_response_length: %lld}\n"
            "actor_rollout_ref:\n"
            "  model: {path: %s/model}\n"
            "  actor: {ppo_mini_batch_size: %lld, use_dynamic_bsz: true, use_kl_loss: true,\n"
            "          kl_loss_type: low_var_kl, kl_loss_coef: 0.001}\n"

            "  rollout: {n: %lld, ignore_eos: true}\n"
            "algorithm: {adv_estimator: grpo}\n"
            "trainer: {total_training_steps: 1, val_before_train: false, logger: [console],\n"
            "          device: %s}\n",
            (long long)g->prompts, (long long)g->n, (long long)g->response, dir, dir,
            (long long)g->prompts, (long long)g->response, dir, (long long)g->prompts,
            (long long)g->n, g->device);
    return fclose(f) != 0;
}

/* Print the timing_s/... metrics of out/metrics.jsonl's last line; *step_s its timing_s/step. */
static int print_timings(const char *label, const char *metrics, double *step_s)
{
    FILE *f = fopen(metrics, "r");
    char line[65536], last[65536] = "";
    while (f && fgets(line, sizeof line, f))
        if (line[0] == '{')
            memcpy(last, line, sizeof last);
    if (f)
        fclose(f);
    json_t *j = json_loads(last, 0, NULL);
    if (!j) {
        fprintf(stderr, "bench_grpo_step: no metrics in %s\n", metrics);
        return 1;
    }
    const char *k;
    json_t *v;
    json_object_foreach(j, k, v)
    {
        if (!strncmp(k, "timing_s/", 9) || !strcmp(k, "perf/total_num_tokens"))
            printf("grpo_%s_%s: %.2f\n", label, k, json_number_value(v));
    }
    *step_s = json_number_value(json_object_get(j, "timing_s/step"));
    json_decref(j);
    return !(*step_s > 0);
}

/* The paths the run took, from its log: the rollout's banner line and any precision notice
 * (a bf16 key that fell back to float32 on this CPU). */
static void print_paths(const char *label, const char *log)
{
    FILE *f = fopen(log, "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "rollout: ", 9) || strstr(line, "notice:"))
            printf("grpo_%s_path: %s", label, line);
    if (f)
        fclose(f);
}

/* One `distflow train` run with the overrides of `label`; 0 ok. */
static int run(const grpo_args *g, const char *dir, const char *label, const char *overrides,
               double *step_s, double *rss, double *cpu)
{
    char yaml[1100], out[1200], log[1100], metrics[1100], ov[4096];
    bench_join(yaml, sizeof yaml, dir, "/grpo.yaml");
    char rest[64];
    snprintf(rest, sizeof rest, "/out_%s", label);
    bench_join(out, sizeof out, "trainer.default_local_dir=", bench_join(metrics, sizeof metrics, dir, rest));
    snprintf(rest, sizeof rest, "/out_%s/metrics.jsonl", label);
    bench_join(metrics, sizeof metrics, dir, rest);
    snprintf(rest, sizeof rest, "/train_%s.log", label);
    bench_join(log, sizeof log, dir, rest);
    snprintf(ov, sizeof ov, "%s", overrides);
    char *argv[64] = {(char *)g->distflow, "train", yaml, out};
    int n = 4;
    for (char *s = strtok(ov, " "); s && n < 63; s = strtok(NULL, " "))
        argv[n++] = s;
    argv[n] = NULL;
    printf("grpo_%s_overrides: %s\n", label, overrides[0] ? overrides : "(none: the defaults)");
    fflush(stdout);
    unlink(metrics);
    bench_proc_result r;
    unlink(log); /* bench_spawn appends */
    if (bench_spawn("bench_grpo_step", argv, NULL, log, &r) || print_timings(label, metrics, step_s))
        return 1;
    double wall = r.wall_s;
    *rss = r.rss_mib, *cpu = r.cpu_s;
    print_paths(label, log);
    printf("grpo_%s_process_wall_s: %.1f\n", label, wall);
    printf("grpo_%s_process_cpu_s: %.1f\n", label, *cpu);
    printf("grpo_%s_peak_rss_mib: %.1f\n", label, *rss);
    return 0;
}

int main(int argc, char **argv)
{
    grpo_args g;
    char exe_dir[1024], df[1100], dir[1100];
    if (parse(argc, argv, &g, exe_dir, sizeof exe_dir)) {
        fprintf(stderr, "usage: bench_grpo_step [--shape qwen2.5-0.5b|demo] [--prompts P] [--n N] "
                        "[--response R] [--runs bf16,f32] [--workdir DIR] [--distflow PATH]\n");
        return 2;
    }
    char rest[64];
    snprintf(rest, sizeof rest, "/bench_grpo_%s", g.shape);
    bench_join(df, sizeof df, exe_dir, "/distflow");
    bench_join(dir, sizeof dir, exe_dir, rest);
    g.distflow = g.distflow ? g.distflow : df;
    g.workdir = g.workdir ? g.workdir : dir;
    mkdir(g.workdir, 0755);
    printf("grpo_config: shape %s, %lld prompts x n %lld, %lld response tokens, workdir %s\n",
           g.shape, (long long)g.prompts, (long long)g.n, (long long)g.response, g.workdir);
    if (bench_make_inputs("bench_grpo_step", g.distflow, g.shape, g.workdir) || write_yaml(&g, g.workdir))
        return 1;
    const char *bf = getenv("DF_BENCH_BF16_OVERRIDES"), *f32 = getenv("DF_BENCH_F32_OVERRIDES");
    /* the reference's offload is the host's: on a GPU its bf16 copy lives there */
    bf = bf ? bf : df_model_bf16_available() == DF_OK && !strcmp(g.device, "cpu") ? BF16_OVERRIDES_DEFAULT : "";
    f32 = f32 ? f32 : F32_OVERRIDES_DEFAULT;
    double t_bf = 0, t_f = 0, rss_bf = 0, rss_f = 0, cpu_bf = 0, cpu_f = 0;
    int do_bf = strstr(g.runs, "bf16") != NULL, do_f = strstr(g.runs, "f32") != NULL;
    if ((do_bf && run(&g, g.workdir, "bf16", bf, &t_bf, &rss_bf, &cpu_bf)) ||
        (do_f && run(&g, g.workdir, "f32", f32, &t_f, &rss_f, &cpu_f)))
        return 1;
    if (do_bf && do_f) /* whole processes, startup included: the wall-time target's steadier twin */
        printf("ratio_grpo_process_cpu_f32_over_bf16: %.2f\n", cpu_f / cpu_bf);
    if (do_bf && do_f)
        printf("target_grpo_bf16_vs_f32: >= 1.8x faster than forced f32 measured %.2f met %s\n",
               t_f / t_bf, t_f / t_bf >= 1.8 ? "yes" : "no");
    double rss = do_bf ? rss_bf : rss_f;
    if (!strcmp(g.shape, "qwen2.5-0.5b") && (do_bf || do_f))
        printf("target_grpo_peak_rss: <= 10 GiB (%s run) measured %.2f GiB met %s\n",
               do_bf ? "bf16" : "f32", rss / 1024.0, rss <= 10240.0 ? "yes" : "no");
    return 0;
}
