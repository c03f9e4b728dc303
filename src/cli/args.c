/* Option parsing shared by the commands (cli.h). */
#include "cli/cli.h"

#include "distflow/comm.h"
#include "distflow/common.h"

#include "util/fsutil.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void df_cli_usage(const char *cmd, const char *usage, const df_opt *opts)
{
    printf("usage: distflow %s %s\n", cmd, usage);
    bool any = false;
    for (const df_opt *o = opts; o && o->name; o++) {
        if (!any)
            printf("\noptions:\n");
        any = true;
        const char *arg = o->kind == DF_OPT_FLAG ? ""
                          : o->kind == DF_OPT_STR || o->kind == DF_OPT_TEXT ? " STR"
                          : o->kind == DF_OPT_PATH ? " PATH"
                          : o->kind == DF_OPT_INT ? " N"
                                                  : " X";
        char left[64];
        snprintf(left, sizeof left, "--%s%s", o->name, arg);
        printf("  %-26s %s\n", left, o->help);
    }
    printf("  %-26s %s\n", "--help", "show this help");
}

int df_cli_fail(const char *cmd)
{
    fprintf(stderr, "distflow %s: error: %s\n", cmd, df_last_error());
    return 1;
}

void df_cli_warn(void *user, const char *msg)
{
    fprintf(stderr, "distflow %s: warning: %s\n", (const char *)user, msg);
}

int df_cli_default_world(const char *cmd, bool given, int64_t *world, int *rank)
{
    df_comm *comm = NULL;
    if (df_comm_world(&comm))
        return df_cli_fail(cmd);
    *rank = df_comm_rank(comm);
    if (!given)
        *world = df_comm_size(comm);
    if (*world >= 1 && *world <= 1 << 20)
        return 0;
    if (*rank == 0)
        fprintf(stderr, "distflow %s: error: --world must be between 1 and 1048576, got %lld\n", cmd,
                (long long)*world);
    df_comm_shutdown();
    return 1;
}

static int set_value(const char *cmd, df_opt *o, const char *val)
{
    char *end = NULL;
    errno = 0;
    switch (o->kind) {
    case DF_OPT_PATH:
    case DF_OPT_STR:
        if (!*val)
            break;
        /* fall through */
    case DF_OPT_TEXT:
        *(const char **)o->dst = val;
        return 0;
    case DF_OPT_INT: {
        long long v = strtoll(val, &end, 10);
        if (errno || !*val || *end)
            break;
        *(int64_t *)o->dst = v;
        return 0;
    }
    case DF_OPT_FLOAT: { /* strtod reads "nan" and "inf": no option means either */
        double v = strtod(val, &end);
        if (errno || !*val || *end || !isfinite(v))
            break;
        *(double *)o->dst = v;
        return 0;
    }
    case DF_OPT_FLAG:
        return 0;
    }
    fprintf(stderr, "distflow %s: error: --%s expects %s, got '%s'\n", cmd, o->name,
            o->kind == DF_OPT_PATH  ? "a path"
            : o->kind == DF_OPT_STR ? "a non-empty value"
            : o->kind == DF_OPT_INT ? "an integer"
                                    : "a finite number",
            val);
    return 1;
}

const df_opt *df_cli_opt(const df_opt *opts, const char *name)
{
    const df_opt *o = opts;
    while (o->name && strcmp(o->name, name))
        o++;
    assert(o->name); /* a name the command's table does not have */
    return o;
}

int df_cli_check_ranges(const char *cmd, const df_opt *opts, const df_opt_range *ranges)
{
    for (const df_opt_range *r = ranges; r->name; r++) {
        const df_opt *o = df_cli_opt(opts, r->name);
        assert(o->kind == DF_OPT_INT || o->kind == DF_OPT_FLOAT); /* a range of no number option */
        bool integral = o->kind == DF_OPT_INT;
        double v = integral ? (double)*(const int64_t *)o->dst : *(const double *)o->dst;
        if (!o->seen || (v >= r->min && v <= r->max))
            continue;
        char got[32], lo[32], hi[32];
        snprintf(got, sizeof got, integral ? "%.0f" : "%g", v);
        snprintf(lo, sizeof lo, integral ? "%.0f" : "%g", r->min);
        snprintf(hi, sizeof hi, integral ? "%.0f" : "%g", r->max);
        if (isinf(r->max))
            fprintf(stderr, "distflow %s: error: --%s must be >= %s, got %s\n", cmd, o->name, lo, got);
        else
            fprintf(stderr, "distflow %s: error: --%s must be in [%s, %s], got %s\n", cmd, o->name, lo, hi, got);
        return 2;
    }
    return 0;
}

int df_cli_distinct(const char *cmd, const char *out_opt, const char *out, const char *in_opt, const char *in)
{
    if (!out || !in || !df_same_file(out, in))
        return 0;
    fprintf(stderr, "distflow %s: error: --%s names the input file --%s (%s): writing it would destroy the input\n",
            cmd, out_opt, in_opt, in);
    return 2;
}

int df_cli_greedy_options(const char *cmd, const df_opt *opts, double temperature)
{
    static const char *const sampling[] = {"top-p", "top-k", "seed"};
    for (size_t i = 0; temperature <= 0 && i < sizeof sampling / sizeof *sampling; i++)
        if (df_cli_opt(opts, sampling[i])->seen) {
            fprintf(stderr, "distflow %s: error: --%s shapes sampling, and without --temperature > 0 the "
                            "decoding is greedy: give a temperature or leave --%s out\n",
                    cmd, sampling[i], sampling[i]);
            return 2;
        }
    return 0;
}

int df_cli_bad_subcommand(const char *cmd, const char *usage, const char *name)
{
    if (name)
        fprintf(stderr, "distflow %s: error: unknown subcommand '%s'\n", cmd, name);
    else
        fprintf(stderr, "distflow %s: error: missing subcommand\n", cmd);
    df_cli_usage(cmd, usage, NULL);
    return 2;
}

int df_cli_parse(const char *cmd, const char *usage, df_opt *opts, int argc, char **argv,
                 char **positional, int max_pos, int *n_pos, int *exit_code)
{
    *n_pos = 0;
    bool only_positional = false; /* after "--": a text such as "--help" is an argument (POSIX) */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!only_positional && !strcmp(a, "--")) {
            only_positional = true;
            continue;
        }
        if (!only_positional && (!strcmp(a, "--help") || !strcmp(a, "-h"))) {
            df_cli_usage(cmd, usage, opts);
            *exit_code = 0;
            return 1;
        }
        if (only_positional || strncmp(a, "--", 2) || !a[2]) {
            if (*n_pos >= max_pos) {
                fprintf(stderr, "distflow %s: error: unexpected argument '%s' (see --help)\n", cmd, a);
                *exit_code = 2;
                return 1;
            }
            positional[(*n_pos)++] = argv[i];
            continue;
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        df_opt *o = opts;
        for (; o && o->name; o++)
            if (strlen(o->name) == len && !strncmp(o->name, name, len))
                break;
        if (!o || !o->name) {
            fprintf(stderr, "distflow %s: error: unknown option '--%.*s' (see --help)\n", cmd,
                    (int)len, name);
            *exit_code = 2;
            return 1;
        }
        if (o->seen && o->kind != DF_OPT_FLAG) { /* which one was meant? (a repeated flag says the same) */
            fprintf(stderr, "distflow %s: error: --%s given twice\n", cmd, o->name);
            *exit_code = 2;
            return 1;
        }
        o->seen = true;
        if (o->kind == DF_OPT_FLAG) {
            if (eq) {
                fprintf(stderr, "distflow %s: error: --%s takes no value\n", cmd, o->name);
                *exit_code = 2;
                return 1;
            }
            *(bool *)o->dst = true;
            continue;
        }
        const char *val = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!val) {
            fprintf(stderr, "distflow %s: error: --%s needs a value\n", cmd, o->name);
            *exit_code = 2;
            return 1;
        }
        if (set_value(cmd, o, val)) {
            *exit_code = 2;
            return 1;
        }
    }
    return 0;
}

int df_cli_load_config(const df_config_schema *s, char *const *pos, int n_pos, df_config **out)
{
    bool overrides_only = strchr(pos[0], '=') && access(pos[0], F_OK) != 0;
    const char *const *ov = (const char *const *)pos + (overrides_only ? 0 : 1);
    return df_config_load(s, overrides_only ? NULL : pos[0], ov, n_pos - (overrides_only ? 0 : 1), out);
}

int df_cli_require(const char *cmd, const df_opt *opts)
{
    for (const df_opt *o = opts; o && o->name; o++)
        if (!o->seen && strstr(o->help, "(required)")) {
            fprintf(stderr, "distflow %s: error: --%s is required (see --help)\n", cmd, o->name);
            return 2;
        }
    return 0;
}

int df_cli_read_arg(const char *path, const char *what, char **text)
{
    if (strcmp(path, "-") != 0) {
        size_t len;
        int rc = df_read_file(path, text, &len);
        return rc ? df_error_wrap(rc, "--%s", what) : 0;
    }
    size_t cap = 4096, n = 0;
    char *s = malloc(cap);
    for (size_t k; s && (k = fread(s + n, 1, cap - n - 1, stdin)) > 0;) {
        n += k;
        if (n + 1 == cap) {
            char *t = realloc(s, cap *= 2);
            if (!t)
                free(s);
            s = t;
        }
    }
    if (!s)
        return df_error(DF_ENOMEM, "--%s: out of memory reading stdin", what);
    s[n] = '\0';
    *text = s;
    return 0;
}
