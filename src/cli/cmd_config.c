/* distflow config show | help */
#include "cli/cli.h"

#include "distflow/config.h"

#include <stdio.h>
#include <string.h>

static const char *USAGE =
    "show CONFIG [key=value ...] | help [PREFIX]\n\n"
    "  show   print the resolved configuration (file + overrides + defaults), with\n"
    "         '# where' comments on values that are not defaults\n"
    "  help   list the documented keys (type, default, help), optionally under PREFIX";

int df_cmd_config(int argc, char **argv)
{
    bool sft = false;
    df_opt opts[] = {
        {"sft", DF_OPT_FLAG, &sft, "use the `distflow sft` schema instead of `train`", false},
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
