/* The DAG worker's training loop: steps over the TaskGraph, validation, logging, checkpoints. */
#include "workers/embodied/embodied_worker.h"
#include "workers/worker_internal.h"

#include "util/killpoint.h"
#include "util/timeutil.h"
#include "util/warn.h"
#include "workers/common/data_metrics.h"
#include "workers/common/stop.h"
#include "workers/dag/async.h"
#include "workers/dag/checkpoint.h"
#include "workers/dag/console.h"
#include "workers/dag/evaluate.h"
#include "workers/dag/rollout_dump.h"
#include "workers/dag/val_generations.h"
#include "workers/dag/metrics_reduce.h"
#include "workers/dag/marft_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The step's line of metrics.jsonl, then trainer.logger's other sinks (rank 0); `sync`: the line durable
   before the checkpoint that follows it. */
static int log_metrics(df_dag_worker *w, const df_metrics *m, bool sync)
{
    if (w->rank != 0)
        return DF_OK;
    /* the run directory's config.yaml comes with its first line (a run that fails before it leaves
       nothing); a copy for the user, so failing to write it is a warning, not a lost run */
    if (!df_run_log_started(&w->log) && df_worker_save_config(w))
        df_warnf(df_worker_warn, w, "%s", df_last_error());
    return df_run_log_step(&w->log, w->step, m, sync);
}

static int validate(df_dag_worker *w, df_metrics *m)
{
    if (!w->val_ds)
        return DF_OK;
    double t0 = df_now();
    const df_config_opt_int *val_bs = &w->global.cfg.data.val_batch_size;
    int64_t vbs = val_bs->set ? val_bs->v : 0;
    /* each DP rank of the first stage validates its shard; its model-parallel replicas repeat it */
    df_eval_opts o = {.sp = w->rollout.val_sp, .n = w->global.cfg.actor_rollout_ref.rollout.val_kwargs.n,
                      .seed = df_rng_key(df_worker_seed(w), 0x7a1, 0, 0),
                      .batch_prompts = vbs, .label = w->console && w->rank == 0 ? "validate" : NULL,
                      .comm = w->group, .replica = w->data_layout.mp_rank != 0, .agent = w->rollout.agent};
    if (w->marft) /* the agents' chain, scored on the last agent's answers */
        o.generate = df_marft_val_generate, o.gen_user = w;
    df_eval_result res = {0};
    df_val_generations gen = {0};
    int rc = df_worker_rollout_sync(w);
    if (!rc)
        rc = df_val_generations_begin(w, &gen);
    o.dump = gen.f, o.with_step = true, o.step = w->step;
    if (!rc && w->embodied) /* control episodes: the success rate (siiRL's _validate_embodied) */
        rc = df_worker_embodied_validate(w, &o.sp, o.n, o.seed, m, &res.acc_mean, &res.n_responses);
    else if (!rc)
        rc = df_evaluate(w->rollout.engine, df_actor_model(w->actor.model), df_worker_marft_scorer_tok(w), &w->reward.cfg, w->val_ds,
                         &w->val_prompts, &o, m, &res);
    if (!rc && w->embodied)
        res.score_mean = res.acc_mean, res.n_prompts = (int64_t)w->con.prompts[1];
    rc = df_val_generations_end(w, &gen, rc);
    if (rc)
        return df_error_wrap(rc, "validation");
    df_metrics_set(m, "timing_s/testing", df_now() - t0);
    df_console_validation(w, &res, df_now() - t0);
    return DF_OK;
}

/* Aggregate across ranks, then throughput per rank from the job's tokens and the slowest rank. */
static int reduce_step_metrics(df_dag_worker *w, df_metrics *m)
{
    int rc = df_metrics_reduce(w->group, m);
    double tok = df_metrics_get(m, "perf/total_num_tokens", 0), t = df_metrics_get(m, "perf/time_per_step", 0);
    if (!rc && t > 0)
        df_metrics_set(m, "perf/throughput", tok / (t * w->group_size));
    if (!rc && df_metrics_has(m, "global_seqlen/max")) /* trainer.balance_batch's (handoff.c) */
        df_metrics_set(m, "global_seqlen/minmax_diff",
                       df_metrics_get(m, "global_seqlen/max", 0) - df_metrics_get(m, "global_seqlen/min", 0));
    return rc;
}

/* timing_per_token_ms/<stage> from the step's (reduced) timings and the tokens of the whole step batch:
   tok = this rank's (prompt, response) tokens, a model-parallel replica's zeros. Collective over
   w->group. */
static int timing_per_token(df_dag_worker *w, double tok[2], df_metrics *m)
{
    int rc = df_comm_allreduce(w->group, tok, 2, DF_COMM_FLOAT64, DF_COMM_SUM);
    if (!rc)
        df_compute_timing_per_token(m, tok[0], tok[1]);
    return rc;
}

/* critic/vf_explained_var of the whole step batch, as verl's: the sums of every DP rank (model-parallel
   replicas pass zeros) all-reduced, then the formula. Collective over w->group when there is a critic. */
static int global_explained_var(df_dag_worker *w, double s[DF_EV_NSUMS], df_metrics *m)
{
    if (!w->critic.model)
        return DF_OK;
    double ev;
    int rc = df_comm_allreduce(w->group, s, DF_EV_NSUMS, DF_COMM_FLOAT64, DF_COMM_SUM);
    if (!rc && df_explained_var(s, &ev))
        df_metrics_set(m, "critic/vf_explained_var", ev);
    return rc;
}

static int train_step(df_dag_worker *w)
{
    double ev_sums[DF_EV_NSUMS] = {0}, tok[2] = {0};
    double t0 = df_now();
    df_metrics *m = w->metrics;
    df_batch *b = NULL;
    int64_t epoch = df_dataloader_epoch(w->dl);
    int rc = df_worker_next_prompts(w, 0, &b);
    df_node_ctx ctx = {.worker = w, .step = w->step, .metrics = m};
    df_run_opts opts = {.release_batch = df_batch_free, .copy_batch = df_batch_copy,
                        .before_node = df_worker_before_node, .begin_pass = df_worker_begin_pass,
                        .skip_node = df_worker_marft_skip, .hook_user = w};
    w->metrics_group = -1;
    if (!rc)
        rc = df_task_graph_run(w->graph, &ctx, &b, &opts);
    if (!rc)
        rc = df_worker_agent_metrics(w, NULL);
    double other_tokens = 0; /* a chained multi-agent step: the agents' before the last */
    if (!rc && w->marft)
        rc = df_marft_step_metrics(w, b, m, ev_sums, &other_tokens);
    if (!rc) {
        double dt = df_now() - t0;
        df_metrics_set(m, "training/global_step", (double)w->step);
        df_metrics_set(m, "training/epoch", (double)epoch);
        df_compute_data_metrics(b, w->global.cfg.actor_rollout_ref.rollout.response_length,
                                w->global.cfg.data.max_prompt_length, m);
        df_metrics_set(m, "timing_s/step", dt);
        df_compute_throughput_metrics(b, dt, w->world, m);
        df_metrics_add(m, "perf/total_num_tokens", other_tokens);
        if (w->cur_layout.mp_rank != 0) /* a model-parallel replica: its tokens are counted once */
            df_metrics_set(m, "perf/total_num_tokens", 0);
        else
            df_explained_var_sums(b, ev_sums), df_step_token_counts(b, tok);
    }
    if (!rc)
        rc = df_worker_rollout_dump(w, b, m);
    df_batch_free(b);
    if (!rc)
        rc = reduce_step_metrics(w, m);
    if (!rc)
        rc = global_explained_var(w, ev_sums, m);
    if (!rc)
        rc = timing_per_token(w, tok, m);
    if (!rc)
        rc = df_worker_check_in_sync(w, df_actor_model(w->actor.model), "actor", m);
    if (!rc)
        rc = df_worker_check_critic_weights(w, m);
    if (!rc) /* the later agent groups' own models */
        rc = df_worker_check_agent_weights(w, m);
    return rc ? df_error_wrap(rc, "step %lld", (long long)w->step) : DF_OK;
}

void df_dag_worker_set_stop_flag(df_dag_worker *w, const volatile sig_atomic_t *flag)
{
    w->stop_flag = flag;
}

int df_dag_worker_stopped(const df_dag_worker *w)
{
    return w->stopped;
}

static int poll_stop(df_dag_worker *w, int *stop)
{
    return df_worker_poll_stop(w->comm, w->stop_flag, stop);
}

static int stopped(df_dag_worker *w, int flag, int64_t done, bool saved)
{
    w->stopped = flag;
    return df_worker_stopped(w->rank == 0, done, w->total_steps, saved, w->global.cfg.trainer.save_freq);
}

/* Updates trainer.skip_nonfinite_steps skipped in this step, on the console. */
static void warn_skipped(df_dag_worker *w, const df_metrics *m)
{
    static const char *const roles[] = {"actor", "critic"};
    for (int i = 0; i < 2; i++) {
        char key[64];
        snprintf(key, sizeof key, "%s/nonfinite_steps", roles[i]);
        double k = df_metrics_get(m, key, 0);
        if (k > 0)
            df_warnf(df_worker_warn, w, "step %lld: skipped %.0f %s update(s) with a non-finite loss or gradient "
                                        "norm (trainer.skip_nonfinite_steps=true)",
                     (long long)w->step, k, roles[i]);
    }
}

/* Validation before the first step (a resumed run's checkpoint run logged that one already), or the
   whole run with trainer.val_only. *only: the run ends here. */
static int validate_first(df_dag_worker *w, bool *only)
{
    const struct df_train_trainer *tr = &w->global.cfg.trainer;
    *only = tr->val_only;
    if (!w->val_ds || !(tr->val_only || (tr->val_before_train && w->resumed_step == 0)))
        return DF_OK;
    df_metrics_clear(w->metrics);
    int rc = validate(w, w->metrics);
    return rc ? rc : log_metrics(w, w->metrics, false);
}

static int fit_steps(df_dag_worker *w)
{
    const struct df_train_trainer *tr = &w->global.cfg.trainer;
    int64_t test_freq = tr->test_freq;
    int64_t save_freq = tr->save_freq;
    int rc = DF_OK, stop = 0;
    bool only = false;
    w->step = w->resumed_step;
    w->stopped = 0;
    w->con.t_fit = df_now();
    w->con.val_step = -1;
    w->con.saved_step = 0;
    df_console_banner(w);
    if ((rc = validate_first(w, &only)) || only) {
        if (!rc)
            df_console_summary(w, "validation only (trainer.val_only=true)");
        return rc;
    }
    if (w->resumed_step >= w->total_steps && w->rank == 0)
        fprintf(stderr, "[distflow] the checkpoint is at step %lld of %lld: nothing left to train\n",
                (long long)w->resumed_step, (long long)w->total_steps);
    /* a signal while loading: stop before the first step (the checkpoint resumed from, if any, stays) */
    if (w->resumed_step < w->total_steps && !(rc = poll_stop(w, &stop)) && stop)
        return stopped(w, stop, w->resumed_step, false);
    for (w->step = w->resumed_step + 1; w->step <= w->total_steps && !rc; w->step++) {
        bool last = w->step == w->total_steps;
        df_metrics_clear(w->metrics);
        rc = train_step(w);
        if (!rc && w->async) /* the rollout side samples from the new weights as soon as they arrive */
            rc = df_async_publish(w, w->step);
        if (!rc) {
            warn_skipped(w, w->metrics);
            df_console_step(w, w->metrics); /* before the validation and the save that follow it */
        }
        if (!rc && test_freq > 0 && (last || w->step % test_freq == 0))
            rc = validate(w, w->metrics);
        if (!rc && !last)
            rc = poll_stop(w, &stop);
        bool save = save_freq > 0 && (last || w->step % save_freq == 0 || stop);
        /* the line before the checkpoint: a resume from it keeps the line, one from an earlier
           checkpoint drops it (a line after its checkpoint would be lost to a kill between them) */
        if (!rc)
            rc = log_metrics(w, w->metrics, save);
        if (!rc)
            df_kill_point("metrics");
        if (!rc && save && !(rc = df_worker_checkpoint_save(w))) {
            df_console_saved(w);
            rc = df_worker_checkpoint_prune(w);
        }
        if (!rc && stop) {
            df_console_summary(w, "stopped on request");
            return stopped(w, stop, w->step, save);
        }
    }
    if (!rc)
        df_console_summary(w, "finished");
    return rc;
}

int df_dag_worker_fit(df_dag_worker *w)
{
    if (!w->async)
        return fit_steps(w);
    if (w->async->rollout_side)
        return df_async_rollout_run(w);
    /* the rollout side starts from the trainer's weights (a resumed run's too) */
    int rc = df_async_publish(w, w->resumed_step);
    if (!rc)
        rc = fit_steps(w);
    if (!rc || rc == DF_ESTOPPED) {
        int frc = df_async_finish(w, rc ? w->stopped : -1);
        if (frc)
            rc = frc;
    }
    return rc;
}
