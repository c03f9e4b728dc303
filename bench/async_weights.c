/*
 * bench/async_weights.c — one weight update of the asynchronous runtime (issue 16, docs/async.md
 * "Measured"): trainer rank 0 sends the new weights, a bf16 rollout rank receives and installs
 * them (src/workers/dag/async_weights.c), in each wire format, measured in the same run:
 *
 *   f32        the float32 wire: every parameter; the rollout engine then converts them to its
 *              own bf16 copy (df_rollout_engine_load_weights) and packs that;
 *   bf16       the bf16 wire, the trainer converting its float32 weights (a float32 actor);
 *   bf16_actor the bf16 wire, the trainer sending the actor's bf16 copy as is (mixed precision:
 *              the optimizer step already refreshed it, so nothing is converted here).
 *
 * Per update: the trainer's send (the conversion, when there is one, and the broadcasts), and on
 * the rollout rank the receive (the payload's broadcasts, timed from the header's arrival, so the
 * trainer's conversion is not in it), the install (df_async_weights_install), the engine's
 * conversion (f32 only) and the pack into oneDNN's layout (both: the next forward's
 * df_rollout_infer_weights). The first update is reported apart (pages touched for the first
 * time), the others as their median. Also the bytes on the wire and the rollout rank's resident
 * memory after the updates (the bf16 wire gives the float32 matmul weights' pages back).
 *
 * Usage: mpiexec -np 2 bench_async_weights [--shape demo|qwen2.5-0.5b] [--iters K (5)]
 * Random weights of the shape (bench_shape); threads: OMP_NUM_THREADS.
 */
#include "common/bench_util.h"

#include "distflow/comm.h"
#include "distflow/rollout.h"
#include "engine/rollout_engine.h"
#include "model/ops.h"
#include "workers/dag/async.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static df_comm *W;
static int R;

typedef struct {
    double send, receive, install, convert, pack;
} update_s;

static double rss_mib(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, res = 0;
    if (f && fscanf(f, "%ld %ld", &pages, &res) != 2)
        res = 0;
    if (f)
        fclose(f);
    return (double)res * 4096.0 / 1048576.0;
}

static int fail(const char *what)
{
    fprintf(stderr, "bench_async_weights rank %d: %s: %s\n", R, what, df_last_error());
    return 1;
}

/* The rollout rank's side of one update. */
static int receive_one(df_async_weights *x, df_model *m, df_rollout_engine *e, bool f32, update_s *t)
{
    df_async_header h;
    df_comm_request *req = NULL;
    if (df_comm_ibroadcast(W, &h, (int64_t)sizeof h, 0, &req) || df_comm_wait(&req))
        return fail("header");
    double t0 = bench_now_s();
    if (df_async_weights_receive(x, W, m, &h, false))
        return fail("receive");
    double t1 = bench_now_s();
    if (df_async_weights_install(x, m, e, false))
        return fail("install");
    double t2 = bench_now_s();
    if (f32 && df_rollout_engine_load_weights(e, m))
        return fail("convert");
    double t3 = bench_now_s();
    df_infer_weights iw;
    if (df_rollout_infer_weights(e, m, &iw))
        return fail("pack");
    double t4 = bench_now_s();
    *t = (update_s){0, t1 - t0, t2 - t1, t3 - t2, t4 - t3};
    return 0;
}

static void print_variant(const char *shape, const char *v, int64_t bytes, update_s *u, int k, double rss)
{
    double s[64], r[64], i[64], c[64], p[64], tot[64];
    for (int j = 1; j < k; j++) {
        s[j - 1] = u[j].send, r[j - 1] = u[j].receive, i[j - 1] = u[j].install;
        c[j - 1] = u[j].convert, p[j - 1] = u[j].pack;
        tot[j - 1] = u[j].receive + u[j].install + u[j].convert + u[j].pack;
    }
    const int n = k - 1;
    printf("weights_%s_%s_bytes: %lld (%.1f MiB)\n", shape, v, (long long)bytes, (double)bytes / 1048576.0);
    printf("weights_%s_%s_send_s: %.4f (first %.4f)\n", shape, v, bench_median(s, n), u[0].send);
    printf("weights_%s_%s_receive_s: %.4f (first %.4f)\n", shape, v, bench_median(r, n), u[0].receive);
    printf("weights_%s_%s_install_s: %.4f (first %.4f)\n", shape, v, bench_median(i, n), u[0].install);
    printf("weights_%s_%s_convert_s: %.4f (first %.4f)\n", shape, v, bench_median(c, n), u[0].convert);
    printf("weights_%s_%s_pack_s: %.4f (first %.4f)\n", shape, v, bench_median(p, n), u[0].pack);
    printf("weights_%s_%s_rollout_update_s: %.4f (receive + install + convert + pack; first %.4f)\n", shape, v,
           bench_median(tot, n), u[0].receive + u[0].install + u[0].convert + u[0].pack);
    printf("weights_%s_%s_rollout_rss_mib: %.0f\n", shape, v, rss);
    fflush(stdout);
}

/* One wire format: k updates of fresh weights versions. variant: 0 f32, 1 bf16, 2 bf16_actor. */
static int run_variant(const char *shape, const df_model_config *cfg, int variant, int k, update_s *mine)
{
    static const char *names[] = {"f32", "bf16", "bf16_actor"};
    df_model *m = NULL;
    df_async_weights *x = NULL;
    df_weights16 *actor16 = NULL;
    df_rollout_engine *e = NULL;
    df_rollout_options o = {.max_num_seqs = 4, .max_seq_len = 64, .max_num_batched_tokens = 64,
                            .dtype = DF_ROLLOUT_BF16};
    if (df_model_create(cfg, &m) || df_model_init_random(m, 1))
        return fail("model");
    int rc = df_async_weights_create(m, variant ? DF_ASYNC_WIRE_BF16 : DF_ASYNC_WIRE_F32, &x);
    if (!rc && R == 0 && variant == 2)
        rc = df_weights16_create_ex(cfg, DF_W16_LM_HEAD | DF_W16_EMBED, &actor16);
    if (!rc && R == 1)
        rc = df_rollout_engine_create_ex(cfg, &o, &e);
    if (rc)
        return fail("setup");
    for (int i = 0; i < k && !rc; i++) {
        df_model_weights_changed(m); /* a new version: the trainer's copies are stale */
        if (actor16) /* the optimizer step's refresh, not the update's */
            rc = df_weights16_refresh_model(actor16, m);
        df_comm_barrier(W);
        if (R == 0) {
            double t0 = bench_now_s();
            df_async_header h = {.version = i + 1};
            rc = df_async_weights_send(x, W, m, actor16, &h) ? fail("send") : 0;
            mine[i] = (update_s){.send = bench_now_s() - t0};
        } else if (R == 1) {
            rc = receive_one(x, m, e, variant == 0, &mine[i]);
        }
    }
    update_s all[64];
    for (int i = 0; i < k && !rc; i++) { /* the send time from rank 0, the rest from rank 1 */
        double v[5] = {mine[i].send, mine[i].receive, mine[i].install, mine[i].convert, mine[i].pack};
        if (df_comm_allreduce(W, v, 5, DF_COMM_FLOAT64, DF_COMM_SUM))
            return fail("allreduce");
        all[i] = (update_s){v[0], v[1], v[2], v[3], v[4]};
    }
    double rss = R == 1 ? rss_mib() : 0;
    if (!rc && df_comm_allreduce(W, &rss, 1, DF_COMM_FLOAT64, DF_COMM_SUM))
        return fail("allreduce");
    if (!rc && R == 0)
        print_variant(shape, names[variant], df_async_weights_bytes(x), all, k, rss);
    df_rollout_engine_free(e);
    df_weights16_free(actor16);
    df_async_weights_free(x);
    df_model_free(m);
    return rc;
}

int main(int argc, char **argv)
{
    const char *shape = "demo";
    int iters = 5;
    for (int i = 1; i + 1 < argc; i += 2)
        if (!strcmp(argv[i], "--shape"))
            shape = argv[i + 1];
        else if (!strcmp(argv[i], "--iters"))
            iters = atoi(argv[i + 1]);
    df_model_config cfg;
    if (argc % 2 == 0 || iters < 2 || iters > 64 || bench_shape(shape, &cfg)) {
        fputs("usage: mpiexec -np 2 bench_async_weights [--shape demo|qwen2.5-0.5b] [--iters K (2..64)]\n", stderr);
        return 2;
    }
    if (df_comm_world(&W))
        return fail("world");
    R = df_comm_rank(W);
    int rc = df_comm_size(W) == 2 ? 0 : 1;
    if (rc && R == 0)
        fputs("bench_async_weights: run it on 2 ranks (mpiexec -np 2): trainer rank 0, rollout rank 1\n", stderr);
    bool skip = !rc && df_model_bf16_available() != DF_OK;
    if (skip && R == 0) /* not a failure: the bf16 wire is only used where a bf16 rollout runs */
        printf("weights_skipped: no native bf16 matmuls here (%s): no bf16 rollout to send to\n", df_last_error());
    if (!rc && !skip && R == 0)
        printf("weights_config: shape %s, %d updates per wire format (the first apart, the median of the "
               "rest), OMP_NUM_THREADS %s\n", shape, iters, getenv("OMP_NUM_THREADS") ? getenv("OMP_NUM_THREADS") : "-");
    update_s mine[64];
    for (int v = 0; v < 3 && !rc && !skip; v++) {
        memset(mine, 0, sizeof mine);
        rc = run_variant(shape, &cfg, v, iters, mine);
    }
    df_comm_shutdown();
    return rc;
}
