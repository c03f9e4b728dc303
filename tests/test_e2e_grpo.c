/*
 * End to end: a few GRPO steps through the DAG worker on a tiny random model
 * (the built-in grpo TaskGraph: rollout -> reward -> advantage -> old
 * log-probs -> reference log-probs -> actor update). Checks that every step's
 * metrics reach metrics.jsonl with siiRL / verl names, that the policy got a
 * real gradient, and that the saved checkpoint's weights moved.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testbounds.h"
#include "testutil.h"

#include "distflow/config.h"
#include "distflow/model.h"
#include "distflow/reward.h"
#include "distflow/tokenizer.h"
#include "distflow/worker.h"
#include "engine/hf_dir.h"
#include "util/fsutil.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmp[256];

static void write_text(const char *name, const char *text)
{
    char *p = df_path_join(tmp, name);
    assert_int_equal(df_write_file_atomic(p, text, strlen(text)), 0);
    free(p);
}

/* A fresh tmp/ with the dataset, tokenizer and a tiny model; the digit-share reward registered. */
static void make_inputs(void)
{
    snprintf(tmp, sizeof tmp, "/tmp/df_e2e_XXXXXX");
    assert_non_null(mkdtemp(tmp));
    df_test_digits_inputs(tmp, "train.jsonl", 64, "test/digits", true);
    assert_int_equal(df_reward_register("test/digits", df_test_digit_share), 0);
}

enum { WF_MAX_PROMPT = 128, WF_MAX_RESPONSE = 8 };

/* A GRPO workflow's nodes after its `rollout` node; the train node runs two epochs. */
#define GRPO_NODES_AFTER_ROLLOUT                                                                       \
    "  - {node_id: reward, node_type: COMPUTE, node_role: REWARD, dependencies: [rollout]}\n"          \
    "  - {node_id: adv, node_type: COMPUTE, node_role: ADVANTAGE, dependencies: [reward]}\n"           \
    "  - {node_id: old, node_type: MODEL_TRAIN, node_role: ACTOR, only_forward_compute: true,\n"       \
    "     dependencies: [adv]}\n"                                                                     \
    "  - {node_id: train, node_type: MODEL_TRAIN, node_role: ACTOR, dependencies: [old],\n"           \
    "     config: {actor.ppo_epochs: 2}}\n"

/* tmp/wf.yaml = `workflow`, and into yaml[cap] one GRPO step's config that runs it. */
static void workflow_config(const char *workflow, char *yaml, size_t cap)
{
    write_text("wf.yaml", workflow);
    snprintf(yaml, cap,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 8,\n"
             "       max_prompt_length: %d, max_response_length: %d}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {optim: {lr: 0.01}, ppo_mini_batch_size: 8, ppo_micro_batch_size_per_gpu: 8}\n"
             "  rollout: {n: 4, temperature: 1.0, log_prob_micro_batch_size_per_gpu: 16}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "dag: {workflow_path: %s/wf.yaml}\n"
             "trainer: {total_training_steps: 1, save_freq: -1, logger: [], default_local_dir: %s/out}\n",
             tmp, WF_MAX_PROMPT, WF_MAX_RESPONSE, tmp, tmp, tmp);
}

/*
 * trainer.rollout_data_dir: after each of the 3 steps, <step>.jsonl with one line per rollout
 * (train_batch_size 8 x rollout.n 4) in verl's keys. Each line's score is its summed
 * token_level_scores (test_gen_dump pins that per row); here their mean over the step is the
 * step's critic/score/mean, computed from the same sums: equal up to the order of a double mean of
 * 32 terms and metrics.jsonl's 10 significant digits (5e-10 relative; the dump prints 17: exact).
 */
static void check_rollout_dumps(void)
{
    json_t *metrics = df_test_metrics(tmp, "out", true);
    for (int step = 1; step <= 3; step++) {
        char rel[64], *text = NULL;
        snprintf(rel, sizeof rel, "rollouts/%d.jsonl", step);
        char *path = df_path_join(tmp, rel);
        assert_int_equal(df_read_file(path, &text, NULL), DF_OK);
        int n = 0;
        double sum = 0, abs_sum = 0;
        for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n"), n++) {
            json_t *row = json_loads(l, 0, NULL);
            assert_non_null(row);
            assert_true(strlen(json_string_value(json_object_get(row, "input"))) > 0);
            assert_non_null(json_string_value(json_object_get(row, "output")));
            assert_non_null(json_string_value(json_object_get(row, "gts")));
            assert_int_equal(json_integer_value(json_object_get(row, "step")), step);
            double acc = json_number_value(json_object_get(row, "acc"));
            assert_true(json_is_number(json_object_get(row, "acc")) && (acc == 0 || acc == 1));
            assert_string_equal(json_string_value(json_object_get(row, "data_source")), "test/digits");
            sum += json_number_value(json_object_get(row, "score"));
            abs_sum += fabs(json_number_value(json_object_get(row, "score")));
            json_decref(row);
        }
        assert_int_equal(n, 8 * 4);
        double want = json_number_value(json_object_get(json_array_get(metrics, step - 1), "critic/score/mean"));
        assert_near(sum / n, want, 2 * df_tol_gamma(n, DF_U64) * abs_sum / n + 5e-10 * fabs(want));
        free(text), free(path);
    }
    char *none = df_path_join(tmp, "rollouts/4.jsonl");
    struct stat st;
    assert_int_not_equal(stat(none, &st), 0);
    free(none);
    json_decref(metrics);
}

static void test_grpo_steps(void **state)
{
    (void)state;
    make_inputs();
    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [%s/train.jsonl], train_batch_size: 8,\n"
             "       max_prompt_length: 128, max_response_length: 12, val_max_samples: 8}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {optim: {lr: 0.01, weight_decay: 0.0}, ppo_mini_batch_size: 4,\n"
             "          ppo_micro_batch_size_per_gpu: 8, use_kl_loss: true, kl_loss_coef: 0.01}\n"
             "  rollout: {n: 4, log_prob_micro_batch_size_per_gpu: 16}\n"
             "  ref: {log_prob_micro_batch_size_per_gpu: 16}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "trainer: {total_training_steps: 3, save_freq: 1, max_actor_ckpt_to_keep: 2, logger: [],\n"
             "          val_before_train: false, test_freq: 3, log_val_generations: 2,\n"
             "          validation_data_dir: %s/val, rollout_data_dir: %s/rollouts, default_local_dir: %s/out}\n",
             tmp, tmp, tmp, tmp, tmp, tmp);
    df_test_fit(yaml, "e2e.yaml");

    /* the validation of step 3 dumped in verl's keys (trainer.validation_data_dir): one line per
       response of the 8 validation prompts */
    char *vpath = df_path_join(tmp, "val/3.jsonl"), *vtext = NULL;
    assert_int_equal(df_read_file(vpath, &vtext, NULL), DF_OK);
    int n_lines = 0;
    for (char *line = vtext, *end; *line; line = end + 1, n_lines++) {
        end = strchr(line, '\n');
        assert_non_null(end);
        json_t *row = json_loadb(line, (size_t)(end - line), 0, NULL);
        assert_non_null(row);
        assert_true(strlen(json_string_value(json_object_get(row, "input"))) > 0);
        assert_non_null(json_string_value(json_object_get(row, "output")));
        assert_non_null(json_string_value(json_object_get(row, "gts")));
        assert_true(json_is_number(json_object_get(row, "score")));
        assert_int_equal(json_integer_value(json_object_get(row, "step")), 3);
        json_decref(row);
    }
    assert_int_equal(n_lines, 8);
    free(vpath), free(vtext);

    check_rollout_dumps();

    /* saved every step, the newest two kept (trainer.max_actor_ckpt_to_keep) */
    char *ck[3];
    for (int k = 0; k < 3; k++) {
        char rel[64];
        snprintf(rel, sizeof rel, "out/global_step_%d", k + 1);
        ck[k] = df_path_join(tmp, rel);
    }
    struct stat st;
    assert_int_not_equal(stat(ck[0], &st), 0);
    assert_int_equal(stat(ck[1], &st), 0);
    assert_int_equal(stat(ck[2], &st), 0);
    for (int k = 0; k < 3; k++)
        free(ck[k]);

    /* three lines of metrics with the standard names */
    json_t *lines = df_test_metrics(tmp, "out", true), *o;
    size_t s;
    double grad_norm_sum = 0;
    json_array_foreach(lines, s, o) {
        const char *keys[] = {"critic/score/mean", "critic/rewards/mean", "response_length/mean",
                              "actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/pg_clipfrac",
                              "actor/grad_norm", "actor/lr", "timing_s/gen", "timing_s/step",
                              "perf/throughput", "perf/mfu/actor", "timing_per_token_ms/gen",
                              "response/aborted_ratio", "perf/max_memory_allocated_gb",
                              "perf/max_memory_reserved_gb", "perf/cpu_memory_used_gb"};
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
            if (!json_is_number(json_object_get(o, keys[k])))
                fail_msg("step %d: metric %s missing", (int)s + 1, keys[k]);
        /* verl's CPU peak (448 GFLOP/s) and a tiny model: a small positive fraction */
        const double mfu = json_number_value(json_object_get(o, "perf/mfu/actor"));
        assert_true(mfu > 0 && mfu < 1);
        /* the CPU's device memory is the process's peak resident set: at least the model's
           weights and Adam's two moments (far less than 1 GiB for the tiny model) */
        const double gb = json_number_value(json_object_get(o, "perf/max_memory_allocated_gb"));
        assert_true(gb > 0 && gb < 8);
        grad_norm_sum += json_number_value(json_object_get(o, "actor/grad_norm"));
        assert_true(json_number_value(json_object_get(o, "actor/lr")) > 0);
    }
    assert_int_equal(json_array_size(lines), 3);
    assert_true(grad_norm_sum > 0); /* the digit-share reward varies, so the policy gets a gradient */
    json_decref(lines);

    /* the saved actor differs from the initial model. Not rounding: weight decay is 0, so only a
       gradient moves a weight (Adam leaves one without any exactly in place), and then by ~lr = 1e-2
       per step; 1e-3 summed over all weights is far below one step of one weight */
    df_model *before, *after;
    char *d0 = df_path_join(tmp, "model"), *d1 = df_path_join(tmp, "out/global_step_3/actor");
    assert_int_equal(df_model_load(d0, &before), 0);
    assert_int_equal(df_model_load(d1, &after), 0);
    double diff = 0;
    for (int64_t i = 0; i < before->n_params; i++)
        diff += fabs((double)before->params[i] - after->params[i]);
    assert_true(diff > 1e-3);
    df_model_free(before);
    df_model_free(after);
    free(d0);
    free(d1);
    assert_int_equal(df_test_remove_tree(tmp), 0);
}

/* One step from a workflow file in siiRL's style (no executable refs, role-relative
 * per-node config): a greedy rollout node gives every group identical responses,
 * so every GRPO advantage is exactly 0 — the node's override took effect. */
static void test_workflow_file_step(void **state)
{
    (void)state;
    make_inputs();
    char yaml[2048];
    workflow_config("dag_id: wf_grpo\n"
                    "nodes:\n"
                    "  - {node_id: rollout, node_type: MODEL_INFERENCE, node_role: ROLLOUT,\n"
                    "     config: {rollout.do_sample: false}}\n"
                    GRPO_NODES_AFTER_ROLLOUT,
                    yaml, sizeof yaml);
    df_test_fit(yaml, "e2e.yaml");
    json_t *lines = df_test_metrics(tmp, "out", true), *o = json_array_get(lines, 0);
    assert_int_equal(json_array_size(lines), 1);
    assert_true(json_is_number(json_object_get(o, "timing_s/update_actor")));
    assert_true(json_is_number(json_object_get(o, "critic/advantages/max")));
    assert_true(json_is_number(json_object_get(o, "critic/advantages/min")));
    assert_true(json_number_value(json_object_get(o, "critic/advantages/min")) == 0.0);
    assert_true(json_number_value(json_object_get(o, "critic/advantages/max")) == 0.0);
    json_decref(lines);
    assert_int_equal(df_test_remove_tree(tmp), 0);
}

/* A workflow's rollout node samples at its own temperature (0.5 here, 1.0 globally): the actor
 * and reference must compute old_log_probs at that temperature too, or the PPO ratio compares
 * log-probs of two different distributions. training/rollout_probs_diff_max is the old-log-prob
 * node's max over tokens of |exp(rollout) - exp(old)| (the actor's rollout_corr/ metrics would
 * include the second epoch's drift); each token's two log-probs are two float forward passes of
 * the same weights at the same temperature, at most F apart (testbounds.h), and both are <= F, so
 * the difference of their exps (computed in double) is <= F e^F. At the global temperature
 * rollout_corr/log_ppl_abs_diff was 0.018.
 * The train node's own actor.ppo_epochs (2; 1 globally) must reach the update as well:
 * actor/ppo_kl is the mean over the update's micro-batches of mean(old - current log-prob);
 * in the first epoch the weights are those old_log_probs came from, so that term is <= F in
 * magnitude, and with one epoch |ppo_kl| <= F. The second epoch runs after an AdamW step of
 * lr 0.01 on a tiny model and moves the log-probs far more: |ppo_kl| > 2F says it ran (a check
 * that fails, rather than passes, if the step were too small to tell). */
static void test_workflow_node_temperature(void **state)
{
    (void)state;
    make_inputs();
    char yaml[2048];
    workflow_config("dag_id: wf_temperature\n"
                    "nodes:\n"
                    "  - {node_id: rollout, node_type: MODEL_INFERENCE, node_role: ROLLOUT,\n"
                    "     config: {rollout.temperature: 0.5}}\n"
                    GRPO_NODES_AFTER_ROLLOUT,
                    yaml, sizeof yaml);
    df_test_fit(yaml, "e2e.yaml");
    json_t *lines = df_test_metrics(tmp, "out", true), *o = json_array_get(lines, 0);
    json_t *v = json_object_get(o, "training/rollout_probs_diff_max");
    if (!json_is_number(v))
        fail_msg("training/rollout_probs_diff_max missing");
    df_model *m;
    char *dir = df_path_join(tmp, "model");
    assert_int_equal(df_model_load(dir, &m), 0);
    double F = tb_forward_bound(m, WF_MAX_PROMPT + WF_MAX_RESPONSE, 0.5f);
    print_message("rollout_probs_diff_max %.3g, bound %.3g\n", json_number_value(v), F * exp(F));
    if (!(json_number_value(v) <= F * exp(F)))
        fail_msg("rollout and actor log-probs differ by %.3g per token (bound %.3g): the actor does not "
                 "compute them at the rollout node's temperature",
                 json_number_value(v), F);
    json_t *kl = json_object_get(o, "actor/ppo_kl");
    if (!json_is_number(kl))
        fail_msg("actor/ppo_kl missing");
    print_message("ppo_kl %.3g, one-epoch bound %.3g\n", json_number_value(kl), F);
    if (!(fabs(json_number_value(kl)) > 2 * F))
        fail_msg("actor/ppo_kl = %.3g is within the one-epoch bound (%.3g): the train node's own "
                 "actor.ppo_epochs=2 did not reach the update",
                 json_number_value(kl), 2 * F);
    df_model_free(m);
    free(dir);
    json_decref(lines);
    assert_int_equal(df_test_remove_tree(tmp), 0);
}

/* Two rollout nodes that sample at different temperatures leave the actor no single one to
 * compute log-probs at: refused before any step, naming both nodes. */
static void test_rollout_temperatures_disagree(void **state)
{
    (void)state;
    make_inputs();
    char yaml[2048];
    workflow_config("dag_id: wf_two_rollouts\n"
                    "nodes:\n"
                    "  - {node_id: hot, node_type: MODEL_INFERENCE, node_role: ROLLOUT,\n"
                    "     config: {rollout.temperature: 0.5}}\n"
                    "  - {node_id: cold, node_type: MODEL_INFERENCE, node_role: ROLLOUT, dependencies: [hot],\n"
                    "     config: {rollout.temperature: 0.7}}\n"
                    "  - {node_id: reward, node_type: COMPUTE, node_role: REWARD, dependencies: [cold]}\n"
                    "  - {node_id: adv, node_type: COMPUTE, node_role: ADVANTAGE, dependencies: [reward]}\n"
                    "  - {node_id: train, node_type: MODEL_TRAIN, node_role: ACTOR, dependencies: [adv]}\n",
                    yaml, sizeof yaml);
    assert_int_equal(df_test_run(NULL, df_test_config(yaml, "e2e.yaml", NULL, 0)), DF_EUNSUPPORTED);
    assert_last_error_mentions("'hot' and 'cold'");
    assert_last_error_mentions("temperatures 0.5 and 0.7");
    assert_int_equal(df_test_remove_tree(tmp), 0);
}

/* A row for verl's tool_agent in a single-turn job is refused at its line, naming the key that turns
 * the tool loop on (it would otherwise be answered single-turn). */
static void test_tool_agent_rows_refused(void **state)
{
    (void)state;
    make_inputs();
    write_text("tool.jsonl", "{\"agent_name\": \"tool_agent\", \"data_source\": \"test/digits\", \"prompt\": \"Add 1 and 2.\", "
                             "\"reward_model\": {\"ground_truth\": \"3\"}}\n");
    char yaml[2048], ov[512];
    workflow_config("", yaml, sizeof yaml);
    snprintf(ov, sizeof ov, "data.train_files=[%s/tool.jsonl]", tmp);
    const char *ovs[] = {ov, "dag.workflow_path=null"};
    assert_int_equal(df_test_run(NULL, df_test_config(yaml, "e2e.yaml", ovs, 2)), DF_EINVAL);
    assert_last_error_mentions("tool.jsonl:1: agent_name \"tool_agent\": the tool loop is off");
    assert_last_error_mentions("multi_turn.enable");
    assert_int_equal(df_test_remove_tree(tmp), 0);
}

/* actor_rollout_ref.model.custom_chat_template (here a file): every prompt is rendered with it (the
 * rollout dump's decoded inputs), and the checkpoint's actor/ carries it as chat_template.jinja, so the
 * saved model renders as the run did. */
static void test_custom_chat_template(void **state)
{
    (void)state;
    make_inputs();
    const char *tmpl = "{% for m in messages %}Q: {{ m.content }}\n{% endfor %}A:"; /* trim_blocks: no \n after a tag */
    write_text("tmpl.jinja", tmpl);
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 8,\n"
             "       max_prompt_length: 128, max_response_length: 4}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model, custom_chat_template: %s/tmpl.jinja}\n"
             "  actor: {optim: {lr: 0.01}, ppo_mini_batch_size: 8, ppo_micro_batch_size_per_gpu: 8}\n"
             "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 16}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "trainer: {total_training_steps: 1, save_freq: 1, logger: [], default_local_dir: %s/out,\n"
             "          rollout_data_dir: %s/rollouts}\n",
             tmp, tmp, tmp, tmp, tmp);
    df_test_fit(yaml, "e2e.yaml");
    char *p = df_path_join(tmp, "rollouts/1.jsonl"), *text = NULL;
    assert_int_equal(df_read_file(p, &text, NULL), DF_OK);
    json_t *row = json_loads(text, JSON_DISABLE_EOF_CHECK, NULL);
    assert_non_null(row);
    const char *input = json_string_value(json_object_get(row, "input"));
    if (!input || strncmp(input, "Q: Add ", 7) || !strstr(input, "What do you get?\nA:"))
        fail_msg("the dumped prompt was not rendered with the custom template: %s", input ? input : "(none)");
    json_decref(row);
    free(text), free(p);
    p = df_path_join(tmp, "out/global_step_1/actor/chat_template.jinja");
    assert_int_equal(df_read_file(p, &text, NULL), DF_OK);
    assert_string_equal(text, tmpl);
    free(text), free(p);
    assert_int_equal(df_test_remove_tree(tmp), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_grpo_steps),
                                       cmocka_unit_test(test_workflow_file_step),
                                       cmocka_unit_test(test_workflow_node_temperature),
                                       cmocka_unit_test(test_rollout_temperatures_disagree),
                                       cmocka_unit_test(test_tool_agent_rows_refused),
                                       cmocka_unit_test(test_custom_chat_template)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
