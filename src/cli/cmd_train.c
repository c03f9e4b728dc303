/* distflow train | sft */
#include "cli/cli.h"

#include "distflow/comm.h"
#include "distflow/config.h"
#include "distflow/worker.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

static const char *TRAIN_USAGE =
    "CONFIG.yaml [key=value ...] | key=value ...\n\n"
    "RL training (GRPO and the PPO family) with siiRL / verl configuration keys: the YAML file,\n"
    "then Hydra-style dotted overrides, e.g. actor_rollout_ref.rollout.n=8 (without a file: the\n"
    "defaults, then the overrides, as verl's main_ppo command line). The DAG worker walks\n"
    "the built-in pipeline chosen by algorithm.adv_estimator / workflow_type every step.\n"
    "Metrics: the console and <trainer.default_local_dir>/metrics.jsonl.\n"
    "`distflow config help` lists every key.";

static const char *SFT_USAGE =
    "CONFIG.yaml [key=value ...] | key=value ...\n\n"
    "Supervised fine-tuning with verl's SFT trainer keys (data.prompt_key / data.response_key as\n"
    "dotted paths into each JSON line, model.partial_pretrain, optim.*, trainer.*). Saves\n"
    "<trainer.default_local_dir>/global_step_<N> as a Hugging Face directory. Under\n"
    "`mpirun -np N` the N ranks train data-parallel: each its 1/N of the rows and of every batch.\n"
    "`distflow config help --sft` lists every key.";

/* Parse CONFIG + overrides into a resolved config. */
static int load(const char *cmd, const char *usage, const df_config_schema *schema, int argc,
                char **argv, df_config **cfg, int *code, bool report)
{
    char *pos[512];
    int n_pos;
    df_opt opts[] = {{0}};
    if (df_cli_parse(cmd, usage, opts, argc, argv, pos, 512, &n_pos, code))
        return 1;
    if (n_pos < 1) {
        if (report)
            fprintf(stderr, "distflow %s: error: missing CONFIG.yaml or key=value overrides (see --help)\n", cmd);
        *code = 2;
        return 1;
    }
    if (df_cli_load_config(schema, pos, n_pos, cfg)) {
        *code = report ? df_cli_fail(cmd) : 1;
        return 1;
    }
    return 0;
}

/* SIGINT / SIGTERM: the first asks the fit loop to stop at the next step boundary (it polls the
   flag); a second one ends the process at once with the signal's default action. */
static volatile sig_atomic_t g_stop;

static void on_stop_signal(int sig)
{
    if (g_stop) {
        signal(sig, SIG_DFL); /* both async-signal-safe */
        raise(sig);
        return;
    }
    g_stop = sig;
}

static void catch_stop_signals(void)
{
    static const int sigs[] = {SIGINT, SIGTERM};
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* reads and writes in progress carry on */
    for (int i = 0; i < 2; i++)
        if (!sigaction(sigs[i], &sa, &old) && old.sa_handler == SIG_IGN)
            sigaction(sigs[i], &old, NULL); /* ignored by whoever started us (`cmd &`): keep it so */
}

/*
 * Under mpirun every rank runs this. A config error is the same on every rank,
 * so rank 0 alone reports it and every rank exits. An error inside the worker
 * may hit one rank while the others wait in a collective: that rank reports
 * it (rank, node, message) and ends the whole job with MPI_Abort. A stop on
 * SIGINT / SIGTERM (docs/checkpoints.md) exits 130 / 143 on every rank.
 */
int df_cmd_train(int argc, char **argv)
{
    df_comm *world = NULL;
    if (df_comm_world(&world))
        return df_cli_fail("train");
    int rank = df_comm_rank(world), size = df_comm_size(world);
    df_config *cfg;
    df_dag_worker *w = NULL;
    int code;
    if (load("train", TRAIN_USAGE, df_config_schema_train(), argc, argv, &cfg, &code, rank == 0)) {
        df_comm_shutdown();
        return code;
    }
    catch_stop_signals();
    int rc = df_dag_worker_create(cfg, world, &w);
    if (!rc) {
        df_dag_worker_set_stop_flag(w, &g_stop);
        rc = df_dag_worker_fit(w);
    }
    int stopped = rc == DF_ESTOPPED ? df_dag_worker_stopped(w) : 0;
    if (stopped) { /* every rank stopped at the same boundary: a clean exit, 128 + the signal */
        df_dag_worker_free(w);
        df_config_free(cfg);
        df_comm_shutdown();
        return 128 + stopped;
    }
    if (rc && size > 1) {
        fprintf(stderr, "distflow train: error on rank %d of %d: %s\n", rank, size, df_last_error());
        fflush(stderr);
        df_comm_abort(1);
    }
    if (rc)
        df_cli_fail("train");
    df_dag_worker_free(w);
    df_config_free(cfg);
    if (df_comm_shutdown() && !rc)
        rc = df_cli_fail("train");
    return rc ? 1 : 0;
}

/* `distflow sft`: under mpirun each rank its shard of the data (df_sft_run agrees every failure, so
   every rank returns and ends MPI itself). SIGINT / SIGTERM stop it as they stop train. */
int df_cmd_sft(int argc, char **argv)
{
    df_comm *world = NULL;
    if (df_comm_world(&world))
        return df_cli_fail("sft");
    int rank = df_comm_rank(world), size = df_comm_size(world);
    df_config *cfg;
    int code;
    if (load("sft", SFT_USAGE, df_config_schema_sft(), argc, argv, &cfg, &code, rank == 0)) {
        df_comm_shutdown();
        return code;
    }
    catch_stop_signals();
    int stopped = 0;
    int rc = df_sft_run(cfg, &(df_sft_opts){.comm = world, .stop = &g_stop}, &stopped);
    if (rc == DF_ESTOPPED) { /* every rank stopped at the same boundary: 128 + the signal */
        df_config_free(cfg);
        df_comm_shutdown();
        return 128 + stopped;
    }
    if (rc && size > 1) {
        fprintf(stderr, "distflow sft: error on rank %d of %d: %s\n", rank, size, df_last_error());
        fflush(stderr);
    } else if (rc) {
        df_cli_fail("sft");
    }
    df_config_free(cfg);
    if (df_comm_shutdown() && !rc)
        rc = df_cli_fail("sft");
    return rc ? 1 : 0;
}
