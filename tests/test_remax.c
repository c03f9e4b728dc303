/*
 * test_remax.c — ReMax's greedy baseline: reward_baselines matched to rows by
 * uid on hand-made batches, and three remax steps through the DAG worker,
 * where the reward_baseline node the planner adds re-runs the rollout and
 * reward nodes greedily. Probes around the baseline and advantage nodes check,
 * every step, that the baselines equal the scores of a separate greedy
 * generation of the same prompts with the same weights (the same value for the
 * rollout.n samples of a prompt), and that the advantages the actor trains on
 * are built from them, after trainer.balance_batch has moved the rows (between
 * ranks under mpiexec -np 2).
 *
 * mpi-test: np 2
 * (as a plain ctest it runs with one rank.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"
#include "tolerance.h"

#include "distflow/comm.h"
#include "distflow/reward.h"
#include "workers/worker_internal.h"

#include <jansson.h>

static df_comm *world;
static int rank, size;
static char dir[256];

/* A reward every response of a random model earns something from: its length in characters / 100. */
static int length_score(const char *data_source, const char *s, const char *gt, const char *extra,
                        double *score)
{
    (void)data_source, (void)gt, (void)extra;
    *score = (double)strlen(s) / 100.0;
    return 0;
}

/* greedy rows: uid a scores [0, 0, 1] (sum 1), uid b [0.25, 0.25] (0.5); rollout rows b a a b */
static void test_baselines_by_uid(void **state)
{
    (void)state;
    const char *gu[] = {"a", "b"}, *ou[] = {"b", "a", "a", "b"};
    const int64_t goff[] = {0, 3, 5};
    const float gs[] = {0, 0, 1, 0.25f, 0.25f};
    df_batch *g = df_batch_new(2), *o = df_batch_new(4);
    assert_int_equal(df_batch_set_str(g, "uid", gu), 0);
    assert_int_equal(df_batch_set_tok_f32(g, "token_level_scores", goff, gs), 0);
    assert_int_equal(df_batch_set_str(o, "uid", ou), 0);
    assert_int_equal(df_remax_set_baselines(o, g), 0);
    const float *rb = df_batch_f32(o, "reward_baselines");
    assert_non_null(rb);
    assert_true(rb[0] == 0.5f && rb[1] == 1.0f && rb[2] == 1.0f && rb[3] == 0.5f);

    /* a rollout row whose prompt has no greedy response; a prompt with two */
    assert_int_equal(df_batch_set_str_at(o, "uid", 3, "c"), 0);
    assert_error_mentions(df_remax_set_baselines(o, g), DF_EINVAL, "no greedy response for uid 'c' (row 3)");
    assert_int_equal(df_batch_set_str_at(g, "uid", 1, "a"), 0);
    assert_error_mentions(df_remax_set_baselines(o, g), DF_EINVAL, "two greedy responses for uid 'a'");
    df_batch_drop(g, "token_level_scores");
    assert_error_mentions(df_remax_set_baselines(o, g), DF_EINVAL, "uid and token_level_scores");
    df_batch_free(g);
    df_batch_free(o);
}

/* ---- probes around the baseline and advantage nodes ------------------------------------------ */

#define MAX_ROWS 32 /* rollout rows per rank */
#define MAX_RANKS 4

typedef struct {
    char uid[40];
    float baseline;
    int rank; /* where the rollout made the row */
} made_row;

static struct {
    df_node_fn baseline, advantage; /* the nodes' own functions */
    made_row made[MAX_RANKS * MAX_ROWS]; /* this step's baseline node's rows of every rank */
    int steps, rows, moved, nonzero, bad;
    int greedy_rows, greedy_nonzero, distinct_samples; /* the independent greedy generations */
    char first_bad[512];
} probe;

static void probe_fail(const char *fmt, ...) DF_PRINTF(1, 2);
static void probe_fail(const char *fmt, ...)
{
    /* noted, not asserted: a longjmp out of a node would leave the other rank in a collective */
    if (!probe.bad++) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(probe.first_bad, sizeof probe.first_bad, fmt, ap);
        va_end(ap);
    }
}

/* The baseline node, then every rank's (uid, reward_baselines) gathered. */
static int gather_made(df_dag_worker *w, const df_batch *b)
{
    made_row mine[MAX_ROWS];
    memset(mine, 0, sizeof mine);
    const float *rb = b ? df_batch_f32(b, "reward_baselines") : NULL;
    int64_t n = b ? df_batch_size(b) : 0;
    if (b && (!rb || n > MAX_ROWS))
        probe_fail("baseline node: %lld rows, reward_baselines %s", (long long)n, rb ? "set" : "missing");
    for (int64_t i = 0; rb && i < n && i < MAX_ROWS; i++) {
        snprintf(mine[i].uid, sizeof mine[i].uid, "%s", df_batch_str(b, "uid", i));
        mine[i].baseline = rb[i];
        mine[i].rank = w->group_rank;
    }
    return df_comm_allgather(w->group, mine, sizeof mine, probe.made);
}

static const made_row *made_for(const char *uid)
{
    for (int i = 0; i < size * MAX_ROWS; i++)
        if (!strcmp(probe.made[i].uid, uid))
            return &probe.made[i];
    return NULL;
}

/*
 * This rank's prompts (the pass's input) generated greedily here, apart from the graph, with the
 * weights of this step and scored by the reward: each response's score must be the baseline the
 * node gave its uid, the same value for the rollout.n samples of the prompt.
 */
static void check_greedy(df_dag_worker *w, const df_node_ctx *ctx, const df_batch *b)
{
    df_batch *g = NULL;
    df_sampling_params sp = w->global.sampling;
    sp.greedy = true;
    if (!ctx->input || df_generate_batch(w->rollout.engine, df_actor_model(w->actor.model), ctx->input, 1, &sp,
                                         12345, NULL, &g) || df_worker_reward(w, NULL, g, NULL)) {
        probe_fail("step %lld: the independent greedy generation failed: %s", (long long)ctx->step, df_last_error());
        df_batch_free(g);
        return;
    }
    for (int64_t i = 0; i < df_batch_size(g); i++) {
        int64_t len;
        const float *s = df_batch_tok_f32(g, "token_level_scores", i, &len);
        float sum = 0;
        for (int64_t t = 0; t < len; t++)
            sum += s[t];
        /* exact: the score sits on the last token, the others are 0 */
        if (sum != df_batch_f32(g, "score")[i])
            probe_fail("greedy row %lld: token_level_scores sum %.9g, score %.9g", (long long)i, sum,
                       df_batch_f32(g, "score")[i]);
        const made_row *m = made_for(df_batch_str(g, "uid", i));
        if (!m || m->baseline != sum)
            probe_fail("step %lld prompt %s: reward_baselines %.9g, greedy score %.9g", (long long)ctx->step,
                       df_batch_str(g, "uid", i), m ? m->baseline : NAN, sum);
        probe.greedy_rows++;
        probe.greedy_nonzero += sum != 0;
        probe.moved += m && m->rank != w->group_rank; /* the prompt's samples sit on another rank */
    }
    for (int64_t i = 0; i < df_batch_size(b); i++)
        probe.distinct_samples += df_batch_f32(b, "score")[i] != df_batch_f32(b, "reward_baselines")[i];
    df_batch_free(g);
}

static int probe_baseline(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    int rc = probe.baseline(ctx, batch, out);
    df_dag_worker *w = ctx->worker;
    int grc = gather_made(w, rc ? NULL : batch);
    if (!rc && !grc)
        check_greedy(w, ctx, batch);
    return rc ? rc : grc;
}

/*
 * The advantage node, then per row: reward_baselines is the rollout's value
 * for its uid, and remax's advantages are returns - baseline, so at the first
 * response token sum(token_level_rewards) - reward_baselines.
 */
static int probe_advantage(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    int rc = probe.advantage(ctx, batch, out);
    const df_batch *b = out->batch ? out->batch : batch;
    const float *rb = rc ? NULL : df_batch_f32(b, "reward_baselines");
    const df_column *adv = rc ? NULL : df_batch_column(b, "advantages");
    const df_column *ret = rc ? NULL : df_batch_column(b, "returns");
    const df_column *rew = rc ? NULL : df_batch_column(b, "token_level_rewards");
    if (!rc && (!rb || !adv || !ret || !rew)) {
        probe_fail("step %lld: the advantage node's batch lacks a column", (long long)ctx->step);
        return rc;
    }
    probe.steps += !rc;
    for (int64_t i = 0; !rc && i < df_batch_size(b); i++) {
        const char *uid = df_batch_str(b, "uid", i);
        const made_row *m = made_for(uid);
        if (!m || m->baseline != rb[i]) {
            probe_fail("step %lld row %lld uid %s: reward_baselines %.9g, the rollout's %.9g", (long long)ctx->step,
                       (long long)i, uid, rb[i], m ? m->baseline : NAN);
            continue;
        }
        /* remax sums the float rewards to go in double and rounds returns and returns - baseline to
           float once each: at the first token a = fl(sum - b) up to the double sums' order */
        int64_t t0 = adv->offsets[i], t1 = adv->offsets[i + 1];
        double sum = 0, abs_sum = 0;
        for (int64_t t = rew->offsets[i]; t < rew->offsets[i + 1]; t++)
            sum += ((const float *)rew->data)[t], abs_sum += fabs(((const float *)rew->data)[t]);
        const float *a = adv->data, *r = ret->data;
        double tol0 = DF_U32 * fabs(sum - rb[i]) +
                      2 * df_tol_gamma((double)(t1 - t0 + 1), DF_U64) * (abs_sum + fabs(rb[i]));
        if (t1 > t0 && fabs(a[t0] - (sum - rb[i])) > tol0)
            probe_fail("step %lld row %lld: advantage %.9g at the first token, sum of rewards %.9g - baseline %.9g",
                       (long long)ctx->step, (long long)i, a[t0], sum, rb[i]);
        for (int64_t t = t0; t < t1; t++) /* a = fl(R - b) and r = fl(R) for the same double R */
            if (fabs(a[t] - (r[t] - rb[i])) > DF_U32 * (fabs(r[t] - rb[i]) + 2 * fabs(r[t])))
                probe_fail("step %lld row %lld token %lld: advantage %.9g != return %.9g - baseline %.9g",
                           (long long)ctx->step, (long long)i, (long long)(t - t0), a[t], r[t], rb[i]);
        probe.rows++;
        probe.nonzero += rb[i] != 0;
    }
    return rc;
}

/* Wrap the two nodes of w's graph with the probes. */
static void install_probes(df_dag_worker *w)
{
    memset(&probe, 0, sizeof probe);
    df_node *base = df_task_graph_get_node(w->graph, "reward_baseline");
    df_node *adv = df_task_graph_get_node(w->graph, "calculate_advantages");
    assert_non_null(base);
    assert_non_null(adv);
    assert_int_equal(df_exec_resolve(base->executable_ref, &probe.baseline), 0);
    assert_int_equal(df_exec_resolve(adv->executable_ref, &probe.advantage), 0);
    base->fn = probe_baseline;
    adv->fn = probe_advantage;
}

/* After the run: no mismatch anywhere, and (with several ranks) rows that changed rank were checked. */
static void check_probes(int steps)
{
    if (probe.bad)
        fail_msg("rank %d: %d mismatches; the first: %s", rank, probe.bad, probe.first_bad);
    assert_int_equal(probe.steps, steps);
    assert_true(probe.rows > 0 && probe.nonzero > 0);
    /* a real baseline, and not the samples' own scores */
    print_message("rank %d: %d greedy rows checked (%d score non-zero); %d sampled responses score differently\n",
                  rank, probe.greedy_rows, probe.greedy_nonzero, probe.distinct_samples);
    assert_true(probe.greedy_rows > 0 && probe.greedy_nonzero > 0 && probe.distinct_samples > 0);
    int64_t moved = probe.moved;
    assert_int_equal(df_comm_allreduce(world, &moved, 1, DF_COMM_INT64, DF_COMM_SUM), 0);
    print_message("rank %d: %d rows checked over %d steps, %lld moved by balance_batch on all ranks\n", rank,
                  probe.rows, probe.steps, (long long)moved);
    if (size > 1)
        assert_true(moved > 0);
}

static void test_remax_steps(void **state)
{
    (void)state;
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 4,\n"
             "       max_prompt_length: 128, max_response_length: 8}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {optim: {lr: 0.01}, ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 6}\n"
             "  rollout: {n: 3, log_prob_micro_batch_size_per_gpu: 16}\n"
             "algorithm: {adv_estimator: remax}\n"
             "trainer: {total_training_steps: 3, save_freq: -1, logger: [], default_local_dir: %s/out}\n",
             dir, dir, dir);
    df_config *cfg = df_test_config(yaml, "remax.yaml", NULL, 0);
    df_dag_worker *w = NULL;
    int rc = df_dag_worker_create(cfg, world, &w);
    if (rc)
        fail_msg("rank %d: %s", rank, df_last_error());
    assert_true(w->global.cfg.trainer.balance_batch); /* verl's default: the rows move before the reward node */
    install_probes(w);
    if (df_dag_worker_fit(w))
        fail_msg("rank %d: %s", rank, df_last_error());
    check_probes(3);
    df_dag_worker_free(w);
    df_config_free(cfg);
    assert_int_equal(df_comm_barrier(world), 0);
    if (rank != 0)
        return;

    json_t *lines = df_test_metrics(dir, "out", false), *o;
    size_t i;
    json_array_foreach(lines, i, o) {
        double gen = json_number_value(json_object_get(o, "timing_s/gen"));
        double gen_max = json_number_value(json_object_get(o, "timing_s/gen_max"));
        assert_true(gen > 0 && gen_max > 0);
        assert_true(json_is_number(json_object_get(o, "actor/pg_loss")));
        assert_true(json_is_number(json_object_get(o, "critic/advantages/mean")));
        print_message("step %d: timing_s/gen %.3f s, timing_s/gen_max %.3f s\n", (int)i + 1, gen, gen_max);
    }
    assert_int_equal(json_array_size(lines), 3);
    json_decref(lines);
}

static int setup(void **state)
{
    (void)state;
    if (df_comm_world(&world) || df_reward_register("test/length", length_score))
        return -1;
    rank = df_comm_rank(world);
    size = df_comm_size(world);
    if (!df_test_size_ok(size) || size > MAX_RANKS)
        return -1;
    return df_test_shared_inputs(world, "df_remax", 64, "test/length", dir, sizeof dir);
}

static int teardown(void **state)
{
    (void)state;
    df_comm_barrier(world);
    int rc = rank == 0 ? df_test_remove_tree(dir) : 0;
    df_comm_shutdown();
    return rc;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_baselines_by_uid),
        cmocka_unit_test(test_remax_steps),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
