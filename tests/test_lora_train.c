/*
 * test_lora_train.c — LoRA through the DAG worker (actor_rollout_ref.model.lora_rank; docs/lora.md).
 *
 * mpi-test: np 2
 * (as a plain ctest it runs with one rank.)
 *
 * A GRPO run with adapters on q_proj, v_proj and down_proj: the checkpoint's Hugging Face actor
 * holds the base model's every other tensor bit for bit (embeddings, norms, biases, k/o/gate/up)
 * and moved targeted ones; its training state is the adapter's (its size and LoRA metadata), and
 * the merge of that adapter onto the base is the saved actor exactly, and actor/lora_adapter (PEFT's
 * files, as verl's checkpoint holds them) is the same adapter. Resuming from step 1 ends
 * with the bytes of the run that was not interrupted; a state of another LoRA config or of a
 * full fine-tune is refused naming both. lora_adapter_path continues from such an adapter. Bad settings are refused before anything runs. On N ranks
 * the run's weights are checked in sync by the worker itself every step (fit.c), so a gradient
 * all-reduce that missed the adapter fails it. Every rank checks the files itself, so that a
 * failing check fails every rank at the same place (none is left waiting in a collective).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testcli.h"
#include "testutil.h"
#include "marft_fixture.h"
#include "testbounds.h"

#include "distflow/comm.h"
#include "distflow/lora.h"
#include "distflow/reward.h"
#include "distflow/worker.h"
#include "model/safetensors.h"
#include "workers/worker_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static df_comm *world;
static char dir[256];

#define TARGETS "[q_proj, v_proj, down_proj]"

/* `steps` GRPO steps on comm into dir/<out>, a checkpoint every step, with overrides ov[n]. */
static int grpo(df_comm *comm, const char *out, int steps, const char *const *ov, int n)
{
    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 4, shuffle: true,\n"
             "       max_prompt_length: 128, max_response_length: 8}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model, lora_rank: 4, lora_alpha: 8, target_modules: " TARGETS "}\n"
             "  actor: {optim: {lr: 0.01, weight_decay: 0.01}, ppo_mini_batch_size: 2,\n"
             "          ppo_micro_batch_size_per_gpu: 1, use_kl_loss: true}\n"
             "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 2}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "trainer: {total_training_steps: %d, save_freq: 1, logger: [], default_local_dir: %s/%s}\n",
             dir, dir, steps, dir, out);
    return df_test_run(comm, df_test_config(yaml, "lora.yaml", ov, n));
}

static df_model *load_model(const char *rel)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    df_model *m = NULL;
    if (df_model_load(p, &m))
        fail_msg("%s", df_last_error());
    return m;
}

static bool targeted(const char *name)
{
    return strstr(name, "q_proj.weight") || strstr(name, "v_proj.weight") || strstr(name, "down_proj.weight");
}

/* The adapter of a run's training state (its "params"), on a fresh adapter of the base. */
static df_lora *state_adapter(const df_model *base, const char *rel)
{
    df_lora_config lc = {.rank = 4, .alpha = 8};
    const char *names[] = {"q_proj", "v_proj", "down_proj"};
    assert_int_equal(df_lora_parse_targets(names, 3, "t", &lc.targets), DF_OK);
    df_lora *l = NULL;
    assert_int_equal(df_lora_create(base, &lc, 99, &l), DF_OK);
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    df_st_file *f = NULL;
    assert_int_equal(df_st_open(p, &f), DF_OK);
    assert_string_equal(df_st_metadata(f, "lora_rank"), "4");
    assert_string_equal(df_st_metadata(f, "lora_alpha"), "8");
    assert_int_equal(df_st_read_f32(f, "params", l->params, l->n_params), DF_OK);
    df_st_tensor t;
    assert_int_equal(df_st_find(f, "exp_avg", &t), DF_OK);
    assert_int_equal(t.shape[0], l->n_params); /* AdamW's moments are the adapter's too */
    df_st_close(f);
    return l;
}

/* The HF model directory dir/<rel> of a checkpoint: every untargeted tensor is the base's bit for bit, every
 * targeted one moved, the training state's adapter merged onto the base is the saved actor, and
 * actor/lora_adapter (PEFT's files, as verl's checkpoint holds them) is that adapter. */
static void check_model_dir(const char *rel)
{
    char p[1024];
    df_model *base = load_model("model"), *trained = load_model(rel);
    int moved = 0;
    for (int i = 0; i < base->n_tensors; i++) {
        const df_param_desc *d = &base->tensors[i];
        const bool same = !memcmp(base->params + d->offset, trained->params + d->offset,
                                  (size_t)d->numel * sizeof(float));
        if (targeted(d->name)) {
            moved += !same;
        } else if (!same) {
            fail_msg("%s: %s is not a LoRA target but changed", rel, d->name);
        }
    }
    assert_int_equal(moved, 3 * 2); /* every targeted tensor of both layers */
    snprintf(p, sizeof p, "%s/train_state.safetensors", rel);
    df_lora *l = state_adapter(base, p);
    df_lora *peft = NULL;
    assert_int_equal(df_lora_create(base, &l->cfg, 5, &peft), DF_OK);
    snprintf(p, sizeof p, "%s/%s/lora_adapter", dir, rel);
    if (df_lora_load_peft(peft, p))
        fail_msg("%s", df_last_error());
    assert_memory_equal(peft->params, l->params, (size_t)l->n_params * sizeof(float));
    assert_int_equal(df_lora_merge(l, base), DF_OK);
    assert_memory_equal(base->params, trained->params, (size_t)base->n_params * sizeof(float));
    df_lora_free(peft);
    df_lora_free(l);
    df_model_free(base);
    df_model_free(trained);
}

static void test_frozen_base_and_merge(void **state)
{
    (void)state;
    df_test_run_ok(grpo(world, "a", 2, NULL, 0), "LoRA GRPO");
    check_model_dir("a/global_step_2/actor");
}

/* The same in mixed precision (bf16 matmuls, the default where the CPU has bf16 kernels): the
 * adapters' gradients come from bf16-rounded operands, the base still frozen bit for bit. */
static void test_bf16(void **state)
{
    (void)state;
    if (df_model_bf16_available()) {
        df_clear_error();
        print_message("skipped: no native bf16 matmuls on this CPU\n");
        return;
    }
    const char *ov[] = {"actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16",
                        "actor_rollout_ref.rollout.dtype=bfloat16"};
    df_test_run_ok(grpo(world, "g", 1, ov, 2), "LoRA GRPO in bf16");
    check_model_dir("g/global_step_1/actor");
}

static bool same_file(const char *a, const char *b)
{
    char pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s/%s", dir, a);
    snprintf(pb, sizeof pb, "%s/%s", dir, b);
    size_t na = 0, nb = 0;
    char *x = NULL, *y = NULL;
    bool same = !df_read_file(pa, &x, &na) && !df_read_file(pb, &y, &nb) && na == nb &&
                !memcmp(x, y, na);
    free(x);
    free(y);
    return same;
}

static void test_resume(void **state)
{
    (void)state;
    /* b: the run of test_frozen_base_and_merge cut back to its step-1 checkpoint, then resumed */
    double failed = 0;
    if (df_comm_rank(world) == 0) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "rm -rf %s/b && cp -r %s/a %s/b && rm -rf %s/b/global_step_2 && "
                 "echo 1 > %s/b/latest_checkpointed_iteration.txt", dir, dir, dir, dir, dir);
        failed = system(cmd) != 0;
    }
    /* every rank takes the verdict: one failing alone would leave the others in a collective */
    assert_int_equal(df_comm_allreduce(world, &failed, 1, DF_COMM_FLOAT64, DF_COMM_MAX), 0);
    assert_true(failed == 0);
    df_test_run_ok(grpo(world, "b", 2, NULL, 0), "LoRA GRPO resumed");
    assert_true(same_file("a/global_step_2/actor/model.safetensors", "b/global_step_2/actor/model.safetensors"));
    assert_true(same_file("a/global_step_2/actor/train_state.safetensors",
                          "b/global_step_2/actor/train_state.safetensors"));
    /* another rank, or no LoRA: the state does not fit and says why */
    const char *r8[] = {"actor_rollout_ref.model.lora_rank=8"};
    assert_int_equal(grpo(world, "b", 3, r8, 1), DF_EINVAL);
    assert_last_error_mentions("lora_rank is 4 and this run's is 8");
    const char *full[] = {"actor_rollout_ref.model.lora_rank=0"};
    assert_int_equal(grpo(world, "b", 3, full, 1), DF_EINVAL);
    assert_last_error_mentions("the state is of LoRA adapters and this run trains the whole model");
}

/* `distflow sft` with adapters: its step directory (the HF model, the training state and
 * lora_adapter/) checked as the actor's, and a resume from step 1 ending with the same bytes. */
static void test_sft(void **state)
{
    (void)state;
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], prompt_key: prompt,\n"
             "       response_key: reward_model.ground_truth,\n"
             "       train_batch_size: 4, micro_batch_size_per_gpu: 2, max_length: 128}\n"
             "model: {partial_pretrain: %s/model, lora_rank: 4, lora_alpha: 8, target_modules: " TARGETS ",\n"
             "        fsdp_config: {mixed_precision: {param_dtype: fp32}}}\n"
             "optim: {lr: 0.01, lr_warmup_steps_ratio: 0.0}\n"
             "trainer: {total_training_steps: 2, save_freq: 1, logger: []}\n", dir, dir);
    char out[512], p[2048];
    for (int run = 0; run < 2; run++) { /* the straight run, then a resume from step 1 */
        snprintf(out, sizeof out, "trainer.default_local_dir=%s/%s", dir, run ? "sft_b" : "sft_a");
        const char *ov[] = {out};
        df_config *cfg = NULL;
        assert_int_equal(df_config_load_text(df_config_schema_sft(), yaml, "sft.yaml", ov, 1, &cfg), DF_OK);
        df_test_run_ok(df_sft_run(cfg, &(df_sft_opts){.comm = world}, NULL), "LoRA SFT");
        df_config_free(cfg);
        double failed = 0;
        if (!run && df_comm_rank(world) == 0) {
            snprintf(p, sizeof p, "cp -r %s/sft_a %s/sft_b && rm -rf %s/sft_b/global_step_2 && "
                     "echo 1 > %s/sft_b/latest_checkpointed_iteration.txt", dir, dir, dir, dir);
            failed = system(p) != 0;
        }
        assert_int_equal(df_comm_allreduce(world, &failed, 1, DF_COMM_FLOAT64, DF_COMM_MAX), 0);
        assert_true(failed == 0);
    }
    check_model_dir("sft_a/global_step_2");
    assert_true(same_file("sft_a/global_step_2/model.safetensors", "sft_b/global_step_2/model.safetensors"));
    assert_true(same_file("sft_a/global_step_2/train_state.safetensors", "sft_b/global_step_2/train_state.safetensors"));
}

/* lora_adapter_path: training continues from a PEFT adapter (verl's); with lr 0 the saved actor
 * is the adapter's merge onto the base, bit for bit the run that wrote it. */
static void test_adapter_path(void **state)
{
    (void)state;
    char ap[512];
    snprintf(ap, sizeof ap, "actor_rollout_ref.model.lora_adapter_path=%s/a/global_step_2/actor/lora_adapter", dir);
    /* one optimizer step per training step: step 1's KL is the adapter's alone (after a first
     * mini-batch, the step's merge would make it positive anyway) */
    const char *ov[] = {ap, "actor_rollout_ref.actor.optim.lr=0", "actor_rollout_ref.actor.ppo_mini_batch_size=4"};
    df_test_run_ok(grpo(world, "d", 1, ov, 3), "LoRA GRPO from an adapter");
    assert_true(same_file("a/global_step_2/actor/model.safetensors", "d/global_step_1/actor/model.safetensors"));
    /* the adapter was merged at load, before step 1's rollout: the policy differs from the reference,
       and with lr 0 the update's log-probs are the old ones, two passes of the same weights, within
       the forward bound F of each other (a model merged only later, by the reference's pass, would
       have sampled and scored the base: its ppo_kl is ~1e-2) */
    json_t *lines = df_test_metrics(dir, "d", true), *l1 = json_array_get(lines, 0);
    assert_true(df_test_metric(l1, "actor/kl_loss") > 0);
    df_model *m = load_model("a/global_step_2/actor");
    const double F = tb_forward_bound(m, 128 + 8, 1.0f);
    df_model_free(m);
    print_message("step 1 from the adapter: ppo_kl %.3g (bound %.3g)\n", df_test_metric(l1, "actor/ppo_kl"), F);
    assert_near(df_test_metric(l1, "actor/ppo_kl"), 0.0, F);
    json_decref(lines);
    const char *r8[] = {ap, "actor_rollout_ref.model.lora_rank=8"};
    assert_int_equal(grpo(world, "e", 1, r8, 2), DF_EINVAL);
    assert_last_error_mentions("has r 4");
    const char *none[] = {"actor_rollout_ref.model.lora_adapter_path=/nonexistent/adapter"};
    assert_int_equal(grpo(world, "e", 1, none, 1), DF_ENOTFOUND);
    assert_last_error_mentions("actor_rollout_ref.model.lora_adapter_path");
}

/* `distflow eval --lora-adapter` on the base model answers as the merged checkpoint does, and
 * df_lora_apply_peft (PEFT's merge_and_unload) gives that checkpoint's weights. One rank only
 * (the CLI runs as a child process). */
static void test_eval_adapter(void **state)
{
    (void)state;
    if (df_comm_size(world) > 1)
        return;
    df_model *base = load_model("model"), *trained = load_model("a/global_step_2/actor");
    char ad[512], data[512], o1[600], o2[600], l1[600], l2[600], m1[512], m2[512];
    snprintf(ad, sizeof ad, "%s/a/global_step_2/actor/lora_adapter", dir);
    assert_int_equal(df_lora_apply_peft(base, ad), DF_OK);
    assert_memory_equal(base->params, trained->params, (size_t)base->n_params * sizeof(float));
    df_model_free(base);
    df_model_free(trained);
    df_test_digits_inputs(dir, "eval.jsonl", 8, "openai/gsm8k", false);
    snprintf(data, sizeof data, "%s/eval.jsonl", dir);
    snprintf(m1, sizeof m1, "%s/model", dir);
    snprintf(m2, sizeof m2, "%s/a/global_step_2/actor", dir);
    snprintf(o1, sizeof o1, "%s/eval_adapter.jsonl", dir);
    snprintf(o2, sizeof o2, "%s/eval_merged.jsonl", dir);
    snprintf(l1, sizeof l1, "%s/eval_adapter.log", dir);
    snprintf(l2, sizeof l2, "%s/eval_merged.log", dir);
    const char *a1[] = {"eval", "--model", m1, "--lora-adapter", ad, "--data", data,
                        "--max-response-length", "8", "--output", o1, NULL};
    const char *a2[] = {"eval", "--model", m2, "--data", data, "--max-response-length", "8",
                        "--output", o2, NULL};
    df_cli_run r1 = {.log = l1}, r2 = {.log = l2};
    assert_int_equal(df_cli_exec(&r1, a1), 0);
    assert_int_equal(df_cli_exec(&r2, a2), 0);
    df_test_same_file(o1, o2);
    /* not an adapter directory: refused naming the option */
    const char *a3[] = {"eval", "--model", m1, "--lora-adapter", m1, "--data", data, NULL};
    assert_int_not_equal(df_cli_exec(&r1, a3), 0);
    char *log = df_cli_log(l1);
    assert_non_null(strstr(log, "--lora-adapter"));
    free(log);
}

/* critic.model.lora_rank (PPO): the critic trains adapters and its score head (PEFT's TOKEN_CLS);
 * its trunk's untargeted tensors stay the base's, and critic/lora_adapter (with the head) merged
 * onto any value model of that trunk is the saved critic. */
static void test_critic(void **state)
{
    (void)state;
    char cp[512];
    snprintf(cp, sizeof cp, "critic.model.path=%s/model", dir);
    const char *ov[] = {"algorithm.adv_estimator=gae", cp, "critic.ppo_mini_batch_size=2",
                        "critic.ppo_micro_batch_size_per_gpu=1", "critic.model.lora_rank=4",
                        "critic.model.lora_alpha=8", "critic.model.target_modules=[q_proj,down_proj]",
                        "actor_rollout_ref.model.lora_rank=0"};
    df_test_run_ok(grpo(world, "f", 2, ov, 8), "PPO with a LoRA critic");
    df_model *base = load_model("model"), *critic = load_model("f/global_step_2/critic");
    int moved = 0;
    for (int i = 0; i < base->n_tensors; i++) {
        const df_param_desc *d = &base->tensors[i];
        const df_param_desc *e = df_model_find_tensor(critic, d->name);
        if (!e) /* the LM head */
            continue;
        const bool same = !memcmp(base->params + d->offset, critic->params + e->offset,
                                  (size_t)d->numel * sizeof(float));
        if (strstr(d->name, "q_proj.weight") || strstr(d->name, "down_proj.weight"))
            moved += !same;
        else if (!same)
            fail_msg("critic: %s is not a LoRA target but changed", d->name);
    }
    assert_int_equal(moved, 2 * 2);
    assert_int_equal(df_model_to_value_model(&base, 123), DF_OK);
    char ad[512];
    snprintf(ad, sizeof ad, "%s/f/global_step_2/critic/lora_adapter", dir);
    if (df_lora_apply_peft(base, ad))
        fail_msg("%s", df_last_error());
    assert_memory_equal(base->params, critic->params, (size_t)base->n_params * sizeof(float));
    df_model_free(base);
    df_model_free(critic);
}

/* Two agent groups (a planner and a solver, each its own model) with adapters and a KL loss:
 * each group's reference is its own actor with the adapters disabled, no copy of a base made. */
static void test_agent_groups(void **state)
{
    (void)state;
    if (df_comm_size(world) > 1)
        return;
    char sub[600], yaml[4096];
    snprintf(sub, sizeof sub, "%s/agents", dir);
    assert_int_equal(df_mkdir_p(sub), 0);
    df_test_two_models(sub);
    write_chain(sub, "", "");
    job_yaml(sub, yaml, sizeof yaml);
    const char *ov[] = {"trainer.total_training_steps=1", "actor_rollout_ref.model.lora_rank=4",
                        "actor_rollout_ref.actor.use_kl_loss=true"};
    df_config *cfg = df_test_config(yaml, "agents.yaml", ov, 3);
    df_dag_worker *w = NULL;
    if (df_dag_worker_create(cfg, NULL, &w))
        fail_msg("%s", df_last_error());
    assert_int_equal(w->n_agents, 2);
    for (int g = 0; g < 2; g++) {
        df_agent_slot s = df_worker_slot(w, NULL);
        if (g)
            s = w->agents[1];
        assert_null(s.reference->model);
        assert_ptr_equal(s.reference->in_actor, s.actor->model);
        assert_non_null(df_actor_core(s.actor->model)->lora);
    }
    df_dag_worker_free(w);
    df_config_free(cfg);
}

/* exclude_modules drops v_proj from the targets [q_proj, v_proj, down_proj] (PEFT's pattern over
   every layer's module names): the adapter trains q_proj and down_proj only, the saved PEFT
   config names those two, and every v_proj weight stays the base's. */
static void test_exclude_modules(void **state)
{
    (void)state;
    const char *ov[] = {"actor_rollout_ref.model.exclude_modules=.*\\.v_proj"};
    df_test_run_ok(grpo(world, "x", 1, ov, 1), "LoRA GRPO without v_proj");
    char p[512];
    snprintf(p, sizeof p, "%s/x/global_step_1/actor/lora_adapter/adapter_config.json", dir);
    json_error_t e;
    json_t *o = json_load_file(p, 0, &e);
    assert_non_null(o);
    json_t *tm = json_object_get(o, "target_modules");
    assert_int_equal(json_array_size(tm), 2);
    assert_string_equal(json_string_value(json_array_get(tm, 0)), "down_proj");
    assert_string_equal(json_string_value(json_array_get(tm, 1)), "q_proj");
    json_decref(o);
    df_model *base = load_model("model"), *trained = load_model("x/global_step_1/actor");
    int moved = 0;
    for (int i = 0; i < base->n_tensors; i++) {
        const df_param_desc *d = &base->tensors[i];
        bool same = !memcmp(base->params + d->offset, trained->params + d->offset, (size_t)d->numel * sizeof(float));
        if (strstr(d->name, "v_proj.weight") && !same)
            fail_msg("%s changed: v_proj is excluded", d->name);
        moved += !same;
    }
    assert_int_equal(moved, 2 * 2); /* q_proj and down_proj of both layers */
    df_model_free(base);
    df_model_free(trained);
}

static void test_refused(void **state)
{
    (void)state;
    const char *bad[] = {"actor_rollout_ref.model.target_modules=[q_proj,qkv_proj]"};
    assert_int_equal(grpo(world, "c", 1, bad, 1), DF_EINVAL);
    assert_last_error_mentions("qkv_proj");
    assert_last_error_mentions("actor_rollout_ref.model.target_modules");
    /* exclude_modules in some layers only: adapters cover every layer here */
    const char *excl[] = {"actor_rollout_ref.model.exclude_modules=model\\.layers\\.0\\..*"};
    assert_int_equal(grpo(world, "c", 1, excl, 1), DF_EUNSUPPORTED);
    assert_last_error_mentions("actor_rollout_ref.model.exclude_modules (command line)");
    assert_last_error_mentions("excludes model.layers.0.self_attn.q_proj but not model.layers.1.self_attn.q_proj");
    char p[512];
    snprintf(p, sizeof p, "%s/c", dir);
    assert_false(df_dir_exists(p)); /* refused before any output */
}

static int setup(void **state)
{
    (void)state;
    if (df_comm_world(&world) || df_reward_register("test/digits", df_test_digit_share))
        return -1;
    return df_test_shared_inputs(world, "df_lora_train", 8, "test/digits", dir, sizeof dir);
}

static int teardown(void **state)
{
    (void)state;
    return df_test_shared_cleanup(world, dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frozen_base_and_merge),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_adapter_path),
        cmocka_unit_test(test_sft),
        cmocka_unit_test(test_eval_adapter),
        cmocka_unit_test(test_critic),
        cmocka_unit_test(test_agent_groups),
        cmocka_unit_test(test_exclude_modules),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
