/* distflow config show | check | help */
#include "cli/cli.h"

#include "distflow/config.h"

#include <stdio.h>
#include <string.h>

static const char *USAGE =
    "show CONFIG [key=value ...] | check CONFIG [key=value ...] | help [PREFIX]\n\n"
    "  show   print the resolved configuration (file + overrides + defaults), with\n"
    "         '# where' comments on values that are not defaults\n"
    "  check  load a `train` config and run the validator `distflow train` runs first\n"
    "         (batch sizes, algorithm, KL controller and reward manager names; not the\n"
    "         pipeline or the models) for a job of --world N ranks (the `mpirun -np`,\n"
    "         default 1): as in `train`, the actor has N / actor_rollout_ref.actor.\n"
    "         ulysses_sequence_parallel_size data-parallel ranks, an error when that\n"
    "         does not divide N; warnings go to stderr; prints 'ok' and exits 0 when it\n"
    "         passes. `train` configs only (not with --sft)\n"
    "  help   list the documented keys (type, default, help), optionally under PREFIX";

/* The actor's data-parallel size on `world` ranks, as the worker's layout: world / its sequence-parallel size. */
static int actor_dp_size(const df_config *cfg, int64_t world, int *dp)
{
    const char *key = "actor_rollout_ref.actor.ulysses_sequence_parallel_size";
    int64_t mp = df_config_int(cfg, key);
    if (world < 1 || world > 1 << 20)
        return df_error(DF_EINVAL, "--world must be between 1 and 1048576, got %lld", (long long)world);
    if (world % mp)
        return df_error(DF_EINVAL, "%s=%lld (%s) does not divide --world %lld", key, (long long)mp,
                        df_config_where(cfg, key), (long long)world);
    *dp = (int)(world / mp);
    return DF_OK;
}

/* `config check`: load, then df_config_validate_train_ex on the actor's data-parallel ranks. */
static int check(const df_config_schema *schema, char **pos, int n_pos, int64_t world)
{
    df_config *cfg;
    if (df_config_load(schema, pos[1], (const char *const *)pos + 2, n_pos - 2, &cfg))
        return df_cli_fail("config");
    int dp = 0, rc = actor_dp_size(cfg, world, &dp);
    if (!rc)
        rc = df_config_validate_train_ex(cfg, dp, df_cli_warn, "config");
    df_config_free(cfg);
    if (rc)
        return df_cli_fail("config");
    printf("ok\n");
    return 0;
}

int df_cmd_config(int argc, char **argv)
{
    bool sft = false;
    int64_t world = 1;
    df_opt opts[] = {
        {"sft", DF_OPT_FLAG, &sft, "use the `distflow sft` schema instead of `train`", false},
        {"world", DF_OPT_INT, &world, "check: ranks of the job, as `mpirun -np` (default 1)", false},
        {0}};
    char *pos[256];
    int n_pos, code;
    if (df_cli_parse("config", USAGE, opts, argc, argv, pos, 256, &n_pos, &code))
        return code;
    const df_config_schema *schema = sft ? df_config_schema_sft() : df_config_schema_train();
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
    if (n_pos == 1 && !strcmp(pos[0], "check")) {
        fprintf(stderr, "distflow config: error: check needs a CONFIG file (see --help)\n");
        return 2;
    }
    if (n_pos >= 2 && !strcmp(pos[0], "check"))
        return check(schema, pos, n_pos, world);
    if (n_pos >= 2 && !strcmp(pos[0], "show")) {
        df_config *cfg;
        if (df_config_load(schema, pos[1], (const char *const *)pos + 2, n_pos - 2, &cfg))
            return df_cli_fail("config");
        int rc = df_config_dump(cfg, stdout);
        df_config_free(cfg);
        return rc ? df_cli_fail("config") : 0;
    }
    df_cli_usage("config", USAGE, opts);
    return 2;
}
