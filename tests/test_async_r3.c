/*
 * test_async_r3.c — router replay R3 with the asynchronous rollout (actor_rollout_ref.rollout.mode
 * async; docs/models.md "Router replay (R2, R3)", docs/async.md): the rollout side's engine records
 * every token's experts, each episode carries its samples' routes to the trainer side as the batch
 * field routed_experts, and the trainer's old-log-prob pass and updates replay them.
 *
 * mpi-test: np 2
 * (as a plain ctest, one rank: only the configuration check runs; an asynchronous job needs a
 * rollout rank and a trainer rank.)
 *
 * On a random qwen3_moe (2 layers, each sparse: the top 2 of 4 experts; W = 4 route entries a
 * token), GRPO with R3, 2 steps, a workflow whose old-log-prob node first looks at the batch it is
 * given:
 *   - the configuration check accepts R3 with rollout.mode async (it refused it before the
 *     asynchronous rollout recorded routes) and still refuses it with an embodied rollout;
 *   - every row the trainer side's old-log-prob pass receives has routed_experts of (prompt +
 *     response tokens) x 4 entries, whose layer-0 experts are two distinct ones in [0, 4) for every
 *     token but the last, whose every layer is routed for the response tokens fed back (the last
 *     prompt token on), and the last token (sampled, never run) is -1 throughout: a column shifted
 *     by a row, cut to the response, made for another sample or left live would fail here;
 *   - at max_staleness 0 on 2 ranks the asynchronous run samples what the synchronous run samples
 *     (test_async_train.c): the routes of every (step, uid, response) equal the synchronous R3 run's
 *     (rollout_batch.c's column, which test_rollout_routes.c holds against training forwards), and
 *     every metric equals the synchronous run's bit for bit (replaying the same routes; a trainer
 *     side routing live or replaying others would move actor/ppo_kl and the log-prob metrics);
 *   - at max_staleness 1 (a batch ahead, the KV cache kept across updates) the rows' routes keep
 *     those rules and the run ends.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"

#include "distflow/comm.h"
#include "distflow/reward.h"
#include "distflow/tokenizer.h"
#include "workers/worker_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_EXP 4        /* experts of every layer */
#define TOP_K 2        /* experts a token */
#define RW (2 * TOP_K) /* df_model_route_width: two sparse layers */
#define ROWS 32

static df_comm *world;
static char dir[256];
static df_node_fn real_old;
static json_t *captured; /* "step|uid|response tokens" -> the row's routes */
static int problems;     /* rows whose routes broke a rule (printed) */

static const char *k_workflow =
    "dag_id: r3_capture\n"
    "nodes:\n"
    "  - {node_id: rollout, node_type: MODEL_INFERENCE, node_role: ROLLOUT}\n"
    "  - {node_id: reward, node_type: COMPUTE, node_role: REWARD, dependencies: [rollout]}\n"
    "  - {node_id: adv, node_type: COMPUTE, node_role: ADVANTAGE, dependencies: [reward]}\n"
    "  - {node_id: old, node_type: MODEL_TRAIN, node_role: ACTOR, only_forward_compute: true,\n"
    "     executable_ref: test.capture_routes, dependencies: [adv]}\n"
    "  - {node_id: train, node_type: MODEL_TRAIN, node_role: ACTOR, dependencies: [old]}\n";

static void problem(int64_t row, int64_t t, const char *what)
{
    if (problems++ < 10)
        print_error("row %lld token %lld: %s\n", (long long)row, (long long)t, what);
}

/* Layer l's TOP_K entries of a token: distinct experts in [0, N_EXP), or (all, when `live_ok`) -1. */
static bool layer_ok(const int32_t *r, int l, bool live_ok)
{
    const int32_t *x = r + l * TOP_K;
    if (live_ok && x[0] == -1 && x[1] == -1)
        return true;
    return x[0] >= 0 && x[0] < N_EXP && x[1] >= 0 && x[1] < N_EXP && x[0] != x[1];
}

/* Row i's routes, P prompt then R response tokens: the rules of the file comment. */
static void check_row(int64_t i, const int32_t *r, int64_t P, int64_t R)
{
    for (int64_t t = 0; t < P + R; t++) {
        const int32_t *x = r + t * RW;
        if (t == P + R - 1) {
            for (int j = 0; j < RW; j++)
                if (x[j] != -1)
                    problem(i, t, "the last token (never run) has a route");
        } else if (!layer_ok(x, 0, false) || !layer_ok(x, 1, t < P - 1)) {
            problem(i, t, "an expert outside [0, 4), twice, or -1 where a forward routed the token");
        }
    }
}

/* The row's key: step, uid and response tokens (identical responses of a prompt share it). */
static void row_key(const df_batch *b, int64_t step, int64_t i, char *key, size_t cap)
{
    int64_t R = 0;
    const int32_t *resp = df_batch_tok_i32(b, "response_ids", i, &R);
    int len = snprintf(key, cap, "%lld|%s|", (long long)step, df_batch_str(b, "uid", i));
    for (int64_t t = 0; t < R && len < (int)cap; t++)
        len += snprintf(key + len, cap - (size_t)len, "%d,", resp[t]);
}

/* The old-log-prob node: the batch's routes checked and kept, then the real pass (which replays them). */
static int capture_routes(df_node_ctx *ctx, df_batch *b, df_node_output *out)
{
    const df_column *col = df_batch_column(b, DF_ROUTES_COLUMN);
    if (!col || col->kind != DF_COL_TOK_I32) {
        problem(-1, -1, "the batch has no TOK_I32 routed_experts");
        return real_old(ctx, b, out);
    }
    for (int64_t i = 0; i < df_batch_size(b); i++) {
        int64_t P = 0, R = 0;
        df_batch_tok_i32(b, "prompt_ids", i, &P);
        df_batch_tok_i32(b, "response_ids", i, &R);
        const int32_t *r = (const int32_t *)col->data + col->offsets[i];
        if (col->offsets[i + 1] - col->offsets[i] != (P + R) * RW || R < 1) {
            problem(i, -1, "routed_experts is not (prompt + response tokens) x 4 entries");
            continue;
        }
        check_row(i, r, P, R);
        char key[4096];
        row_key(b, ctx->step, i, key, sizeof key);
        json_t *v = json_array();
        for (int64_t j = 0; j < (P + R) * RW; j++)
            json_array_append_new(v, json_integer(r[j]));
        json_object_set_new(captured, key, v);
    }
    return real_old(ctx, b, out);
}

/* The job's YAML: GRPO with R3, 2 steps, into dir/<out>. */
static void job_yaml(char *yaml, size_t cap, const char *out)
{
    snprintf(yaml, cap,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 8,\n"
             "       shuffle: false, max_prompt_length: 128, max_response_length: 24}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {optim: {lr: 0.01, weight_decay: 0.0}, ppo_mini_batch_size: 4,\n"
             "          ppo_micro_batch_size_per_gpu: 8, router_replay: {mode: R3}}\n"
             "  rollout: {n: 4, log_prob_micro_batch_size_per_gpu: 8, enable_rollout_routing_replay: true}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "dag: {workflow_path: %s/r3.yaml}\n"
             "trainer: {total_training_steps: 2, val_before_train: false, logger: [], balance_batch: false,\n"
             "          collective_timeout_s: 30, save_freq: -1, default_local_dir: %s/%s}\n",
             dir, dir, dir, dir, out);
}

/* The job on `comm` with the overrides; this rank's captures into dir/<out>_r<rank>.json. Returns
   the run's status. */
static int train(df_comm *comm, const char *out, const char *const *ov, int n)
{
    char yaml[4096];
    job_yaml(yaml, sizeof yaml, out);
    captured = json_object();
    problems = 0;
    int rc = df_test_run(comm, df_test_config(yaml, "r3.yaml", ov, n));
    char p[512];
    snprintf(p, sizeof p, "%s/%s_r%d.json", dir, out, df_comm_rank(comm));
    if (json_dump_file(captured, p, JSON_COMPACT))
        print_error("writing %s\n", p);
    json_decref(captured);
    captured = NULL;
    return rc;
}

/* The captures of run `out` over `ranks` ranks, merged. */
static json_t *load_captures(const char *out, int ranks)
{
    json_t *all = json_object();
    for (int r = 0; r < ranks; r++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s_r%d.json", dir, out, r);
        json_error_t e;
        json_t *j = json_load_file(p, 0, &e);
        if (!j)
            fail_msg("%s: %s", p, e.text);
        json_object_update(all, j);
        json_decref(j);
    }
    return all;
}

static double num(json_t *o, const char *key, int line)
{
    json_t *x = json_object_get(o, key);
    if (!json_is_number(x))
        fail_msg("line %d: %s missing", line, key);
    return json_number_value(x);
}

/* Every metric of every line of a equals b's (the clock's and the asynchronous runtime's aside). */
static void same_metrics(json_t *a, json_t *b)
{
    int bad = 0;
    assert_int_equal(json_array_size(a), json_array_size(b));
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *x = json_array_get(a, i), *y = json_array_get(b, i);
        const char *key;
        json_t *v;
        json_object_foreach(x, key, v)
        {
            if (df_test_clock_metric(key) || !strncmp(key, "fully_async/", 12) || !json_is_number(v))
                continue;
            double u = json_number_value(v), w = num(y, key, (int)i);
            if (!(u == w || (isnan(u) && isnan(w))))
                print_error("line %zu: %s = %.17g synchronous, %.17g asynchronous\n", i, key, u, w), bad++;
        }
    }
    assert_int_equal(bad, 0);
}

/* The configuration check: R3 goes with the asynchronous rollout now, not with an embodied one. */
static void test_config(void **state)
{
    (void)state;
    char yaml[4096];
    job_yaml(yaml, sizeof yaml, "cfg");
    const char *async[] = {"actor_rollout_ref.rollout.mode=async", "rollout.n_gpus_per_node=1"};
    df_config *c = df_test_config(yaml, "r3.yaml", async, 2);
    if (df_config_validate_train(c, 2))
        fail_msg("R3 with the asynchronous rollout refused: %s", df_last_error());
    df_config_free(c);
    const char *embodied[] = {"data.dataset_type=embodied"};
    c = df_test_config(yaml, "r3.yaml", embodied, 1);
    assert_int_not_equal(df_config_validate_train(c, 2), 0);
    assert_last_error_mentions("only the single-agent language rollout records routes");
    df_config_free(c);
}

static void test_async_carries_routes(void **state)
{
    (void)state;
    if (df_comm_size(world) != 2) {
        skip();
        return;
    }
    const char *ov[] = {"actor_rollout_ref.rollout.mode=async", "rollout.n_gpus_per_node=1"};
    df_test_run_ok(train(world, "async", ov, 2), "the asynchronous R3 run");
    int64_t bad = problems;
    assert_int_equal(df_comm_allreduce(world, &bad, 1, DF_COMM_INT64, DF_COMM_SUM), 0);
    assert_int_equal(bad, 0);
    assert_int_equal(df_comm_barrier(world), 0);
    if (df_comm_rank(world) != 0)
        return;
    json_t *ref = load_captures("sync", 1), *got = load_captures("async", 2);
    print_message("%zu rows of routes (synchronous), %zu (asynchronous)\n", json_object_size(ref),
                  json_object_size(got));
    assert_true(json_object_size(ref) >= 8); /* 2 steps of 8 prompts x 4, less identical responses */
    assert_int_equal(json_object_size(got), json_object_size(ref));
    const char *key;
    json_t *v;
    int differ = 0;
    json_object_foreach(ref, key, v)
    {
        json_t *w = json_object_get(got, key);
        if (!w || !json_equal(v, w)) {
            print_error("%s: %s\n", w ? "other routes" : "missing", key);
            differ++;
        }
    }
    assert_int_equal(differ, 0);
    json_decref(ref);
    json_decref(got);
    json_t *sm = df_test_metrics(dir, "sync", false), *am = df_test_metrics(dir, "async", false);
    assert_int_equal(json_array_size(am), 2);
    same_metrics(sm, am);
    json_decref(sm);
    json_decref(am);
}

/* max_staleness 1, two batches in flight, the KV cache kept across updates: episodes sampled a
   version behind (or across a weight change) still carry well-formed routes, and the run ends. */
static void test_async_staleness1(void **state)
{
    (void)state;
    if (df_comm_size(world) != 2) {
        skip();
        return;
    }
    const char *ov[] = {"actor_rollout_ref.rollout.mode=async", "rollout.n_gpus_per_node=1",
                        "async_training.max_staleness=1", "async_training.max_concurrent_rollouts=16"};
    df_test_run_ok(train(world, "stale1", ov, 4), "the asynchronous R3 run at max_staleness 1");
    int64_t bad = problems;
    assert_int_equal(df_comm_allreduce(world, &bad, 1, DF_COMM_INT64, DF_COMM_SUM), 0);
    assert_int_equal(bad, 0);
    assert_int_equal(df_comm_barrier(world), 0);
    if (df_comm_rank(world) != 0)
        return;
    json_t *got = load_captures("stale1", 2), *m = df_test_metrics(dir, "stale1", false);
    assert_true(json_object_size(got) > 0);
    assert_int_equal(json_array_size(m), 2);
    print_message("max_staleness 1: %zu rows of routes, version gap max %g\n", json_object_size(got),
                  num(json_array_get(m, 1), "fully_async/version_gap/max", 1));
    json_decref(got);
    json_decref(m);
}

/* The inputs (rank 0): digit prompts, a random qwen3_moe on their BPE tokenizer, the workflow; the
   synchronous R3 run on rank 0 alone, the reference. */
static int make_inputs(void)
{
    snprintf(dir, sizeof dir, "/tmp/df_async_r3_XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    df_test_digits_inputs(dir, "train.jsonl", ROWS, "test/digits", false);
    char store[ROWS][128], wf[512];
    const char *texts[ROWS];
    for (int i = 0; i < ROWS; i++) { /* df_test_digits_inputs' prompts */
        snprintf(store[i], sizeof store[i], "Add %d and %d. What do you get?", i, 2 * i + 1);
        texts[i] = store[i];
    }
    df_tokenizer *tok = NULL;
    if (df_tokenizer_train_bpe(texts, ROWS, 300, NULL, &tok))
        return -1;
    df_test_random_model(dir, tok, "qwen3_moe", 32, 2, 7, 32768);
    df_tokenizer_free(tok);
    snprintf(wf, sizeof wf, "%s/r3.yaml", dir);
    return df_write_file_atomic(wf, k_workflow, strlen(k_workflow)) ? -1 : 0;
}

static int setup(void **state)
{
    (void)state;
    if (df_comm_world(&world) || df_reward_register("test/digits", df_test_digit_share) ||
        df_worker_register_nodes() || df_exec_resolve("DAGWorker.compute_old_log_prob", &real_old) ||
        df_exec_register("test.capture_routes", capture_routes))
        return -1;
    if (!df_test_size_ok(df_comm_size(world)))
        return -1;
    if (df_comm_rank(world) == 0 && make_inputs())
        return -1;
    if (df_comm_broadcast(world, dir, sizeof dir, 0))
        return -1;
    df_comm *self = NULL;
    if (df_comm_split(world, df_comm_rank(world), 0, &self))
        return -1;
    int rc = 0;
    if (df_comm_rank(world) == 0 && df_comm_size(world) > 1 && (rc = train(self, "sync", NULL, 0)))
        print_error("the synchronous R3 reference: %s\n", df_last_error());
    if (df_comm_rank(world) == 0 && problems)
        print_error("the synchronous R3 reference: %d rows broke the routes' rules\n", problems), rc = -1;
    df_comm_free(self);
    int64_t all = rc ? 1 : 0;
    if (df_comm_allreduce(world, &all, 1, DF_COMM_INT64, DF_COMM_SUM))
        return -1;
    return all ? -1 : df_comm_barrier(world);
}

static int teardown(void **state)
{
    (void)state;
    return df_test_shared_cleanup(world, dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_async_carries_routes),
        cmocka_unit_test(test_async_staleness1),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
