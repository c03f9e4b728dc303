/* The DAG worker's console (console.h): the saved config, the banner, step lines, the summary. */
#include "workers/dag/console.h"
#include "workers/dag/marft_run.h"

#include "util/fsutil.h"
#include "util/timeutil.h"
#include "workers/common/model_info.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool printing(const df_dag_worker *w)
{
    return w->console && w->rank == 0;
}

int df_worker_save_config(df_dag_worker *w)
{
    if (w->rank != 0)
        return DF_OK;
    char *text = NULL, *path = df_path_join(w->out_dir, "config.yaml");
    size_t len = 0;
    FILE *f = path ? open_memstream(&text, &len) : NULL;
    int rc = f ? df_mkdir_p(w->out_dir) : df_error(DF_ENOMEM, "out of memory");
    if (!rc)
        rc = df_config_dump(w->cfg, f);
    if (f && fclose(f) && !rc)
        rc = df_error(DF_ENOMEM, "out of memory writing the config");
    char *had = NULL;
    size_t had_len = 0;
    /* a resumed run with the same config leaves the file alone (no write on a disk that may be full) */
    bool same = !rc && !df_read_file(path, &had, &had_len) && had_len == len && !memcmp(had, text, len);
    df_clear_error();
    if (!rc && !same)
        rc = df_write_file_atomic(path, text, len);
    free(had);
    free(text);
    free(path);
    return rc ? df_error_wrap(rc, "saving the resolved config") : DF_OK;
}

/* ---- the banner ---- */

static void banner_data(const df_dag_worker *w)
{
    const struct df_train_data *d = &w->global.cfg.data;
    printf("data: %lld training prompts", (long long)w->con.prompts[0]);
    if (w->con.filtered[0])
        printf(" (%lld longer than data.max_prompt_length=%lld dropped)", (long long)w->con.filtered[0],
               (long long)d->max_prompt_length);
    if (w->val_ds)
        printf(", %lld validation prompts", (long long)w->con.prompts[1]);
    if (w->val_ds && w->con.filtered[1])
        printf(" (%lld dropped)", (long long)w->con.filtered[1]);
    printf("; %lld prompts x %lld responses a step", (long long)d->train_batch_size,
           (long long)df_worker_n_samples(w));
    if (d->gen_batch_size != d->train_batch_size) /* DAPO: rounds of gen_batch_size, cut to the step's */
        printf(", generated in rounds of %lld prompts (data.gen_batch_size)", (long long)d->gen_batch_size);
    printf("\n");
}

/* Ranks and machines; this rank's nodes in order with their data-parallel x model-parallel ranks. */
static void banner_world(const df_dag_worker *w)
{
    const df_train_config *t = &w->global.cfg;
    int64_t nnodes = t->trainer.nnodes;
    printf("world: %d rank%s on %lld machine%s (%lld per machine)", w->world, w->world == 1 ? "" : "s",
           (long long)nnodes, nnodes == 1 ? "" : "s", (long long)(w->world / nnodes));
    if (strcmp(t->trainer.device, "cpu"))
        printf("; trainer.device=%s: actor, reference, critic and rollout forward / backward there%s",
               t->trainer.device,
               df_data_buffers_on_device(w->buffers) ? ", the data coordinator's payloads over its fabric" : "");
    else
        printf("; cpu");
    printf("\n");
    const df_train_core *core[2] = {df_actor_core(w->actor.model),
                                    w->critic.model ? df_critic_core(w->critic.model) : NULL};
    for (int i = 0; i < 2; i++) /* fsdp_config.fsdp_size (docs/sharding.md) */
        if (core[i] && core[i]->dp)
            printf("optimizer: the %s's AdamW state %s %d data-parallel ranks%s\n", core[i]->who,
                   df_train_core_sharded(core[i]) ? "sharded (ZeRO-1) over its" : "whole on each of its",
                   df_comm_size(core[i]->dp), core[i]->dev_optim ? ", on the device" : "");
    df_node **order = NULL;
    int n = 0;
    if (df_task_graph_topo_order(w->graph, &order, &n)) {
        df_clear_error(); /* the graph ran its checks at setup: only memory can fail here */
        return;
    }
    printf("pipeline %s", w->plan->pipeline);
    if (w->plan->n_subgraphs > 1)
        printf(" (rank 0's subgraph %s of %d; `distflow plan` shows all)", df_task_graph_id(w->graph),
               w->plan->n_subgraphs);
    printf(", nodes in order (data-parallel x model-parallel ranks):");
    for (int i = 0; i < n; i++) {
        const df_node_layout *l = df_worker_node_layout(w, order[i]);
        printf("%s %s %dx%d", i ? "," : "", order[i]->node_id, l ? l->dp_size : 0, l ? l->mp : 0);
    }
    printf("\n");
    free(order);
}

/* The rollout engine: its precision and the memory it preallocated (the KV cache's share). */
static void banner_rollout(const df_dag_worker *w)
{
    if (!w->rollout.engine)
        return;
    df_rollout_options o;
    int64_t kv = 0, total = 0;
    df_rollout_engine_options(w->rollout.engine, &o);
    df_rollout_engine_memory(w->rollout.engine, &kv, &total);
    const char *weights = o.dtype != DF_ROLLOUT_BF16 ? "float32"
                          : w->rollout.shared_w16 ? "bfloat16, the actor's bf16 weights shared"
                                                  : "bfloat16 weight copy";
    printf("rollout: %s (%s KV cache), %lld sequences x %lld tokens, KV cache %.1f MiB of %.1f MiB "
           "preallocated%s, %lld tokens per forward\n", weights,
           o.dtype == DF_ROLLOUT_BF16 ? "bf16" : "f32", (long long)o.max_num_seqs,
           (long long)o.max_seq_len, (double)kv / (1 << 20), (double)total / (1 << 20),
           o.free_cache_engine ? " (its pages freed after every rollout: free_cache_engine)" : "",
           (long long)o.max_num_batched_tokens);
}

static void banner_outputs(const df_dag_worker *w)
{
    const struct df_train_trainer *tr = &w->global.cfg.trainer;
    printf("outputs: %s/", w->out_dir);
    if (tr->save_freq > 0)
        printf(" (checkpoints global_step_<N>/ every %lld step%s and at the end,", (long long)tr->save_freq,
               tr->save_freq == 1 ? "" : "s");
    else
        printf(" (no checkpoints: trainer.save_freq=%lld,", (long long)tr->save_freq);
    printf(" metrics.jsonl, config.yaml)");
    if (tr->validation_data_dir)
        printf("; validation responses %s/<step>.jsonl", tr->validation_data_dir);
    printf("\n");
    if (w->con.resumed_from[0] && w->con.resumed_world != w->world)
        printf(
            "start: resuming from %s (trainer.resume_mode=%s), written by %lld ranks, on %d: the same data "
            "order, gradients summed in another order (within rounding, not bit for bit): steps %lld to "
            "%lld\n",
            w->con.resumed_from, tr->resume_mode, (long long)w->con.resumed_world, w->world,
            (long long)w->resumed_step + 1, (long long)w->total_steps);
    else if (w->con.resumed_from[0])
        printf("start: resuming from %s (trainer.resume_mode=%s): steps %lld to %lld\n", w->con.resumed_from,
               tr->resume_mode, (long long)w->resumed_step + 1, (long long)w->total_steps);
    else
        printf("start: fresh (trainer.resume_mode=%s): steps 1 to %lld\n", tr->resume_mode,
               (long long)w->total_steps);
}

/* A multi-agent graph: its layout and each later agent group's model (group 0's is shown above). */
static void banner_agents(const df_dag_worker *w)
{
    if (w->n_agents <= 1)
        return;
    const df_marft_run *r = w->marft;
    printf("agents: %d agent groups, ", w->n_agents);
    if (r) {
        printf("chained (");
        for (int a = 0; a < r->n_agents; a++)
            printf("%s%s", a ? " -> " : "", r->rollout[a]->node_id);
        printf("), up to %lld turn%s, %s", (long long)r->max_turns, r->max_turns == 1 ? "" : "s",
               r->env ? "environment " : "no environment");
        if (r->env)
            printf("%s%s", r->env->name ? r->env->name : "(plugin)", r->rewards_with_env ? " (its rewards)" : "");
    } else {
        printf("independent (each samples the step's prompts)");
    }
    printf("\n");
    for (int g = 1; g < w->n_agents; g++) {
        const df_agent_slot *s = &w->agents[g];
        printf("  agent %d: %s%s\n", g, s->model_dir, s->tok != w->tok ? " (its own tokenizer)" : "");
    }
}

void df_console_banner(const df_dag_worker *w)
{
    if (!printing(w))
        return;
    printf("== distflow %s train\n", df_version());
    int n = 0;
    printf("config (the full resolved copy: %s/config.yaml), keys set:\n", w->out_dir);
    if (df_config_dump_set(w->cfg, "  ", stdout, &n))
        df_clear_error(); /* a console that cannot be written is no reason to stop training */
    else if (n == 0)
        printf("  (none: every key has its default)\n");
    df_print_model_info(stdout, w->model_dir, df_actor_model(w->actor.model), df_actor_bf16(w->actor.model),
                        df_actor_core(w->actor.model)->lora, w->tokenizer_dir, w->tok);
    banner_agents(w);
    banner_data(w);
    banner_world(w);
    banner_rollout(w);
    banner_outputs(w);
    fflush(stdout);
}

/* ---- during the run ---- */

void df_console_step(const df_dag_worker *w, const df_metrics *m)
{
    static const struct {
        const char *key, *label, *fmt;
    } cols[] = {
        {"critic/score/mean", "score", "%.3f"},
        {"response_length/mean", "resp_len", "%.1f"},
        {"actor/pg_loss", "pg_loss", "%.4f"},
        {"actor/kl_loss", "kl_loss", "%.4f"},
        {"actor/entropy", "entropy", "%.3f"},
        {"actor/pg_clipfrac", "clipfrac", "%.3f"},
        {"actor/grad_norm", "grad_norm", "%.3f"},
        {"critic/vf_loss", "vf_loss", "%.4f"},
        {"actor/lr", "lr", "%.2e"},
        {"timing_s/gen", "gen", "%.1fs"},
        {"timing_s/step", "step", "%.1fs"},
        {"perf/throughput", "tok/s/rank", "%.0f"}, /* verl's: tokens per second per rank (GPU) */
    };
    if (!printing(w))
        return;
    printf("step %lld/%lld", (long long)w->step, (long long)w->total_steps);
    for (size_t i = 0; i < sizeof cols / sizeof *cols; i++) {
        if (df_metrics_has(m, cols[i].key)) {
            printf(" | %s ", cols[i].label);
            printf(cols[i].fmt, df_metrics_get(m, cols[i].key, 0));
        }
        for (int g = 0; w->n_agents > 1 && g < w->n_agents; g++) { /* a multi-agent node's, per group */
            char key[128];
            snprintf(key, sizeof key, "agent_%d_%s", g, cols[i].key);
            if (!df_metrics_has(m, key) || df_metrics_has(m, cols[i].key))
                continue;
            printf(" | %s[%d] ", cols[i].label, g);
            printf(cols[i].fmt, df_metrics_get(m, key, 0));
        }
    }
    double tok = df_metrics_get(m, "perf/total_num_tokens", 0), t = df_metrics_get(m, "perf/time_per_step", 0);
    if (w->world > 1 && t > 0)
        printf(" | tok/s %.0f", tok / t);
    printf("\n");
    fflush(stdout);
}

void df_console_validation(df_dag_worker *w, const df_eval_result *res, double seconds)
{
    w->con.val_step = w->step;
    w->con.val_score = res->score_mean;
    w->con.val_acc = res->acc_mean;
    if (!printing(w))
        return;
    printf("validation at step %lld: score %.4f acc %.4f over %lld responses (%.1fs)\n", (long long)w->step,
           res->score_mean, res->acc_mean, (long long)res->n_responses, seconds);
    fflush(stdout);
}

void df_console_saved(df_dag_worker *w)
{
    w->con.saved_step = w->step;
    if (!printing(w))
        return;
    printf("saved %s/global_step_%lld\n", w->out_dir, (long long)w->step);
    fflush(stdout);
}

/* ---- the summary ---- */

void df_console_summary(const df_dag_worker *w, const char *how)
{
    if (!printing(w))
        return;
    double dt = df_now() - w->con.t_fit;
    int64_t done = w->step > w->total_steps ? w->total_steps : w->step, ran = done - w->resumed_step;
    printf("== %s: ", how);
    if (ran > 0)
        printf("steps %lld to %lld of %lld in %.1fs (%.1fs a step)", (long long)w->resumed_step + 1,
               (long long)done, (long long)w->total_steps, dt, dt / (double)ran);
    else
        printf("no step trained (%.1fs)", dt);
    if (ran > 0 && df_metrics_has(w->metrics, "critic/score/mean"))
        printf("; last step's score %.4f", df_metrics_get(w->metrics, "critic/score/mean", 0));
    printf("\n");
    if (w->con.val_step >= 0)
        printf("validation at step %lld: score %.4f acc %.4f\n", (long long)w->con.val_step, w->con.val_score,
               w->con.val_acc);
    if (w->con.saved_step > 0)
        printf("checkpoint: %s/global_step_%lld (the same command resumes from it; its actor/ is a "
               "Hugging Face model directory)\n",
               w->out_dir, (long long)w->con.saved_step);
    else
        printf("checkpoint: none written by this run (trainer.save_freq=%lld)\n",
               (long long)w->global.cfg.trainer.save_freq);
    printf("metrics: %s/metrics.jsonl; config: %s/config.yaml\n", w->out_dir, w->out_dir);
    fflush(stdout);
}
