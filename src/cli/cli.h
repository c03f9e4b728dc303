/* cli.h — the `distflow` command-line front end: commands and option parsing. */
#ifndef DF_CLI_H
#define DF_CLI_H

#include "distflow/config.h"

#include <stdbool.h>
#include <stdint.h>

/** A command: `distflow <name> ...`. Returns the process exit status. */
typedef struct df_cli_command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv); /* argv[0] is the command name */
} df_cli_command;

/* ---- option parsing ---------------------------------------------------- */

/* DF_OPT_PATH: a string that names a file or directory, so never empty (an empty path would be the
   current directory to some calls and no file to others). DF_OPT_STR is never empty either: '' is
   most often an unset shell variable, and a name, key or JSON text that is empty would be taken as
   the default or written as is. DF_OPT_TEXT: any text, '' included, for the few options where an
   empty one means something (free text, "none"). */
typedef enum { DF_OPT_FLAG, DF_OPT_STR, DF_OPT_TEXT, DF_OPT_PATH, DF_OPT_INT, DF_OPT_FLOAT } df_opt_kind;

typedef struct df_opt {
    const char *name;  /* long name without "--" */
    df_opt_kind kind;
    void *dst;         /* bool*, const char** (STR, TEXT, PATH), int64_t*, double* */
    const char *help;  /* one line; "(required)" in it marks a required option */
    bool seen;         /* set by the parser */
} df_opt;

/** The values a number option (INT or FLOAT) may take: [min, max]; INFINITY: no upper bound. */
typedef struct df_opt_range {
    const char *name; /* the option's long name */
    double min, max;
} df_opt_range;

/**
 * Parse `--name value`, `--name=value` and `--flag` options; everything else is
 * collected in order into positional[] (at most max_pos), and so is every
 * argument after a `--` (which is dropped). `--help` / `-h` (before `--`) prints
 * usage and returns 1 with *exit_code = 0. Errors print a message naming the
 * option and return 1 with *exit_code = 2: an unknown option, a missing value, a
 * value option given twice, an empty PATH or STR, an INT that is not an integer, a
 * FLOAT that is not a finite number. Returns 0 to continue.
 */
int df_cli_parse(const char *cmd, const char *usage, df_opt *opts, int argc, char **argv,
                 char **positional, int max_pos, int *n_pos, int *exit_code);
/** The option of opts named `name` (it must be there: asserted). */
const df_opt *df_cli_opt(const df_opt *opts, const char *name);
/**
 * After df_cli_parse: every option of `ranges` ({0}-terminated) that was given holds a value in
 * its range, else prints "--name must be in [min, max], got V" and returns 2; 0 when all do.
 * (Defaults outside the range, such as 0 for "no limit", stay allowed when the option is not given.)
 */
int df_cli_check_ranges(const char *cmd, const df_opt *opts, const df_opt_range *ranges);
/**
 * 2 after printing "--<out_opt> names the input file --<in_opt> (PATH)" when `out` and `in` are the
 * same existing file (df_same_file): writing the output would destroy the input. 0 otherwise, and
 * when either is NULL.
 */
int df_cli_distinct(const char *cmd, const char *out_opt, const char *out, const char *in_opt, const char *in);
/** 2 after printing why when `temperature` <= 0 (greedy decoding) and --top-p, --top-k or --seed
 *  (options of opts, which must have all three) was given: greedy decoding would ignore it. */
int df_cli_greedy_options(const char *cmd, const df_opt *opts, double temperature);
/** An option's file as text (malloc'd into *text): `path`, or standard input for "-". Errors name
 *  --<what> (df_read_file's, DF_ENOMEM). */
int df_cli_read_arg(const char *path, const char *what, char **text);
/** A command with subcommands (data, embodied, config) given none it knows: prints "distflow <cmd>:
 *  error: unknown subcommand 'NAME'" (NULL: "missing subcommand") to stderr, then the usage as
 *  --help does; returns 2. */
int df_cli_bad_subcommand(const char *cmd, const char *usage, const char *name);
/** Print the usage text and the option table to stdout. */
void df_cli_usage(const char *cmd, const char *usage, const df_opt *opts);
/** Print "distflow <cmd>: error: <df_last_error()>" to stderr and return 1. */
int df_cli_fail(const char *cmd);
/** df_warn_fn for the commands: "distflow <cmd>: warning: <msg>" to stderr (user = the command name). */
void df_cli_warn(void *user, const char *msg);
/**
 * The ranks a check command plans for: *world as given (`given`: --world N was on the command line)
 * or, when not, the ranks `distflow train` started the same way would have (the mpirun world
 * under mpirun, else 1); *rank: this process's rank (only rank 0 prints). Starts the world
 * communicator: the caller ends with df_comm_shutdown(). Returns 1 after printing an error (no
 * world, or N outside [1, 2^20], then the world is already shut down), else 0.
 */
int df_cli_default_world(const char *cmd, bool given, int64_t *world, int *rank);
/** Check required options were given; prints which is missing. */
int df_cli_require(const char *cmd, const df_opt *opts);
/**
 * df_config_load of the positional arguments `CONFIG.yaml [key=value ...]`, or of `key=value ...`
 * alone (the schema's defaults and the overrides, as `python3 -m verl.trainer.main_ppo k=v ...`
 * starts from verl's defaults): pos[0] is taken as an override when it holds '=' and names no
 * file. n_pos >= 1. Errors: df_config_load's.
 */
int df_cli_load_config(const df_config_schema *s, char *const *pos, int n_pos, df_config **out);

/* ---- commands (cmd_*.c) ------------------------------------------------- */

int df_cmd_train(int argc, char **argv);
int df_cmd_sft(int argc, char **argv);
int df_cmd_eval(int argc, char **argv);
int df_cmd_generate(int argc, char **argv);
int df_cmd_embodied(int argc, char **argv);
int df_cmd_init_model(int argc, char **argv);
int df_cmd_tokenize(int argc, char **argv);
int df_cmd_score(int argc, char **argv);
int df_cmd_data(int argc, char **argv);
/** `distflow data marft-demos` (cmd_marft_demos.c; cmd_data.c dispatches to it). */
int df_cmd_data_marft_demos(int argc, char **argv);
int df_cmd_config(int argc, char **argv);
int df_cmd_plan(int argc, char **argv);
int df_cmd_env(int argc, char **argv);
int df_cmd_plot(int argc, char **argv);

#endif
