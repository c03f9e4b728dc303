/*
 * test_rollout_corr_node.c — seams of the rollout correction at the advantage node
 * (DAGWorker.compute_advantage on a real worker, hand-made batches), where the kernels that
 * test_rollout_corr.c and test_adv.c check are wired together:
 *   - rollout_is_batch_normalize divides by the mean over the whole data-parallel group: ranks
 *     whose shards have different means must get the weights and the factor of the global mean
 *     (a rank normalising by its own mean fails here under mpiexec);
 *   - the rollout_is_weights the node writes reach the optimal token baseline (df_adv_input's
 *     rollout_is_weights): its advantages are those of w_t scaled by rho_t^2, not of w_t.
 *
 * mpi-test: np 2
 * (as a plain ctest it runs with one rank, which holds the whole batch.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"
#include "tolerance.h"

#include "testmpi.h"

#include "distflow/reward.h"
#include "workers/worker_internal.h"

#include <math.h>
#include <unistd.h>

static char dir[256];
static df_config *cfg; /* the worker's: it reads its strings, so freed after it (done()) */

/* A worker of the built-in graph with `algorithm` (a YAML flow mapping) over the world. */
static df_dag_worker *worker(const char *algorithm, const char *actor_extra)
{
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 4, shuffle: false,\n"
             "       max_prompt_length: 128, max_response_length: 8}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {ppo_mini_batch_size: 4, use_kl_loss: false%s}\n"
             "  rollout: {n: 2}\n"
             "algorithm: %s\n"
             "trainer: {logger: [], save_freq: -1, default_local_dir: %s/out}\n",
             dir, dir, actor_extra, algorithm, dir);
    cfg = df_test_config(yaml, "rcnode.yaml", NULL, 0);
    df_dag_worker *w = NULL;
    if (df_dag_worker_create(cfg, W, &w))
        fail_msg("rank %d: %s", R, df_last_error());
    return w;
}

static void done(df_dag_worker *w)
{
    df_dag_worker_free(w);
    df_config_free(cfg);
    cfg = NULL;
}

/* Responses [first, first + n) of a packed hand batch, rebased, with the columns the node reads. */
static df_batch *hand_batch(int first, int n, const int64_t *off, const char *const *uid, const float *rew,
                            const float *old, const float *ro, const float *sq)
{
    int64_t o[8];
    int32_t ids[32];
    assert_true(n < 8 && off[first + n] - off[first] <= 32);
    for (int i = 0; i <= n; i++)
        o[i] = off[first + i] - off[first];
    for (int64_t t = 0; t < o[n]; t++)
        ids[t] = (int32_t)(5 + t);
    const int64_t t0 = off[first];
    df_batch *b = df_batch_new(n);
    assert_non_null(b);
    assert_int_equal(df_batch_set_tok_i32(b, "response_ids", o, ids), 0);
    assert_int_equal(df_batch_set_str(b, "uid", uid + first), 0);
    assert_int_equal(df_batch_set_tok_f32(b, "token_level_scores", o, rew + t0), 0);
    assert_int_equal(df_batch_set_tok_f32(b, "token_level_rewards", o, rew + t0), 0);
    assert_int_equal(df_batch_set_tok_f32(b, "old_log_probs", o, old + t0), 0);
    assert_int_equal(df_batch_set_tok_f32(b, "rollout_log_probs", o, ro + t0), 0);
    if (sq)
        assert_int_equal(df_batch_set_tok_f32(b, "sum_pi_squared", o, sq + t0), 0);
    return b;
}

/* The advantage node itself on b, as the executor runs it. */
static void run_advantage_node(df_dag_worker *w, df_batch *b, df_metrics *m)
{
    df_node_fn fn = NULL;
    assert_int_equal(df_exec_resolve("DAGWorker.compute_advantage", &fn), 0);
    df_node_ctx ctx = {.worker = w,
                       .node = df_task_graph_get_node(w->graph, "calculate_advantages"),
                       .step = 1,
                       .metrics = m};
    assert_non_null(ctx.node);
    df_node_output out = {0};
    alarm(60); /* a rank left waiting in a collective ends here, not at ctest's timeout */
    int rc = fn(&ctx, b, &out);
    alarm(0);
    if (rc)
        fail_msg("rank %d: %s", R, df_last_error());
    assert_null(out.batch);
}

/* ---- rollout_is_batch_normalize over the data-parallel group -------------------------------- */

/*
 * Token level, threshold 2. lr = old - rollout is 0 (w = exp(0) = 1) or >= 1 (exp(lr) >= e,
 * truncated to w = 2), so every weight is exactly 1 or 2:
 *   responses 0, 1 (uid a): lr [0, 0 | 0]     -> w [1, 1 | 1]     sums (3, 3): own mean 1
 *   responses 2, 3 (uid b): lr [0, 1 | 2, 0]  -> w [1, 2 | 2, 1]  sums (6, 4): own mean 1.5
 * Two ranks hold responses 0-1 and 2-3. The global mean is (3 + 6) / (3 + 4) = 9/7, so every
 * rank's weights become 1 / (9/7) = 7/9 and 2 / (9/7) = 14/9, and both record the factor 9/7.
 * Normalised by their own means instead, rank 0 would keep [1, 1, 1] (factor 1) and rank 1
 * get [2/3, 4/3, 4/3, 2/3] (factor 1.5).
 */
static const int64_t n_off[] = {0, 2, 3, 5, 7};
static const char *const n_uid[] = {"a", "a", "b", "b"};
static const float n_rew[] = {0, 1, 0, 0, 1, 0, 0};
static const float n_old[] = {-1, -2, -1.5f, -1, -1, -0.5f, -2};
static const float n_ro[] = {-1, -2, -1.5f, -1, -2, -2.5f, -2};

static void test_batch_normalize_over_dp_group(void **state)
{
    (void)state;
    df_dag_worker *w = worker("{adv_estimator: grpo, rollout_correction: {rollout_is: token, "
                              "rollout_is_threshold: 2.0, rollout_is_batch_normalize: true}}",
                              "");
    assert_int_equal(w->group_size, N); /* the node's group is the whole world: one DP group */
    const int first = 4 * R / N, n = 4 * (R + 1) / N - first;
    df_batch *b = hand_batch(first, n, n_off, n_uid, n_rew, n_old, n_ro, NULL);
    df_metrics *m = df_metrics_new();
    run_advantage_node(w, b, m);

    /* The sums are small integers, exact in double whatever the order of the all-reduce; the mean
       is then one correctly rounded division, the same as 9.0 / 7 here: equal bits. */
    const double factor = df_metrics_get(m, "rollout_corr/rollout_is_batch_norm_factor", NAN);
    if (!(factor == 9.0 / 7))
        fail_msg("rank %d: rollout_is_batch_norm_factor %.17g, expected 9/7 (the global mean)", R, factor);
    /* w / mean: the rounded mean (u64), the double division (u64) and one float32 rounding of the
       result (half an ulp, DF_U32 |v|): df_tol_hand(0, v, 0, v) bounds all three (~1e-7). The
       own-mean values differ from these by >= 0.11. */
    const double w1 = 7.0 / 9, w2 = 14.0 / 9;
    const double want[] = {w1, w1, w1, w1, w2, w2, w1};
    const df_column *isw = df_batch_column(b, "rollout_is_weights");
    assert_non_null(isw);
    const float *got = isw->data;
    for (int64_t t = n_off[first]; t < n_off[first + n]; t++) {
        const float g = got[t - n_off[first]];
        if (!(fabs((double)g - want[t]) <= df_tol_hand(0, want[t], 0, want[t])))
            fail_msg("rank %d, token %lld: weight %.9g, expected %.9g (global mean 9/7)", R, (long long)t,
                     (double)g, want[t]);
    }
    df_metrics_free(m);
    df_batch_free(b);
    done(w);
}

/* ---- rollout_is_weights into the optimal token baseline ------------------------------------- */

/*
 * One group of two responses of two tokens, OTB's w_t = (1 - 2 pi_t + sum_pi_squared_t) rho_t^2.
 * old_log_probs = -200: pi_t = e^-200 ~ 1e-87 vanishes against 1 in double, so 1 - 2 pi_t is
 * exactly 1 and w_t = (1 + sq_t) rho_t^2 exactly. Threshold 2, token level:
 *   A: rewards [0, 1] -> G [1, 1]; sq [0.25, 0.5]; rollout [-201, -200] -> lr [1, 0], rho [2, 1]
 *      w = [1.25 * 4, 1.5] = [5, 1.5],     W = [5, 6.5]
 *   B: rewards [0, 0] -> G [0, 0]; sq [0.5, 0.25]; lr [0, 0], rho [1, 1]
 *      w = [1.5, 1.25],                    W = [1.5, 2.75]
 * Baselines b_t = sum_i G W / (sum_i W + 1e-8), advantages G - b_t:
 *   b_0 = (1 * 5 + 0) / (6.5 + 1e-8)    ~ 10/13   A: [3/13, 11/37]    ~ [0.2308, 0.2973]
 *   b_1 = (1 * 6.5 + 0) / (9.25 + 1e-8) ~ 26/37   B: [-10/13, -26/37] ~ [-0.7692, -0.7027]
 * With rho = 1 (the weights not passed): W_A = [1.25, 2.75], W_B = [1.5, 2.75], b_0 = 1.25 / 2.75
 * = 5/11, b_1 = 2.75 / 5.5 = 1/2: A: [6/11, 1/2], B: [-5/11, -1/2] (0.5455, 0.5 | -0.4545, -0.5).
 */
static const int64_t o_off[] = {0, 2, 4};
static const char *const o_uid[] = {"p", "p"};
static const float o_rew[] = {0, 1, 0, 0};
static const float o_old[] = {-200, -200, -200, -200};
static const float o_ro[] = {-201, -200, -200, -200};
static const float o_sq[] = {0.25f, 0.5f, 0.5f, 0.25f};

static void test_otb_reads_rollout_is_weights(void **state)
{
    (void)state;
    df_dag_worker *w =
        worker("{adv_estimator: optimal_token_baseline, rollout_correction: {rollout_is: token, "
               "rollout_is_threshold: 2.0}}",
               ", calculate_sum_pi_squared: true");
    df_batch *b = hand_batch(0, 2, o_off, o_uid, o_rew, o_old, o_ro, o_sq); /* every rank: the same group */
    run_advantage_node(w, b, NULL);

    /* the node's weights: exactly exp(0) = 1, or the threshold */
    const float *rho = df_batch_column(b, "rollout_is_weights")->data;
    assert_true(rho[0] == 2 && rho[1] == 1 && rho[2] == 1 && rho[3] == 1);
    const float *adv = df_batch_column(b, "advantages")->data, *ret = df_batch_column(b, "returns")->data;
    assert_true(ret[0] == 1 && ret[1] == 1 && ret[2] == 0 && ret[3] == 0);
    /* Exact W, G and num; the expected values repeat the code's few double operations on the same
       exact operands (a few u64 of magnitude <= 1 apart), then one float32 rounding of the output:
       df_tol_hand(0, |v|, 0, 1) ~ 1e-7, far below the >= 0.2 that separates the unweighted values. */
    const double b0 = 5 / (6.5 + 1e-8), b1 = 6.5 / (9.25 + 1e-8);
    const double want[] = {1 - b0, 1 - b1, -b0, -b1};
    const double unweighted[] = {6.0 / 11, 0.5, -5.0 / 11, -0.5};
    for (int t = 0; t < 4; t++) {
        const double tol = df_tol_hand(0, fabs(want[t]), 0, 1);
        assert_true(fabs(want[t] - unweighted[t]) > 1e3 * tol); /* the test can tell the two apart */
        if (!(fabs((double)adv[t] - want[t]) <= tol))
            fail_msg("rank %d, token %d: advantage %.9g, expected %.9g (rho^2-weighted; unweighted %.9g)", R,
                     t, (double)adv[t], want[t], unweighted[t]);
    }
    df_batch_free(b);
    done(w);
}

static int setup(void **state)
{
    if (df_test_world_setup(state) || df_reward_register("test/digits", df_test_digit_share))
        return -1;
    return df_test_shared_inputs(W, "df_rcnode", 8, "test/digits", dir, sizeof dir);
}

static int teardown(void **state)
{
    df_comm_barrier(W);
    if (R == 0)
        df_test_remove_tree(dir);
    return df_test_world_teardown(state);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_normalize_over_dp_group),
        cmocka_unit_test(test_otb_reads_rollout_is_weights),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
