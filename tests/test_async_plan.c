/*
 * test_async_plan.c — the asynchronous runtime's placement and its config checks (docs/async.md):
 * the plan of a job with actor_rollout_ref.rollout.mode=async (the trainer side scheduled over the
 * first ranks, the rollout side named after it), every refusal of df_train_check, with the key
 * and the reason in the message, and the graphs that re-run the rollout (DAPO, ReMax) accepted.
 */
/* rounding-free (scripts/test-variants.sh skips it): placement and config checks only */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"

#include "distflow/scheduler.h"
#include "distflow/worker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char dir[256];

static df_config *load(const char *const *ov, int n)
{
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 8, max_prompt_length: 128,\n"
             "       max_response_length: 12}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 4}\n"
             "  rollout: {n: 4, log_prob_micro_batch_size_per_gpu: 8}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "trainer: {total_training_steps: 2, logger: []}\n",
             dir, dir);
    df_config *c = NULL;
    if (df_config_load_text(df_config_schema_train(), yaml, "async.yaml", ov, n, &c))
        fail_msg("load: %s", df_last_error());
    return c;
}

/* df_train_check on `world` ranks must refuse with a message holding every fragment. */
static void refused(int world, const char *const *ov, int n, const char *a, const char *b)
{
    df_config *c = load(ov, n);
    int rc = df_train_check(c, world, NULL, NULL, NULL);
    const char *msg = df_last_error();
    if (rc == DF_OK)
        fail_msg("accepted: %s ...", ov[n - 1]);
    if (!strstr(msg, a) || (b && !strstr(msg, b)))
        fail_msg("the message lacks \"%s\" / \"%s\":\n  %s", a, b ? b : "", msg);
    df_config_free(c);
}

static void test_plan(void **state)
{
    (void)state;
    const char *ov[] = {"actor_rollout_ref.rollout.mode=async", "rollout.n_gpus_per_node=2"};
    df_config *c = load(ov, 2);
    df_plan *p = NULL;
    if (df_train_check(c, 4, NULL, NULL, &p))
        fail_msg("%s", df_last_error());
    assert_int_equal(p->rollout_ranks, 2);
    assert_int_equal(p->schedule->n_workers, 2); /* the trainer side: ranks 0-1 */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_int_equal(df_plan_print(p, f), 0);
    fclose(f);
    if (!strstr(text, "rollout: 2 ranks, ranks 2-3") || !strstr(text, "weights: ranks 0,2-3"))
        fail_msg("the plan does not show the rollout side:\n%s", text);
    free(text);
    df_plan_free(p);
    df_config_free(c);
    /* colocated: no rollout side */
    c = load(NULL, 0);
    assert_int_equal(df_train_check(c, 2, NULL, NULL, &p), 0);
    assert_int_equal(p->rollout_ranks, 0);
    assert_int_equal(p->schedule->n_workers, 2);
    df_plan_free(p);
    df_config_free(c);
}

static void test_refusals(void **state)
{
    (void)state;
    const char *mode = "actor_rollout_ref.rollout.mode=async";
    {
        const char *ov[] = {mode};
        refused(2, ov, 1, "rollout.n_gpus_per_node", "must be >= 1");
    }
    {
        const char *ov[] = {"rollout.n_gpus_per_node=1"};
        refused(2, ov, 1, "rollout.n_gpus_per_node", "read only with actor_rollout_ref.rollout.mode=async");
    }
    {
        const char *ov[] = {"async_training.max_staleness=2"};
        refused(2, ov, 1, "async_training.max_staleness", "read only with");
    }
    {
        const char *ov[] = {mode, "rollout.n_gpus_per_node=2"};
        refused(2, ov, 2, "rollout.n_gpus_per_node", "leave no trainer rank of the 2 launched");
    }
    {
        const char *ov[] = {mode, "rollout.n_gpus_per_node=3"};
        refused(4, ov, 2, "data.train_batch_size", "multiple of the rollout ranks");
    }
    {
        const char *ov[] = {mode, "rollout.n_gpus_per_node=1", "async_training.consumer_batch_size=4"};
        refused(2, ov, 3, "async_training.consumer_batch_size", "must equal data.train_batch_size");
    }
    {
        const char *ov[] = {mode, "rollout.n_gpus_per_node=2", "async_training.max_concurrent_rollouts=1"};
        refused(3, ov, 3, "async_training.max_concurrent_rollouts", "at least the rollout ranks");
    }
    {
        const char *ov[] = {mode, "rollout.n_gpus_per_node=1", "async_training.partial_rollout=false",
                            "async_training.recompute_kv=true"};
        refused(2, ov, 4, "async_training.recompute_kv", "nothing to recompute");
    }
    {
        const char *ov[] = {mode, "rollout.n_gpus_per_node=1", "actor_rollout_ref.model.model_type=embodied"};
        refused(2, ov, 3, "actor_rollout_ref.model.model_type", "rolled out on the trainer ranks");
    }
    {
        const char *ov[] = {"async_training.partial_rollout=false"};
        refused(2, ov, 1, "async_training.partial_rollout", "read only with");
    }
}

/* Graphs that re-run the rollout inside a step run asynchronously (DAPO's refill takes episodes from
   the rollout side, ReMax's greedy pass decodes on the trainer side): their plans pass the checks. */
static void test_reruns_accepted(void **state)
{
    (void)state;
    const char *dapo[] = {"actor_rollout_ref.rollout.mode=async", "rollout.n_gpus_per_node=1",
                          "algorithm.filter_groups.enable=true", "algorithm.workflow_type=dapo"};
    const char *remax[] = {"actor_rollout_ref.rollout.mode=async", "rollout.n_gpus_per_node=1",
                           "algorithm.adv_estimator=remax"};
    const char *const *ov[] = {dapo, remax};
    const int n[] = {4, 3};
    for (int i = 0; i < 2; i++) {
        df_config *c = load(ov[i], n[i]);
        if (df_train_check(c, 2, NULL, NULL, NULL))
            fail_msg("%s: %s", ov[i][n[i] - 1], df_last_error());
        df_config_free(c);
    }
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/df_async_plan_XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    df_test_digits_inputs(dir, "train.jsonl", 16, "openai/gsm8k", true);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return df_test_remove_tree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_plan), cmocka_unit_test(test_refusals),
                                       cmocka_unit_test(test_reruns_accepted)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
