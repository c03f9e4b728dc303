/*
 * test_embodied_pipeline.c — siiRL's embodied_srpo pipeline through the DAG worker (docs/embodied.md).
 *
 * mpi-test: np 2
 * (as a plain ctest the two-rank comparison runs one rank against itself.)
 *
 *  - wiring: the graph's nodes run by hand on a deterministic test class ("countdown": whether and when an
 *    episode completes depends on its task and trial only), so every episode's finish_step and success
 *    are known: the response mask is finish_step x action_token_len tokens, the filter drops the
 *    truncated group, a success's reward is reward_coef at the last token of its last action, the GRPO
 *    advantages are 0 off the mask, the call view's prompts are the observations as SFT encodes them,
 *    and the actor's old log-probs (computed on the call view) equal the rollout's;
 *  - siiRL's two embodied workflow files and algorithm.workflow_type=embodied train a step on
 *    grid_place;
 *  - refusals: the keys an embodied job needs, and the ones it cannot honour;
 *  - two ranks against one: the same episodes (each keyed by its dataset row, sample and call), so
 *    the same successes, finish steps, rewards and, within rounding, losses.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testbounds.h"
#include "testembodied.h"

#include "distflow/comm.h"
#include "distflow/worker.h"
#include "workers/common/prompts.h"
#include "workers/embodied/embodied_worker.h"
#include "workers/worker_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static df_comm *world;
static char dir[256];

/* ---- the test class: "countdown" --------------------------------------------------------------------- */

typedef struct {
    int64_t task, trial, steps, valid;
} cd_state;

static const char *const k_cd_names[2] = {"go", "halt"};

static int cd_create(const char *cfg, void **st)
{
    (void)cfg;
    *st = calloc(1, sizeof(cd_state));
    return *st ? DF_OK : DF_ENOMEM;
}
static void cd_describe(const void *st, df_embodied_info *in)
{
    (void)st;
    *in = (df_embodied_info){.action_token_len = 1, .action_vocab = 2, .token_names = k_cd_names, .feature_dim = 2,
                             .num_tasks = 3, .num_heldout = 0};
}
static int cd_reset(void *st, int64_t task, int64_t trial)
{
    *(cd_state *)st = (cd_state){.task = task, .trial = trial};
    return DF_OK;
}
/* Task 0 completes at its 3rd action, task 1 at its 5th, task 2 at its 4th in even trials and never in
   odd ones, whatever the actions. */
static int cd_step(void *st, const int32_t *action, bool *complete)
{
    cd_state *s = st;
    s->steps++, s->valid += action[0] >= 0;
    int64_t at = s->task == 0 ? 3 : s->task == 1 ? 5 : s->trial % 2 == 0 ? 4 : -1;
    *complete = s->steps == at;
    return DF_OK;
}
static int cd_observe(const void *st, char **text)
{
    const cd_state *s = st;
    *text = malloc(64);
    if (!*text)
        return DF_ENOMEM;
    snprintf(*text, 64, "task %lld step %lld", (long long)s->task, (long long)s->steps);
    return DF_OK;
}
static void cd_features(const void *st, float *f)
{
    const cd_state *s = st;
    f[0] = (float)s->steps / 10.0f, f[1] = (float)s->valid / 10.0f;
}
static const char *cd_desc(const void *st)
{
    (void)st;
    return "count";
}
static const df_embodied_env k_countdown = {.name = "countdown", .create = cd_create, .describe = cd_describe,
                                            .reset = cd_reset, .step = cd_step, .observe = cd_observe,
                                            .features = cd_features, .task_description = cd_desc,
                                            .release = free};

/* ---- jobs -------------------------------------------------------------------------------------------- */

/* The embodied keys of a job on `env` (grid_place or countdown) with max_steps / chunks. */
static const char *job_yaml(const char *env, int max_steps, int chunks, int atl, const char *out)
{
    static char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/tasks.jsonl], val_files: [%s/tasks.jsonl], train_batch_size: 4,\n"
             "       dataset_type: embodied, shuffle: false, max_prompt_length: 120, max_response_length: 8}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model, model_type: embodied}\n"
             "  embodied:\n"
             "    action_token_len: %d\n"
             "    action_chunks_len: %d\n"
             "    env: {env_type: %s, env_name: %s, config: %s, num_envs: 3, max_steps: %d}\n"
             "  actor: {optim: {lr: 0.01, weight_decay: 0.0}, ppo_mini_batch_size: 4,\n"
             "          ppo_micro_batch_size_per_gpu: 4, use_kl_loss: true, kl_loss_coef: 0.01}\n"
             "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 8}\n"
             "  ref: {log_prob_micro_batch_size_per_gpu: 8}\n"
             "algorithm: {adv_estimator: grpo, workflow_type: embodied}\n"
             "reward_model: {reward_manager: embodied, reward_kwargs: {reward_coef: 5.0}}\n"
             "trainer: {total_training_steps: 1, save_freq: -1, test_freq: -1, val_before_train: false,\n"
             "          logger: [], default_local_dir: %s/%s}\n",
             dir, dir, dir, atl, chunks, env, env, strcmp(env, "grid_place") ? "{}" : EMB_GRID_JSON, max_steps, dir,
             out);
    return yaml;
}

static int setup(void **state)
{
    (void)state;
    if (df_comm_world(&world) || !df_test_size_ok(df_comm_size(world)) || df_embodied_env_register(&k_countdown))
        return -1;
    if (df_comm_rank(world) == 0) {
        snprintf(dir, sizeof dir, "/tmp/df_embodied_XXXXXX");
        if (!mkdtemp(dir))
            return -1;
        emb_model(dir, " go halt go halt go halt go halt");
        const int64_t ids[4][2] = {{0, 0}, {1, 0}, {2, 0}, {2, 1}};
        emb_write_tasks(dir, "tasks.jsonl", ids, 4);
    }
    return df_comm_broadcast(world, dir, sizeof dir, 0) ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    df_comm_barrier(world);
    if (df_comm_rank(world) == 0)
        df_test_remove_tree(dir);
    df_comm_shutdown();
    return 0;
}

/* Every rank: a communicator of its own (a collective split); the single-rank tests run on rank 0's. */
static df_comm *alone(void)
{
    df_comm *self = NULL;
    assert_int_equal(df_comm_split(world, df_comm_rank(world), 0, &self), 0);
    return self;
}

static df_node *node(df_dag_worker *w, const char *id)
{
    df_node *n = df_task_graph_get_node(w->graph, id);
    assert_non_null(n);
    return n;
}

/* Run graph node `id` of w on *b (replaced when the node hands a new batch on). */
static void run_node(df_dag_worker *w, const char *id, df_batch **b, df_metrics *m)
{
    df_node *n = node(w, id);
    df_node_ctx ctx = {.worker = w, .node = n, .step = 1, .metrics = m};
    df_node_output out = {0};
    if (n->fn(&ctx, *b, &out))
        fail_msg("node %s: %s", id, df_last_error());
    if (out.batch) {
        df_batch_free(*b);
        *b = out.batch;
    }
}

/* ---- wiring ------------------------------------------------------------------------------------------ */

static void test_wiring(void **state)
{
    (void)state;
    df_comm *self = alone();
    if (df_comm_rank(world) != 0) {
        df_comm_free(self);
        return;
    }
    /* 8 steps in calls of 2 one-token actions: 4 calls of C = 2 tokens; truncated groups dropped */
    const char *ov[] = {"algorithm.embodied_sampling.filter_truncated=true"};
    df_config *cfg = df_test_config(job_yaml("countdown", 8, 2, 1, "wiring"), "wiring.yaml", ov, 1);
    df_dag_worker *w = NULL;
    if (df_dag_worker_create(cfg, self, &w))
        fail_msg("%s", df_last_error());
    df_metrics *m = df_metrics_new();
    df_batch *b = NULL;
    assert_int_equal(df_worker_next_prompts(w, 0, &b), 0);
    run_node(w, "rollout_actor", &b, m);
    /* 4 rows x 2 samples; finish_step and success by the class's rule */
    assert_int_equal(df_batch_size(b), 8);
    const int64_t want_fs[4] = {3, 5, 4, 8}, want_ok[4] = {1, 1, 1, 0};
    const int64_t *ro = df_batch_offsets(b, "response_ids");
    const int32_t *mask = NULL;
    assert_int_equal(df_batch_response_mask(b, &mask), 0);
    assert_non_null(mask);
    for (int64_t i = 0; i < 8; i++) {
        assert_int_equal(df_batch_i64(b, "finish_step")[i], want_fs[i / 2]);
        assert_int_equal(df_batch_i64(b, "complete")[i], want_ok[i / 2]);
        assert_int_equal(ro[i + 1] - ro[i], 8); /* traj_len 4 x C 2 */
        for (int64_t t = 0; t < 8; t++)
            assert_int_equal(mask[ro[i] + t], t < want_fs[i / 2]);
    }
    /* call k's prompt is its observation rendered as an SFT row's prompt string is */
    df_batch *calls = NULL;
    assert_int_equal(df_embodied_calls_split(b, &calls), 0);
    assert_int_equal(df_batch_size(calls), 32);
    const char *row = "{\"prompt\": \"task 1 step 2\", \"data_source\": \"x\", \"reward_model\": {\"ground_truth\": \"\"}}";
    df_dataset *ds;
    df_prompt_cache pc;
    assert_int_equal(df_dataset_load_buffer(row, strlen(row), "row", NULL, &ds), 0);
    assert_int_equal(df_prompts_encode(ds, w->tok, &pc), 0);
    int64_t len;
    const int32_t *p = df_batch_tok_i32(calls, "prompt_ids", 2 * 4 + 1, &len); /* task 1's call 1: after 2 steps */
    assert_int_equal(len, pc.offsets[1]);
    assert_memory_equal(p, pc.tokens, (size_t)len * sizeof *p);
    df_prompt_cache_free(&pc);
    df_dataset_free(ds);
    df_batch_free(calls);

    run_node(w, "dynaminc_sampling", &b, m);
    assert_int_equal(df_batch_size(b), 6); /* (task 2, trial 1) ran to max_steps */
    assert_true(df_metrics_get(m, "embodied_sampling/truncated", -1) == 1);
    assert_true(df_metrics_get(m, "embodied/countdown/success_rate", -1) == 0.75);
    run_node(w, "compute_reward", &b, m);
    ro = df_batch_offsets(b, "response_ids");
    const float *sc = df_batch_column(b, "token_level_scores")->data;
    for (int64_t i = 0; i < 6; i++) /* every kept episode succeeded: reward_coef 5 at its last action's token */
        for (int64_t t = 0; t < 8; t++)
            assert_true(sc[ro[i] + t] == (t == want_fs[i / 2] - 1 ? 5.0f : 0.0f));
    run_node(w, "calculate_advantages", &b, m);
    assert_int_equal(df_batch_response_mask(b, &mask), 0);
    const float *adv = df_batch_column(b, "advantages")->data;
    for (int64_t t = 0; t < ro[6]; t++)
        if (!mask[t])
            assert_true(adv[t] == 0.0f);
    /* the actor's log-probs on the call view: the rollout's (the same weights, each call's own prompt) */
    run_node(w, "actor_old_log_prob", &b, m);
    const float *old = df_batch_column(b, "old_log_probs")->data, *rl = df_batch_column(b, "rollout_log_probs")->data;
    const double F = tb_forward_bound(df_actor_model(w->actor.model), 128, 1.0f);
    for (int64_t t = 0; t < ro[6]; t++)
        if (mask[t] && !(fabs(old[t] - rl[t]) <= F))
            fail_msg("token %lld: old %g, rollout %g (bound %g)", (long long)t, old[t], rl[t], F);
    run_node(w, "reference_log_prob", &b, m);
    run_node(w, "actor_train", &b, m);
    assert_true(df_metrics_has(m, "actor/pg_loss"));
    df_batch_free(b);
    df_metrics_free(m);
    df_dag_worker_free(w);
    df_config_free(cfg);
    df_comm_free(self);
}

/* A failure's reward is SRPO's progress reward: its task has a success and it is shaped, below 0.6 x coef. */
static void test_reward_failures(void **state)
{
    (void)state;
    df_comm *self = alone();
    if (df_comm_rank(world) != 0) {
        df_comm_free(self);
        return;
    }
    df_config *cfg = df_test_config(job_yaml("countdown", 8, 2, 1, "fail"), "fail.yaml", NULL, 0);
    df_dag_worker *w = NULL;
    if (df_dag_worker_create(cfg, self, &w))
        fail_msg("%s", df_last_error());
    df_batch *b = NULL;
    assert_int_equal(df_worker_next_prompts(w, 0, &b), 0);
    run_node(w, "rollout_actor", &b, NULL);
    run_node(w, "dynaminc_sampling", &b, NULL); /* filters off: every group */
    run_node(w, "compute_reward", &b, NULL);
    assert_int_equal(df_batch_size(b), 8);
    const float *score = df_batch_f32(b, "score");
    for (int i = 6; i < 8; i++) /* task 2's failures, next to its successes: shaped */
        assert_true(score[i] > 0.0f && score[i] < 0.6f * 5.0f);
    for (int i = 0; i < 6; i++)
        assert_true(score[i] == 5.0f);
    df_batch_free(b);
    df_dag_worker_free(w);
    df_config_free(cfg);
    df_comm_free(self);
}

/* ---- siiRL's workflow files and the built-in pipeline train -------------------------------------------- */

static void test_workflows_train(void **state)
{
    (void)state;
    df_comm *self = alone();
    if (df_comm_rank(world) != 0) {
        df_comm_free(self);
        return;
    }
    static const char *const files[] = {NULL, "2025-11-07_client_workflow_embodied_grpo.yaml",
                                        "2025-12-22_client_workflow_embodied_srpo.yaml"};
    for (int i = 0; i < 3; i++) {
        char wf[1024], out[32];
        snprintf(wf, sizeof wf, "dag.workflow_path=" DF_SOURCE_DIR "/tests/fixtures/siirl_workflows/%s",
                 files[i] ? files[i] : "");
        snprintf(out, sizeof out, "wf%d", i);
        /* the built-in pipeline without a KL term: no reference model, so no ref_log_prob to copy back */
        const char *ov[] = {files[i] ? wf : "actor_rollout_ref.actor.use_kl_loss=false"};
        df_config *cfg = df_test_config(job_yaml("grid_place", 6, 2, 2, out), "wf.yaml", ov, 1);
        if (df_test_run(self, cfg))
            fail_msg("%s: %s", files[i] ? files[i] : "workflow_type=embodied", df_last_error());
        json_t *lines = df_test_metrics(dir, out, false);
        assert_int_equal(json_array_size(lines), 1);
        assert_true(json_is_number(json_object_get(json_array_get(lines, 0), "actor/pg_loss")));
        json_decref(lines);
    }
    df_comm_free(self);
}

/* ---- refusals ---------------------------------------------------------------------------------------- */

static void expect_refused(const char *override, const char *msg)
{
    const char *ov[] = {override};
    df_config *cfg = df_test_config(job_yaml("grid_place", 6, 2, 2, "r"), "r.yaml", ov, override ? 1 : 0);
    int rc = df_train_check(cfg, 1, NULL, NULL, NULL);
    if (!rc || !strstr(df_last_error(), msg))
        fail_msg("%s: got %d '%s', want '%s'", override, rc, df_last_error(), msg);
    df_config_free(cfg);
}

static void test_refusals(void **state)
{
    (void)state;
    if (df_comm_rank(world) != 0)
        return;
    df_config *ok = df_test_config(job_yaml("grid_place", 6, 2, 2, "r"), "r.yaml", NULL, 0);
    if (df_train_check(ok, 1, NULL, NULL, NULL))
        fail_msg("the base job: %s", df_last_error());
    df_config_free(ok);
    expect_refused("actor_rollout_ref.model.model_type=llm", "algorithm.workflow_type (r.yaml");
    expect_refused("data.dataset_type=llm", "data.dataset_type (command line) with actor_rollout_ref.model.model_type"
                                           "=embodied: must be embodied");
    expect_refused("reward_model.reward_manager=naive", "reward_model.reward_manager (command line) with");
    expect_refused("reward_model.reward_kwargs={reward_scale: 2}", "config.reward_scale");
    expect_refused("reward_model.reward_kwargs={action_token_len: 3}", "action_token_len differs");
    expect_refused("actor_rollout_ref.embodied.action_token_len=1", "the environment grid_place has 2 tokens per action");
    expect_refused("actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean", "must be token-mean");
    expect_refused("actor_rollout_ref.embodied.env.env_type=libero", "needs its simulator");
    expect_refused("actor_rollout_ref.embodied.env.env_type=nowhere", "unknown embodied environment class 'nowhere'");
    expect_refused("actor_rollout_ref.embodied.env.config={size: 99}", "config.size");
    expect_refused("actor_rollout_ref.embodied.video_embedding_model_path=/v.pt", "video_embedding_model_path");
    expect_refused("actor_rollout_ref.embodied.action_chunks_len=8", "data.max_response_length (r.yaml");
    expect_refused("actor_rollout_ref.rollout.mode=async", "actor_rollout_ref.rollout.mode");
    expect_refused("algorithm.filter_groups.enable=true", "algorithm.filter_groups.enable (command line) with");
}

/* ---- two ranks against one --------------------------------------------------------------------------- */

/* Filters off: task 2's failures keep their shaped rewards, which depend on the tokens drawn. */
static void fit(df_comm *comm, const char *out)
{
    char dump[600];
    snprintf(dump, sizeof dump, "trainer.rollout_data_dir=%s/%s/rollouts", dir, out);
    const char *ov[] = {dump};
    if (df_test_run(comm, df_test_config(job_yaml("countdown", 8, 2, 1, out), "dist.yaml", ov, 1)))
        fail_msg("rank %d: %s", df_comm_rank(world), df_last_error());
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* One dumped sample: its file (-1: the one-rank run's), task, success, output and score. */
typedef struct { int d; int64_t task; bool ok; char out[512]; double score; } dumped;

/* Step 1's samples of run `out` into e[] (at most 16); returns their number. The rows' tasks are
   setup's ids: index 0 -> task 0, 1 -> 1, 2 and 3 -> 2. */
static int dumped_samples(const char *out, dumped *e)
{
    int k = 0;
    for (int d = -1; d < 4; d++) {
        char path[1024], *text = NULL;
        if (d < 0)
            snprintf(path, sizeof path, "%s/%s/rollouts/1.jsonl", dir, out);
        else
            snprintf(path, sizeof path, "%s/%s/rollouts/1.dp%d.jsonl", dir, out, d);
        if (df_read_file(path, &text, NULL)) {
            df_clear_error();
            continue;
        }
        for (char *l = strtok(text, "\n"); l && k < 16; l = strtok(NULL, "\n"), k++) {
            json_t *row = json_loads(l, 0, NULL);
            int64_t index = json_integer_value(json_object_get(row, "index"));
            e[k] = (dumped){.d = d, .task = index < 2 ? index : 2, .ok = json_number_value(json_object_get(row, "acc")) == 1,
                            .score = json_number_value(json_object_get(row, "score"))};
            snprintf(e[k].out, sizeof e[k].out, "%03lld %s", (long long)index, json_string_value(json_object_get(row, "output")));
            json_decref(row);
        }
        free(text);
    }
    return k;
}

/* Step 1's rollouts of run `out` (one file per data-parallel rank) as sorted "index sample-text" lines. */
static char *rollouts(const char *out)
{
    dumped e[16];
    char *lines[16], *all = calloc(1, 1 << 16);
    int k = dumped_samples(out, e);
    assert_int_equal(k, 8);
    for (int i = 0; i < k; i++)
        lines[i] = e[i].out;
    qsort(lines, (size_t)k, sizeof *lines, cmp_str);
    size_t n = 0;
    for (int i = 0; i < k; i++)
        n += (size_t)snprintf(all + n, (1 << 16) - n, "%s\n", lines[i]);
    return all;
}

/* The SRPO reward clusters a task's successes per rank (docs/embodied.md): a success scores as on one rank;
   a failure too where its rank holds a success of its task, else 0 (no cluster to be near). Returns the
   two-rank run's mean score. */
static double check_split_scores(void)
{
    dumped one[16], all[16];
    int n1 = dumped_samples("one", one), n2 = dumped_samples("all", all);
    assert_int_equal(n1, 8);
    assert_int_equal(n2, 8);
    double sum = 0;
    for (int i = 0; i < n2; i++) {
        const dumped *x = &all[i], *ref = NULL;
        for (int j = 0; j < n1; j++)
            if (!strcmp(one[j].out, x->out))
                ref = &one[j];
        assert_non_null(ref);
        bool cluster = false;
        for (int j = 0; j < n2; j++)
            cluster |= all[j].d == x->d && all[j].task == x->task && all[j].ok;
        double want = x->ok || cluster ? ref->score : 0.0;
        if (x->score != want)
            fail_msg("%s on rank %d: score %g, expected %g (one rank: %g)", x->out, x->d, x->score, want, ref->score);
        sum += x->score;
    }
    return sum / n2;
}

static void test_ranks(void **state)
{
    (void)state;
    df_comm *self = NULL; /* rank 0 alone first: the reference */
    assert_int_equal(df_comm_split(world, df_comm_rank(world), 0, &self), 0);
    if (df_comm_rank(world) == 0)
        fit(self, "one");
    df_comm_free(self);
    fit(world, "all");
    if (df_comm_rank(world) != 0)
        return;
    /* each episode's draws are keyed by its prompt's dataset row, sample and call: the same tokens on any
       split, unless rounding (<= F per log-prob, below) flips a draw: a chance of ~1e-3 here */
    char *ra = rollouts("one"), *rb = rollouts("all");
    assert_string_equal(ra, rb);
    free(ra), free(rb);
    json_t *la = df_test_metrics(dir, "one", false), *lb = df_test_metrics(dir, "all", false);
    json_t *a = json_array_get(la, 0), *b = json_array_get(lb, 0);
    /* what the episodes decide: the same on any split (sums of a few exact values); the scores per rank */
    static const char *const exact[] = {"embodied/countdown/success_rate", "embodied/countdown/finish_step/mean",
                                        "critic/acc/mean", "response_length/mean"};
    assert_true(df_test_metric(b, "critic/score/mean") == check_split_scores());
    for (size_t k = 0; k < sizeof exact / sizeof *exact; k++)
        if (df_test_metric(a, exact[k]) != df_test_metric(b, exact[k]))
            fail_msg("%s: %g on one rank, %g on %d", exact[k], df_test_metric(a, exact[k]), df_test_metric(b, exact[k]), df_comm_size(world));
    /* the losses at the initial weights: each log-prob within F (test_dist_train's argument) */
    char p[512];
    snprintf(p, sizeof p, "%s/model", dir);
    df_model *m0;
    assert_int_equal(df_model_load(p, &m0), 0);
    const double F = tb_forward_bound(m0, 128, 1.0f);
    double max_adv = fmax(fabs(df_test_metric(a, "critic/advantages/max")), fabs(df_test_metric(a, "critic/advantages/min")));
    if (!(fabs(df_test_metric(a, "actor/pg_loss") - df_test_metric(b, "actor/pg_loss")) <= 2 * F * max_adv * exp(2 * F) + 1e-12))
        fail_msg("pg_loss %g vs %g", df_test_metric(a, "actor/pg_loss"), df_test_metric(b, "actor/pg_loss"));
    if (!(fabs(df_test_metric(a, "actor/kl_loss") - df_test_metric(b, "actor/kl_loss")) <= 2 * F))
        fail_msg("kl_loss %g vs %g", df_test_metric(a, "actor/kl_loss"), df_test_metric(b, "actor/kl_loss"));
    df_model_free(m0);
    json_decref(la), json_decref(lb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wiring),
        cmocka_unit_test(test_reward_failures),
        cmocka_unit_test(test_workflows_train),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_ranks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
