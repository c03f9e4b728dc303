/*
 * bench/redistribute.c — the Data Coordinator's redistribution (a forced
 * rebalance, DP P -> DP P with GRPO groups kept together, as verl's
 * balance_batch / a DATA_REBALANCE node does) against a central baseline
 * measured in the same run.
 *
 *  - distributed: df_data_buffers_put / _get — allgather of SampleInfo, the
 *    same plan on every rank, one alltoallv of serialized rows;
 *  - central: the single-controller pattern (verl's driver, or a rank-0
 *    coordinator): every rank sends its whole serialized batch to rank 0
 *    (a gather: an alltoallv whose only non-empty blocks go to rank 0), rank 0
 *    deserializes, plans with the same df_redistribution_plan, serializes each
 *    rank's rows and scatters them (an alltoallv whose only non-empty blocks
 *    leave rank 0). Both end with byte-identical batches on every rank (checked).
 *
 * Rows: prompt 100..500 tokens, response 100..1000 (long-tailed), columns
 * prompt_ids, response_ids (int32), old_log_probs, ref_log_prob, advantages
 * (float per response token), uid (groups of 8 = rollout.n), data_source,
 * score, index. Each rank holds samples / P rows.
 *
 * Usage: mpiexec -np P bench_redistribute [--sizes 64,256,1024,4096] [--reps 5] [--plan]
 *        [--collective-timeout S]  (S > 0: the non-blocking collectives trainer.collective_timeout_s uses)
 * (--plan: also time df_redistribution_plan alone for up to 2^20 samples onto
 * 1024 destinations, the part every rank repeats in the distributed scheme)
 * Times are the slowest rank's (the step ends when it does), median of reps.
 * Bytes are payload bytes a rank sends plus receives (copies to itself excluded);
 * the distributed scheme also receives every rank's SampleInfo (info_bytes).
 */
#include "distflow/batch.h"
#include "distflow/comm.h"
#include "distflow/coordinator.h"
#include "util/timeutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { GROUP = 8, MAX_SIZES = 16 };

typedef struct cfg {
    int64_t sizes[MAX_SIZES];
    int n_sizes, reps;
    bool plan; /* also time the plan alone at 1024 destinations */
    double timeout; /* df_comm_set_timeout (trainer.collective_timeout_s); 0: blocking collectives */
} cfg;

static df_comm *W;
static int R, P;

static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

static int parse(int argc, char **argv, cfg *c)
{
    *c = (cfg){{64, 256, 1024, 4096}, 4, 5, false, 0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--plan")) {
            c->plan = true;
        } else if (!strcmp(argv[i], "--collective-timeout") && i + 1 < argc) {
            c->timeout = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            c->reps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
            c->n_sizes = 0;
            for (char *p = argv[++i]; *p && c->n_sizes < MAX_SIZES; p += *p == ',')
                c->sizes[c->n_sizes++] = strtoll(p, &p, 10);
        } else {
            fprintf(stderr, "usage: bench_redistribute [--sizes 64,256,...] [--reps N] [--plan] "
                            "[--collective-timeout S]\n");
            return 1;
        }
    }
    return c->reps < 1 || c->n_sizes < 1;
}

/* This rank's rows: lengths from a generator seeded by (size, rank). */
static df_batch *make_batch(int64_t samples)
{
    int64_t n = samples / P;
    uint64_t seed = 0x9e3779b97f4a7c15ULL ^ (uint64_t)(samples * 1315423911 + R);
    int64_t *po = calloc((size_t)n + 1, 8), *ro = calloc((size_t)n + 1, 8), *idx = malloc((size_t)n * 8 + 8);
    float *score = malloc((size_t)n * 4 + 4);
    char(*uid)[32] = malloc((size_t)n * 32 + 32);
    const char **up = malloc((size_t)n * sizeof *up + 8), **ds = malloc((size_t)n * sizeof *ds + 8);
    for (int64_t i = 0; i < n; i++) {
        uint64_t tail = lcg(&seed) % 4; /* a quarter of the responses run long */
        po[i + 1] = po[i] + 100 + (int64_t)(lcg(&seed) % 401);
        ro[i + 1] = ro[i] + 100 + (int64_t)(lcg(&seed) % (tail == 0 ? 901 : 301));
        idx[i] = (int64_t)R * n + i;
        score[i] = (float)(lcg(&seed) % 2);
        snprintf(uid[i], sizeof uid[i], "r%d-p%lld", R, (long long)(i / GROUP));
        up[i] = uid[i];
        ds[i] = "openai/gsm8k";
    }
    int32_t *tok = malloc((size_t)(po[n] > ro[n] ? po[n] : ro[n]) * 4 + 4);
    float *f = malloc((size_t)ro[n] * 4 + 4);
    for (int64_t j = 0; j < (po[n] > ro[n] ? po[n] : ro[n]); j++)
        tok[j] = (int32_t)(lcg(&seed) % 151936);
    for (int64_t j = 0; j < ro[n]; j++)
        f[j] = -(float)(lcg(&seed) % 10000) * 1e-3f;
    df_batch *b = df_batch_new(n);
    int rc = !b || df_batch_set_tok_i32(b, "prompt_ids", po, tok) ||
             df_batch_set_tok_i32(b, "response_ids", ro, tok) ||
             df_batch_set_tok_f32(b, "old_log_probs", ro, f) ||
             df_batch_set_tok_f32(b, "ref_log_prob", ro, f) || df_batch_set_tok_f32(b, "advantages", ro, f) ||
             df_batch_set_str(b, "uid", up) || df_batch_set_str(b, "data_source", ds) ||
             df_batch_set_f32(b, "score", score) || df_batch_set_i64(b, "index_row", idx) ||
             df_batch_meta_set(b, "step", 1);
    free(po), free(ro), free(idx), free(score), free(uid), free(up), free(ds), free(tok), free(f);
    if (rc) {
        df_batch_free(b);
        return NULL;
    }
    return b;
}

static uint64_t hash_batch(const df_batch *b)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    if (df_batch_serialize(b, &buf, &len))
        return 0;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++)
        h = (h ^ buf[i]) * 1099511628211ULL;
    free(buf);
    return h;
}

typedef struct run {
    double seconds; /* slowest rank */
    int64_t moved;  /* this rank's payload bytes sent + received */
    int64_t info;   /* this rank's SampleInfo bytes received (distributed) */
    uint64_t hash;  /* of this rank's result */
} run;

static int distributed(df_data_buffers *db, int64_t samples, run *out)
{
    df_batch *b = make_batch(samples), *got = NULL;
    if (!b)
        return df_error(DF_ENOMEM, "bench: out of memory");
    df_dp_layout l = {P, 1};
    df_put_opts o = {.force = true, .keep_groups = true};
    df_redist_stats st;
    df_comm_barrier(W);
    double t0 = df_now();
    int rc = df_data_buffers_put(db, "bench", b, l, l, &o, &st);
    if (!rc)
        rc = df_data_buffers_get(db, "bench", P, R, &got);
    out->seconds = df_now() - t0;
    if (rc)
        return rc;
    int64_t info = st.info_bytes;
    df_comm_allreduce(W, &info, 1, DF_COMM_INT64, DF_COMM_SUM);
    df_comm_allreduce(W, &out->seconds, 1, DF_COMM_FLOAT64, DF_COMM_MAX);
    out->moved = st.bytes_sent + st.bytes_received;
    out->info = info - st.info_bytes;
    out->hash = hash_batch(got);
    df_batch_free(got);
    return DF_OK;
}

/* Rank 0: every rank's rows in one batch, planned, split into P serialized parts. */
static int central_plan(const uint8_t *recv, const int64_t *counts, const int64_t *displs, uint8_t **send,
                        int64_t *send_counts)
{
    df_batch **parts = calloc((size_t)P, sizeof *parts), *all = NULL;
    df_sample_info *infos = malloc(sizeof *infos), *v = NULL;
    int64_t n = 0, *base = calloc((size_t)P + 1, 8), *rows = NULL;
    int rc = 0;
    for (int s = 0; !rc && s < P; s++) {
        rc = df_batch_deserialize(recv + displs[s], (size_t)counts[s], &parts[s]);
        int64_t m = rc ? 0 : df_batch_size(parts[s]);
        base[s + 1] = base[s] + m;
        if (!rc)
            rc = df_batch_sample_infos(parts[s], s, &v);
        df_sample_info *grown = rc ? NULL : realloc(infos, (size_t)(n + m + 1) * sizeof *infos);
        if (grown) {
            infos = grown;
            memcpy(infos + n, v, (size_t)m * sizeof *v);
            n += m;
        }
        free(v);
        v = NULL;
    }
    df_redist_plan *plan = NULL;
    if (!rc)
        rc = df_batch_concat((const df_batch *const *)parts, P, &all);
    if (!rc)
        rc = df_redistribution_plan(infos, n, P, true, &plan);
    uint8_t **bufs = calloc((size_t)P, sizeof *bufs);
    size_t *lens = calloc((size_t)P, sizeof *lens), total = 0;
    rows = malloc((size_t)(n + 1) * 8);
    for (int d = 0; !rc && d < P; d++) {
        int64_t lo = plan->dest_offsets[d], k = plan->dest_offsets[d + 1] - lo;
        for (int64_t j = 0; j < k; j++)
            rows[j] = base[plan->src_rank[lo + j]] + plan->src_index[lo + j];
        df_batch *part = NULL;
        rc = df_batch_select(all, rows, k, &part);
        if (!rc)
            rc = df_batch_serialize(part, &bufs[d], &lens[d]);
        df_batch_free(part);
        total += lens[d];
    }
    uint8_t *buf = rc ? NULL : malloc(total + 1);
    size_t o = 0;
    for (int d = 0; buf && d < P; o += lens[d], d++) {
        memcpy(buf + o, bufs[d], lens[d]);
        send_counts[d] = (int64_t)lens[d];
    }
    *send = buf;
    for (int s = 0; s < P; s++) {
        df_batch_free(parts[s]);
        free(bufs[s]);
    }
    free(parts), free(bufs), free(lens), free(base), free(rows), free(infos);
    df_batch_free(all);
    df_redist_plan_free(plan);
    return rc ? rc : buf ? DF_OK : df_error(DF_ENOMEM, "bench: out of memory");
}

static int central(int64_t samples, run *out, int64_t *payload)
{
    df_batch *b = make_batch(samples), *got = NULL;
    int64_t *counts = calloc((size_t)P, 8), *rcv = NULL, *displs = NULL, moved = 0;
    uint8_t *mine = NULL, *send = NULL;
    void *recv = NULL, *back = NULL;
    size_t len = 0;
    if (!b || !counts)
        return df_error(DF_ENOMEM, "bench: out of memory");
    df_comm_barrier(W);
    double t0 = df_now();
    int rc = df_batch_serialize(b, &mine, &len); /* gather: every block goes to rank 0 */
    counts[0] = (int64_t)len;
    if (!rc)
        rc = df_comm_alltoallv(W, mine, counts, &recv, &rcv, &displs);
    for (int s = 1; !rc && s < P; s++)
        moved += R == 0 ? rcv[s] : 0;
    moved += R != 0 ? (int64_t)len : 0;
    memset(counts, 0, (size_t)P * 8);
    if (!rc && R == 0)
        rc = central_plan(recv, rcv, displs, &send, counts);
    free(rcv);
    rcv = NULL;
    if (!rc) /* scatter: every block leaves rank 0 */
        rc = df_comm_alltoallv(W, send, counts, &back, &rcv, NULL);
    for (int d = 1; !rc && R == 0 && d < P; d++)
        moved += counts[d];
    if (!rc) {
        moved += R != 0 ? rcv[0] : 0;
        rc = df_batch_deserialize(back, (size_t)rcv[0], &got);
    }
    out->seconds = df_now() - t0;
    if (!rc) {
        df_comm_allreduce(W, &out->seconds, 1, DF_COMM_FLOAT64, DF_COMM_MAX);
        *payload = (int64_t)len;
        df_comm_allreduce(W, payload, 1, DF_COMM_INT64, DF_COMM_SUM);
        out->moved = moved;
        out->info = 0;
        out->hash = hash_batch(got);
    }
    free(counts), free(rcv), free(displs), free(mine), free(send), free(recv), free(back);
    df_batch_free(b);
    df_batch_free(got);
    return rc;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_dbl);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Mean and max over ranks of a per-rank count. */
static void over_ranks(int64_t v, double *mean, int64_t *max)
{
    int64_t s = v, m = v;
    df_comm_allreduce(W, &s, 1, DF_COMM_INT64, DF_COMM_SUM);
    df_comm_allreduce(W, &m, 1, DF_COMM_INT64, DF_COMM_MAX);
    *mean = (double)s / P;
    *max = m;
}

/* One batch size: a warm-up of each, then `reps` alternating timed runs. */
static int bench_size(df_data_buffers *db, int64_t samples, int reps)
{
    double *td = malloc((size_t)reps * sizeof *td), *tc = malloc((size_t)reps * sizeof *tc);
    run d = {0}, c = {0};
    int64_t payload = 0;
    int rc = td && tc ? DF_OK : df_error(DF_ENOMEM, "bench: out of memory");
    for (int i = -1; !rc && i < reps; i++) {
        rc = distributed(db, samples, &d);
        if (!rc)
            rc = central(samples, &c, &payload);
        if (!rc && i >= 0) {
            td[i] = d.seconds;
            tc[i] = c.seconds;
        }
    }
    if (rc) {
        free(td), free(tc);
        return rc;
    }
    int64_t same = d.hash == c.hash, dmax, cmax, imax;
    df_comm_allreduce(W, &same, 1, DF_COMM_INT64, DF_COMM_MIN);
    double dmean, cmean, imean, md = median(td, reps), mc = median(tc, reps);
    over_ranks(d.moved, &dmean, &dmax);
    over_ranks(c.moved, &cmean, &cmax);
    over_ranks(d.info, &imean, &imax);
    if (R == 0) {
        const char *p = "np";
        printf("%s%d.n%lld.payload_bytes: %lld\n", p, P, (long long)samples, (long long)payload);
        printf("%s%d.n%lld.same_result: %s\n", p, P, (long long)samples, same ? "yes" : "NO");
        printf("%s%d.n%lld.distributed_median_s: %.6f\n", p, P, (long long)samples, md);
        printf("%s%d.n%lld.distributed_bytes_per_rank: %.0f\n", p, P, (long long)samples, dmean);
        printf("%s%d.n%lld.distributed_max_bytes_rank: %lld\n", p, P, (long long)samples, (long long)dmax);
        printf("%s%d.n%lld.distributed_info_bytes_per_rank: %.0f\n", p, P, (long long)samples, imean);
        printf("%s%d.n%lld.central_median_s: %.6f\n", p, P, (long long)samples, mc);
        printf("%s%d.n%lld.central_bytes_per_rank: %.0f\n", p, P, (long long)samples, cmean);
        printf("%s%d.n%lld.central_max_bytes_rank: %lld\n", p, P, (long long)samples, (long long)cmax);
        printf("%s%d.n%lld.ratio_seconds_central/distributed: %.2f\n", p, P, (long long)samples,
               md > 0 ? mc / md : 0);
        printf("%s%d.n%lld.ratio_max_bytes_central/distributed: %.2f\n", p, P, (long long)samples,
               dmax + imax > 0 ? (double)cmax / (double)(dmax + imax) : 0);
        fflush(stdout);
    }
    free(td), free(tc);
    return same ? DF_OK
                : df_error(DF_EINTERNAL, "bench: the two schemes disagree at %lld samples",
                           (long long)samples);
}

/* The plan alone, as every rank computes it in the distributed scheme: S samples
 * in GRPO groups of 8 onto k destinations (rank 0 only; for docs/scaling.md). */
static int bench_plan(int64_t S, int k)
{
    df_sample_info *v = malloc((size_t)S * sizeof *v);
    char(*uid)[24] = malloc((size_t)S * 24);
    if (!v || !uid) {
        free(v), free(uid);
        return df_error(DF_ENOMEM, "bench: out of memory for %lld infos", (long long)S);
    }
    uint64_t seed = 12345;
    for (int64_t i = 0; i < S; i++) {
        memset(&v[i], 0, sizeof v[i]);
        v[i].prompt_length = 100 + (int64_t)(lcg(&seed) % 401);
        v[i].response_length = 100 + (int64_t)(lcg(&seed) % 901);
        v[i].sum_tokens = v[i].prompt_length + v[i].response_length;
        snprintf(uid[i], sizeof uid[i], "p%lld", (long long)(i / GROUP));
        v[i].uid = uid[i];
        v[i].group = -1;
        v[i].src_rank = (int32_t)(i % k);
        v[i].src_index = i / k;
    }
    df_redist_plan *plan = NULL;
    double t0 = df_now();
    int rc = df_redistribution_plan(v, S, k, true, &plan);
    double t = df_now() - t0;
    if (!rc)
        printf("plan.S%lld.k%d_seconds: %.4f\n", (long long)S, k, t);
    df_redist_plan_free(plan);
    free(v), free(uid);
    return rc;
}

int main(int argc, char **argv)
{
    cfg c;
    if (parse(argc, argv, &c))
        return 2;
    if (df_comm_world(&W)) {
        fprintf(stderr, "bench_redistribute: %s\n", df_last_error());
        return 1;
    }
    R = df_comm_rank(W);
    P = df_comm_size(W);
    df_comm_set_timeout(W, c.timeout);
    if (R == 0)
        printf("collective_timeout_s: %g\n", c.timeout);
    df_data_buffers *db = NULL;
    int rc = df_data_buffers_create(W, &db);
    if (R == 0) {
        printf("bench: redistribute (forced rebalance DP %d -> DP %d, GRPO groups of %d kept together)\n", P,
               P, GROUP);
        printf("ranks: %d\nreps: %d\n", P, c.reps);
        if (P == 1)
            printf(
                "note: one rank moves nothing; run under mpiexec -np 2..4 (scripts/bench-redistribute.sh)\n");
    }
    for (int i = 0; !rc && i < c.n_sizes; i++)
        rc = bench_size(db, c.sizes[i], c.reps);
    static const struct {
        int64_t S;
        int k;
    } plans[] = {{8192, 4}, {8192, 64}, {8192, 1024}, {4096, 64}, {65536, 1024}, {1048576, 1024}};
    for (int i = 0; !rc && R == 0 && c.plan && i < (int)(sizeof plans / sizeof plans[0]); i++)
        rc = bench_plan(plans[i].S, plans[i].k);
    df_comm_barrier(W);
    if (rc)
        fprintf(stderr, "bench_redistribute rank %d: %s\n", R, df_last_error());
    df_data_buffers_free(db);
    df_comm_shutdown();
    return rc ? 1 : 0;
}
