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
    "CONFIG.yaml [key=value ...] [--dot FILE]\n\n"
    "Show how `distflow train` would run this config, without loading models or data: the\n"
    "built-in pipeline chosen by algorithm.workflow_type / adv_estimator, its irreducible\n"
    "subgraphs (siiRL discover_and_split_parallel_paths), the rank -> subgraph assignment over\n"
    "trainer.nnodes x trainer.n_gpus_per_node (siiRL TaskScheduler) and the process groups\n"
    "(siiRL ProcessGroupManager). --dot writes the plan as a Graphviz file.\n"
    "The config is first checked as `distflow train` checks it on that many ranks\n"
    "(df_train_check: the same checks and messages as `distflow config check --world N`).";

int df_cmd_plan(int argc, char **argv)
{
    const char *dot = NULL;
    df_opt opts[] = {
        {"dot", DF_OPT_STR, &dot, "write the plan as Graphviz DOT to FILE", false},
        {0},
    };
    char *pos[512];
    int n_pos, code;
    if (df_cli_parse("plan", PLAN_USAGE, opts, argc, argv, pos, 512, &n_pos, &code))
        return code;
    if (n_pos < 1) {
        fprintf(stderr, "distflow plan: error: missing CONFIG.yaml (see --help)\n");
        return 2;
    }
    df_config *cfg = NULL;
    df_plan *plan = NULL;
    char *text = NULL;
    int rc = df_config_load(df_config_schema_train(), pos[0], (const char *const *)pos + 1, n_pos - 1, &cfg);
    df_train_config t;
    if (!rc)
        rc = df_train_config_resolve(cfg, &t);
    if (!rc) { /* the job `train` would run: nnodes x n_gpus_per_node ranks */
        int64_t world = t.trainer.nnodes * t.trainer.n_gpus_per_node;
        rc = world > 1 << 20 ? df_error(DF_EINVAL, "%s: trainer.nnodes x trainer.n_gpus_per_node is too large",
                                        df_config_where(cfg, "trainer.nnodes"))
                             : df_train_check(cfg, (int)world, df_cli_warn, "plan", &plan);
    }
    if (!rc)
        rc = df_plan_print(plan, stdout);
    if (!rc && dot && !(rc = df_plan_dot(plan, &text)))
        rc = df_write_file_atomic(dot, text, strlen(text));
    if (!rc && dot)
        printf("\nwrote %s\n", dot);
    if (rc)
        df_cli_fail("plan");
    free(text);
    df_plan_free(plan);
    df_config_free(cfg);
    return rc ? 1 : 0;
}
