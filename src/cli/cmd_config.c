/* distflow config show | check | help */
#include "cli/cli.h"

#include "distflow/config.h"
#include "distflow/worker.h"

#include <stdio.h>
#include <string.h>

static const char *USAGE =
    "show CONFIG [key=value ...] | check CONFIG [key=value ...] | help [PREFIX]\n"
    "(CONFIG may be left out: the defaults, then the key=value overrides)\n\n"
    "  show   print the resolved configuration (file + overrides + defaults), with\n"
    "         '# where' comments on values that are not defaults\n"
    "  check  load a `train` config and run every check `distflow train` (and\n"
    "         `distflow plan`) runs before loading models or data, for a job of\n"
    "         --world N ranks (the `mpirun -np`; default: the ranks `train` started\n"
    "         the same way would have, 1 outside mpirun): unsupported settings, the\n"
    "         plan, the pipeline or workflow file (executables, plugins read without\n"
    "         loading them, per-node config keys), model-parallel sizes, batch sizes,\n"
    "         algorithm, KL controller and reward manager names, then the files: model\n"
    "         directories, data files and a scorer for every data_source; warnings go to\n"
    "         stderr; prints 'ok' and exits 0 when it passes. `train` configs only\n"
    "         (not with --sft)\n"
    "  help   list the documented keys (type, default, help), optionally under PREFIX";

/* `config check`: load, then what `train` checks on `world` ranks before it loads anything. */
static int check(const df_config_schema *schema, char **pos, int n_pos, bool given, int64_t world)
{
    int rank = 0;
    if (df_cli_default_world("config", given, &world, &rank))
        return 1;
    df_config *cfg;
    int rc = df_cli_load_config(schema, pos + 1, n_pos - 1, &cfg);
    if (!rc) {
        rc = df_train_check(cfg, (int)world, rank == 0 ? df_cli_warn : NULL, "config", NULL);
        df_config_free(cfg);
    }
    if (rc && rank == 0)
        df_cli_fail("config");
    else if (!rc && rank == 0)
        printf("ok\n");
    if (df_comm_shutdown() && !rc)
        rc = df_cli_fail("config");
    return rc ? 1 : 0;
}

int df_cmd_config(int argc, char **argv)
{
    bool sft = false;
    int64_t world = 0;
    df_opt opts[] = {
        {"sft", DF_OPT_FLAG, &sft, "use the `distflow sft` schema instead of `train`", false},
        {"world", DF_OPT_INT, &world,
         "check only: ranks of the job, as `mpirun -np` (default: this job's, 1 outside mpirun)", false},
        {0}};
    char *pos[256];
    int n_pos, code;
    if (df_cli_parse("config", USAGE, opts, argc, argv, pos, 256, &n_pos, &code))
        return code;
    const df_config_schema *schema = sft ? df_config_schema_sft() : df_config_schema_train();
    if (n_pos < 1 || (strcmp(pos[0], "show") && strcmp(pos[0], "check") && strcmp(pos[0], "help")))
        return df_cli_bad_subcommand("config", USAGE, n_pos ? pos[0] : NULL);
    if (opts[1].seen && strcmp(pos[0], "check")) { /* show and help do not depend on the ranks */
        fprintf(stderr, "distflow config: error: --world is the job size `check` checks for; %s takes none\n",
                pos[0]);
        return 2;
    }
    if (!strcmp(pos[0], "help") && n_pos == 2 && !*pos[1]) { /* '' would list every key, as no PREFIX does */
        fprintf(stderr, "distflow config: error: help PREFIX expects a key prefix, got '' (leave it out "
                        "to list every key)\n");
        return 2;
    }
    if (!strcmp(pos[0], "help") && n_pos > 2) {
        fprintf(stderr, "distflow config: error: help takes one PREFIX, got '%s' and '%s'\n", pos[1], pos[2]);
        return 2;
    }
    if (n_pos >= 1 && !strcmp(pos[0], "help")) {
        if (df_config_schema_print(schema, n_pos > 1 ? pos[1] : NULL, stdout))
            return df_cli_fail("config");
        return 0;
    }
    if (n_pos >= 1 && !strcmp(pos[0], "check") && sft) {
        fprintf(stderr, "distflow config: error: check runs the `train` validator; SFT has none beyond the "
                        "schema, so `distflow config show --sft CONFIG` checks an SFT config's keys, types "
                        "and bounds, and `distflow sft` the rest when it starts\n");
        return 2;
    }
    if (n_pos == 1) { /* show or check */
        fprintf(stderr, "distflow config: error: %s needs a CONFIG file or key=value overrides (see --help)\n",
                pos[0]);
        return 2;
    }
    if (n_pos >= 2 && !strcmp(pos[0], "check"))
        return check(schema, pos, n_pos, opts[1].seen, world);
    if (n_pos >= 2 && !strcmp(pos[0], "show")) {
        df_config *cfg;
        if (df_cli_load_config(schema, pos + 1, n_pos - 1, &cfg))
            return df_cli_fail("config");
        int rc = df_config_dump(cfg, stdout);
        df_config_free(cfg);
        return rc ? df_cli_fail("config") : 0;
    }
    df_cli_usage("config", USAGE, opts);
    return 2;
}
