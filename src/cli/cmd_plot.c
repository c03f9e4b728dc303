/* distflow plot METRICS.jsonl --out DIR [--keys k1,k2] */
#include "cli/cli.h"

#include "distflow/common.h"
#include "logging/plot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *USAGE =
    "METRICS.jsonl --out DIR [--keys KEY,KEY,...]\n\n"
    "Draw a run's metrics.jsonl (distflow train / sft, in default_local_dir) as PNG line plots\n"
    "against the step, without TensorBoard: one PNG per panel in DIR (score, response_length,\n"
    "clip_ratio, losses, kl, entropy, grad_norm, lr, throughput, timing, validation; a panel with\n"
    "none of its metrics in the file is skipped). With --keys, one PNG per key instead, named\n"
    "after it ('/' as '_'); a key ending in '*' draws every metric with that prefix together\n"
    "(e.g. 'val-core/*'). Prints the path of each PNG written. docs/logging.md.";

#define MAX_KEYS 64

static void print_written(void *user, const char *png, const char *const *keys, int n_keys)
{
    (void)user;
    printf("%s:", png);
    for (int i = 0; i < n_keys; i++)
        printf(i ? ", %s" : " %s", keys[i]);
    printf("\n");
}

/* Split "a,b,c" in place into keys[]; empty items are an error. */
static int split_keys(char *list, char **keys, int *n)
{
    *n = 0;
    for (char *k = strtok(list, ","); k; k = strtok(NULL, ",")) {
        if (*n == MAX_KEYS) {
            fprintf(stderr, "distflow plot: error: --keys: at most %d keys\n", MAX_KEYS);
            return 2;
        }
        keys[(*n)++] = k;
    }
    if (*n == 0) {
        fprintf(stderr, "distflow plot: error: --keys: no key given\n");
        return 2;
    }
    return 0;
}

int df_cmd_plot(int argc, char **argv)
{
    const char *out = NULL, *keys_opt = NULL;
    df_opt opts[] = {{"out", DF_OPT_PATH, &out, "directory for the PNGs (made if missing) (required)", false},
                     {"keys", DF_OPT_STR, &keys_opt, "comma-separated metric names instead of the panels", false},
                     {0}};
    char *pos[1];
    int n_pos, code;
    if (df_cli_parse("plot", USAGE, opts, argc, argv, pos, 1, &n_pos, &code))
        return code;
    if ((code = df_cli_require("plot", opts)))
        return code;
    if (n_pos != 1) {
        fprintf(stderr, "distflow plot: error: expected one METRICS.jsonl argument (see --help)\n");
        return 2;
    }
    char *list = keys_opt ? strdup(keys_opt) : NULL, *keys[MAX_KEYS];
    int n_keys = 0;
    if (keys_opt && (!list || (code = split_keys(list, keys, &n_keys)))) {
        free(list);
        return list ? code : df_cli_fail("plot");
    }
    df_metrics_table t;
    int rc = df_metrics_table_read(pos[0], &t), n = 0;
    if (!rc && t.cut_last_line)
        fprintf(stderr, "distflow plot: note: %s: its last line is incomplete (the run stopped while "
                        "writing it): skipped\n", pos[0]);
    if (!rc)
        rc = df_plot_metrics(&t, out, (const char *const *)keys, n_keys, print_written, NULL, &n);
    df_metrics_table_free(&t);
    free(list);
    return rc ? df_cli_fail("plot") : 0;
}
