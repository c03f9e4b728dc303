/*
 * bench/async.c — the asynchronous runtime against the synchronous one (issue 16, docs/async.md
 * "Measured"): for one workload and rank count N, `distflow train` under mpiexec (each run its
 * own job) synchronously on N ranks, then asynchronously with R rollout ranks (default N / 2)
 * at each max_staleness S of a list (default 0,1,2,4). Same steps, data, model and seeds.
 *
 * Per run, from the trainer's metrics.jsonl (one line per step, with timing_s/step and the
 * logger's timestamp): trained tokens/s = the sum of perf/total_num_tokens (prompt + response
 * tokens of the step's batch) over the steps' wall time (the last line's timestamp minus the
 * first's, plus the first step's timing_s/step); the trainer's wait (the sum of timing_s/gen:
 * synchronously the generation itself, asynchronously the wait for the step's episodes,
 * fully_async/trainer/idle_s); the rollout side's idle ratio (mean of
 * fully_async/rollouter/idle_ratio over the steps); version gap mean / max and the dropped
 * fraction (the last step's: df_staleness counts the whole run); the response lengths (mean
 * over steps of response_length/mean, the max, the share cut at the cap); and the ratio to the
 * synchronous run's tokens/s.
 *
 * Workloads (--shape):
 *   demo      the demo's model shape (examples/demo/model_config.json) at random init on
 *             synthetic arithmetic prompts: a random model rarely samples EOS, so nearly every
 *             response runs to max_response_length (no tail);
 *   longtail  a larger random model (bench_shape "mid": hidden 512, 8 layers, ~25 M parameters;
 *             the 0.5B shape is too slow on 2 cores for 10 runs) whose responses end at stop
 *             strings (actor_rollout_ref.rollout.stop): a random model hits one with about the
 *             same probability at every token, so lengths are roughly geometric, cut at
 *             max_response_length, a few times the mean.
 * max_concurrent_rollouts = (S + 1) x train_batch_size episodes: room for every batch the
 * staleness bound lets the rollout side work ahead on, so the bound, not the cap, limits it.
 * The asynchronous runs use the decoupled objective (use_decoupled_loss, AReaL's setting).
 *
 * Usage: bench_async [--shape demo|longtail] [--np N (2)] [--rollout R (N/2)] [--steps K]
 *        [--prompts P] [--n G] [--response L] [--staleness 0,1,2,4] [--sync 0|1]
 *        [--stop s1,s2,...] [--workdir DIR] [--distflow PATH] [--mpiexec PATH]
 *        bench_async --report metrics.jsonl   the same lines for an earlier run (the demo's)
 * OMP_NUM_THREADS: as set, else (online CPUs) / N, at least 1, for every rank.
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

#ifndef DF_MPIEXEC
#define DF_MPIEXEC ""
#endif

typedef struct {
    const char *shape, *staleness, *stop, *workdir, *distflow, *mpiexec, *report;
    int np, rollout, sync;
    int64_t steps, prompts, n, response;
} async_args;

/* What one run's metrics.jsonl says (async_args' steps lines). */
typedef struct {
    int steps;
    double tokens, wall_s, gen_s, idle_s, idle_ratio, gap_mean, gap_max, dropped;
    double resp_mean, resp_max, resp_clip, score;
    int has_async;
} run_stats;

static const char *USAGE =
    "usage: bench_async [--shape demo|longtail] [--np N] [--rollout R] [--steps K] [--prompts P] "
    "[--n G] [--response L] [--staleness 0,1,2,4] [--sync 0|1] [--stop s1,s2,...] "
    "[--workdir DIR] [--distflow PATH] [--mpiexec PATH] | --report metrics.jsonl\n";

/* The workload's defaults: one invocation (sync + 4 staleness values) within ~15 minutes on
 * 2 cores. The stop strings: the ten digits and "=", each its own token of the 512-token BPE
 * (11 of 512 ids: a random model stops at about 2% of its tokens), so the lengths are roughly
 * geometric with a mean near 48 and ~2% cut at 192 (docs/async.md, "Measured"). */
static void defaults(async_args *g)
{
    int tail = !strcmp(g->shape, "longtail");
    g->steps = tail ? 8 : 12;
    g->prompts = tail ? 8 : 32;
    g->n = tail ? 4 : 8;
    g->response = tail ? 192 : 64;
    g->stop = tail ? "0,1,2,3,4,5,6,7,8,9,=" : "";
}

static int parse(int argc, char **argv, async_args *g)
{
    *g = (async_args){
        .shape = "demo", .staleness = "0,1,2,4", .mpiexec = DF_MPIEXEC, .np = 2, .rollout = -1, .sync = 1};
    for (int i = 1; i + 1 < argc; i += 2) /* the shape first: it sets the defaults */
        if (!strcmp(argv[i], "--shape"))
            g->shape = argv[i + 1];
    if (strcmp(g->shape, "demo") && strcmp(g->shape, "longtail"))
        return 1;
    defaults(g);
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        const char **s = !strcmp(a, "--staleness")  ? &g->staleness
                         : !strcmp(a, "--report")   ? &g->report
                         : !strcmp(a, "--stop")     ? &g->stop
                         : !strcmp(a, "--workdir")  ? &g->workdir
                         : !strcmp(a, "--distflow") ? &g->distflow
                         : !strcmp(a, "--mpiexec")  ? &g->mpiexec
                                                    : NULL;
        int64_t *n = !strcmp(a, "--steps")      ? &g->steps
                     : !strcmp(a, "--prompts")  ? &g->prompts
                     : !strcmp(a, "--n")        ? &g->n
                     : !strcmp(a, "--response") ? &g->response
                                                : NULL;
        if (s)
            *s = v;
        else if (n)
            *n = atoll(v);
        else if (!strcmp(a, "--np"))
            g->np = atoi(v);
        else if (!strcmp(a, "--rollout"))
            g->rollout = atoi(v);
        else if (!strcmp(a, "--sync"))
            g->sync = atoi(v);
        else if (strcmp(a, "--shape"))
            return 1;
    }
    if (g->rollout < 0)
        g->rollout = g->np / 2;
    return argc % 2 == 0 || g->np < 2 || g->rollout < 1 || g->rollout >= g->np || g->steps < 1 ||
           g->prompts < 1 || g->n < 1 || g->response < 1 || !g->mpiexec[0];
}

/* The job's config: GRPO with the low-var KL loss (so the reference pass runs), one optimizer
 * step per training step, dynamic micro-batches; no validation, no checkpoint. */
static int write_yaml(const async_args *g, const char *dir)
{
    char path[1100], stop[1024] = "";
    FILE *f = fopen(bench_join(path, sizeof path, dir, "/async.yaml"), "w");
    if (!f) {
        fprintf(stderr, "bench_async: %s: %s\n", path, strerror(errno));
        return 1;
    }
    if (g->stop[0]) { /* "a,b" -> , stop: ["a", "b"] (the strings are plain characters) */
        size_t k = (size_t)snprintf(stop, sizeof stop, ", stop: [\"");
        for (const char *c = g->stop; *c && k + 8 < sizeof stop; c++)
            k += (size_t)(*c == ',' ? snprintf(stop + k, sizeof stop - k, "\", \"")
                                    : snprintf(stop + k, sizeof stop - k, "%c", *c));
        snprintf(stop + k, sizeof stop - k, "\"]");
    }
    fprintf(f,
            "# written by bench_async: %lld steps of %lld prompts x n %lld, <= %lld response tokens\n"
            "data: {train_files: [%s/data/train.jsonl], val_files: [], train_batch_size: %lld,\n"
            "       max_prompt_length: 128, max_response_length: %lld, shuffle: true}\n"
            "actor_rollout_ref:\n"
            "  model: {path: %s/model}\n"
            "  actor: {optim: {lr: 1e-5}, ppo_mini_batch_size: %lld, use_dynamic_bsz: true,\n"
            "          use_kl_loss: true, kl_loss_type: low_var_kl, kl_loss_coef: 0.001}\n"
            "  rollout: {n: %lld%s}\n"
            "algorithm: {adv_estimator: grpo}\n"
            "trainer: {total_training_steps: %lld, val_before_train: false, logger: [console],\n"
            "          seed: 1, collective_timeout_s: 600}\n",
            (long long)g->steps, (long long)g->prompts, (long long)g->n, (long long)g->response, dir,
            (long long)g->prompts, (long long)g->response, dir, (long long)g->prompts, (long long)g->n, stop,
            (long long)g->steps);
    return fclose(f) != 0;
}

static double num(json_t *j, const char *k, double dflt)
{
    json_t *v = json_object_get(j, k);
    return json_is_number(v) ? json_number_value(v) : dflt;
}

/* Sum / mean / max the metrics of every step line of `path` into s. 0 ok. */
static int read_metrics(const char *path, run_stats *s)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "bench_async: %s: %s\n", path, strerror(errno));
        return 1;
    }
    memset(s, 0, sizeof *s);
    static char line[1 << 17];
    double t_first = 0, t_last = 0, step_first = 0;
    while (fgets(line, sizeof line, f)) {
        json_t *j = line[0] == '{' ? json_loads(line, 0, NULL) : NULL;
        if (!j || !json_object_get(j, "timing_s/step")) {
            json_decref(j);
            continue;
        }
        t_last = num(j, "timestamp", 0);
        if (s->steps++ == 0)
            t_first = t_last, step_first = num(j, "timing_s/step", 0);
        s->tokens += num(j, "perf/total_num_tokens", 0);
        s->gen_s += num(j, "timing_s/gen", 0);
        s->has_async |= json_object_get(j, "fully_async/trainer/idle_s") != NULL;
        s->idle_s += num(j, "fully_async/trainer/idle_s", 0);
        s->idle_ratio += num(j, "fully_async/rollouter/idle_ratio", 0);
        /* the staleness metrics count every sample consumed since the start: the last line's */
        s->gap_mean = num(j, "fully_async/version_gap/mean", 0);
        double gmax = num(j, "fully_async/version_gap/max", 0), rmax = num(j, "response_length/max", 0);
        s->gap_max = gmax > s->gap_max ? gmax : s->gap_max;
        s->resp_max = rmax > s->resp_max ? rmax : s->resp_max;
        s->dropped = num(j, "fully_async/stale_dropped_frac", 0);
        s->resp_mean += num(j, "response_length/mean", 0);
        s->resp_clip += num(j, "response_length/clip_ratio", 0);
        s->score = num(j, "critic/score/mean", 0);
        json_decref(j);
    }
    fclose(f);
    if (!s->steps || !(t_last > 0)) {
        fprintf(stderr, "bench_async: no step with a timestamp in %s\n", path);
        return 1;
    }
    s->wall_s = t_last - t_first + step_first;
    s->idle_ratio /= s->steps;
    s->resp_mean /= s->steps, s->resp_clip /= s->steps;
    return 0;
}

static void print_stats(const char *label, const run_stats *s, const bench_proc_result *p)
{
    printf("async_%s_steps: %d\n", label, s->steps);
    printf("async_%s_steps_wall_s: %.2f\n", label, s->wall_s);
    printf("async_%s_tokens: %.0f\n", label, s->tokens);
    printf("async_%s_tokens_per_s: %.1f\n", label, s->tokens / s->wall_s);
    printf("async_%s_trainer_wait_s: %.2f (sum of timing_s/gen%s)\n", label, s->gen_s,
           s->has_async ? ": the wait for episodes" : ": generating, the trainer's own rollout");
    printf("async_%s_trainer_wait_frac: %.3f\n", label, s->gen_s / s->wall_s);
    if (s->has_async) {
        printf("async_%s_rollout_idle_ratio: %.3f\n", label, s->idle_ratio);
        printf("async_%s_version_gap_mean: %.3f\n", label, s->gap_mean);
        printf("async_%s_version_gap_max: %.0f\n", label, s->gap_max);
        printf("async_%s_stale_dropped_frac: %.3f\n", label, s->dropped);
    }
    printf("async_%s_response_length_mean: %.1f\n", label, s->resp_mean);
    printf("async_%s_response_length_max: %.0f\n", label, s->resp_max);
    printf("async_%s_response_length_clip_ratio: %.3f\n", label, s->resp_clip);
    printf("async_%s_score_last: %.3f\n", label, s->score);
    printf("async_%s_process_wall_s: %.1f\n", label, p->wall_s);
    printf("async_%s_process_cpu_s: %.1f\n", label, p->cpu_s);
    fflush(stdout);
}

/* One job: mpiexec -np N distflow train async.yaml [overrides]. 0 ok. */
static int run(const async_args *g, const char *dir, const char *label, const char *overrides, run_stats *s)
{
    char yaml[1100], out[1200], log[1100], metrics[1200], ov[2048], rest[64], np[16], omp[64];
    bench_join(yaml, sizeof yaml, dir, "/async.yaml");
    snprintf(rest, sizeof rest, "/out_%s", label);
    bench_join(out, sizeof out, "trainer.default_local_dir=", bench_join(metrics, sizeof metrics, dir, rest));
    snprintf(rest, sizeof rest, "/out_%s/metrics.jsonl", label);
    bench_join(metrics, sizeof metrics, dir, rest);
    snprintf(rest, sizeof rest, "/train_%s.log", label);
    bench_join(log, sizeof log, dir, rest);
    snprintf(np, sizeof np, "%d", g->np);
    snprintf(ov, sizeof ov, "%s", overrides);
    char *argv[48] = {(char *)g->mpiexec,  "--oversubscribe", "--bind-to", "none", "-np", np,
                      (char *)g->distflow, "train",           yaml,        out};
    int n = 10;
    for (char *t = strtok(ov, " "); t && n < 47; t = strtok(NULL, " "))
        argv[n++] = t;
    argv[n] = NULL;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const char *omp_set = getenv("OMP_NUM_THREADS");
    snprintf(omp, sizeof omp, "OMP_NUM_THREADS=%s", omp_set ? omp_set : "");
    if (!omp_set)
        snprintf(omp, sizeof omp, "OMP_NUM_THREADS=%ld", cpus / g->np > 1 ? cpus / g->np : 1);
    char *env[] = {omp,
                   "OMPI_ALLOW_RUN_AS_ROOT=1",
                   "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                   "OMPI_MCA_mpi_yield_when_idle=1",
                   "OMP_WAIT_POLICY=passive",
                   NULL};
    printf("async_%s_run: -np %d %s, %s\n", label, g->np, omp, overrides[0] ? overrides : "(synchronous)");
    fflush(stdout);
    unlink(metrics);
    unlink(log);
    bench_proc_result p;
    if (bench_spawn("bench_async", argv, env, log, &p) || read_metrics(metrics, s))
        return 1;
    print_stats(label, s, &p);
    return 0;
}

/* The summary as a markdown table (docs/async.md's "Measured" takes it as is). */
static void table(const async_args *g, char labels[][16], const run_stats *st, int nrun)
{
    double sync_tps = g->sync ? st[0].tokens / st[0].wall_s : 0;
    printf("\nasync_table: %s, np %d, rollout ranks %d\n", g->shape, g->np, g->rollout);
    printf("| run | tokens/s | vs sync | steps wall s | trainer wait s | rollout idle | gap mean/max "
           "| dropped | resp mean/max | clipped |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nrun; i++) {
        const run_stats *s = &st[i];
        double tps = s->tokens / s->wall_s;
        printf("| %s | %.0f | %.2f | %.1f | %.1f | ", labels[i], tps, sync_tps > 0 ? tps / sync_tps : 0,
               s->wall_s, s->gen_s);
        if (s->has_async)
            printf("%.2f | %.2f / %.0f | %.3f | ", s->idle_ratio, s->gap_mean, s->gap_max, s->dropped);
        else
            printf("- | - | - | ");
        printf("%.1f / %.0f | %.3f |\n", s->resp_mean, s->resp_max, s->resp_clip);
    }
    for (int i = g->sync; g->sync && i < nrun; i++)
        printf("ratio_async_%s_over_sync_tokens_per_s: %.3f\n", labels[i],
               st[i].tokens / st[i].wall_s / sync_tps);
}

int main(int argc, char **argv)
{
    async_args g;
    if (!parse(argc, argv, &g) && g.report) { /* an earlier run's metrics.jsonl (the demo's) */
        run_stats s;
        bench_proc_result none = {0, 0, 0};
        if (read_metrics(g.report, &s))
            return 1;
        print_stats("report", &s, &none);
        return 0;
    }
    if (parse(argc, argv, &g)) {
        fputs(USAGE, stderr);
        if (!DF_MPIEXEC[0])
            fputs("bench_async: built without MPI (no mpiexec): give --mpiexec\n", stderr);
        return 2;
    }
    char exe[1024], df[1100], dir[1100], rest[96];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[len > 0 ? len : 0] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    snprintf(rest, sizeof rest, "/bench_async_%s", g.shape);
    g.distflow = g.distflow ? g.distflow : bench_join(df, sizeof df, exe, "/distflow");
    g.workdir = g.workdir ? g.workdir : bench_join(dir, sizeof dir, exe, rest);
    mkdir(g.workdir, 0755);
    const char *model = !strcmp(g.shape, "longtail") ? "mid" : "demo";
    printf("async_config: shape %s (model %s), np %d (rollout ranks %d when async), %lld steps x "
           "%lld prompts x n %lld, max_response_length %lld, stop [%s], staleness %s, workdir %s\n",
           g.shape, model, g.np, g.rollout, (long long)g.steps, (long long)g.prompts, (long long)g.n,
           (long long)g.response, g.stop, g.staleness, g.workdir);
    printf("async_cpus: %ld online\n", sysconf(_SC_NPROCESSORS_ONLN));
    if (bench_make_inputs("bench_async", g.distflow, model, g.workdir) || write_yaml(&g, g.workdir))
        return 1;
    enum { MAX_RUNS = 16 };
    int S[MAX_RUNS], ns = 0;
    for (const char *c = g.staleness; *c && ns < MAX_RUNS - 1; c = strchr(c, ',') ? strchr(c, ',') + 1 : "")
        S[ns++] = atoi(c);
    run_stats st[MAX_RUNS];
    char labels[MAX_RUNS][16];
    int nrun = 0;
    if (g.sync) {
        snprintf(labels[nrun], sizeof labels[0], "sync");
        if (run(&g, g.workdir, "sync", "", &st[nrun++]))
            return 1;
    }
    for (int i = 0; i < ns; i++, nrun++) {
        char ov[512];
        snprintf(ov, sizeof ov,
                 "actor_rollout_ref.rollout.mode=async rollout.n_gpus_per_node=%d "
                 "async_training.max_staleness=%d async_training.max_concurrent_rollouts=%lld "
                 "actor_rollout_ref.actor.use_decoupled_loss=true",
                 g.rollout, S[i], (long long)(S[i] + 1) * (long long)g.prompts);
        snprintf(labels[nrun], sizeof labels[0], "s%d", S[i]);
        if (run(&g, g.workdir, labels[nrun], ov, &st[nrun]))
            return 1;
    }
    table(&g, labels, st, nrun);
    return 0;
}
