/* Tests of df_config_validate_train (src/config/validate_train.c), the schema
 * keys added from siiRL's argument groups, and the worker refusing a bad
 * config before it loads anything. */
/* rounding-free (scripts/test-variants.sh skips it): parsing, text and integers only */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "distflow/config.h"
#include "distflow/worker.h"
#include "testutil.h"

#define ACTOR "actor_rollout_ref.actor."
#define ROLLOUT "actor_rollout_ref.rollout."

static const char *const BASE = DF_TEST_GRPO_YAML;

static char g_msg[4096];

/* Load BASE + overrides (must succeed), validate on `world` ranks (full: all of df_train_check,
   which knows each role's data-parallel ranks), keep the message. */
static int check_ov(const char *const *ov, int n, int world, bool full)
{
    df_config *c = NULL;
    int rc = df_config_load_text(df_config_schema_train(), BASE, "base.yaml", ov, n, &c);
    if (rc)
        fail_msg("load failed: %s", df_last_error());
    rc = full ? df_train_check(c, world, NULL, NULL, NULL) : df_config_validate_train(c, world);
    snprintf(g_msg, sizeof g_msg, "%s", rc ? df_last_error() : "");
    df_config_free(c);
    return rc;
}

#define OVERRIDES(...) (const char *const[]){__VA_ARGS__}, \
    (int)(sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))
#define VALIDATE(world, ...) check_ov(OVERRIDES(__VA_ARGS__), world, false)
#define CHECK(world, ...) check_ov(OVERRIDES(__VA_ARGS__), world, true)

static void expect(const char *fragment)
{
    if (!strstr(g_msg, fragment))
        fail_msg("message lacks \"%s\":\n  %s", fragment, g_msg);
}

static void test_base_passes(void **state)
{
    (void)state;
    const char *none[] = {NULL};
    assert_int_equal(check_ov(none, 0, 1, false), DF_OK);
    assert_int_equal(check_ov(none, 0, 2, false), DF_OK);
    assert_int_equal(check_ov(none, 0, 4, false), DF_OK);
}

static void test_train_batch_divisible(void **state)
{
    (void)state;
    const char *none[] = {NULL};
    assert_int_equal(check_ov(none, 0, 3, false), DF_EINVAL);
    expect("data.train_batch_size=8 (base.yaml:2) is not divisible by the 3 data-parallel ranks");
}

/* data.gen_batch_size (verl's DAPO key): a multiple of the data-parallel ranks; other than
 * train_batch_size only with filter_groups.enable (larger or smaller), never with mode=async, and
 * only where a node runs DAPO's dynamic sampling (df_train_check reads the graph). */
static void test_gen_batch_size(void **state)
{
    (void)state;
    const char *fg = "algorithm.filter_groups.enable=true";
    assert_int_equal(VALIDATE(2, "data.gen_batch_size=8"), DF_OK); /* = train_batch_size: always */
    assert_int_equal(VALIDATE(2, "data.gen_batch_size=16", fg), DF_OK);
    assert_int_equal(VALIDATE(2, "data.gen_batch_size=4", fg), DF_OK);
    assert_int_equal(VALIDATE(1, "data.gen_batch_size=16"), DF_EINVAL);
    expect("data.gen_batch_size=16 (command line) differs from data.train_batch_size=8 (base.yaml:2) with "
           "algorithm.filter_groups.enable=false (default)");
    assert_int_equal(VALIDATE(4, "data.gen_batch_size=6", fg), DF_EINVAL);
    expect("data.gen_batch_size=6 (command line) is not divisible by the 4 data-parallel ranks");
    assert_int_equal(VALIDATE(1, "data.gen_batch_size=16", fg, ROLLOUT "mode=async"), DF_EINVAL);
    expect("data.gen_batch_size=16 (command line) differs from data.train_batch_size=8 (base.yaml:2) with "
           ROLLOUT "mode='async' (command line)");

    /* filtering on, but the grpo pipeline has no sampling node to cut the batch; the dapo one has */
    const char *ov[] = {"data.gen_batch_size=16", fg, "actor_rollout_ref.model.path=" DF_TEST_MODEL_DIR, NULL};
    for (int dapo = 0; dapo < 2; dapo++) {
        ov[3] = dapo ? "algorithm.workflow_type=dapo" : "algorithm.workflow_type=default";
        df_config *c = NULL;
        assert_int_equal(df_config_load_text(df_config_schema_train(), BASE, "base.yaml", ov, 4, &c), DF_OK);
        int rc = df_train_check(c, 1, NULL, NULL, NULL);
        if (dapo) { /* past the graph's checks: only the files of the run may be missing */
            if (rc && strstr(df_last_error(), "gen_batch_size"))
                fail_msg("%s", df_last_error());
        } else {
            assert_int_equal(rc, DF_EUNSUPPORTED);
            if (!strstr(df_last_error(), "data.gen_batch_size=16 (command line) differs from "
                                         "data.train_batch_size=8 (base.yaml:2), and no node of built-in pipeline "
                                         "'grpo' runs DAPO's dynamic sampling"))
                fail_msg("%s", df_last_error());
        }
        df_config_free(c);
    }
}

/* trainer.device=cuda never trains on the CPU silently: a build without the CUDA backend (this
 * test program registers none) is refused by df_train_check and by sft before anything is
 * loaded, naming the key and what it has; the schema's validator takes it, critic or not. */
static void test_device_cuda(void **state)
{
    (void)state;
    assert_int_equal(VALIDATE(1, "trainer.device=cuda"), DF_OK);
    assert_int_equal(VALIDATE(1, "trainer.device=cuda", "algorithm.adv_estimator=gae",
                              "critic.ppo_micro_batch_size_per_gpu=4", "critic.ppo_mini_batch_size=4"),
                     DF_OK);
    df_config *c = NULL;
    const char *ov[] = {"trainer.device=cuda"};
    assert_int_equal(df_config_load_text(df_config_schema_train(), BASE, "base.yaml", ov, 1, &c), DF_OK);
    assert_int_equal(df_train_check(c, 1, NULL, NULL, NULL), DF_EUNSUPPORTED);
    assert_non_null(strstr(df_last_error(), "trainer.device=cuda: this build of distflow has the cpu backend only"));
    df_config_free(c);
    /* sft likewise, before it loads anything */
    assert_int_equal(df_config_load(df_config_schema_sft(), NULL, ov, 1, &c), DF_OK);
    assert_int_equal(df_sft_run(c, NULL, NULL), DF_EUNSUPPORTED);
    assert_non_null(strstr(df_last_error(), "trainer.device=cuda: this build of distflow has the cpu backend only"));
    df_config_free(c);
}

/* fsdp_config.fsdp_size: -1, 1 or at least the role's data-parallel ranks (df_train_check knows
 * each role's); a hybrid size between (shard within groups, replicate across) and 0 are refused,
 * naming the key and the ranks. An accepted size gets as far as the preflight, which does not find
 * BASE's model. */
static void passes(int rc)
{
    if (rc != DF_ENOTFOUND || !strstr(g_msg, "actor_rollout_ref.model.path"))
        fail_msg("expected only the preflight's missing model; got %d: %s", rc, g_msg);
}

static void test_fsdp_size(void **state)
{
    (void)state;
    passes(CHECK(4, ACTOR "fsdp_config.fsdp_size=-1"));
    passes(CHECK(4, ACTOR "fsdp_config.fsdp_size=1"));
    passes(CHECK(4, ACTOR "fsdp_config.fsdp_size=4"));
    passes(CHECK(4, ACTOR "fsdp_config.fsdp_size=8"));
    assert_int_equal(CHECK(4, ACTOR "fsdp_config.fsdp_size=2"), DF_EINVAL);
    expect(ACTOR "fsdp_config.fsdp_size=2 (command line): hybrid sharding");
    expect("over the role's 4 data-parallel ranks");
    /* the actor's DP ranks, not the world's: sequence parallel 2 halves them */
    passes(CHECK(4, ACTOR "fsdp_config.fsdp_size=2", ACTOR "ulysses_sequence_parallel_size=2"));
    assert_int_equal(CHECK(1, ACTOR "fsdp_config.fsdp_size=0"), DF_EINVAL);
    expect(ACTOR "fsdp_config.fsdp_size=0 (command line): 0 is no group size");
    const char *gae[] = {"algorithm.adv_estimator=gae", "critic.ppo_micro_batch_size_per_gpu=4",
                         "critic.ppo_mini_batch_size=4", "critic.model.fsdp_config.fsdp_size=3"};
    passes(check_ov(gae, 3, 4, true));
    assert_int_equal(check_ov(gae, 4, 4, true), DF_EINVAL);
    expect("critic.model.fsdp_config.fsdp_size=3 (command line): hybrid sharding");
}

static void test_mini_exceeds_train_batch(void **state)
{
    (void)state;
    assert_int_equal(VALIDATE(1, ACTOR "ppo_mini_batch_size=16"), DF_EINVAL);
    expect(ACTOR "ppo_mini_batch_size=16 (command line) exceeds data.train_batch_size=8 (base.yaml:2)");
    expect("64 samples > 32");
}

static void test_mini_divisible_by_world(void **state)
{
    (void)state;
    assert_int_equal(VALIDATE(8, ACTOR "ppo_mini_batch_size=1"), DF_EINVAL);
    expect(ACTOR "ppo_mini_batch_size=1 (command line) x " ROLLOUT "n=4 (base.yaml:8) = 4 samples per "
                 "mini-batch is not divisible by the 8 data-parallel ranks");
}

static void test_micro_divides_mini(void **state)
{
    (void)state;
    assert_int_equal(VALIDATE(1, ACTOR "ppo_micro_batch_size_per_gpu=3"), DF_EINVAL);
    expect(ACTOR "ppo_micro_batch_size_per_gpu=3 (command line) does not divide the per-rank mini-batch of "
                 "16 samples");
    /* on 2 ranks the per-rank mini-batch is 8 */
    assert_int_equal(VALIDATE(2, ACTOR "ppo_micro_batch_size_per_gpu=16"), DF_EINVAL);
    expect("per-rank mini-batch of 8 samples");
    /* dynamic batch size forms micro-batches by tokens */
    assert_int_equal(VALIDATE(1, ACTOR "ppo_micro_batch_size_per_gpu=3", ACTOR "use_dynamic_bsz=true"), DF_OK);
}

static void test_deprecated_micro_keys(void **state)
{
    (void)state;
    assert_int_equal(VALIDATE(2, ACTOR "ppo_micro_batch_size=8", ACTOR "ppo_micro_batch_size_per_gpu=1"),
                     DF_EINVAL);
    expect(ACTOR "ppo_micro_batch_size=8 (command line) and " ACTOR
                 "ppo_micro_batch_size_per_gpu=1 (command line) are mutually exclusive");
    assert_int_equal(VALIDATE(2, ROLLOUT "log_prob_micro_batch_size=8"), DF_EINVAL);
    expect(ROLLOUT "log_prob_micro_batch_size=8 (command line) is deprecated and not read by distflow: set " ROLLOUT
                   "log_prob_micro_batch_size_per_gpu=4 instead (8 / 2 ranks)");
    assert_int_equal(VALIDATE(1, ACTOR "ppo_micro_batch_size_per_gpu=null"), DF_EINVAL);
    expect(ACTOR "ppo_micro_batch_size_per_gpu=null (command line): set a micro-batch size");
    assert_int_equal(VALIDATE(1, "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=null"), DF_OK);
    assert_int_equal(VALIDATE(1, "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=null",
                              ACTOR "use_kl_loss=true"),
                     DF_EINVAL);
    expect("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=null (command line)");
}

static void test_token_budget(void **state)
{
    (void)state;
    assert_int_equal(VALIDATE(1, ACTOR "use_dynamic_bsz=true", ACTOR "ppo_max_token_len_per_gpu=1000"),
                     DF_EINVAL);
    expect(ACTOR "ppo_max_token_len_per_gpu=1000 (command line) is smaller than one sequence ("
                 ROLLOUT "prompt_length=512 (derived from data.max_prompt_length) + " ROLLOUT
                 "response_length=512 (derived from data.max_response_length) = 1024 tokens)");
    assert_int_equal(VALIDATE(1, ROLLOUT "max_model_len=600"), DF_EINVAL);
    expect(ROLLOUT "max_model_len=600 (command line) is shorter than");
    assert_int_equal(VALIDATE(1, ROLLOUT "max_model_len=1024"), DF_OK);
}

static void test_gae_needs_critic(void **state)
{
    (void)state;
    assert_int_equal(VALIDATE(1, "algorithm.adv_estimator=gae"), DF_EINVAL);
    expect("algorithm.adv_estimator='gae' (command line) needs a critic: critic.ppo_micro_batch_size_per_gpu=null "
           "(default): set a micro-batch size");
    assert_int_equal(VALIDATE(1, "algorithm.adv_estimator=gae", "critic.ppo_micro_batch_size_per_gpu=4"),
                     DF_EINVAL);
    expect("needs a critic: critic.ppo_mini_batch_size=256 (default) exceeds data.train_batch_size=8");
    /* the deprecated global critic micro-batch keys are refused as the actor's */
    assert_int_equal(VALIDATE(2, "algorithm.adv_estimator=gae", "critic.ppo_micro_batch_size=8",
                              "critic.ppo_mini_batch_size=4"),
                     DF_EINVAL);
    expect("needs a critic: critic.ppo_micro_batch_size=8 (command line) is deprecated and not read by distflow: "
           "set critic.ppo_micro_batch_size_per_gpu=4 instead (8 / 2 ranks)");
    assert_int_equal(VALIDATE(2, "algorithm.adv_estimator=gae", "critic.ppo_micro_batch_size_per_gpu=4",
                              "critic.ppo_mini_batch_size=4", "critic.forward_micro_batch_size=16"),
                     DF_EINVAL);
    expect("needs a critic: critic.forward_micro_batch_size=16 (command line) is deprecated and not read by "
           "distflow: set critic.forward_micro_batch_size_per_gpu=8 instead (16 / 2 ranks)");
    assert_int_equal(VALIDATE(1, "algorithm.adv_estimator=gae", "critic.ppo_micro_batch_size_per_gpu=4",
                              "critic.ppo_mini_batch_size=4", "critic.forward_micro_batch_size=16",
                              "critic.forward_micro_batch_size_per_gpu=8"),
                     DF_EINVAL);
    expect("critic.forward_micro_batch_size=16 (command line) and critic.forward_micro_batch_size_per_gpu=8 "
           "(command line) are mutually exclusive");
    /* critic settings fine: the estimator itself is then looked up in the registry, which has gae */
    assert_int_equal(VALIDATE(1, "algorithm.adv_estimator=gae", "critic.ppo_micro_batch_size_per_gpu=4",
                              "critic.ppo_mini_batch_size=4"),
                     DF_OK);
}

static void test_group_estimator_needs_n(void **state)
{
    (void)state;
    assert_int_equal(VALIDATE(1, ROLLOUT "n=1"), DF_EINVAL);
    expect("algorithm.adv_estimator='grpo' (base.yaml:10) needs " ROLLOUT "n=1 (command line) > 1");
    assert_int_equal(VALIDATE(1, ROLLOUT "n=1", "algorithm.adv_estimator=rloo"), DF_EINVAL);
    expect("algorithm.adv_estimator='rloo' (command line) needs");
    assert_int_equal(
        VALIDATE(1, ROLLOUT "n=1", "algorithm.adv_estimator=mine", "algorithm.filter_groups.enable=true"),
        DF_EINVAL);
    expect("algorithm.filter_groups.enable=true (command line) needs " ROLLOUT "n=1 (command line) > 1");
    /* the registered estimators pass; the group-baseline ones need n > 1, the others do not */
    for (const char *const *e = (const char *const[]){"rloo", "reinforce_plus_plus_baseline", "gpg", "gpg_paper",
                                                      "cpgd", "reinforce_plus_plus", "remax", NULL};
         *e; e++) {
        char ov[96];
        snprintf(ov, sizeof ov, "algorithm.adv_estimator=%s", *e);
        assert_int_equal(VALIDATE(1, ov), DF_OK);
        bool grouped = strcmp(*e, "reinforce_plus_plus") && strcmp(*e, "remax");
        assert_int_equal(VALIDATE(1, ov, ROLLOUT "n=1"), grouped ? DF_EINVAL : DF_OK);
        if (grouped)
            expect("its baseline is taken from the other responses to the same prompt");
    }
}

static void test_registry_names(void **state)
{
    (void)state;
    assert_int_equal(VALIDATE(1, "algorithm.adv_estimator=grpoo"), DF_EINVAL);
    expect("algorithm.adv_estimator='grpoo' (command line): unknown advantage estimator 'grpoo' (known: ");
    expect("grpo");
    assert_int_equal(VALIDATE(1, ACTOR "policy_loss.loss_mode=vanila"), DF_EINVAL);
    expect(ACTOR "policy_loss.loss_mode='vanila' (command line): unknown policy loss 'vanila'");
    /* "full" passes the schema's choices but the KL registry has no such estimator */
    assert_int_equal(VALIDATE(1, ACTOR "use_kl_loss=true", ACTOR "kl_loss_type=full"), DF_EINVAL);
    expect(ACTOR "kl_loss_type='full' (command line)");
    assert_int_equal(VALIDATE(1, ACTOR "kl_loss_type=full"), DF_OK); /* unused without use_kl_loss */
    assert_int_equal(VALIDATE(1, "algorithm.use_kl_in_reward=true", "algorithm.kl_penalty=full"), DF_EINVAL);
    expect("algorithm.kl_penalty='full' (command line)");
    for (const char *const *m = (const char *const[]){"token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                                                      "seq-mean-token-sum-norm",
                                                      "seq-mean-token-sum-norm-seqavg", NULL};
         *m; m++) {
        char ov[128];
        snprintf(ov, sizeof ov, ACTOR "loss_agg_mode=%s", *m);
        assert_int_equal(VALIDATE(1, ov), DF_OK);
    }
}

static void test_kl_loss_and_kl_in_reward(void **state)
{
    (void)state;
    /* both at once is a warning (test_reward_dapo), as verl's notice */
    assert_int_equal(VALIDATE(1, ACTOR "use_kl_loss=true", "algorithm.use_kl_in_reward=true"), DF_OK);
    /* the controller's settings are checked before any model is loaded */
    assert_int_equal(VALIDATE(1, "algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive",
                              "algorithm.kl_ctrl.target_kl=0"),
                     DF_EINVAL);
    expect("algorithm.kl_ctrl.type='adaptive' (command line)");
    assert_int_equal(VALIDATE(1, "algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive"), DF_OK);
}

/* algorithm.rollout_correction: what runs, and each refusal naming its keys. */
static void test_rollout_correction(void **state)
{
    (void)state;
#define RC "algorithm.rollout_correction."
    assert_int_equal(VALIDATE(2, RC "rollout_is=sequence", RC "rollout_is_batch_normalize=true",
                              RC "rollout_rs=token_k1,seq_mean_k3", RC "rollout_rs_threshold=0.5_2,0.01"),
                     DF_OK);
    assert_int_equal(VALIDATE(1, RC "bypass_mode=true"), DF_OK);
    assert_int_equal(VALIDATE(1, RC "rollout_is=token", RC "rollout_is_threshold=0"), DF_EINVAL);
    expect(RC "rollout_is_threshold=0 (command line) must be > 0");
    assert_int_equal(VALIDATE(1, RC "rollout_rs=seq_max_k1", RC "rollout_rs_threshold=2"), DF_EINVAL);
    expect("seq_max_k1");
    assert_int_equal(VALIDATE(1, RC "rollout_rs=token_k2"), DF_EINVAL);
    expect(RC "rollout_rs_threshold=null");
    assert_int_equal(VALIDATE(1, RC "rollout_rs_threshold=2"), DF_EINVAL);
    expect("has an effect only with " RC "rollout_rs");
    assert_int_equal(VALIDATE(1, RC "rollout_is_batch_normalize=true"), DF_EINVAL);
    expect("has an effect only with " RC "rollout_is");
    /* bypass mode: the weights and rejections in the loss (verl's bypass presets) */
    assert_int_equal(VALIDATE(1, RC "bypass_mode=true", RC "rollout_is=sequence", RC "loss_type=reinforce",
                              RC "rollout_rs=seq_mean_k1", RC "rollout_rs_threshold=0.5_2"),
                     DF_OK);
    assert_int_equal(VALIDATE(1, RC "bypass_mode=true", RC "rollout_is=token", RC "rollout_is_batch_normalize=true"),
                     DF_EUNSUPPORTED);
    expect("per micro-batch");
    assert_int_equal(VALIDATE(1, RC "bypass_mode=true", ACTOR "policy_loss.loss_mode=gspo"), DF_EINVAL);
    expect(ACTOR "policy_loss.loss_mode='gspo' (command line)");
    assert_int_equal(VALIDATE(1, RC "bypass_mode=true", ACTOR "calculate_sum_pi_squared=true"), DF_EINVAL);
    expect("needs the old-log-prob forward pass");
    assert_int_equal(VALIDATE(1, RC "rollout_is=token", ACTOR "tis_imp_ratio_cap=2"), DF_EINVAL);
    expect("both correct the policy loss");
    assert_int_equal(VALIDATE(1, RC "rollout_rs=token_k2", RC "rollout_rs_threshold=1",
                              "algorithm.adv_estimator=reinforce_plus_plus"),
                     DF_EUNSUPPORTED);
    expect("reinforce_plus_plus");
    assert_int_equal(VALIDATE(1, RC "loss_type=reinforce"), DF_EINVAL);
    expect("has an effect only with " RC "bypass_mode");
#undef RC
}

static void test_clip_ratios(void **state)
{
    (void)state;
    assert_int_equal(VALIDATE(1, ACTOR "clip_ratio_c=1"), DF_EINVAL);
    expect(ACTOR "clip_ratio_c=1 (command line) must be > 1");
    assert_int_equal(VALIDATE(1, ACTOR "clip_ratio_c=1.5", ACTOR "clip_ratio_high=0.28"), DF_OK);
    /* negative epsilons are refused by the schema bounds already */
    df_config *c = NULL;
    const char *ov[] = {ACTOR "clip_ratio_low=-0.1"};
    assert_int_equal(df_config_load_text(df_config_schema_train(), BASE, "base.yaml", ov, 1, &c), DF_EINVAL);
    assert_null(c);
    assert_non_null(strstr(df_last_error(), ACTOR "clip_ratio_low: must be >= 0.0, got -0.1"));
}

static void test_val_kwargs(void **state)
{
    (void)state;
    assert_int_equal(VALIDATE(1, ROLLOUT "val_kwargs.do_sample=true"), DF_EINVAL);
    expect(ROLLOUT "val_kwargs.do_sample=true (command line) needs " ROLLOUT
                   "val_kwargs.temperature=0 (default) > 0");
    assert_int_equal(VALIDATE(1, ROLLOUT "val_kwargs.n=4"), DF_EINVAL);
    expect(ROLLOUT "val_kwargs.n=4 (command line) with " ROLLOUT
                   "val_kwargs.do_sample=false (default): the 4 greedy responses per prompt would be identical");
    assert_int_equal(VALIDATE(1, ROLLOUT "val_kwargs.n=4", ROLLOUT "val_kwargs.do_sample=true",
                              ROLLOUT "val_kwargs.temperature=0.6"),
                     DF_OK);
}

/* rollout.stop: non-empty strings the engine can hold */
static void test_stop_strings(void **state)
{
    (void)state;
    assert_int_equal(VALIDATE(1, ROLLOUT "stop=[\"</answer>\", \"\\n\\n\"]"), DF_OK);
    assert_int_equal(VALIDATE(1, ROLLOUT "stop=[\"</answer>\", \"\"]"), DF_EINVAL);
    expect("stop string 1 has 0 bytes; each must have 1 to 256");
}

static void test_bad_arguments(void **state)
{
    (void)state;
    df_config *c = NULL;
    assert_int_equal(df_config_load(df_config_schema_sft(), NULL, NULL, 0, &c), DF_OK);
    assert_int_equal(df_config_validate_train(c, 1), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "not a train config"));
    df_config_free(c);
    assert_int_equal(df_config_validate_train(NULL, 1), DF_EINVAL);
    const char *none[] = {NULL};
    assert_int_equal(check_ov(none, 0, 0, false), DF_EINVAL);
    expect("world size must be >= 1, got 0");
}

/* The shipped example configs pass on 1 and 2 ranks. */
/* Settings from verl / siiRL files that distflow cannot honour are refused, naming the key and
 * the value (never silently ignored). */
static void test_unhonoured_settings(void **state)
{
    (void)state;
    assert_int_equal(VALIDATE(1, "trainer.logger=[console, mlflow]"), DF_EUNSUPPORTED);
    expect("trainer.logger (command line): logger 'mlflow' is not available in distflow; the loggers are "
           "console, file, jsonl, tensorboard");
    assert_int_equal(VALIDATE(1, "trainer.logger=[file, console]"), DF_OK);
    assert_int_equal(VALIDATE(1, "trainer.logger=[jsonl]"), DF_OK);
    assert_int_equal(VALIDATE(1, "trainer.logger=[]"), DF_OK);
    /* tensorboard_dir without the logger that reads it would write nothing */
    assert_int_equal(VALIDATE(1, "trainer.tensorboard_dir=/tmp/tb"), DF_EINVAL);
    expect("trainer.tensorboard_dir='/tmp/tb' (command line): trainer.logger has no tensorboard");
#ifdef DF_HAVE_PROTOBUF_C
    assert_int_equal(VALIDATE(1, "trainer.logger=[console, tensorboard]", "trainer.tensorboard_dir=/tmp/tb"), DF_OK);
#else
    assert_int_equal(VALIDATE(1, "trainer.logger=[console, tensorboard]"), DF_EUNSUPPORTED);
    expect("this build of distflow has no TensorBoard writer");
#endif
    assert_int_equal(VALIDATE(1, "trainer.rollout_data_dir=/tmp/rollouts"), DF_OK);
    assert_int_equal(VALIDATE(1, "trainer.default_hdfs_dir=hdfs://x"), DF_EUNSUPPORTED);
    expect("command line: trainer.default_hdfs_dir=\"hdfs://x\" is not supported by distflow (copy checkpoints to "
           "HDFS); only the default null is accepted");
    assert_int_equal(VALIDATE(1, "trainer.del_local_ckpt_after_load=true"), DF_EUNSUPPORTED);
    assert_int_equal(VALIDATE(1, "trainer.should_save=true"), DF_EUNSUPPORTED);
    assert_int_equal(VALIDATE(1, ACTOR "checkpoint.contents=[model]"), DF_EUNSUPPORTED);
    expect(ACTOR "checkpoint.contents (command line)");
    assert_int_equal(VALIDATE(1, "dag.enable_perf=true"), DF_EUNSUPPORTED);
    expect("command line: dag.enable_perf=true is not supported by distflow (per-rank timing table");
    assert_int_equal(VALIDATE(1, ACTOR "checkpoint.save_contents=[model]"), DF_EUNSUPPORTED);
    expect(ACTOR "checkpoint.save_contents (command line): a distflow checkpoint always holds model, optimizer and extra");
    assert_int_equal(VALIDATE(1, "critic.checkpoint.load_contents=[model, optimizer]"), DF_EUNSUPPORTED);
    expect("critic.checkpoint.load_contents (command line)");
    assert_int_equal(VALIDATE(1, ACTOR "checkpoint.save_contents=[hf_model, extra, optimizer, model]"), DF_OK);
    /* an empty output directory (an unset shell variable) would write into the working directory */
    assert_int_equal(VALIDATE(1, "trainer.default_local_dir="), DF_EINVAL);
    expect("trainer.default_local_dir (command line) is empty");
    assert_int_equal(VALIDATE(1, "trainer.default_local_dir=''"), DF_EINVAL);
    /* resume_from_path is read with resume_mode=resume_path only: with auto it would start elsewhere */
    assert_int_equal(VALIDATE(1, "trainer.resume_from_path=/ckpt/global_step_2"), DF_EINVAL);
    expect("trainer.resume_from_path=/ckpt/global_step_2 (command line) is read only with "
           "trainer.resume_mode=resume_path (verl's rule), but resume_mode is auto (default)");
    assert_int_equal(VALIDATE(1, "trainer.resume_mode=disable", "trainer.resume_from_path=/c"), DF_EINVAL);
    assert_int_equal(VALIDATE(1, "trainer.resume_mode=resume_path", "trainer.resume_from_path=/c"), DF_OK);
}

/* Integer keys the engine holds in an int are bounded by INT32_MAX, not wrapped (2^32 + 1 -> 1). */
static void test_int_keys_bounded(void **state)
{
    (void)state;
    static const char *const keys[] = {ROLLOUT "top_k", ROLLOUT "val_kwargs.top_k", ACTOR "ppo_epochs", "critic.ppo_epochs",
                                       ROLLOUT "multi_turn.max_parallel_calls"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        char ov[200];
        snprintf(ov, sizeof ov, "%s=4294967297", keys[i]);
        const char *const one[] = {ov};
        df_config *c = NULL;
        assert_int_equal(df_config_load_text(df_config_schema_train(), BASE, "base.yaml", one, 1, &c), DF_EINVAL);
        if (!strstr(df_last_error(), keys[i]) || !strstr(df_last_error(), "2147483647"))
            fail_msg("%s: %s", keys[i], df_last_error());
    }
}

/* Warnings handed to the validation's df_warn_fn, joined. */
static char g_warned[4096];
static void collect_warning(void *user, const char *msg)
{
    (void)user;
    size_t n = strlen(g_warned);
    snprintf(g_warned + n, sizeof g_warned - n, "%s\n", msg);
}

/* Loads `text` + overrides, runs df_config_check_compat; the status, g_msg and g_warned as results. */
static int compat_of(const char *text, const char *const *ov, int n)
{
    df_config *c = NULL;
    g_warned[0] = '\0';
    if (df_config_load_text(df_config_schema_train(), text, "job.yaml", ov, n, &c))
        fail_msg("load failed: %s", df_last_error());
    int rc = df_config_check_compat(c, collect_warning, NULL);
    snprintf(g_msg, sizeof g_msg, "%s", rc ? df_last_error() : "");
    df_config_free(c);
    return rc;
}

/* Keys the tables mark DFK_NO_EFFECT / DFK_UNSUPPORTED: a value other than the default is named in a
   warning or refused; the default itself, written out as verl's files do, passes silently. */
static void test_compat_classes(void **state)
{
    (void)state;
    const df_config_schema *s = df_config_schema_train();
    int i_skip = -1, i_offload = -1, i_clip = -1;
    for (int i = 0; i < df_config_schema_count(s); i++) {
        const char *k = df_config_schema_at(s, i)->key;
        i_skip = strcmp(k, ROLLOUT "skip_rollout") ? i_skip : i;
        i_offload = strcmp(k, ACTOR "fsdp_config.param_offload") ? i_offload : i;
        i_clip = strcmp(k, ACTOR "clip_ratio") ? i_clip : i;
    }
    assert_int_equal(df_config_schema_compat(s, i_skip), DF_CFG_UNSUPPORTED);
    assert_int_equal(df_config_schema_compat(s, i_offload), DF_CFG_NO_EFFECT);
    assert_int_equal(df_config_schema_compat(s, i_clip), DF_CFG_EFFECTIVE);

    const char *defaults = "actor_rollout_ref:\n  rollout:\n    skip_rollout: false\n  actor:\n    fsdp_config:\n      param_offload: false\n";
    assert_int_equal(compat_of(defaults, NULL, 0), DF_OK);
    assert_string_equal(g_warned, "");

    const char *ov[] = {ACTOR "fsdp_config.param_offload=true", ROLLOUT "gpu_memory_utilization=0.7"};
    assert_int_equal(compat_of(defaults, ov, 2), DF_OK);
    if (!strstr(g_warned, "2 settings with no effect in distflow") ||
        !strstr(g_warned, ACTOR "fsdp_config.param_offload=true (command line), " ROLLOUT "gpu_memory_utilization=0.7 "
                          "(command line)"))
        fail_msg("warning: %s", g_warned);

    const char *on = "actor_rollout_ref:\n  rollout:\n    skip_rollout: true\n";
    assert_int_equal(compat_of(on, NULL, 0), DF_EUNSUPPORTED);
    expect("job.yaml:3: " ROLLOUT "skip_rollout=true is not supported by distflow (replay responses dumped");
    expect("only the default false is accepted");

    /* a derived default compares with its source's value in the same config */
    const char *same[] = {"actor_rollout_ref.model.path=/m", "critic.model.tokenizer_path=/m"};
    assert_int_equal(compat_of(NULL, same, 2), DF_OK);
    const char *other[] = {"actor_rollout_ref.model.path=/m", "critic.model.tokenizer_path=/t"};
    assert_int_equal(compat_of(NULL, other, 2), DF_EUNSUPPORTED);
    expect("critic.model.tokenizer_path=/t is not supported by distflow");
    expect("only the default /m is accepted");
}

/* The example config `path` validates on 1 and 2 ranks. */
static void example_passes(const char *path)
{
    df_config *c = NULL;
    if (df_config_load(df_config_schema_train(), path, NULL, 0, &c))
        fail_msg("%s: %s", path, df_last_error());
    for (int world = 1; world <= 2; world++)
        if (df_config_validate_train(c, world))
            fail_msg("%s on %d ranks: %s", path, world, df_last_error());
    df_config_free(c);
}

static void test_examples_pass(void **state)
{
    (void)state;
    example_passes(DF_SOURCE_DIR "/examples/demo/grpo.yaml");
    example_passes(DF_SOURCE_DIR "/examples/gsm8k_multiturn/gsm8k_multiturn_w_tool.yaml");
    DIR *d = opendir(DF_SOURCE_DIR "/examples/gsm8k"); /* every algorithm's GSM8K example */
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        char path[1024];
        if (len < 6 || strcmp(e->d_name + len - 5, ".yaml"))
            continue;
        snprintf(path, sizeof path, "%s/examples/gsm8k/%s", DF_SOURCE_DIR, e->d_name);
        example_passes(path);
        n++;
    }
    closedir(d);
    assert_true(n >= 16);
}

/* Keys added from siiRL's argument groups: defaults, hints, types, bounds. */
static void test_siirl_keys(void **state)
{
    (void)state;
    const df_config_schema *s = df_config_schema_train();
    const char *keys[] = {"data.auto_repeat", "data.num_loader_workers", ACTOR "tis_imp_ratio_cap",
                          ACTOR "checkpoint.contents", ACTOR "optim.lr_decay_style", ROLLOUT "multi_turn.enable",
                          ROLLOUT "mode", "actor_rollout_ref.ref.strategy", "critic.forward_micro_batch_size_per_gpu",
                          "reward_model.micro_batch_size_per_gpu", "algorithm.use_pf_ppo",
                          "trainer.del_local_ckpt_after_load", "dag.backend_threshold"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (!df_config_schema_find(s, keys[i]))
            fail_msg("schema lacks %s", keys[i]);
    df_config *c = NULL;
    const char *text = "actor_rollout_ref:\n"
                       "  ref:\n"
                       "    ulysses_sequence_parallel_size: 2\n"
                       "  actor:\n"
                       "    checkpoint:\n"
                       "      contents: ['model', 'optimizer', 'extra']\n"
                       "  rollout:\n"
                       "    mode: sync\n"
                       "    multi_turn:\n"
                       "      tool_response_truncate_side: middle\n"
                       "critic:\n"
                       "  ppo_micro_batch_size_per_gpu: 2\n"
                       "dag:\n"
                       "  backend_threshold: 256\n";
    assert_int_equal(df_config_load_text(s, text, "siirl.yaml", NULL, 0, &c), DF_OK);
    assert_int_equal(df_config_int(c, "actor_rollout_ref.ref.ulysses_sequence_parallel_size"), 2);
    assert_int_equal(df_config_int(c, "critic.forward_micro_batch_size_per_gpu"), 2); /* derived */
    assert_string_equal(df_config_where(c, "critic.forward_micro_batch_size_per_gpu"),
                        "derived from critic.ppo_micro_batch_size_per_gpu");
    assert_int_equal(df_config_list_len(c, ACTOR "checkpoint.contents"), 3);
    assert_true(df_config_bool(c, "actor_rollout_ref.ref.use_torch_compile")); /* from actor's */
    assert_false(df_config_bool(c, "data.auto_repeat"));
    assert_true(df_config_float(c, ACTOR "tis_imp_ratio_cap") == -1.0);
    df_config_free(c);

    const struct {
        const char *ov, *frag;
    } bad[] = {
        {ROLLOUT "multi_turn.enabel=true", "(did you mean '" ROLLOUT "multi_turn.enable'?)"},
        {"data.auto_repeat=maybe", "data.auto_repeat: expected"},
        {"data.num_loader_workers=-1", "data.num_loader_workers: must be >= 0, got -1"},
        {ROLLOUT "mode=asink", "expected one of sync|async, got \"asink\""},
        {ACTOR "checkpoint.contents=[model, weights]", "weights"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        c = NULL;
        assert_int_equal(df_config_load(s, NULL, &bad[i].ov, 1, &c), DF_EINVAL);
        assert_null(c);
        if (!strstr(df_last_error(), bad[i].frag))
            fail_msg("'%s': message lacks \"%s\": %s", bad[i].ov, bad[i].frag, df_last_error());
    }
}

/* `distflow train` refuses a bad config before touching the model or data. */
static void test_worker_refuses_before_loading(void **state)
{
    (void)state;
    const char *ov[] = {ROLLOUT "n=1", ACTOR "ppo_mini_batch_size=4", "data.train_batch_size=8",
                        "algorithm.adv_estimator=grpo", "actor_rollout_ref.model.path=/nonexistent/model"};
    df_config *c = NULL;
    assert_int_equal(df_config_load(df_config_schema_train(), NULL, ov, 5, &c), DF_OK);
    df_dag_worker *w = NULL;
    assert_int_equal(df_dag_worker_create(c, NULL, &w), DF_EINVAL);
    assert_null(w);
    assert_non_null(strstr(df_last_error(), ROLLOUT "n=1 (command line) > 1"));
    df_config_free(c);

    const char *ov2[] = {"data.auto_repeat=true", "actor_rollout_ref.model.path=/nonexistent/model"};
    assert_int_equal(df_config_load(df_config_schema_train(), NULL, ov2, 2, &c), DF_OK);
    assert_int_equal(df_dag_worker_create(c, NULL, &w), DF_EUNSUPPORTED);
    assert_non_null(strstr(df_last_error(), "command line: data.auto_repeat=true is not supported by distflow"));
    df_config_free(c);

    /* truncated importance sampling is supported: the worker gets as far as the model */
    const char *ov3[] = {ACTOR "tis_imp_ratio_cap=2", "actor_rollout_ref.model.path=/nonexistent/model",
                         /* gae (the default) would need critic batch sizes */
                         "algorithm.adv_estimator=reinforce_plus_plus"};
    assert_int_equal(df_config_load(df_config_schema_train(), NULL, ov3, 3, &c), DF_OK);
    assert_int_equal(df_dag_worker_create(c, NULL, &w), DF_ENOTFOUND);
    assert_null(strstr(df_last_error(), "tis_imp_ratio_cap"));
    df_config_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base_passes),
        cmocka_unit_test(test_train_batch_divisible),
        cmocka_unit_test(test_fsdp_size),
        cmocka_unit_test(test_mini_exceeds_train_batch),
        cmocka_unit_test(test_mini_divisible_by_world),
        cmocka_unit_test(test_micro_divides_mini),
        cmocka_unit_test(test_deprecated_micro_keys),
        cmocka_unit_test(test_token_budget),
        cmocka_unit_test(test_gae_needs_critic),
        cmocka_unit_test(test_group_estimator_needs_n),
        cmocka_unit_test(test_registry_names),
        cmocka_unit_test(test_kl_loss_and_kl_in_reward),
        cmocka_unit_test(test_clip_ratios),
        cmocka_unit_test(test_rollout_correction),
        cmocka_unit_test(test_val_kwargs),
        cmocka_unit_test(test_stop_strings),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_device_cuda),
        cmocka_unit_test(test_gen_batch_size),
        cmocka_unit_test(test_unhonoured_settings),
        cmocka_unit_test(test_int_keys_bounded),
        cmocka_unit_test(test_compat_classes),
        cmocka_unit_test(test_examples_pass),
        cmocka_unit_test(test_siirl_keys),
        cmocka_unit_test(test_worker_refuses_before_loading),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
