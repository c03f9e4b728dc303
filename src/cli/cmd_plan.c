/* distflow plan — print (and optionally draw) the DAG plan of a train config. */
#include "cli/cli.h"

#include "distflow/config.h"
#include "distflow/train_config.h"
#include "distflow/scheduler.h"
#include "distflow/worker.h"
#include "util/fsutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *PLAN_USAGE =
    "CONFIG.yaml [key=value ...] | key=value ... [--world N] [--dot FILE]\n\n"
    "Show how `distflow train` would run this config on N ranks: the built-in pipeline chosen by\n"
    "algorithm.workflow_type / adv_estimator, its irreducible subgraphs (siiRL\n"
    "discover_and_split_parallel_paths), the rank -> subgraph assignment over trainer.nnodes\n"
    "machines (siiRL TaskScheduler) and the process groups (siiRL ProcessGroupManager). N is\n"
    "what `train` would run with: the mpirun world when started under mpirun, else 1; --world N\n"
    "plans for `mpirun -np N` from here. The config is first checked as `distflow train` checks it\n"
    "on that many ranks, its files included (df_train_check: the same checks and messages as\n"
    "`distflow config check --world N`). With actor_rollout_ref.rollout.mode=async the last\n"
    "rollout.nnodes x rollout.n_gpus_per_node ranks are the rollout side (docs/async.md): the\n"
    "assignment covers the others, and the rollout side and its weights group are shown last.\n"
    "--dot writes the plan as a Graphviz file.";

/*
 * A multi-agent (siiRL MARFT) workflow the checks refuse still has its plan shown, agent groups
 * included, before the refusal (docs/multi_agent.md): what a user adapting siiRL's file needs to
 * see. The refusal's message is kept for df_cli_fail.
 */
static void show_refused_agents(const df_config *cfg, int world, int code)
{
    char *msg = strdup(df_last_error());
    df_plan *p = NULL;
    if (msg && cfg && !df_train_plan(cfg, world, NULL, NULL, &p) && p->n_agent_groups > 1) {
        printf("== planned for %d rank%s: a multi-agent graph, shown but refused (below)\n", world,
               world == 1 ? "" : "s");
        df_plan_print(p, stdout);
        fflush(stdout);
    }
    df_plan_free(p);
    if (msg)
        df_error(code, "%s", msg);
    free(msg);
}

int df_cmd_plan(int argc, char **argv)
{
    const char *dot = NULL;
    int64_t world = 0;
    df_opt opts[] = {
        {"world", DF_OPT_INT, &world, "ranks of the job, as `mpirun -np` (default: this job's, 1 outside mpirun)",
         false},
        {"dot", DF_OPT_PATH, &dot, "write the plan as Graphviz DOT to FILE (not the CONFIG)", false},
        {0},
    };
    char *pos[512];
    int n_pos, code;
    if (df_cli_parse("plan", PLAN_USAGE, opts, argc, argv, pos, 512, &n_pos, &code))
        return code;
    if (n_pos < 1) {
        fprintf(stderr, "distflow plan: error: missing CONFIG.yaml or key=value overrides (see --help)\n");
        return 2;
    }
    if (dot && df_same_file(dot, pos[0])) {
        fprintf(stderr, "distflow plan: error: --dot names the config file %s: writing it would destroy the "
                        "config\n", pos[0]);
        return 2;
    }
    int rank = 0;
    if (df_cli_default_world("plan", opts[0].seen, &world, &rank))
        return 1;
    df_config *cfg = NULL;
    df_plan *plan = NULL;
    char *text = NULL;
    int rc = df_cli_load_config(df_config_schema_train(), pos, n_pos, &cfg);
    if (!rc)
        rc = df_train_check(cfg, (int)world, rank == 0 ? df_cli_warn : NULL, "plan", &plan);
    if (!rc && rank == 0) {
        printf("== planned for %lld rank%s (%s)\n", (long long)world, world == 1 ? "" : "s",
               opts[0].seen ? "--world" : "as `distflow train` started the same way; --world N for others");
        rc = df_plan_print(plan, stdout);
    }
    if (!rc && dot && rank == 0 && !(rc = df_plan_dot(plan, &text)))
        rc = df_write_file_atomic(dot, text, strlen(text));
    if (!rc && dot && rank == 0)
        printf("\nwrote %s\n", dot);
    if (rc && rank == 0)
        show_refused_agents(cfg, (int)world, rc);
    if (rc && rank == 0)
        df_cli_fail("plan");
    free(text);
    df_plan_free(plan);
    df_config_free(cfg);
    if (df_comm_shutdown() && !rc)
        rc = df_cli_fail("plan");
    return rc ? 1 : 0;
}
