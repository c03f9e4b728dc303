/*
 * test_siirl_workflows.c — `distflow plan`, `distflow config check` and
 * `distflow train` reach the same verdict, with the same message, on every
 * historical siiRL workflow file (tests/fixtures/siirl_workflows/: each
 * distinct version of each siiRL workflow YAML, docs/siirl_workflows.md) and
 * on a few workflows made to fail one check each (plugins, per-node keys).
 * All three run df_train_check (include/distflow/worker.h); before it, plan
 * and config check accepted all 18 siiRL files and train refused 11. The two embodied files
 * train with an embodied job's keys: test_embodied_pipeline.
 *
 * A file that is accepted must train: `train` runs one step of a tiny random
 * model on a one-rank job, so its setup got past validation and its graph ran.
 */
/* rounding-free (scripts/test-variants.sh skips it): verdicts and messages of plan / check / train */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIX DF_SOURCE_DIR "/tests/fixtures/siirl_workflows/"
#define PLUGINS DF_BINARY_DIR "/plugins/test/"

/* Settings a workflow needs beyond the base config: a critic for the PPO files, DAPO's filter. */
#define CRITIC "algorithm.adv_estimator=gae critic.model.path=%D/model critic.ppo_micro_batch_size_per_gpu=8 " \
               "critic.ppo_mini_batch_size=4"
/* DAPO's filter on, with a score that varies within a group (the random model's GSM8K scores are
   all 0, which no refill would change) */
#define FILTER_ON "algorithm.filter_groups.enable=true"
#define FILTER                                                                                     \
    FILTER_ON " algorithm.filter_groups.metric=score "                                              \
    "custom_reward_function.path=%P/libscore_const.so custom_reward_function.name=score_parity"

/* A file's verdict: accepted (msg NULL) or refused with a message containing msg. */
typedef struct {
    const char *file; /* under FIX, or an absolute path written by the test ("%D/..." is the temp dir) */
    const char *extra; /* more key=value arguments ("%D" is the temp dir), or "" */
    const char *msg;
} verdict;

/* siiRL's MARFT files set their run script's values per node (rollout.n 1, log-prob micro-batch 16,
   TP 4): this job's differ; with the script's they train (test_marft_ranks, on 4 ranks) */
#define MULTI_AGENT "node 'rollout_reasoner': actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 differs from the job's"
/* its code environment is a Python class */
#define MULTI_AGENT_CODE "node 'rollout_actor': agent_options.env_path: env_path entry " \
    "'examples/experimental/marft/config/code_env.py:CodeEnv': a Python class distflow does not have"
/* an embodied job's keys make them train (test_embodied_pipeline) */
#define EMBODIED                                                                                   \
    "the graph's embodied sampling node filters control episodes: set actor_rollout_ref.model.model_type=embodied"
#define NO_CRITIC_MICRO "set critic.ppo_micro_batch_size_per_gpu (or critic.use_dynamic_bsz=true)"

static const verdict k_siirl[] = {
    {"2025-07-21_client_workflow_grpo.yaml", "", NULL},
    {"2025-07-21_client_workflow_ppo.yaml", CRITIC, NULL},
    {"2025-07-21_client_workflow_ppo.yaml", "", NO_CRITIC_MICRO},
    {"2025-07-21_marft_workflow_marft.yaml", "", MULTI_AGENT},
    {"2025-08-01_client_workflow_grpo.yaml", "", NULL},
    {"2025-08-07_client_workflow_dapo.yaml", "",
     "planning: 2 subgraphs but only 1 workers (trainer.nnodes=1 x trainer.n_gpus_per_node=1)"},
    {"2025-08-08_client_workflow_grpo.yaml", "", NULL},
    {"2025-08-09_client_workflow_dapo.yaml", "", NULL},
    {"2025-08-09_client_workflow_dapo.yaml", FILTER, NULL},
    {"2025-08-20_marft_workflow_marft.yaml", "", MULTI_AGENT},
    {"2025-09-03_marft_workflow_marft.yaml", "", MULTI_AGENT},
    {"2025-09-11_marft_workflow_marft.yaml", "", MULTI_AGENT},
    {"2025-09-17_marft_workflow_marft_code.yaml", "", MULTI_AGENT_CODE},
    {"2025-09-29_global_config_workflow_dapo.yaml", "", NULL},
    {"2025-09-29_global_config_workflow_dapo.yaml", FILTER, NULL},
    {"2025-09-29_global_config_workflow_grpo.yaml", "", NULL},
    {"2025-09-29_global_config_workflow_ppo.yaml", CRITIC, NULL},
    {"2025-10-11_global_config_workflow_dapo.yaml", "", NULL},
    {"2025-10-11_global_config_workflow_dapo.yaml", FILTER, NULL},
    {"2025-10-25_client_workflow_dapo.yaml", "", NULL},
    {"2025-11-07_client_workflow_embodied_grpo.yaml", "", EMBODIED},
    {"2025-12-22_client_workflow_embodied_srpo.yaml", "", EMBODIED},
};

/* Workflows written by the test, each failing (or passing) one check: "%P" is the plugin directory. */
#define GRPO_TAIL                                                                                  \
    "  - {node_id: function_reward, node_type: COMPUTE, node_role: REWARD, dependencies: [rollout_actor]}\n" \
    "  - {node_id: calculate_advantages, node_type: COMPUTE, node_role: ADVANTAGE,\n"               \
    "     dependencies: [function_reward]}\n"                                                      \
    "  - {node_id: actor_old_log_prob, node_type: MODEL_TRAIN, node_role: ACTOR,\n"                \
    "     only_forward_compute: true, dependencies: [calculate_advantages]}\n"                     \
    "  - {node_id: actor_train, node_type: MODEL_TRAIN, node_role: ACTOR,\n"                       \
    "     dependencies: [actor_old_log_prob]}\n"
/* GRPO_TAIL with `cfg` on the old-log-prob node, its actor_train node left open for a `config:` line */
#define GRPO_TAIL_OLD(cfg)                                                                         \
    "  - {node_id: function_reward, node_type: COMPUTE, node_role: REWARD,\n"                      \
    "     dependencies: [rollout_actor]}\n"                                                        \
    "  - {node_id: calculate_advantages, node_type: COMPUTE, node_role: ADVANTAGE,\n"               \
    "     dependencies: [function_reward]}\n"                                                      \
    "  - {node_id: actor_old_log_prob, node_type: MODEL_TRAIN, node_role: ACTOR,\n"                \
    "     only_forward_compute: true, dependencies: [calculate_advantages]" cfg "}\n"              \
    "  - node_id: actor_train\n    node_type: MODEL_TRAIN\n    node_role: ACTOR\n"                 \
    "    dependencies: [actor_old_log_prob]\n"
/* siiRL's MARFT anchors (actor_1_config) with write_job's values */
#define MARFT_KEYS                                                                                 \
    "{rollout.log_prob_micro_batch_size_per_gpu: 8, rollout.tensor_model_parallel_size: 1, "        \
    "rollout.gpu_memory_utilization: 0.5, rollout.n: 2}"
#define ROLLOUT(cfg) "dag_id: t\nnodes:\n  - {node_id: rollout_actor, node_type: MODEL_INFERENCE, node_role: ROLLOUT" cfg "}\n"

typedef struct {
    const char *name, *yaml, *msg;
    const char *extra; /* more key=value arguments, or NULL */
} made;

static const made k_made[] = {
    /* siiRL's scheduler key is the planner's, not a config key: accepted and trained */
    {"model_params", ROLLOUT(", config: {model_params: 500M, rollout.temperature: 0.9}") GRPO_TAIL, NULL, NULL},
    {"per_node_key", ROLLOUT(", config: {rollout.ignore_eos: true}") GRPO_TAIL,
     "node 'rollout_actor': actor_rollout_ref.rollout.ignore_eos cannot be changed per node (this node "
     "honours: actor_rollout_ref.rollout.temperature", NULL},
    /* the keys siiRL's MARFT file sets on its rollout and actor nodes: the job's values accepted (and
       trained), another value refused naming the node, the key and the job's value */
    {"marft_keys_agree",
     ROLLOUT(", config: " MARFT_KEYS) GRPO_TAIL_OLD(", config: " MARFT_KEYS) "    config: " MARFT_KEYS "\n",
     NULL, NULL},
    {"marft_n", ROLLOUT(", config: {rollout.n: 8}") GRPO_TAIL,
     "node 'rollout_actor': actor_rollout_ref.rollout.n=8 differs from the job's 2 (%D/job.yaml:6); "
     "distflow reads this key once for the job, not per node", NULL},
    {"marft_tp_on_actor",
     ROLLOUT("") GRPO_TAIL_OLD("") "    config: {rollout.tensor_model_parallel_size: 2}\n",
     "node 'actor_train': actor_rollout_ref.rollout.tensor_model_parallel_size=2 differs from the job's 1 "
     "(default); distflow reads this key once for the job", NULL},
    {"typo_ref",
     ROLLOUT("") GRPO_TAIL "  - {node_id: ds, node_type: COMPUTE, executable_ref: siirl.algorithm.dapo.dynamic_samplin,\n"
                          "     dependencies: [actor_train]}\n",
     "node 'ds': no executable registered for 'siirl.algorithm.dapo.dynamic_samplin' (closest distflow function: "
     "'DAGWorker.dynamic_sampling'", NULL},
    {"bad_abi_plugin",
     ROLLOUT("") GRPO_TAIL "  - {node_id: p, node_type: CUSTOM, executable_ref: '%P/libbad_bad_abi.so:bad_node',\n"
                          "     dependencies: [actor_train]}\n",
     "node 'p': plugin '%P/libbad_bad_abi.so' (ref '%P/libbad_bad_abi.so:bad_node'): built for plugin ABI 99, "
     "this distflow has ABI 1", NULL},
    /* refused from the file: its constructor (which aborts) never runs, in train either */
    {"missing_symbol",
     ROLLOUT("") GRPO_TAIL "  - {node_id: p, node_type: CUSTOM, executable_ref: '%P/libbad_ctor_aborts.so:nope',\n"
                          "     dependencies: [actor_train]}\n",
     "node 'p': plugin '%P/libbad_ctor_aborts.so' (ref '%P/libbad_ctor_aborts.so:nope'): no exported symbol 'nope'", NULL},
    /* DAPO's refill re-runs the nodes before the sampling node: a training node there is refused */
    {"trains_before_sampling",
     ROLLOUT("") GRPO_TAIL "  - {node_id: ds, node_type: COMPUTE, executable_ref: DAGWorker.dynamic_sampling,\n"
                          "     dependencies: [actor_train]}\n",
     "node 'ds': dynamic sampling refills a step by re-running every node before it on new prompts, and node "
     "'actor_train' (DAGWorker.train_actor) trains",
     FILTER_ON},
    /* ... and a workflow's own reward node scores the refills too (before, refills were scored by the
       built-in reward, whose extra columns failed the concatenation) */
    {"plugin_reward_refill",
     ROLLOUT("") "  - {node_id: reward, node_type: COMPUTE, node_role: REWARD, dependencies: [rollout_actor],\n"
                 "     executable_ref: '%P/libscore_const.so:parity_reward_node'}\n"
                 "  - {node_id: ds, node_type: COMPUTE, executable_ref: DAGWorker.dynamic_sampling,\n"
                 "     dependencies: [reward]}\n"
                 "  - {node_id: adv, node_type: COMPUTE, node_role: ADVANTAGE, dependencies: [ds]}\n"
                 "  - {node_id: old, node_type: MODEL_TRAIN, node_role: ACTOR, only_forward_compute: true,\n"
                 "     dependencies: [adv]}\n"
                 "  - {node_id: train, node_type: MODEL_TRAIN, node_role: ACTOR, dependencies: [old]}\n",
     NULL, FILTER_ON " algorithm.filter_groups.metric=seq_reward"},
    {"two_temperatures",
     "dag_id: t\nnodes:\n"
     "  - {node_id: hot, node_type: MODEL_INFERENCE, node_role: ROLLOUT, config: {rollout.temperature: 0.5}}\n"
     "  - {node_id: rollout_actor, node_type: MODEL_INFERENCE, node_role: ROLLOUT, dependencies: [hot]}\n" GRPO_TAIL,
     "rollout nodes 'hot' and 'rollout_actor' sample at temperatures 0.5 and 1; the actor computes log-probs at "
     "one temperature", NULL},
};

/* s with "%D" -> dir and "%P" -> the test plugins' directory, into out[cap]. */
static void expand(const char *s, const char *dir, char *out, size_t cap)
{
    size_t n = 0;
    for (; *s && n + 1 < cap; s++) {
        const char *rep = s[0] == '%' && s[1] == 'D' ? dir : s[0] == '%' && s[1] == 'P' ? PLUGINS : NULL;
        if (!rep) {
            out[n++] = *s;
            continue;
        }
        size_t k = strlen(rep);
        if (k && rep[k - 1] == '/')
            k--; /* "%P/x" */
        if (n + k >= cap)
            break;
        memcpy(out + n, rep, k);
        n += k;
        s++;
    }
    out[n] = 0;
}

/* Run `distflow <cmd> <args>`; its exit code, and the text after "distflow <name>: error: " (or "") in msg. */
static int run(const char *cmd, const char *name, const char *args, char *msg, size_t cap, char *all, size_t all_cap)
{
    char line[8192];
    snprintf(line, sizeof line, "OMP_NUM_THREADS=1 %s/distflow %s %s 2>&1", DF_BINARY_DIR, cmd, args);
    int st = df_test_command(line, all, all_cap);
    char tag[64];
    snprintf(tag, sizeof tag, "distflow %s: error: ", name);
    const char *e = strstr(all, tag);
    msg[0] = 0;
    if (e) {
        e += strlen(tag);
        size_t k = strcspn(e, "\n");
        snprintf(msg, cap, "%.*s", (int)(k < cap ? k : cap - 1), e);
    }
    return st;
}

/* The three commands on one workflow: the same verdict and message, the expected one; accepted ones train. */
static void check_verdict(const char *dir, const char *wf, const char *extra_tmpl, const char *want_tmpl)
{
    static char out[1 << 16];
    char extra[1024], want[2048], args[4096], m_plan[4096], m_check[4096], m_train[4096];
    expand(extra_tmpl, dir, extra, sizeof extra);
    if (want_tmpl)
        expand(want_tmpl, dir, want, sizeof want);
    snprintf(args, sizeof args, "%s/job.yaml dag.workflow_path=%s %s", dir, wf, extra);
    int rp = run("plan", "plan", args, m_plan, sizeof m_plan, out, sizeof out);
    int rc = run("config check", "config", args, m_check, sizeof m_check, out, sizeof out);
    int rt = run("train", "train", args, m_train, sizeof m_train, out, sizeof out);
    print_message("%s %s: plan %d, config check %d, train %d%s%s\n", strrchr(wf, '/') + 1, extra, rp, rc, rt,
                  m_plan[0] ? ": " : "", m_plan);
    if (!want_tmpl) {
        if (rp || rc || rt)
            fail_msg("%s should be accepted and train:\nplan: %s\nconfig check: %s\ntrain (exit %d): %s\n%s", wf,
                     m_plan, m_check, rt, m_train, rt ? out : "");
        return;
    }
    assert_int_equal(rp, 1);
    assert_int_equal(rc, 1);
    assert_int_equal(rt, 1);
    assert_string_equal(m_plan, m_check);
    assert_string_equal(m_plan, m_train);
    if (!strstr(m_plan, want))
        fail_msg("%s: '%s' lacks '%s'", wf, m_plan, want);
}

static void write_job(const char *dir)
{
    char path[1024], text[2048];
    df_test_digits_inputs(dir, "train.jsonl", 16, "openai/gsm8k", true);
    snprintf(path, sizeof path, "%s/job.yaml", dir);
    snprintf(text, sizeof text,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 4,\n"
             "       max_prompt_length: 128, max_response_length: 8}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 4}\n"
             "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 8}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "trainer: {nnodes: 1, n_gpus_per_node: 1, total_training_steps: 1, save_freq: -1, logger: [],\n"
             "          default_local_dir: %s/out}\n",
             dir, dir, dir);
    assert_int_equal(df_write_file_atomic(path, text, strlen(text)), 0);
}

static void test_siirl_files(void **state)
{
    const char *dir = *state;
    write_job(dir);
    for (size_t i = 0; i < sizeof k_siirl / sizeof *k_siirl; i++) {
        char wf[1024];
        snprintf(wf, sizeof wf, FIX "%s", k_siirl[i].file);
        check_verdict(dir, wf, k_siirl[i].extra, k_siirl[i].msg);
    }
}

static void test_made_workflows(void **state)
{
    const char *dir = *state;
    write_job(dir);
    for (size_t i = 0; i < sizeof k_made / sizeof *k_made; i++) {
        char wf[1024], text[4096];
        snprintf(wf, sizeof wf, "%s/%s.yaml", dir, k_made[i].name);
        expand(k_made[i].yaml, dir, text, sizeof text);
        assert_int_equal(df_write_file_atomic(wf, text, strlen(text)), 0);
        check_verdict(dir, wf, k_made[i].extra ? k_made[i].extra : "", k_made[i].msg);
    }
}

/* plan and config check read a plugin's file; only train loads it (here its constructor aborts). */
static void test_plugin_code_not_run(void **state)
{
    static char out[1 << 16];
    const char *dir = *state;
    write_job(dir);
    char wf[1024], text[4096], args[2048], msg[4096];
    snprintf(wf, sizeof wf, "%s/ctor.yaml", dir);
    expand(ROLLOUT("") GRPO_TAIL "  - {node_id: p, node_type: CUSTOM, executable_ref: '%P/libbad_ctor_aborts.so:bad_node',\n"
                                 "     dependencies: [actor_train]}\n",
           dir, text, sizeof text);
    assert_int_equal(df_write_file_atomic(wf, text, strlen(text)), 0);
    snprintf(args, sizeof args, "%s/job.yaml dag.workflow_path=%s", dir, wf);
    assert_int_equal(run("plan", "plan", args, msg, sizeof msg, out, sizeof out), 0);
    assert_int_equal(run("config check", "config", args, msg, sizeof msg, out, sizeof out), 0);
    assert_string_equal(out, "ok\n");
    /* train loads it: the constructor runs (SIGABRT), after the same checks passed */
    assert_int_equal(run("train", "train", args, msg, sizeof msg, out, sizeof out), 128 + 6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_siirl_files, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_made_workflows, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_plugin_code_not_run, df_test_mkdtemp, df_test_rmtree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
