/* distflow generate: a model's answers to one prompt (llama-cli / vLLM's generate) */
#include "cli/cli.h"

#include "distflow/lora.h"
#include "distflow/rollout.h"
#include "distflow/tokenizer.h"
#include "engine/hf_dir.h"
#include "workers/common/max_pos.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *USAGE =
    "--model DIR (--prompt TEXT | --messages JSON|FILE) [options]\n\n"
    "Generate --n responses to one prompt and print them. --prompt is a user message (after a\n"
    "--system message if given) and --messages a whole conversation (a JSON array of {role,\n"
    "content} messages: the JSON text, or a file holding it, '-' for stdin), rendered with the tokenizer's chat template and the assistant generation\n"
    "prompt and encoded without special tokens, as training and eval render a dataset's prompt.\n"
    "--raw encodes --prompt as plain text instead, adding no special tokens (as `distflow tokenize\n"
    "TEXT`) unless --special adds the tokenizer's own (e.g. Llama-3's <|begin_of_text|>).\n"
    "Greedy unless --temperature is given; a response ends at an EOS token or --max-new-tokens.\n"
    "Prints each response's text (special tokens skipped; with --n > 1 each after a line\n"
    "`--- response i/n ---`) and a summary on stderr; --json prints one JSON object instead:\n"
    "{\"prompt\", \"prompt_ids\", \"responses\": [{\"text\", \"token_ids\", \"log_probs\",\n"
    "\"finish_reason\": \"stop\" | \"length\"}]} (token_ids include the EOS that stopped it).";

typedef struct gen_args {
    const char *model, *tokdir, *adapter, *prompt, *messages, *system, *tmpl_kwargs;
    bool raw, special, json;
    int64_t n, top_k, max_new, seed;
    double temperature, top_p;
} gen_args;

/* Combinations that cannot mean anything, and a --messages that is no array, before any file is read. */
static int check_options(const gen_args *a)
{
    if (!a->prompt == !a->messages)
        return df_error(DF_EINVAL, a->prompt ? "give --prompt or --messages, not both (--messages is the "
                                               "whole conversation)"
                                             : "give --prompt TEXT or --messages JSON (one is required)");
    if (a->raw && (a->messages || a->system || a->tmpl_kwargs))
        return df_error(DF_EINVAL, "--raw encodes --prompt as plain text: %s needs the chat template",
                        a->messages ? "--messages" : a->system ? "--system" : "--chat-template-kwargs");
    if (a->system && a->messages)
        return df_error(DF_EINVAL, "--system adds a message before --prompt; with --messages, put it in the "
                                   "conversation");
    if (a->special && !a->raw)
        return df_error(DF_EINVAL, "--special adds special tokens to a --raw prompt; a chat template writes "
                                   "its own");
    if (!a->messages)
        return DF_OK;
    json_error_t err;
    json_t *j = json_loads(a->messages, JSON_REJECT_DUPLICATES, &err);
    int rc = !j ? df_error(DF_EINVAL, "--messages is not JSON: %s (column %d)", err.text, err.column)
             : !json_is_array(j) ? df_error(DF_EINVAL, "--messages must be a JSON array of {role, content} "
                                                       "messages")
                                 : DF_OK;
    json_decref(j);
    return rc;
}

/* No position past the model's range (max_pos.h), as eval's fit_lengths: a --max-new-tokens given must
 * fit with the prompt, checked from DIR/config.json before the weights load (cfg NULL: a 1-token prompt)
 * and then with the prompt's length; the default shrinks to what the prompt leaves. */
static int fit_lengths(const df_opt *opts, const df_model_config *cfg, const char *dir, int64_t np,
                       int64_t *max_new)
{
    const bool given = df_cli_opt(opts, "max-new-tokens")->seen;
    if (!given && !cfg)
        return DF_OK;
    const int64_t room = cfg ? df_model_max_positions(cfg) - np : 0;
    if (!given && *max_new > room && room >= 1)
        *max_new = room;
    df_seq_bound b = {.len = np + *max_new};
    snprintf(b.why, sizeof b.why, "%s %lld token%s + --max-new-tokens %lld%s",
             cfg ? "the prompt's" : "a prompt of", (long long)np, np == 1 ? "" : "s", (long long)*max_new,
             given ? "" : " (default)");
    return cfg ? df_check_max_pos(cfg, dir, NULL, "command line", "--model", &b)
               : df_check_max_pos_dir(dir, NULL, "command line", "--model", &b);
}

/* The prompt's text (rendered, or --raw's as given) and its ids. */
static int encode_prompt(const df_tokenizer *tok, const gen_args *a, char **text, int32_t **ids, int64_t *np)
{
    int rc = DF_OK;
    if (a->raw)
        rc = (*text = strdup(a->prompt)) ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    else if (!df_tokenizer_chat_template(tok))
        return df_error(DF_EINVAL, "the tokenizer of %s has no chat template: give --raw to encode --prompt "
                                   "as plain text", a->tokdir ? a->tokdir : a->model);
    else if (a->messages &&
             (rc = df_tokenizer_apply_chat_template_json(tok, a->messages, NULL, true, NULL, text)))
        rc = df_error_wrap(rc, "--messages");
    else if (!a->messages) {
        df_chat_message msgs[2] = {{"system", a->system}, {"user", a->prompt}};
        rc = df_tokenizer_apply_chat_template(tok, msgs + !a->system, a->system ? 2 : 1, true, text);
    }
    if (!rc) /* a template writes its special tokens as text (verl: add_special_tokens=False) */
        rc = df_tokenizer_encode(tok, *text, a->raw && a->special, ids, np);
    if (!rc && *np == 0)
        rc = df_error(DF_EINVAL, "the prompt encodes to no tokens; at least one is needed");
    return rc;
}

static int generate(const df_model *m, const df_tokenizer *tok, const gen_args *a, const int32_t *ids,
                    int64_t np, df_rollout_result *res, df_rollout_stats *st)
{
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.greedy = a->temperature <= 0;
    sp.temperature = sp.greedy ? 1.0f : (float)a->temperature;
    sp.top_p = (float)a->top_p;
    sp.top_k = (int)a->top_k;
    sp.max_new_tokens = a->max_new;
    sp.stop_ids = df_tokenizer_eos_ids(tok, &sp.n_stop);
    const int64_t offs[2] = {0, np};
    df_rollout_request req = {.n_prompts = 1, .prompt_offsets = offs, .prompt_tokens = ids,
                              .n_samples = a->n, .seed = (uint64_t)a->seed};
    df_rollout_engine *e = NULL;
    int rc = df_rollout_engine_create(&m->cfg, a->n < 512 ? a->n : 512, np + a->max_new, &e);
    if (!rc)
        rc = df_rollout_generate(e, m, &req, &sp, res, NULL, NULL);
    if (!rc)
        df_rollout_engine_stats(e, st);
    df_rollout_engine_free(e);
    return rc;
}

static const char *finish_name(int8_t r)
{
    return r == DF_FINISH_STOP ? "stop" : "length";
}

/* Response s's text, special tokens skipped (vLLM's default). */
static int response_text(const df_tokenizer *tok, const df_rollout_result *res, int64_t s, char **text)
{
    const int64_t o = res->offsets[s];
    return df_tokenizer_decode(tok, res->tokens + o, res->offsets[s + 1] - o, true, text);
}

static int print_text(const df_tokenizer *tok, const df_rollout_result *res)
{
    int rc = DF_OK;
    for (int64_t s = 0; s < res->n_seqs && !rc; s++) {
        char *text = NULL;
        if (!(rc = response_text(tok, res, s, &text))) {
            if (res->n_seqs > 1)
                printf("--- response %lld/%lld ---\n", (long long)s + 1, (long long)res->n_seqs);
            printf("%s\n", text);
        }
        free(text);
    }
    return rc;
}

static json_t *ids_json(const int32_t *ids, int64_t n)
{
    json_t *a = json_array();
    for (int64_t i = 0; a && i < n; i++)
        json_array_append_new(a, json_integer(ids[i]));
    return a;
}

/* One response's object; a non-finite log-prob (JSON has none) is null. */
static json_t *response_json(const df_tokenizer *tok, const df_rollout_result *res, int64_t s)
{
    char *text = NULL;
    if (response_text(tok, res, s, &text))
        return NULL;
    const int64_t o = res->offsets[s], len = res->offsets[s + 1] - o;
    json_t *lp = json_array();
    for (int64_t i = 0; lp && i < len; i++) {
        const double v = res->log_probs[o + i];
        json_array_append_new(lp, isfinite(v) ? json_real(v) : json_null());
    }
    json_t *r = json_pack("{s:s, s:o, s:o, s:s}", "text", text, "token_ids", ids_json(res->tokens + o, len),
                          "log_probs", lp, "finish_reason", finish_name(res->finish_reason[s]));
    free(text);
    return r;
}

static int print_json(const df_tokenizer *tok, const char *prompt, const int32_t *ids, int64_t np,
                      const df_rollout_result *res)
{
    json_t *rs = json_array();
    for (int64_t s = 0; rs && s < res->n_seqs; s++)
        if (json_array_append_new(rs, response_json(tok, res, s)))
            json_decref(rs), rs = NULL;
    json_t *o =
        json_pack("{s:s, s:o, s:o}", "prompt", prompt, "prompt_ids", ids_json(ids, np), "responses", rs);
    char *out = o ? json_dumps(o, JSON_REAL_PRECISION(9)) : NULL;
    if (out)
        printf("%s\n", out);
    free(out);
    json_decref(o);
    return out ? DF_OK : df_error(DF_ENOMEM, "out of memory writing the JSON output");
}

/* One line on stderr: prompt and generated tokens, how the responses ended, speed. */
static void summary(int64_t np, const df_rollout_result *res, const df_rollout_stats *st)
{
    int64_t stops = 0, total = res->offsets[res->n_seqs];
    for (int64_t s = 0; s < res->n_seqs; s++)
        stops += res->finish_reason[s] == DF_FINISH_STOP;
    fprintf(stderr, "distflow generate: prompt %lld tokens, ", (long long)np);
    if (res->n_seqs == 1)
        fprintf(stderr, "response %lld tokens (%s)", (long long)total, finish_name(res->finish_reason[0]));
    else
        fprintf(stderr, "%lld responses %lld tokens (%lld stop, %lld length)", (long long)res->n_seqs,
                (long long)total, (long long)stops, (long long)(res->n_seqs - stops));
    fprintf(stderr, ", %.1f tokens/s\n", st->seconds > 0 ? (double)total / st->seconds : 0.0);
}

int df_cmd_generate(int argc, char **argv)
{
    gen_args a = {.n = 1, .top_k = -1, .max_new = 512, .top_p = 1.0};
    df_opt opts[] = {
        {"model", DF_OPT_PATH, &a.model, "HF model directory, e.g. a checkpoint's global_step_N/actor "
         "(required)", false},
        {"prompt", DF_OPT_STR, &a.prompt, "the user message (or with --raw the plain text)", false},
        {"messages", DF_OPT_STR, &a.messages, "the whole conversation instead: a JSON array of {role, "
         "content} messages, given as the JSON text itself (starting with '[') or a file holding it ('-': "
         "stdin)", false},
        {"system", DF_OPT_STR, &a.system, "with --prompt: a system message before it", false},
        {"raw", DF_OPT_FLAG, &a.raw, "encode --prompt as plain text, without the chat template", false},
        {"special", DF_OPT_FLAG, &a.special, "with --raw: add the tokenizer's special tokens (e.g. Llama-3 "
         "BOS)", false},
        {"tokenizer", DF_OPT_PATH, &a.tokdir, "tokenizer directory (default: the model's)", false},
        {"lora-adapter", DF_OPT_PATH, &a.adapter, "a PEFT LoRA adapter directory merged into the model first "
         "(docs/lora.md)", false},
        {"chat-template-kwargs", DF_OPT_STR, &a.tmpl_kwargs, "JSON object of chat-template variables, e.g. "
         "'{\"enable_thinking\": false}' (as data.apply_chat_template_kwargs)", false},
        {"n", DF_OPT_INT, &a.n, "responses (default 1)", false},
        {"temperature", DF_OPT_FLOAT, &a.temperature, "sample at this temperature (default 0: greedy)",
         false},
        {"top-p", DF_OPT_FLOAT, &a.top_p, "nucleus sampling mass (default 1: off)", false},
        {"top-k", DF_OPT_INT, &a.top_k, "top-k sampling (default -1: off)", false},
        {"max-new-tokens", DF_OPT_INT, &a.max_new, "tokens per response at most (default 512, or what the "
         "prompt leaves of the model's max_position_embeddings; a value given must fit with it)", false},
        {"seed", DF_OPT_INT, &a.seed, "sampling seed (default 0)", false},
        {"json", DF_OPT_FLAG, &a.json, "print one JSON object: prompt, prompt_ids, responses", false},
        {0}};
    static const df_opt_range ranges[] = {
        {"n", 1, INFINITY}, {"temperature", 0, INFINITY}, {"top-p", 0, 1}, {"top-k", -1, INT_MAX},
        {"max-new-tokens", 1, INFINITY}, {0}};
    char *pos[1];
    int n_pos, code;
    if (df_cli_parse("generate", USAGE, opts, argc, argv, pos, 0, &n_pos, &code) ||
        (code = df_cli_require("generate", opts)) || (code = df_cli_check_ranges("generate", opts, ranges)) ||
        (code = df_cli_greedy_options("generate", opts, a.temperature)))
        return code;
    char *msgs = NULL; /* --messages FILE's text */
    if (a.messages && !strchr("[{", a.messages[strspn(a.messages, " \t\r\n")])) {
        if (df_cli_read_arg(a.messages, "messages", &msgs))
            return df_cli_fail("generate");
        a.messages = msgs;
    }
    if (check_options(&a)) { /* a usage error: 2, as the parser's */
        free(msgs);
        df_cli_fail("generate");
        return 2;
    }
    df_model *m = NULL;
    df_tokenizer *tok = NULL;
    char *text = NULL;
    int32_t *ids = NULL;
    int64_t np = 0;
    df_rollout_result res = {0};
    df_rollout_stats st = {0};
    int rc = fit_lengths(opts, NULL, a.model, 1, &a.max_new);
    if (!rc)
        rc = df_hf_dir_load(a.model, a.tokdir, NULL, &m, &tok);
    if (!rc && a.adapter && (rc = df_lora_apply_peft(m, a.adapter)))
        rc = df_error_wrap(rc, "--lora-adapter");
    if (!rc && a.tmpl_kwargs && (rc = df_tokenizer_set_chat_template_kwargs(tok, a.tmpl_kwargs)))
        rc = df_error_wrap(rc, "--chat-template-kwargs");
    if (!rc)
        rc = encode_prompt(tok, &a, &text, &ids, &np);
    if (!rc)
        rc = fit_lengths(opts, &m->cfg, a.model, np, &a.max_new);
    if (!rc)
        rc = generate(m, tok, &a, ids, np, &res, &st);
    if (!rc)
        rc = a.json ? print_json(tok, text, ids, np, &res) : print_text(tok, &res);
    if (!rc) {
        fflush(stdout);
        summary(np, &res, &st);
    }
    df_rollout_result_free(&res);
    free(ids);
    free(text);
    free(msgs);
    df_tokenizer_free(tok);
    df_model_free(m);
    return rc ? df_cli_fail("generate") : 0;
}
