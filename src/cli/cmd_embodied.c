/* distflow embodied — the embodied workload's files and its evaluation (docs/embodied.md):
 *   tasks  the episode rows a train config's data files list (siiRL's embodied manifest);
 *   demos  grid_place's scripted demonstrations as SFT rows (the SRPO warm start);
 *   eval   the success rate of a model on a config's environment (greedy unless --temperature). */
#include "cli/cli.h"

#include "distflow/config.h"
#include "distflow/embodied.h"
#include "engine/hf_dir.h"
#include "util/fsutil.h"
#include "workers/common/max_pos.h"
#include "workers/embodied/embodied_worker.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *USAGE =
    "tasks|demos|eval [options]\n\n"
    "  tasks --out FILE --split train|heldout [--trials N] [--env-config JSON] [--env-name NAME]\n"
    "        one JSON line per episode (task_id, trial_id; prompt = the task's description), the\n"
    "        rows of data.train_files / data.val_files with data.dataset_type=embodied\n"
    "  demos --out FILE --max-steps M --chunks C [--trials N] [--env-config JSON]\n"
    "        grid_place's shortest solutions of the training tasks, one SFT row per model call\n"
    "  eval CONFIG.yaml --model DIR [--data FILE] [--n N] [--temperature T] [key=value ...]\n"
    "        run every row of FILE (default: the config's first data.val_files) as N episodes of the\n"
    "        model in the config's environment; prints success_rate, episodes, finish_step";

/* A grid_place episode state made from env_config, for the task descriptions and counts. */
static int probe(const char *env_config, void **st, df_embodied_info *info)
{
    int rc = df_embodied_grid_place.create(env_config ? env_config : "{}", st);
    if (!rc)
        df_embodied_grid_place.describe(*st, info);
    return rc;
}

static int cmd_tasks(int argc, char **argv)
{
    const char *out = NULL, *split = NULL, *env_config = NULL, *env_name = "grid_place";
    int64_t trials = 1;
    df_opt opts[] = {{"out", DF_OPT_PATH, &out, "output JSON lines (required)", false},
                     {"split", DF_OPT_STR, &split, "train (task ids [0, num_tasks)) or heldout (required)", false},
                     {"trials", DF_OPT_INT, &trials, "trials (initial states) per task (default 1)", false},
                     {"env-config", DF_OPT_STR, &env_config, "grid_place's config as JSON (default {})", false},
                     {"env-name", DF_OPT_STR, &env_name, "the rows' data_source (default grid_place)", false},
                     {0}};
    static const df_opt_range ranges[] = {{"trials", 1, INFINITY}, {0}};
    char *pos[1];
    int n_pos, code;
    if (df_cli_parse("embodied tasks", USAGE, opts, argc, argv, pos, 0, &n_pos, &code))
        return code;
    if ((code = df_cli_require("embodied tasks", opts)) ||
        (code = df_cli_check_ranges("embodied tasks", opts, ranges)))
        return code;
    void *st = NULL;
    df_embodied_info info;
    int rc = probe(env_config, &st, &info);
    bool held = split && !strcmp(split, "heldout");
    if (!rc && (!held && strcmp(split, "train")))
        rc = df_error(DF_EINVAL, "--split must be train or heldout, got '%s'", split);
    int64_t first = held ? info.num_tasks : 0, n = held ? info.num_heldout : info.num_tasks;
    char *text = NULL;
    size_t len = 0;
    FILE *f = rc ? NULL : open_memstream(&text, &len);
    for (int64_t t = first; f && !rc && t < first + n; t++)
        for (int64_t r = 0; !rc && r < trials; r++) {
            if ((rc = df_embodied_grid_place.reset(st, t, r)))
                break;
            json_t *row = json_pack("{s:s, s:s, s:{s:s, s:s}, s:I, s:I}", "prompt",
                                    df_embodied_grid_place.task_description(st), "data_source", env_name,
                                    "reward_model", "style", "rule", "ground_truth", "", "task_id", (json_int_t)t,
                                    "trial_id", (json_int_t)r);
            char *line = row ? json_dumps(row, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
            if (!line)
                rc = df_error(DF_ENOMEM, "out of memory");
            else
                fprintf(f, "%s\n", line);
            free(line);
            json_decref(row);
        }
    if (f)
        fclose(f);
    if (!rc && !f)
        rc = df_error(DF_ENOMEM, "out of memory");
    if (!rc)
        rc = df_write_file_atomic(out, text, len);
    if (!rc)
        fprintf(stderr, "distflow embodied tasks: %lld episodes (tasks %lld-%lld x %lld trials) in %s\n",
                (long long)(n * trials), (long long)first, (long long)(first + n - 1), (long long)trials, out);
    free(text);
    if (st)
        df_embodied_grid_place.release(st);
    return rc ? df_cli_fail("embodied tasks") : 0;
}

static int cmd_demos(int argc, char **argv)
{
    const char *out = NULL, *env_config = NULL;
    int64_t max_steps = 0, chunks = 0, trials = 1;
    df_opt opts[] = {{"out", DF_OPT_PATH, &out, "output JSON lines (required)", false},
                     {"max-steps", DF_OPT_INT, &max_steps, "env.max_steps (required)", false},
                     {"chunks", DF_OPT_INT, &chunks, "action_chunks_len (required)", false},
                     {"trials", DF_OPT_INT, &trials, "trials per training task (default 1)", false},
                     {"env-config", DF_OPT_STR, &env_config, "grid_place's config as JSON (default {})", false},
                     {0}};
    static const df_opt_range ranges[] = {
        {"max-steps", 1, 1000000}, {"chunks", 1, 4096}, {"trials", 1, INFINITY}, {0}};
    char *pos[1];
    int n_pos, code;
    if (df_cli_parse("embodied demos", USAGE, opts, argc, argv, pos, 0, &n_pos, &code))
        return code;
    if ((code = df_cli_require("embodied demos", opts)) ||
        (code = df_cli_check_ranges("embodied demos", opts, ranges)))
        return code;
    void *st = NULL;
    df_embodied_info info;
    int rc = probe(env_config, &st, &info);
    if (st)
        df_embodied_grid_place.release(st);
    df_embodied_vec_opts o = {.num_envs = 1, .max_steps = max_steps, .action_chunks_len = (int)chunks};
    int64_t rows = 0;
    if (!rc)
        rc = df_grid_place_write_demos(out, env_config, &o, 0, info.num_tasks, trials, &rows);
    if (!rc)
        fprintf(stderr, "distflow embodied demos: %lld rows (%lld tasks x %lld trials) in %s\n", (long long)rows,
                (long long)info.num_tasks, (long long)trials, out);
    return rc ? df_cli_fail("embodied demos") : 0;
}

/* The sampling of an evaluation: greedy, or at `temperature`. */
static df_sampling_params eval_sampling(double temperature)
{
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.greedy = temperature <= 0;
    sp.temperature = temperature > 0 ? (float)temperature : 1.0f;
    return sp;
}

static int cmd_eval(int argc, char **argv)
{
    const char *model = NULL, *data = NULL;
    int64_t n = 1, seed = 0, max_seqs = 256;
    double temperature = 0;
    df_opt opts[] = {{"model", DF_OPT_PATH, &model, "HF model directory of the policy (required)", false},
                     {"data", DF_OPT_PATH, &data, "episode rows (default: the config's first data.val_files)", false},
                     {"n", DF_OPT_INT, &n, "episodes per row (default 1)", false},
                     {"temperature", DF_OPT_FLOAT, &temperature, "sample at this temperature (default 0: greedy)", false},
                     {"seed", DF_OPT_INT, &seed, "sampling seed (default 0)", false},
                     {"max-num-seqs", DF_OPT_INT, &max_seqs, "sequences decoded together (default 256)", false},
                     {0}};
    static const df_opt_range ranges[] = {
        {"n", 1, INFINITY}, {"temperature", 0, INFINITY}, {"max-num-seqs", 1, INFINITY}, {0}};
    char *pos[64];
    int n_pos, code;
    if (df_cli_parse("embodied eval", USAGE, opts, argc, argv, pos, 64, &n_pos, &code))
        return code;
    if ((code = df_cli_require("embodied eval", opts)) ||
        (code = df_cli_check_ranges("embodied eval", opts, ranges)))
        return code;
    if (n_pos < 1)
        return df_error(DF_EINVAL, "a train config (the environment's keys) is required"),
               df_cli_fail("embodied eval");
    df_config *c = NULL;
    df_train_config t;
    df_embodied_setup s = {0};
    df_model *m = NULL;
    df_tokenizer *tok = NULL;
    df_dataset *ds = NULL;
    df_rollout_engine *e = NULL;
    int rc = df_cli_load_config(df_config_schema_train(), pos, n_pos, &c);
    if (!rc)
        rc = df_train_config_resolve(c, &t);
    if (!rc && !data && t.data.val_files.n < 1)
        rc = df_error(DF_EINVAL, "no --data and the config lists no data.val_files");
    if (!rc)
        rc = df_hf_dir_load(model, NULL, NULL, &m, &tok);
    if (!rc)
        rc = df_embodied_setup_init(&s, c, &t, tok, true);
    if (!rc) { /* an observation's prompt and one call's answer, within the model's positions */
        df_seq_bound b = {.len = t.data.max_prompt_length + s.call_tokens}; /* the engine's slot below */
        snprintf(b.why, sizeof b.why, "data.max_prompt_length=%lld (%s) + one call's %lld action tokens",
                 (long long)t.data.max_prompt_length, df_config_where(c, "data.max_prompt_length"),
                 (long long)s.call_tokens);
        rc = df_check_max_pos(&m->cfg, model, NULL, "command line", "--model", &b);
    }
    const char *path = data ? data : rc ? NULL : t.data.val_files.items[0];
    df_dataset_opts dopt = {.reward_optional = true, .need_rows = true}; /* a rate over no episodes means nothing */
    if (!rc)
        rc = df_dataset_load(&path, 1, &dopt, &ds);
    if (!rc)
        rc = df_rollout_engine_create(&m->cfg, max_seqs, t.data.max_prompt_length + s.call_tokens, &e);
    df_embodied_rollout_opts o = {.sp = eval_sampling(temperature), .seed = (uint64_t)seed, .n = n, .label = "eval"};
    double sums[DF_EMB_EVAL_SUMS];
    if (!rc)
        rc = df_embodied_evaluate(&s, e, m, tok, ds, &o, sums);
    if (!rc)
        printf("success_rate: %.4f\nepisodes: %lld\nfinish_step: %.2f\n", sums[0] > 0 ? sums[1] / sums[0] : 0.0,
               (long long)sums[0], sums[0] > 0 ? sums[2] / sums[0] : 0.0);
    df_rollout_engine_free(e);
    df_dataset_free(ds);
    df_embodied_setup_clear(&s);
    df_tokenizer_free(tok);
    df_model_free(m);
    df_config_free(c);
    return rc ? df_cli_fail("embodied eval") : 0;
}

int df_cmd_embodied(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "tasks"))
        return cmd_tasks(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "demos"))
        return cmd_demos(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "eval"))
        return cmd_eval(argc - 1, argv + 1);
    bool help = argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"));
    if (!help)
        return df_cli_bad_subcommand("embodied", USAGE, argc >= 2 ? argv[1] : NULL);
    df_cli_usage("embodied", USAGE, NULL);
    return 0;
}
