/* distflow eval */
#include "cli/cli.h"
#include "distflow/lora.h"
#include "util/fsutil.h"

#include "distflow/comm.h"
#include "distflow/dag.h"
#include "distflow/dataset.h"
#include "engine/hf_dir.h"
#include "workers/common/group_sum.h"
#include "workers/common/max_pos.h"
#include "workers/common/scorer_check.h"
#include "workers/dag/evaluate.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *USAGE =
    "--model DIR --data FILE.jsonl [options]\n\n"
    "Generate responses for every prompt of a dataset in the verl schema (chat template applied,\n"
    "as in training) and score them with the reward function of each row's data_source\n"
    "(or --reward-function's); a row whose data_source has no scorer is refused, naming FILE:LINE,\n"
    "before the model loads, and so is an --output whose directory does not exist.\n"
    "Greedy decoding unless --temperature is given. Prints `metric: value` lines on stdout:\n"
    "accuracy (mean of acc: score == 1), score, n_prompts, n_responses, response_length, then\n"
    "verl's validation metrics per data source (val-core/<data_source>/acc/mean@<n>, and with\n"
    "--n > 1 std@n, best@N, worst@N and pass@k; docs/validation.md).\n"
    "Under mpirun each of the N ranks generates for the rows i % N == rank of the file; rank 0\n"
    "scores them all in the file's order and prints: the results do not depend on N.";

/* No position past the model's range (workers/common/max_pos.h): a --max-prompt-length given must
 * fit with --max-response-length into the model's max_position_embeddings; the default shrinks to
 * what fits (longer prompts are skipped, and counted, as any over the limit). */
static int fit_lengths(const df_opt *opts, const char *dir, const df_model_config *cfg, int64_t *max_prompt,
                       int64_t max_resp)
{
    const bool given = df_cli_opt(opts, "max-prompt-length")->seen;
    const int64_t room = df_model_max_positions(cfg) - max_resp;
    if (!given && *max_prompt > room && room >= 1) {
        *max_prompt = room;
        return DF_OK;
    }
    df_seq_bound b = {.len = *max_prompt + max_resp};
    snprintf(b.why, sizeof b.why, "--max-prompt-length %lld%s + --max-response-length %lld", (long long)*max_prompt,
             given ? "" : " (default)", (long long)max_resp);
    return df_check_max_pos(cfg, dir, NULL, "command line", "--model", &b);
}

/* FILE of --reward-function FILE[:NAME] (malloc'd; NULL: out of memory), NAME into *name (default
 * compute_score). */
static char *ref_path(const char *arg, const char **name)
{
    const char *colon = strrchr(arg, ':');
    bool named = colon && !strchr(colon, '/');
    *name = named ? colon + 1 : "compute_score";
    return named ? strndup(arg, (size_t)(colon - arg)) : strdup(arg);
}

/* --reward-manager: naive, batch or prime; batch and prime call a Python --reward-function (the built-in
 * scorers and a library's function score as naive), and only prime reads --reward-manager-kwargs. */
static int check_manager(const char *manager, const char *manager_kwargs, const char *reward_fn)
{
    const char *name;
    char *path = reward_fn ? ref_path(reward_fn, &name) : NULL;
    bool py = path && df_reward_python_file(path);
    free(path);
    if (strcmp(manager, "naive") && strcmp(manager, "batch") && strcmp(manager, "prime"))
        return df_error(DF_EINVAL, "--reward-manager %s: naive, batch or prime", manager);
    if (strcmp(manager, "naive") && !py)
        return df_error(DF_EINVAL, "--reward-manager %s calls a Python --reward-function (FILE.py[:NAME])",
                        manager);
    if (manager_kwargs && strcmp(manager, "prime"))
        return df_error(DF_EINVAL,
                        "--reward-manager-kwargs: only --reward-manager prime reads settings (its pool)");
    df_reward_python_opts po; /* the same message on every rank, before any file is opened */
    int rc = df_reward_python_opts_for(manager, manager_kwargs, &po);
    return rc ? df_error_wrap(rc, "--reward-manager-kwargs") : DF_OK;
}

/* --reward-function FILE[:NAME] into *r: a Python file (.py, verl's custom_reward_function; kwargs,
 * a JSON object or NULL, its keyword arguments; called as r->manager calls it, with `manager_kwargs`)
 * or a library's exported df_reward_fn; NAME defaults to compute_score. */
static int open_reward_function(const char *arg, const char *kwargs, const char *manager_kwargs,
                                df_reward_manager_cfg *r)
{
    const char *name;
    char *path = ref_path(arg, &name), *ref = NULL;
    int rc = path ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    void (*fn)(void) = NULL;
    df_reward_python_opts po;
    if (!rc && df_reward_python_file(path) &&
        !(rc = df_reward_python_opts_for(r->manager, manager_kwargs, &po)))
        rc = df_reward_python_open(path, name, kwargs, &po, &r->python);
    else if (!rc && kwargs)
        rc = df_error(DF_EINVAL, "--reward-kwargs: keyword arguments go to a Python reward function (a .py "
                                 "file); a library's df_reward_fn takes none");
    else if (!rc && asprintf(&ref, "%s:%s", path, name) < 0)
        rc = df_error(DF_ENOMEM, "out of memory");
    else if (!rc && !(rc = df_plugin_symbol(ref, &fn)))
        r->compute_score = (df_reward_fn)fn;
    free(ref);
    free(path);
    return rc ? df_error_wrap(rc, "--reward-function %s", arg) : DF_OK;
}

/* Every rank's status, agreed (df_worker_group_sum over the world: a rank whose own step succeeded
 * gets DF_EINTERNAL naming `what`); *sum (may be NULL) is added over the ranks. Collective: each
 * rank calls it at the same points, failed or not. */
static int agree(df_comm *w, int rc, int64_t *sum, const char *what)
{
    double mine = sum ? (double)*sum : 0, total = 0;
    rc = df_worker_group_sum(w, rc, &mine, 1, &total, what, "job");
    if (sum)
        *sum = (int64_t)total;
    return rc;
}

/* The options' combinations, before any file is read (the same on every rank): an option with no
 * effect in this mode, an --output that would replace an input. 2 after printing why, else 0. */
static int check_options(const df_opt *opts, const char *output, const char *data, const char *tool_cfg,
                         const char *ia_cfg, const char *reward_fn)
{
    const bool turns = df_cli_opt(opts, "max-assistant-turns")->seen,
               user_turns = df_cli_opt(opts, "max-user-turns")->seen;
    if (turns && !tool_cfg && !ia_cfg) {
        fprintf(stderr, "distflow eval: error: --max-assistant-turns limits a multi-turn conversation: it needs "
                        "--tool-config or --interaction-config\n");
        return 2;
    }
    if (user_turns && !ia_cfg) {
        fprintf(stderr, "distflow eval: error: --max-user-turns counts the replies of --interaction-config: it "
                        "needs one\n");
        return 2;
    }
    const char *name;
    char *fn_file = reward_fn ? ref_path(reward_fn, &name) : NULL;
    int code = df_cli_distinct("eval", "output", output, "data", data);
    if (!code)
        code = df_cli_distinct("eval", "output", output, "tool-config", tool_cfg);
    if (!code)
        code = df_cli_distinct("eval", "output", output, "interaction-config", ia_cfg);
    if (!code)
        code = df_cli_distinct("eval", "output", output, "reward-function", fn_file);
    free(fn_file);
    return code;
}

/*
 * Under mpirun every rank runs this (docs/validation.md, "distflow eval on N ranks"): each loads and
 * encodes its shard of the file (rows i % N == rank) and generates for it; df_evaluate (o.gather)
 * gathers the responses to rank 0, which scores them in the file's order, prints and writes --output.
 * Every failure is agreed at the next collective point instead of leaving the other ranks waiting:
 * each failing rank prints its error and every rank exits 1.
 */
int df_cmd_eval(int argc, char **argv)
{
    df_comm *world = NULL;
    if (df_comm_world(&world))
        return df_cli_fail("eval");
    const int rank = df_comm_rank(world), size = df_comm_size(world);
    const char *model = NULL, *data = NULL, *tokdir = NULL, *output = NULL, *adapter = NULL;
    int64_t n = 1, top_k = -1, max_resp = 512, max_prompt = 1024, batch = 0, limit = 0, seed = 0;
    int64_t max_seqs = 512, max_turns = 0, max_user_turns = 0;
    double temperature = 0, top_p = 1.0;
    const char *tool_cfg = NULL, *ia_cfg = NULL, *tmpl_kwargs = NULL, *reward_fn = NULL;
    const char *reward_kwargs = NULL, *manager = "naive", *manager_kwargs = NULL, *fn_key = "data_source";
    df_opt opts[] = {
        {"model", DF_OPT_PATH, &model, "HF model directory (required)", false},
        {"data", DF_OPT_PATH, &data, "dataset in the verl RL schema, JSON lines or parquet (required)", false},
        {"tokenizer", DF_OPT_PATH, &tokdir, "tokenizer directory (default: the model's)", false},
        {"lora-adapter", DF_OPT_PATH, &adapter, "a PEFT LoRA adapter directory merged into the model first "
                                               "(docs/lora.md)", false},
        {"n", DF_OPT_INT, &n, "responses per prompt (default 1)", false},
        {"temperature", DF_OPT_FLOAT, &temperature, "sample at this temperature (default 0: greedy)", false},
        {"top-p", DF_OPT_FLOAT, &top_p, "nucleus sampling mass (default 1: off)", false},
        {"top-k", DF_OPT_INT, &top_k, "top-k sampling (default -1: off)", false},
        {"max-response-length", DF_OPT_INT, &max_resp, "tokens per response (default 512)", false},
        {"max-prompt-length", DF_OPT_INT, &max_prompt, "longer prompts are skipped (default 1024, or less so that "
         "it fits with the responses in the model's max_position_embeddings; a value given must fit)", false},
        {"batch", DF_OPT_INT, &batch, "prompts per generation call on each rank (default: all)", false},
        {"max-num-seqs", DF_OPT_INT, &max_seqs, "sequences decoded together (default 512)", false},
        {"limit", DF_OPT_INT, &limit, "evaluate only the first N prompts of the file (default: all)", false},
        {"seed", DF_OPT_INT, &seed, "sampling seed (default 0)", false},
        {"tool-config", DF_OPT_PATH, &tool_cfg, "multi-turn: answer hermes tool calls with the tools of this verl tool "
         "config (as multi_turn.tool_config_path; docs/agents.md)", false},
        {"interaction-config", DF_OPT_PATH, &ia_cfg, "multi-turn: a turn without a tool call is answered by this "
         "interaction config's (as multi_turn.interaction_config_path)", false},
        {"max-assistant-turns", DF_OPT_INT, &max_turns, "multi-turn (--tool-config or --interaction-config): "
         "model turns per conversation (default 0: no limit)", false},
        {"max-user-turns", DF_OPT_INT, &max_user_turns, "with --interaction-config: its replies per conversation "
         "(default 0: no limit)", false},
        {"chat-template-kwargs", DF_OPT_STR, &tmpl_kwargs, "JSON object of chat-template variables for every prompt, "
         "e.g. '{\"enable_thinking\": false}' (as data.apply_chat_template_kwargs)", false},
        {"reward-function", DF_OPT_PATH, &reward_fn, "score every response with FILE.py[:NAME] (a verl reward "
         "function, run in a python3 child; docs/rewards.md) or LIB.so[:NAME] (an exported df_reward_fn) instead of "
         "the data_source scorers; NAME defaults to compute_score", false},
        {"reward-kwargs", DF_OPT_STR, &reward_kwargs, "JSON object of keyword arguments for a Python "
         "--reward-function (as custom_reward_function.reward_kwargs)", false},
        {"reward-manager", DF_OPT_STR, &manager, "how the --reward-function is called (as "
         "reward_model.reward_manager): naive (default: per response), batch (one call per batch with "
         "lists) or prime (the responses in a process pool, a call that raises or outlasts the timeout "
         "scoring 0; docs/rewards.md)", false},
        {"reward-manager-kwargs", DF_OPT_STR, &manager_kwargs, "JSON object of the manager's settings (as "
         "reward_model.reward_kwargs): prime's num_processes (default 64) and timeout (seconds, default "
         "300)", false},
        {"reward-fn-key", DF_OPT_STR, &fn_key, "the rows' field (a dotted path) whose value selects the "
         "scorer and is a reward function's data_source (as data.reward_fn_key; default data_source)",
         false},
        {"output", DF_OPT_PATH, &output, "write each response as a JSON line here (input, output, gts, score, acc, index, "
         "data_source), in the file's order, when the run succeeds (rank 0); its directory must exist, and is "
         "checked before the model loads", false},
        {0}};
    static const df_opt_range ranges[] = {
        {"n", 1, INFINITY}, {"temperature", 0, INFINITY}, {"top-p", 0, 1}, {"top-k", -1, INT_MAX},
        {"max-response-length", 1, INFINITY}, {"max-prompt-length", 1, INFINITY}, {"batch", 1, INFINITY},
        {"max-num-seqs", 1, INFINITY}, {"limit", 1, INFINITY}, {"max-assistant-turns", 0, INFINITY},
        {"max-user-turns", 0, INFINITY}, {0}};
    char *pos[1];
    int n_pos, code;
    if (df_cli_parse("eval", USAGE, opts, argc, argv, pos, 0, &n_pos, &code) ||
        (code = df_cli_require("eval", opts)) || (code = df_cli_check_ranges("eval", opts, ranges)) ||
        (code = check_options(opts, output, data, tool_cfg, ia_cfg, reward_fn)) ||
        (code = df_cli_greedy_options("eval", opts, temperature))) { /* the same on every rank */
        df_comm_shutdown();
        return code;
    }
    df_model *m = NULL;
    df_tokenizer *tok = NULL;
    df_dataset *ds = NULL;
    df_prompt_cache pc = {0};
    df_rollout_engine *e = NULL;
    FILE *dump = NULL;
    int64_t dropped = 0;
    /* what would otherwise fail only after the whole generation, checked by rank 0 (which scores and
       writes): the settings of the reward manager, --output's directory, a scorer for every row */
    int rc = check_manager(manager, manager_kwargs, reward_fn);
    if (!rc && reward_kwargs && !reward_fn)
        rc = df_error(DF_EINVAL, "--reward-kwargs needs --reward-function (the built-in scorers' options are "
                                 "not taken from it)");
    if (!rc && rank == 0 && output && (rc = df_check_output_path(output)))
        rc = df_error_wrap(rc, "--output");
    if (!rc && rank == 0 && !reward_fn)
        rc = df_scorer_check_files(&data, 1, fn_key, limit > 0 ? limit : -1,
                                   &(df_scorer_check){"--data", "--reward-fn-key", "--reward-function"});
    rc = agree(world, rc, NULL, "checking the options");
    if (!rc)
        rc = df_hf_dir_load(model, tokdir, NULL, &m, &tok);
    if (!rc && adapter && (rc = df_lora_apply_peft(m, adapter)))
        rc = df_error_wrap(rc, "--lora-adapter");
    if (!rc)
        rc = fit_lengths(opts, model, &m->cfg, &max_prompt, max_resp);
    if (!rc && tmpl_kwargs && (rc = df_tokenizer_set_chat_template_kwargs(tok, tmpl_kwargs)))
        rc = df_error_wrap(rc, "--chat-template-kwargs");
    /* this rank's shard; --limit keeps the file's first rows (df_dataset_head counts them over all shards) */
    bool multi = tool_cfg || ia_cfg;
    df_dataset_opts dopt = {.shard_index = rank, .shard_count = size,
                            .agent_loop = multi ? "tool_agent" : "single_turn_agent"};
    if (!rc)
        rc = df_dataset_load(&data, 1, &dopt, &ds);
    if (!rc && limit > 0 && df_dataset_head(ds, limit) < 0)
        rc = DF_ENOMEM;
    df_agent_config agent = {.max_assistant_turns = max_turns, .max_user_turns = max_user_turns,
                             .max_prompt_length = max_prompt};
    if (!rc && multi)
        rc = df_agent_config_load(&agent, tool_cfg, ia_cfg, df_plugin_tool, df_plugin_interaction, NULL);
    /* measured as the agent loop renders them: with the tools' schemas in the system prompt */
    if (!rc)
        rc = df_prompts_encode_rerendered(ds, tok, multi, agent.tools_json, &pc);
    if (!rc)
        rc = df_prompts_limit(ds, &pc, max_prompt, true, "error", &dropped);
    if (!rc)
        rc = df_rollout_engine_create(&m->cfg, max_seqs, max_prompt + max_resp, &e);
    /* the responses are collected, then written atomically by rank 0: a failed run leaves no half file */
    char *dump_buf = NULL;
    size_t dump_len = 0;
    if (!rc && output && rank == 0 && !(dump = open_memstream(&dump_buf, &dump_len)))
        rc = df_error(DF_ENOMEM, "out of memory collecting the responses for %s", output);
    /* rank 0 scores every response */
    df_reward_manager_cfg rcfg = {.manager = manager, .reward_fn_key = fn_key};
    if (!rc && reward_fn && rank == 0)
        rc = open_reward_function(reward_fn, reward_kwargs, manager_kwargs, &rcfg);
    df_metrics *vm = rc ? NULL : df_metrics_new();
    if (!rc && !vm)
        rc = df_error(DF_ENOMEM, "out of memory");
    /* a bad row or a missing file may fail one rank alone: no rank goes on to the evaluation's collectives */
    rc = agree(world, rc, &dropped, "loading the model and the data");
    const bool reached = !rc; /* the same on every rank */
    if (!rc && dropped && rank == 0)
        fprintf(stderr, "distflow eval: skipped %lld prompts longer than %lld tokens\n",
                (long long)dropped, (long long)max_prompt);
    df_eval_opts o = {.n = n, .seed = (uint64_t)seed, .batch_prompts = batch, .label = rank == 0 ? "eval" : NULL,
                      .dump = dump, .comm = world, .gather = true};
    if (multi)
        o.agent = &agent;
    df_sampling_params_defaults(&o.sp);
    o.sp.greedy = temperature <= 0;
    o.sp.temperature = temperature > 0 ? (float)temperature : 1.0f;
    o.sp.top_p = (float)top_p;
    o.sp.top_k = (int)top_k;
    o.sp.max_new_tokens = max_resp;
    o.sp.stop_ids = tok ? df_tokenizer_eos_ids(tok, &o.sp.n_stop) : NULL;
    df_eval_result res;
    if (!rc)
        rc = df_evaluate(e, m, tok, &rcfg, ds, &pc, &o, vm, &res);
    if (!rc && rank == 0) {
        printf("accuracy: %.4f\nscore: %.4f\nn_prompts: %lld\nn_responses: %lld\nresponse_length: %.2f\n",
               res.acc_mean, res.score_mean, (long long)res.n_prompts, (long long)res.n_responses,
               res.response_length_mean);
        for (int i = 0; i < df_metrics_count(vm); i++) {
            double v;
            const char *k = df_metrics_at(vm, i, &v);
            printf("%s: %.4f\n", k, v);
        }
        fflush(stdout);
    }
    df_metrics_free(vm);
    df_reward_python_close(rcfg.python);
    if (dump)
        fclose(dump);
    if (!rc && dump && (rc = df_write_file_atomic(output, dump_buf, dump_len)))
        rc = df_error_wrap(rc, "--output");
    if (reached) /* rank 0's write: every rank's exit status says whether the run succeeded */
        rc = agree(world, rc, NULL, "rank 0 writing --output");
    free(dump_buf);
    df_agent_config_clear(&agent);
    df_rollout_engine_free(e);
    df_prompt_cache_free(&pc);
    df_dataset_free(ds);
    df_tokenizer_free(tok);
    df_model_free(m);
    if (rc && size > 1) {
        fprintf(stderr, "distflow eval: error on rank %d of %d: %s\n", rank, size, df_last_error());
        fflush(stderr);
    } else if (rc) {
        df_cli_fail("eval");
    }
    if (df_comm_shutdown() && !rc)
        rc = df_cli_fail("eval");
    return rc ? 1 : 0;
}
