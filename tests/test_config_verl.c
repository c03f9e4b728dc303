/* Tests of verl's full trainer layout (tests/fixtures/verl_ppo_trainer.yaml: every key of verl's
 * _generated_ppo_trainer.yaml): its keys load, verl's copies of distflow keys and its
 * ${oc.select:...} interpolations land on distflow's keys, keys without effect set away from their
 * default are named in the warning, keys of features distflow lacks are refused away from theirs. */
/* rounding-free (scripts/test-variants.sh skips it): parsing, text and integers only */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "distflow/config.h"
#include "distflow/train_config.h"

#define FIXTURE DF_SOURCE_DIR "/tests/fixtures/verl_ppo_trainer.yaml"
#define ARR "actor_rollout_ref."

static df_config *load_ok(const char *const *ov, int n)
{
    df_config *c = NULL;
    if (df_config_load(df_config_schema_train(), FIXTURE, ov, n, &c))
        fail_msg("load failed: %s", df_last_error());
    return c;
}

static df_config *text_ok(const char *yaml)
{
    df_config *c = NULL;
    if (df_config_load_text(df_config_schema_train(), yaml, "t.yaml", NULL, 0, &c))
        fail_msg("load failed: %s", df_last_error());
    return c;
}

/* The warnings of df_config_validate_train_ex, joined. */
static void collect(void *user, const char *msg)
{
    char *b = user;
    strncat(b, msg, 16383 - strlen(b));
    strncat(b, "\n", 16383 - strlen(b));
}

/* ---- tests ---- */

static void test_verl_layout_loads(void **state)
{
    (void)state;
    df_config *c = load_ok(NULL, 0);
    /* verl's copies of distflow keys, from its ${oc.select:...} defaults */
    assert_int_equal(df_config_int(c, ARR "rollout.n"), 4);
    assert_int_equal(df_config_int(c, ARR "actor.rollout_n"), 4);
    assert_int_equal(df_config_int(c, ARR "ref.rollout_n"), 4);
    assert_int_equal(df_config_int(c, "critic.rollout_n"), 4);
    assert_int_equal(df_config_int(c, "critic.ppo_mini_batch_size"), 16);
    assert_int_equal(df_config_int(c, ARR "rollout.prompt_length"), 256);
    assert_int_equal(df_config_int(c, ARR "rollout.response_length"), 384);
    assert_string_equal(df_config_str(c, "reward_manager.name"), "dapo");
    assert_null(df_config_str(c, "data.tool_config_path")); /* the multi-turn key's null, across a line */
    /* relative oc.select: the sibling's value, null or set */
    assert_true(df_config_is_null(c, "critic.forward_micro_batch_size"));
    assert_int_equal(df_config_int(c, "critic.forward_micro_batch_size_per_gpu"), 2);
    /* a quoted default is not taken when the key exists */
    assert_string_equal(df_config_str(c, "critic.model.tokenizer_path"), "~/models/Qwen2.5-0.5B-Instruct");
    assert_string_equal(df_config_str(c, ARR "rollout.prometheus.served_model_name"), "~/models/Qwen2.5-0.5B-Instruct");
    /* lr_scheduler_type is the schedule; warmup_style, null, follows it */
    assert_string_equal(df_config_str(c, ARR "actor.optim.warmup_style"), "cosine");
    assert_string_equal(df_config_str(c, "critic.optim.warmup_style"), "constant");
    /* the profilers: the global tool reaches every role; the rollout's follows the actor's */
    assert_string_equal(df_config_str(c, "critic.profiler.tool"), "nsys");
    assert_true(df_config_bool(c, ARR "rollout.profiler.enable"));
    assert_string_equal(df_config_map_text(c, ARR "rollout.profiler.tool_config"),
                        df_config_map_text(c, ARR "actor.profiler.tool_config"));
    assert_null(strstr(df_config_map_text(c, ARR "actor.profiler.tool_config"), "_target_"));
    assert_true(df_config_is_null(c, ARR "rollout.mtp")); /* a group is no key: the default */
    assert_true(df_config_is_null(c, "reward_model.rollout.name")); /* ???: the default */
    assert_true(df_config_is_null(c, "critic.enable"));
    df_config_free(c);
}

static void test_verl_layout_validates_and_warns(void **state)
{
    (void)state;
    df_config *c = load_ok(NULL, 0);
    char *w = calloc(16384, 1);
    assert_non_null(w);
    if (df_config_validate_train_ex(c, 8, collect, w))
        fail_msg("validation failed: %s", df_last_error());
    static const char *const named[] = {
        "data.dataloader_num_workers=4 (" FIXTURE ":339)", ARR "nccl_timeout=1200", ARR "actor.calculate_entropy=true",
        ARR "actor.profiler.enable=true", ARR "rollout.profiler.enable=true", ARR "rollout.enable_prefix_caching=false",
        ARR "rollout.checkpoint_engine.update_weights_bucket_megabytes=1024", "global_profiler.tool=nsys",
        "critic.profiler.tool=nsys", "trainer.use_legacy_worker_impl=disable", "ray_kwargs ("};
    for (size_t i = 0; i < sizeof named / sizeof *named; i++)
        if (!strstr(w, named[i]))
            fail_msg("'%s' not in the warning: %s", named[i], w);
    assert_non_null(strstr(w, "20 settings with no effect in distflow"));
    /* keys at their default, and copies equal to their source, are not named */
    assert_null(strstr(w, "actor.rollout_n"));
    assert_null(strstr(w, "prometheus"));
    assert_null(strstr(w, "mtp"));
    free(w);
    df_config_free(c);
}

/* Each override on the fixture is refused by validation, the message naming its key. */
static void test_verl_unsupported_refused(void **state)
{
    (void)state;
    static const char *const refused[][2] = {
        {ARR "model.mtp.enable=true", ARR "model.mtp.enable=true is not supported"},
        {ARR "rollout.quantization=fp8", ARR "rollout.quantization=fp8 is not supported"},
        {ARR "rollout.skip_rollout=true", ARR "rollout.skip_rollout=true is not supported"},
        {ARR "actor.freeze_vision_tower=true", ARR "actor.freeze_vision_tower=true is not supported"},
        {ARR "actor.router_replay.mode=R3", ARR "rollout.enable_rollout_routing_replay=false"},
        {ARR "ref.router_replay.mode=R2", ARR "ref.router_replay.mode=R2 is not supported"},
        {"algorithm.adv_estimator=optimal_token_baseline", ARR "actor.calculate_sum_pi_squared=false (" },
        {"data.sampler.class_path=curriculum.py", "data.sampler.class_path=curriculum.py is not supported"},
        {"reward_manager.module.path=rm.py", "reward_manager.module.path=rm.py is not supported"},
        {"algorithm.rollout_correction.loss_type=reinforce", "has an effect only with algorithm.rollout_correction.bypass_mode"},
        {"algorithm.rollout_correction.rollout_is_threshold=3", "has an effect only with algorithm.rollout_correction.rollout_is"},
        {ARR "actor.optim.optimizer=SGD", ARR "actor.optim.optimizer=SGD is not supported"},
        {"critic.model.fsdp_config.full_determinism=true", "critic.model.fsdp_config.full_determinism=true"},
        /* verl's copies of distflow keys: another value than the source's names the key to set */
        {ARR "actor.rollout_n=3", "set rollout.n; another value is refused); only the default 4 is accepted"},
        {"reward_manager.name=prime", "reward_manager.name=prime is not supported by distflow (verl's copy of "
                                      "reward_model.reward_manager: set that key"},
        {ARR "model.tokenizer_path=/tok", "distflow's key is data.tokenizer"},
        {ARR "rollout.logprobs_mode=raw_logprobs", ARR "rollout.logprobs_mode=raw_logprobs is not supported"},
        {"reward_model.rollout.max_model_len=4096", "distflow's key is reward_model.max_length"},
        {"critic.enable=false", "critic.enable=false (command line) with algorithm.adv_estimator='gae'"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        df_config *c = load_ok(&refused[i][0], 1);
        int rc = df_config_validate_train(c, 8);
        if (!rc || !strstr(df_last_error(), refused[i][1]))
            fail_msg("%s: rc %d, '%s' not in: %s", refused[i][0], rc, refused[i][1], rc ? df_last_error() : "");
        df_config_free(c);
    }
    /* the copies at their source's value, and critic.enable agreeing with the estimator, pass */
    const char *ok[] = {ARR "rollout.n=2", "critic.enable=true", "reward_model.reward_manager=naive"};
    df_config *c = load_ok(ok, 3);
    assert_int_equal(df_config_int(c, ARR "actor.rollout_n"), 2);
    assert_string_equal(df_config_str(c, "reward_manager.name"), "naive");
    assert_int_equal(df_config_validate_train(c, 8), 0);
    df_config_free(c);
}

static void test_oc_select_forms(void **state)
{
    (void)state;
    df_config *c = text_ok("data:\n"
                           "  tokenizer: ${oc.select:no.such.key,/tmp/tok}\n"         /* absent: the default */
                           "  max_prompt_length: ${oc.select:data.max_response_length, 7}\n"
                           "actor_rollout_ref:\n"
                           "  model:\n"
                           "    external_lib: ${oc.select:no.such.key}\n"              /* no default: null */
                           "  rollout:\n"
                           "    stop: ${oc.select:no.such.key,[a, b]}\n");
    assert_string_equal(df_config_str(c, "data.tokenizer"), "/tmp/tok");
    assert_int_equal(df_config_int(c, "data.max_prompt_length"), 512);
    assert_true(df_config_is_null(c, ARR "model.external_lib"));
    assert_int_equal(df_config_list_len(c, ARR "rollout.stop"), 2);
    df_config_free(c);
    /* the default is typed as the key: a wrong one is an error naming it */
    df_config *d = NULL;
    assert_int_equal(df_config_load_text(df_config_schema_train(), "data:\n  max_prompt_length: ${oc.select:x,abc}\n",
                                         "t.yaml", NULL, 0, &d),
                     DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "data.max_prompt_length: expected an integer"));
    /* ??? on a key that acts is refused */
    assert_int_equal(df_config_load_text(df_config_schema_train(), "data:\n  train_batch_size: ???\n", "t.yaml",
                                         NULL, 0, &d),
                     DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "t.yaml:2: data.train_batch_size: '?\?\?'"));
    /* other resolvers stay refused */
    assert_int_equal(df_config_load_text(df_config_schema_train(), "data:\n  tokenizer: ${oc.env:HOME}\n", "t.yaml",
                                         NULL, 0, &d),
                     DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "resolvers such as '${oc.env:HOME}' are not supported"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verl_layout_loads),
        cmocka_unit_test(test_verl_layout_validates_and_warns),
        cmocka_unit_test(test_verl_unsupported_refused),
        cmocka_unit_test(test_oc_select_forms),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
