/*
 * test_data_buffers.c — the Data Coordinator's buffers: local hand-off and
 * redistribution between data-parallel layouts (include/distflow/coordinator.h).
 * Runs as one rank and again under mpiexec:
 * mpi-test: np 2 3 4
 * Source rows are a pure function of their global id g, so every rank can
 * rebuild every source batch, recompute the plan and check what it received
 * byte for byte; cross-rank properties (each row once, replicas identical,
 * groups together) are checked on allgathered summaries. The redistribution
 * tests run twice: payloads over MPI, then through a device
 * (df_data_buffers_use_backend) — each rank's own emulated one
 * (tests/emu_backend.h), whose alltoallv is MPI's over memory the host cannot
 * touch, so the staging, the counts' exchange and the blocks' placement are
 * the coordinator's, checked by the same byte-for-byte comparisons.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "emu_backend.h"
#include "testmpi.h"
#include "testutil.h"

#include "distflow/batch.h"
#include "distflow/comm.h"
#include "distflow/coordinator.h"

/* Soft checks for code between collectives: a failed CHECK is noted and the rank
 * carries on, so every rank keeps calling the same collectives; agree() then
 * fails every rank together instead of leaving the others waiting. */
static int n_bad;
static char first_bad[768];

static bool note(bool ok, int line, const char *what)
{
    if (!ok && !n_bad++)
        snprintf(first_bad, sizeof first_bad, "line %d: CHECK(%s) failed; last error: %s", line, what,
                 df_last_error());
    return ok;
}
#define CHECK(c) note((c), __LINE__, #c)

static void agree(void)
{
    int64_t bad = n_bad;
    int rc = df_comm_allreduce(W, &bad, 1, DF_COMM_INT64, DF_COMM_MAX);
    int mine = n_bad;
    n_bad = 0;
    if (mine)
        fail_msg("rank %d of %d: %s", R, N, first_bad);
    if (rc || bad)
        fail_msg("rank %d of %d: another rank failed a check", R, N);
}

static bool streq(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

/* get, or (a failed CHECK) an empty batch, so the checks that follow stay safe. */
static df_batch *take(df_data_buffers *db, const char *key, int dp_size, int dp_rank)
{
    df_batch *b = NULL;
    if (!note(df_data_buffers_get(db, key, dp_size, dp_rank, &b) == 0, __LINE__, key))
        b = df_batch_new(0);
    return b;
}

/* ---- the store: payloads over MPI, or through the emulated device ------------------------ */

static bool on_device; /* the second group's stores move payloads through dev */
static emu_dev dev;
static df_backend dev_be;

static df_data_buffers *new_store(void)
{
    df_data_buffers *db = NULL;
    CHECK(df_data_buffers_create(W, &db) == 0);
    if (db && on_device) {
        CHECK(df_data_buffers_use_backend(db, &dev_be) == 0);
        CHECK(df_data_buffers_on_device(db) == (N > 1)); /* one rank: nothing to move */
    }
    return db;
}

/* A put that moved payloads went through the device exactly when the store is on it. */
static void check_path(const df_redist_stats *st)
{
    CHECK(st->device == (on_device && N > 1));
}

/* ---- the test rows --------------------------------------------------------------- */

enum { GROUP = 4, BASE = 1000 }; /* GRPO groups of 4 rows; source DP rank d owns g in [d*BASE, ...) */

/* Rows of source DP rank d: uneven, and none on DP rank 1 (a rank that contributes nothing). */
static int64_t rows_of(int d)
{
    return d == 1 ? 0 : GROUP * (2 + (d * 5) % 7);
}

static int64_t plen(int64_t g)
{
    return 3 + (g * 7) % 11;
}

static int64_t rlen(int64_t g)
{
    return g % 9 == 4 ? 0 : 1 + (g * 37) % 97; /* some empty responses */
}

static int32_t ptok(int64_t g, int64_t j)
{
    return (int32_t)(g * 100 + j);
}

static int32_t rtok(int64_t g, int64_t j)
{
    return (int32_t)(-g * 100 - j - 1);
}

static float logp(int64_t g, int64_t j)
{
    return -0.001f * (float)((g * 31 + j) % 1000) - 1e-7f * (float)g;
}

static float score_of(int64_t g)
{
    return 0.25f * (float)(g % 5);
}

static void uid_of(int64_t g, char *buf, size_t n)
{
    snprintf(buf, n, "u%lld", (long long)(g / GROUP));
}

static const char *source_of(int64_t g)
{
    static const char *s[3] = {"openai/gsm8k", "", "math/\xc3\xa9t\xc3\xa9"}; /* empty and UTF-8 too */
    return s[g % 3];
}

typedef struct shape {
    bool no_logprobs; /* drop old_log_probs */
    bool score_i64;   /* score as I64 instead of F32 */
    bool blank;       /* no rows, no columns */
    int64_t rows;     /* -1: rows_of(dp) */
} shape;

/* Source DP rank dp's batch, held by world rank `origin` (metadata records it). */
static df_batch *make_rows(int dp, int origin, shape sh)
{
    int64_t n = sh.blank ? 0 : sh.rows >= 0 ? sh.rows : rows_of(dp), base = (int64_t)dp * BASE;
    df_batch *b = df_batch_new(n);
    assert_non_null(b);
    assert_int_equal(df_batch_meta_set(b, "epoch", 3), 0);
    assert_int_equal(df_batch_meta_set(b, "step", 17), 0);
    assert_int_equal(df_batch_meta_set(b, "origin", origin), 0);
    if (sh.blank)
        return b;
    int64_t *po = calloc((size_t)n + 1, 8), *ro = calloc((size_t)n + 1, 8), *id = malloc((size_t)n * 8 + 8);
    float *sc = malloc((size_t)n * 4 + 4);
    char(*uid)[24] = malloc((size_t)n * 24 + 24);
    const char **up = malloc((size_t)n * sizeof *up + 8), **ds = malloc((size_t)n * sizeof *ds + 8);
    for (int64_t i = 0; i < n; i++) {
        po[i + 1] = po[i] + plen(base + i);
        ro[i + 1] = ro[i] + rlen(base + i);
    }
    int32_t *pt = malloc((size_t)po[n] * 4 + 4), *rt = malloc((size_t)ro[n] * 4 + 4);
    float *lp = malloc((size_t)ro[n] * 4 + 4);
    for (int64_t i = 0; i < n; i++) {
        int64_t g = base + i;
        for (int64_t j = 0; j < plen(g); j++)
            pt[po[i] + j] = ptok(g, j);
        for (int64_t j = 0; j < rlen(g); j++) {
            rt[ro[i] + j] = rtok(g, j);
            lp[ro[i] + j] = logp(g, j);
        }
        id[i] = g;
        sc[i] = score_of(g);
        uid_of(g, uid[i], sizeof uid[i]);
        up[i] = uid[i];
        ds[i] = source_of(g);
    }
    assert_int_equal(df_batch_set_tok_i32(b, "prompt_ids", po, pt), 0);
    assert_int_equal(df_batch_set_tok_i32(b, "response_ids", ro, rt), 0);
    if (!sh.no_logprobs)
        assert_int_equal(df_batch_set_tok_f32(b, "old_log_probs", ro, lp), 0);
    assert_int_equal(df_batch_set_str(b, "uid", up), 0);
    assert_int_equal(df_batch_set_i64(b, "row_id", id), 0);
    if (sh.score_i64)
        assert_int_equal(df_batch_set_i64(b, "score", id), 0);
    else
        assert_int_equal(df_batch_set_f32(b, "score", sc), 0);
    assert_int_equal(df_batch_set_str(b, "data_source", ds), 0);
    free(po), free(ro), free(id), free(sc), free(uid), free(up), free(ds), free(pt), free(rt), free(lp);
    return b;
}

/* What an mp replica (not a sender) passes: other rows and an extra column, all to be ignored. */
static df_batch *make_decoy(void)
{
    shape sh = {.rows = 8};
    df_batch *b = make_rows(77, R, sh);
    int64_t v[8] = {0};
    assert_int_equal(df_batch_set_i64(b, "decoy", v), 0);
    return b;
}

/* Row i of a received batch is row g's exact bytes. */
static void check_row(const df_batch *b, int64_t i)
{
    const int64_t *id = df_batch_i64(b, "row_id");
    const float *score = df_batch_f32(b, "score");
    if (!CHECK(id && score && df_batch_size(b) > i))
        return;
    int64_t g = id[i], len = -1;
    const int32_t *p = df_batch_tok_i32(b, "prompt_ids", i, &len);
    if (!CHECK(p && len == plen(g)))
        return;
    for (int64_t j = 0; j < len; j++)
        CHECK(p[j] == ptok(g, j));
    p = df_batch_tok_i32(b, "response_ids", i, &len);
    if (!CHECK(p && len == rlen(g)))
        return;
    for (int64_t j = 0; j < len; j++)
        CHECK(p[j] == rtok(g, j));
    const float *f = df_batch_tok_f32(b, "old_log_probs", i, &len);
    if (!CHECK(f && len == rlen(g)))
        return;
    for (int64_t j = 0; j < len; j++) {
        float want = logp(g, j);
        CHECK(memcmp(&f[j], &want, sizeof want) == 0); /* bit-exact */
    }
    char u[24];
    uid_of(g, u, sizeof u);
    CHECK(streq(df_batch_str(b, "uid", i), u));
    CHECK(streq(df_batch_str(b, "data_source", i), source_of(g)));
    float s = score_of(g);
    CHECK(memcmp(&score[i], &s, sizeof s) == 0);
}

static void check_meta(const df_batch *b, int origin)
{
    CHECK(df_batch_meta_count(b) == 3);
    CHECK(df_batch_meta_get(b, "epoch", -1) == 3);
    CHECK(df_batch_meta_get(b, "step", -1) == 17);
    CHECK(df_batch_meta_get(b, "origin", -1) == origin);
}

static const char *const COLS[] = {"prompt_ids", "response_ids", "old_log_probs", "uid",
                                   "row_id",     "score",        "data_source"};

static void check_columns(const df_batch *b)
{
    if (!CHECK(df_batch_num_columns(b) == 7))
        return;
    for (int c = 0; c < 7; c++) /* the reference source's order */
        CHECK(streq(df_batch_column_at(b, c)->name, COLS[c]));
}

/* ---- the expected plan, rebuilt from scratch on every rank ------------------------------ */

static bool keep_high_score(const df_sample_info *s, void *user)
{
    return s->score >= *(const double *)user;
}

typedef struct expect {
    df_batch **src; /* [N] each sender's batch (NULL elsewhere) */
    df_redist_plan *plan;
    int64_t max_unit; /* heaviest unit (group or sample) in sum_tokens */
    int64_t kept;     /* rows after the filter */
} expect;

static void expect_build(expect *e, df_dp_layout src, df_dp_layout dst, const df_put_opts *o)
{
    e->src = calloc((size_t)N, sizeof *e->src);
    df_sample_info *all = malloc(sizeof *all * 4096);
    int64_t n = 0;
    for (int r = 0; r < src.dp_size * src.mp; r += src.mp) {
        shape sh = {.rows = -1};
        e->src[r] = make_rows(r / src.mp, r, sh);
        df_sample_info *v = NULL;
        int64_t m = df_batch_size(e->src[r]), k = 0;
        assert_int_equal(df_batch_sample_infos(e->src[r], r, &v), 0);
        assert_int_equal(df_sample_infos_filter(v, m, o->filter, o->filter_user, &k), 0);
        memcpy(all + n, v, (size_t)k * sizeof *v);
        n += k;
        free(v);
    }
    e->kept = n;
    assert_int_equal(df_redistribution_plan(all, n, dst.dp_size, o->keep_groups, &e->plan), 0);
    e->max_unit = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t w = 0;
        for (int64_t j = 0; j < n; j++)
            if (o->keep_groups ? strcmp(all[i].uid, all[j].uid) == 0 : i == j)
                w += all[j].sum_tokens;
        e->max_unit = w > e->max_unit ? w : e->max_unit;
    }
    free(all);
}

static void expect_free(expect *e, int n)
{
    for (int r = 0; r < n; r++)
        df_batch_free(e->src[r]);
    free(e->src);
    df_redist_plan_free(e->plan);
}

/* Global id of plan entry j (source world rank -> its DP rank's id range). */
static int64_t plan_gid(const expect *e, df_dp_layout src, int64_t j)
{
    return (int64_t)(e->plan->src_rank[j] / src.mp) * BASE + e->plan->src_index[j];
}

static uint64_t batch_hash(const df_batch *b)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    assert_int_equal(df_batch_serialize(b, &buf, &len), 0);
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++)
        h = (h ^ buf[i]) * 1099511628211ULL;
    free(buf);
    return h;
}

/* Cross-rank checks: replicas identical, every kept row exactly once, groups together, balance. */
static void check_global(const df_batch *got, const expect *e, df_dp_layout src, df_dp_layout dst,
                         bool groups)
{
    int64_t mine[2] = {got ? (int64_t)batch_hash(got) : 0, got ? df_batch_size(got) : -1};
    int64_t *every = malloc((size_t)N * sizeof mine);
    CHECK(df_comm_allgather(W, mine, sizeof mine, every) == 0);
    for (int r = 0; r < N; r++) {
        int d = r < dst.dp_size * dst.mp ? r / dst.mp : -1;
        if (d < 0) {
            CHECK(every[2 * r + 1] == -1); /* outside dst: nothing stored */
            continue;
        }
        int lead = d * dst.mp;
        CHECK(every[2 * r] == every[2 * lead]);
        CHECK(every[2 * r + 1] == e->plan->dest_offsets[d + 1] - e->plan->dest_offsets[d]);
    }
    free(every);
    /* (g, d) of every row, from the first replica of each destination */
    bool lead = got && R % dst.mp == 0;
    int64_t n = lead ? df_batch_size(got) : 0, *pairs = malloc((size_t)(2 * n + 2) * 8);
    for (int64_t i = 0; i < n; i++) {
        pairs[2 * i] = df_batch_i64(got, "row_id")[i];
        pairs[2 * i + 1] = R / dst.mp;
    }
    void *all = NULL;
    int64_t *counts = NULL;
    CHECK(df_comm_allgatherv(W, pairs, n * 16, &all, &counts, NULL) == 0);
    int64_t total = 0;
    for (int r = 0; r < N; r++)
        total += counts[r] / 16;
    CHECK(total == e->kept);
    const int64_t *p = all;
    int64_t *dest_of = malloc(sizeof *dest_of * BASE * 8), *tokens = calloc((size_t)dst.dp_size, 8);
    for (int64_t g = 0; g < BASE * 8; g++)
        dest_of[g] = -1;
    for (int64_t i = 0; i < total; i++) {
        int64_t g = p[2 * i], d = p[2 * i + 1];
        CHECK(g >= 0 && g < BASE * 8);
        CHECK(dest_of[g] == -1); /* exactly once */
        dest_of[g] = d;
        tokens[d] += plen(g) + rlen(g);
    }
    for (int64_t g = 0; groups && g < BASE * 8; g++) /* a GRPO group lands on one rank */
        if (dest_of[g] >= 0)
            for (int64_t h = g - g % GROUP; h < g; h++)
                CHECK(dest_of[h] < 0 || dest_of[h] == dest_of[g]);
    int64_t mx = 0, mn = INT64_MAX;
    for (int d = 0; d < dst.dp_size; d++) {
        CHECK(tokens[d] == e->plan->dest_tokens[d]);
        mx = tokens[d] > mx ? tokens[d] : mx;
        mn = tokens[d] < mn ? tokens[d] : mn;
    }
    CHECK(mx - mn <= e->max_unit); /* within one unit: what KK reaches on these rows */
    free(pairs), free(all), free(counts), free(dest_of), free(tokens);
    (void)src;
}

/* One put / get between two layouts, checked on every rank. */
static void run_case(df_dp_layout src, df_dp_layout dst, const df_put_opts *o)
{
    df_data_buffers *db = new_store();
    const int64_t a2a0 = dev.alltoallvs;
    bool in_src = R < src.dp_size * src.mp, sender = in_src && R % src.mp == 0;
    shape sh = {.rows = -1};
    df_batch *in = sender ? make_rows(R / src.mp, R, sh) : in_src ? make_decoy() : NULL;
    df_redist_stats st;
    memset(&st, 0xff, sizeof st);
    int rc = df_data_buffers_put(db, "gen", in, src, dst, o, &st);
    if (rc)
        fail_msg("rank %d: put %dx%d -> %dx%d: %s", R, src.dp_size, src.mp, dst.dp_size, dst.mp,
                 df_last_error());
    CHECK(!st.local);
    check_path(&st);
    CHECK(dev.alltoallvs - a2a0 == (on_device && N > 1)); /* one payload move per put */
    expect e;
    expect_build(&e, src, dst, o);
    df_batch *got = NULL;
    int d = R < dst.dp_size * dst.mp ? R / dst.mp : -1;
    if (d >= 0) {
        got = take(db, "gen", dst.dp_size, d);
        int64_t lo = e.plan->dest_offsets[d], n = e.plan->dest_offsets[d + 1] - lo;
        CHECK(st.rows_out == n);
        check_columns(got);
        check_meta(got, 0);
        const int64_t *id = df_batch_i64(got, "row_id");
        for (int64_t i = 0; CHECK(df_batch_size(got) == n) && id && i < n; i++) {
            CHECK(id[i] == plan_gid(&e, src, lo + i)); /* the plan's order */
            check_row(got, i);
        }
    } else {
        CHECK(!df_data_buffers_has(db, "gen"));
        CHECK(st.rows_out == 0);
    }
    CHECK(df_data_buffers_count(db) == 0);
    CHECK(st.rows_in == (sender ? rows_of(R / src.mp) : 0));
    check_global(got, &e, src, dst, o->keep_groups);
    int64_t bytes[2] = {st.bytes_sent, st.bytes_received};
    CHECK(df_comm_allreduce(W, bytes, 2, DF_COMM_INT64, DF_COMM_SUM) == 0);
    CHECK(bytes[0] == bytes[1]); /* what leaves one rank arrives at another */
    CHECK(st.messages_sent <= N - 1);
    CHECK(st.seconds >= 0);
    df_batch_free(got);
    expect_free(&e, N);
    df_data_buffers_free(db);
    agree();
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_local_handoff(void **state)
{
    df_data_buffers *db = NULL;
    assert_int_equal(df_data_buffers_create(W, &db), 0);
    df_dp_layout l = {N, 1};
    shape sh = {.rows = -1};
    df_batch *in = make_rows(R, R, sh);
    df_redist_stats st;
    assert_int_equal(df_data_buffers_put(db, "k", in, l, l, NULL, &st), 0);
    assert_true(st.local);
    assert_true(st.bytes_sent == 0 && st.bytes_received == 0 && st.bytes_self == 0 && st.info_bytes == 0);
    assert_true(st.messages_sent == 0);
    assert_int_equal(st.rows_in, rows_of(R));
    assert_int_equal(st.rows_out, rows_of(R));
    assert_true(df_data_buffers_has(db, "k"));
    df_batch *got = NULL;
    assert_error_mentions(df_data_buffers_get(db, "k", N, (R + 1) % N + (N == 1), &got), DF_EINVAL,
                          "dp_rank");
    assert_int_equal(df_data_buffers_get(db, "k", N + 1, R, &got), DF_EINVAL);
    assert_true(df_data_buffers_has(db, "k")); /* a wrong get leaves it */
    assert_int_equal(df_data_buffers_get(db, "k", N, R, &got), 0);
    assert_ptr_equal(got, in); /* the very batch: no copy */
    assert_error_mentions(df_data_buffers_get(db, "k", N, R, &got), DF_ENOTFOUND, "'k'");
    df_batch_free(in);

    /* a later put under the same key replaces the earlier batch */
    df_batch *a = df_batch_new(2), *b = df_batch_new(5);
    assert_int_equal(df_data_buffers_put(db, "k", a, l, l, NULL, NULL), 0);
    assert_int_equal(df_data_buffers_put(db, "k", b, l, l, NULL, NULL), 0);
    assert_int_equal(df_data_buffers_count(db), 1);
    assert_int_equal(df_data_buffers_get(db, "k", N, R, &got), 0);
    assert_ptr_equal(got, b);
    df_batch_free(got);

    if (N % 2 == 0) { /* mp groups of 2: each replica keeps its own batch */
        df_dp_layout m = {N / 2, 2};
        df_batch *c = df_batch_new(R);
        assert_int_equal(df_data_buffers_put(db, "m", c, m, m, NULL, &st), 0);
        assert_true(st.local);
        assert_int_equal(df_data_buffers_get(db, "m", N / 2, R / 2, &got), 0);
        assert_ptr_equal(got, c);
        df_batch_free(got);
    }
    df_data_buffers_free(db);
}

static void test_rebalance(void **state)
{
    df_put_opts o = {.force = true, .keep_groups = true};
    df_dp_layout l = {N, 1};
    run_case(l, l, &o);
    o.keep_groups = false; /* single samples */
    run_case(l, l, &o);
}

static void test_shrink_grow(void **state)
{
    df_put_opts o = {.keep_groups = true, .force = N == 1}; /* one rank: both layouts are {1, 1} */
    df_dp_layout all = {N, 1}, one = {1, N};
    run_case(all, one, &o); /* N -> 1: one DP rank replicated on every rank */
    run_case(one, all, &o); /* 1 -> N: only rank 0 sends */
    if (N % 2 == 0) {
        df_dp_layout half = {N / 2, 2};
        run_case(all, half, &o); /* 4 -> 2, 2 -> 1 */
        run_case(half, all, &o); /* 2 -> 4, 1 -> 2 */
    }
}

/* Layouts on a prefix of the world: 3 -> 2 at np 3 and np 4. */
static void test_three_to_two(void **state)
{
    if (N < 3)
        skip();
    df_put_opts o = {.keep_groups = true};
    df_dp_layout three = {3, 1}, two = {2, 1};
    run_case(three, two, &o);
    run_case(two, three, &o);
    if (N >= 4) {
        df_dp_layout two_mp = {2, 2};
        run_case(three, two_mp, &o);
    }
}

static void test_filter(void **state)
{
    double min_score = 0.5;
    df_put_opts o = {.keep_groups = true, .filter = keep_high_score, .filter_user = &min_score};
    df_dp_layout l = {N, 1};
    run_case(l, l, &o); /* a filter alone makes even an equal layout redistribute */
    /* which rows were dropped */
    df_data_buffers *db = new_store();
    shape sh = {.rows = -1};
    df_redist_stats st;
    CHECK(df_data_buffers_put(db, "f", make_rows(R, R, sh), l, l, &o, &st) == 0);
    int64_t dropped = 0;
    for (int64_t i = 0; i < rows_of(R); i++)
        dropped += score_of((int64_t)R * BASE + i) < 0.5f;
    CHECK(st.rows_dropped == dropped);
    df_batch *got = NULL;
    got = take(db, "f", N, R);
    const float *score = df_batch_f32(got, "score");
    for (int64_t i = 0; CHECK(score != NULL) && i < df_batch_size(got); i++)
        CHECK(score[i] >= 0.5f);
    df_batch_free(got);
    df_data_buffers_free(db);
    agree();
}

/* No rows anywhere, and a reference source other than rank 0. */
static void test_empty(void **state)
{
    df_data_buffers *db = new_store();
    df_dp_layout l = {N, 1};
    df_put_opts o = {.force = true};
    shape zero = {.rows = 0}, blank = {.blank = true};
    df_batch *got = NULL;

    CHECK(df_data_buffers_put(db, "z", make_rows(R, R, zero), l, l, &o, NULL) == 0);
    got = take(db, "z", N, R);
    CHECK(df_batch_size(got) == 0);
    check_columns(got);
    check_meta(got, 0);
    df_batch_free(got);

    CHECK(df_data_buffers_put(db, "b", make_rows(R, R, blank), l, l, &o, NULL) == 0);
    got = take(db, "b", N, R);
    CHECK(df_batch_size(got) == 0);
    CHECK(df_batch_num_columns(got) == 0);
    check_meta(got, 0); /* nobody has columns: rank 0's metadata */
    df_batch_free(got);

    /* rank 0 blank, the others with rows: the lowest rank with columns is the reference */
    shape some = {.rows = 4};
    df_batch *in = make_rows(R, R, R == 0 ? blank : some);
    df_redist_stats st;
    CHECK(df_data_buffers_put(db, "r", in, l, l, &o, &st) == 0);
    got = take(db, "r", N, R);
    int64_t total = df_batch_size(got);
    CHECK(df_comm_allreduce(W, &total, 1, DF_COMM_INT64, DF_COMM_SUM) == 0);
    CHECK(total == 4 * (N - 1));
    if (N > 1) { /* even a destination without rows gets rank 1's columns and metadata */
        check_columns(got);
        check_meta(got, 1);
    } else {
        CHECK(df_batch_num_columns(got) == 0);
    }
    for (int64_t i = 0; i < df_batch_size(got); i++)
        check_row(got, i);
    df_batch_free(got);
    df_data_buffers_free(db);
    agree();
}

/* One rank's batch lacks a column, or has one of another kind: every rank fails. */
static void test_column_mismatch(void **state)
{
    if (N < 2)
        skip();
    df_data_buffers *db = new_store();
    df_dp_layout l = {N, 1}, one = {1, N};
    shape ok = {.rows = -1}, lacks = {.rows = -1, .no_logprobs = true},
          kind = {.rows = -1, .score_i64 = true};
    int rc = df_data_buffers_put(db, "x", make_rows(R, R, R == N - 1 ? lacks : ok), l, one, NULL, NULL);
    CHECK(rc == DF_EINVAL);
    CHECK(df_test_error_mentions("old_log_probs"));
    char who[64];
    snprintf(who, sizeof who, "rank %d's batch lacks", N - 1);
    CHECK(df_test_error_mentions(who));
    CHECK(!df_data_buffers_has(db, "x"));

    rc = df_data_buffers_put(db, "x", make_rows(R, R, R == 1 ? kind : ok), l, one, NULL, NULL);
    CHECK(rc == DF_EINVAL);
    CHECK(df_test_error_mentions("column 'score' is f32 on rank 0 but i64 on rank 1"));
    CHECK(!df_data_buffers_has(db, "x"));

    /* the store still works afterwards */
    CHECK(df_data_buffers_put(db, "x", make_rows(R, R, ok), l, one, NULL, NULL) == 0);
    df_batch *got = NULL;
    got = take(db, "x", 1, 0);
    int64_t all = 0;
    for (int d = 0; d < N; d++)
        all += rows_of(d);
    CHECK(df_batch_size(got) == all);
    df_batch_free(got);
    df_data_buffers_free(db);
    agree();
}

/* A rank inside the source layout without a batch: every rank fails, none hangs. */
static void test_missing_batch(void **state)
{
    df_data_buffers *db = new_store();
    df_dp_layout l = {N, 1};
    df_put_opts o = {.force = true};
    shape ok = {.rows = -1};
    int rc = df_data_buffers_put(db, "y", R == N - 1 ? NULL : make_rows(R, R, ok), l, l, &o, NULL);
    CHECK(rc == DF_EINVAL);
    if (R == N - 1) {
        CHECK(df_test_error_mentions("passed no batch"));
    } else {
        char who[64];
        snprintf(who, sizeof who, "rank %d of %d failed", N - 1, N);
        CHECK(df_test_error_mentions(who));
    }
    CHECK(!df_data_buffers_has(db, "y"));
    df_data_buffers_free(db);
    agree();
}

static void test_bad_arguments(void **state)
{
    df_data_buffers *db = NULL;
    assert_int_equal(df_data_buffers_create(NULL, &db), DF_EINVAL);
    assert_int_equal(df_data_buffers_create(W, &db), 0);
    df_dp_layout ok = {N, 1}, zero = {0, 1}, big = {N + 1, 1}, nomp = {N, 0};
    assert_error_mentions(df_data_buffers_put(db, "k", df_batch_new(1), zero, ok, NULL, NULL), DF_EINVAL,
                          "source layout dp_size 0");
    assert_error_mentions(df_data_buffers_put(db, "k", df_batch_new(1), ok, big, NULL, NULL), DF_EINVAL,
                          "destination layout");
    assert_int_equal(df_data_buffers_put(db, "k", df_batch_new(1), ok, nomp, NULL, NULL), DF_EINVAL);
    assert_int_equal(df_data_buffers_put(db, "", df_batch_new(1), ok, ok, NULL, NULL), DF_EINVAL);
    assert_int_equal(df_data_buffers_put(NULL, "k", df_batch_new(1), ok, ok, NULL, NULL), DF_EINVAL);
    assert_int_equal(df_data_buffers_count(db), 0);
    df_batch *got = NULL;
    assert_int_equal(df_data_buffers_get(db, "k", N, R, NULL), DF_EINVAL);
    assert_int_equal(df_data_buffers_get(db, "k", N, R, &got), DF_ENOTFOUND);
    df_data_buffers_free(db);
    df_data_buffers_free(NULL);
}

/* ---- through the device ------------------------------------------------------------------ */

/* A backend whose memory is the host's (the CPU), or one without alltoallv, leaves payloads on
 * MPI without communicating; the device path releases every staging buffer. */
static void test_device_store(void **state)
{
    df_data_buffers *db = NULL;
    assert_int_equal(df_data_buffers_create(W, &db), 0);
    df_backend cpu = df_backend_cpu();
    assert_int_equal(df_data_buffers_use_backend(db, &cpu), 0);
    assert_false(df_data_buffers_on_device(db));
    emu_dev bare;
    df_backend none = emu_open(&bare);
    emu_no_optim(&bare); /* no group_open, no alltoallv */
    assert_int_equal(df_data_buffers_use_backend(db, &none), 0);
    assert_false(df_data_buffers_on_device(db));
    assert_int_equal(df_data_buffers_use_backend(NULL, &cpu), DF_EINVAL);
    assert_int_equal(df_data_buffers_use_backend(db, NULL), DF_EINVAL);
    df_data_buffers_free(db);
    assert_int_equal(emu_buffers(&dev), 0);
}

static int fail_upload_rank = -1; /* upload fails on this rank (the staging's failure) */
static int (*real_upload)(void *, void *, const void *, size_t);

static int upload_or_fail(void *ctx, void *dst, const void *src, size_t bytes)
{
    if (R == fail_upload_rank)
        return df_error(DF_ENOMEM, "test: the device is out of memory");
    return real_upload(ctx, dst, src, bytes);
}

/* One rank fails to stage its payload on the device: every rank fails with the same code
 * before the device collective (none waits in it), names the rank, stores nothing, and
 * the store works afterwards. */
static void test_device_staging_fails(void **state)
{
    if (N < 2)
        skip();
    df_data_buffers *db = new_store();
    df_dp_layout l = {N, 1};
    df_put_opts o = {.force = true};
    shape ok = {.rows = -1};
    const int64_t a2a0 = dev.alltoallvs;
    fail_upload_rank = 0; /* has rows to send (rank 1 has none) */
    int rc = df_data_buffers_put(db, "s", make_rows(R, R, ok), l, l, &o, NULL);
    fail_upload_rank = -1;
    CHECK(rc == DF_ENOMEM);
    char who[64];
    snprintf(who, sizeof who, "rank %d failed staging", 0);
    CHECK(df_test_error_mentions(R == 0 ? "out of memory" : who));
    CHECK(!df_data_buffers_has(db, "s"));
    CHECK(dev.alltoallvs == a2a0); /* nobody entered the device collective */
    CHECK(df_data_buffers_put(db, "s", make_rows(R, R, ok), l, l, &o, NULL) == 0);
    df_batch *got = take(db, "s", N, R);
    df_batch_free(got);
    df_data_buffers_free(db);
    CHECK(emu_buffers(&dev) == 0); /* the staging buffers released, on failure too */
    agree();
}

static int device_setup(void **state)
{
    on_device = true;
    dev_be = emu_open(&dev);
    real_upload = dev.ops.upload;
    dev.ops.upload = upload_or_fail;
    (void)state;
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_local_handoff),   cmocka_unit_test(test_rebalance),
        cmocka_unit_test(test_shrink_grow),     cmocka_unit_test(test_three_to_two),
        cmocka_unit_test(test_filter),          cmocka_unit_test(test_empty),
        cmocka_unit_test(test_column_mismatch), cmocka_unit_test(test_missing_batch),
        cmocka_unit_test(test_bad_arguments),
    };
    /* the redistributions again, their payloads through each rank's emulated device */
    const struct CMUnitTest device[] = {
        cmocka_unit_test(test_device_store),    cmocka_unit_test(test_rebalance),
        cmocka_unit_test(test_shrink_grow),     cmocka_unit_test(test_three_to_two),
        cmocka_unit_test(test_filter),          cmocka_unit_test(test_empty),
        cmocka_unit_test(test_column_mismatch), cmocka_unit_test(test_missing_batch),
        cmocka_unit_test(test_device_staging_fails),
    };
    if (df_test_world_setup(NULL))
        return 1;
    int rc = cmocka_run_group_tests_name("mpi", tests, NULL, NULL);
    rc |= cmocka_run_group_tests_name("device", device, device_setup, NULL);
    df_test_world_teardown(NULL);
    return rc;
}
