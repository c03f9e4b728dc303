/* distflow data gsm8k | math | jsonl | synth | tokenizer | marft-demos (cmd_marft_demos.c) */
#include "cli/cli.h"

#include "data/jsonl.h"
#include "distflow/dataset.h"
#include "distflow/synth.h"
#include "distflow/tokenizer.h"
#include "util/fsutil.h"
#include "util/sbuf.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *USAGE =
    "gsm8k | math | jsonl | synth | tokenizer | marft-demos [options]   (distflow data <sub> --help)\n\n"
    "  gsm8k      convert raw GSM8K rows (JSON lines or HF parquet) to the verl RL schema (as verl's gsm8k.py)\n"
    "  math       convert raw MATH / MATH-500 rows (JSON lines or parquet) to the verl RL schema (as verl's math_dataset.py)\n"
    "  jsonl      write a dataset file's rows (a parquet file's, say) as JSON lines, as distflow reads them\n"
    "  synth      generate the synthetic arithmetic word-problem task (the embedded default)\n"
    "  tokenizer  train a small byte-level BPE tokenizer on a dataset's chat-rendered text\n"
    "  marft-demos  planner / solver SFT rows on a MARFT workflow's chained prompts (make demo ALGO=marft)";

static int cmd_gsm8k(int argc, char **argv)
{
    const char *in = NULL, *out = NULL, *split = NULL;
    bool tool = false;
    df_opt opts[] = {
        {"in", DF_OPT_PATH, &in, "raw GSM8K file, JSON lines or parquet, e.g. ../shared/data/gsm8k/train.jsonl (required)", false},
        {"multiturn-tool", DF_OPT_FLAG, &tool, "verl's gsm8k_multiturn_w_tool layout: a system prompt asking for the "
         "calc_gsm8k_reward tool, extra_info.tools_kwargs / interaction_kwargs (examples/gsm8k_multiturn)", false},
        {"out", DF_OPT_PATH, &out, "output JSON lines in the verl schema (required)", false},
        {"split", DF_OPT_STR, &split, "extra_info.split (default: the input's base name)", false},
        {0}};
    char *pos[1];
    int n_pos, code;
    if (df_cli_parse("data gsm8k", "--in RAW.jsonl --out OUT.jsonl [--split NAME] [--multiturn-tool]", opts, argc,
                     argv, pos, 0, &n_pos, &code))
        return code;
    if ((code = df_cli_require("data gsm8k", opts)) ||
        (code = df_cli_distinct("data gsm8k", "out", out, "in", in)))
        return code;
    int64_t n = 0;
    char *made = NULL; /* directories made for the output go again if it is not written */
    int rc = df_mkdir_parent_undoable(out, &made) ||
             (tool ? df_gsm8k_convert_tool(in, out, split, &n) : df_gsm8k_convert(in, out, split, &n));
    df_mkdir_settle(made, rc);
    if (rc)
        return df_cli_fail("data gsm8k");
    fprintf(stderr, "distflow data gsm8k: wrote %lld rows to %s\n", (long long)n, out);
    return 0;
}

static int cmd_math(int argc, char **argv)
{
    const char *in = NULL, *out = NULL, *split = NULL, *source = DF_MATH_DATA_SOURCE;
    df_opt opts[] = {
        {"in", DF_OPT_PATH, &in, "raw MATH file, JSON lines or parquet, e.g. ../shared/data/math500/test.jsonl (required)", false},
        {"out", DF_OPT_PATH, &out, "output JSON lines in the verl schema (required)", false},
        {"split", DF_OPT_STR, &split, "extra_info.split (default: the input's base name)", false},
        {"data-source", DF_OPT_STR, &source,
         "data_source of every row (default " DF_MATH_DATA_SOURCE "; verl's MATH script writes "
         "DigitalLearningGmbH/MATH-lighteval)",
         false},
        {0}};
    char *pos[1];
    int n_pos, code;
    if (df_cli_parse("data math", "--in RAW.jsonl --out OUT.jsonl [--split NAME] [--data-source NAME]", opts,
                     argc, argv, pos, 0, &n_pos, &code))
        return code;
    if ((code = df_cli_require("data math", opts)) ||
        (code = df_cli_distinct("data math", "out", out, "in", in)))
        return code;
    int64_t n = 0;
    char *made = NULL; /* directories made for the output go again if it is not written */
    int rc = df_mkdir_parent_undoable(out, &made) || df_math_convert(in, out, split, source, &n);
    df_mkdir_settle(made, rc);
    if (rc)
        return df_cli_fail("data math");
    fprintf(stderr, "distflow data math: wrote %lld rows to %s\n", (long long)n, out);
    return 0;
}

/* One row as compact JSON, keys in the file's order. */
static int row_as_line(void *user, json_t *raw, const char *file, int64_t line, const char *split, int64_t index,
                       df_jsonl_buf *out)
{
    (void)user, (void)file, (void)line, (void)split, (void)index;
    char *text = df_jsonl_compact(raw);
    bool ok = text && df_jsonl_buf_add(out, text, strlen(text)) && df_jsonl_buf_add(out, "\n", 1);
    free(text);
    return ok ? DF_OK : df_error(DF_ENOMEM, "out of memory");
}

static int cmd_jsonl(int argc, char **argv)
{
    const char *in = NULL, *out = NULL;
    df_opt opts[] = {{"in", DF_OPT_PATH, &in, "dataset file, parquet or JSON lines (required)", false},
                     {"out", DF_OPT_PATH, &out, "output JSON lines, one compact object per row (required)", false},
                     {0}};
    char *pos[1];
    int n_pos, code;
    if (df_cli_parse("data jsonl", "--in FILE.parquet --out OUT.jsonl", opts, argc, argv, pos, 0, &n_pos, &code))
        return code;
    if ((code = df_cli_require("data jsonl", opts)) ||
        (code = df_cli_distinct("data jsonl", "out", out, "in", in)))
        return code;
    int64_t n = 0;
    char *made = NULL; /* directories made for the output go again if it is not written */
    int rc = df_mkdir_parent_undoable(out, &made) || df_jsonl_convert(in, out, "", true, row_as_line, NULL, &n);
    df_mkdir_settle(made, rc);
    if (rc)
        return df_cli_fail("data jsonl");
    fprintf(stderr, "distflow data jsonl: wrote %lld rows to %s\n", (long long)n, out);
    return 0;
}

static int cmd_synth(int argc, char **argv)
{
    df_synth_cfg cfg;
    df_synth_cfg_default(&cfg);
    const char *out = NULL, *split = "train", *ops = NULL, *exclude = NULL;
    double bare = 0, bare_short = -1;
    bool tool = false;
    int64_t n = 0, seed = 0, min_steps = cfg.min_steps, max_steps = cfg.max_steps;
    int64_t max_operand = cfg.max_operand, max_value = cfg.max_value;
    df_opt opts[] = {
        {"out", DF_OPT_PATH, &out, "output JSON lines (required)", false},
        {"n", DF_OPT_INT, &n, "number of problems (required)", false},
        {"seed", DF_OPT_INT, &seed, "generator seed; use different seeds for train and test", false},
        {"split", DF_OPT_STR, &split, "extra_info.split (default train)", false},
        {"min-steps", DF_OPT_INT, &min_steps, "fewest operations per problem (default 2)", false},
        {"max-steps", DF_OPT_INT, &max_steps, "most operations per problem (default 3)", false},
        {"max-operand", DF_OPT_INT, &max_operand, "largest start value / operand (default 20)", false},
        {"max-value", DF_OPT_INT, &max_value, "no value ever exceeds this (default 99)", false},
        {"ops", DF_OPT_STR, &ops, "operations to use, a subset of \"+-*\" (default all)", false},
        {"bare-answers", DF_OPT_FLOAT, &bare,
         "share of demonstrations that are bare answers \"The answer is N.\" (default 0)", false},
        {"bare-answers-short", DF_OPT_FLOAT, &bare_short, "share of bare answers among the problems with "
         "--min-steps operations, --bare-answers then covering the longer ones (default: --bare-answers for all)",
         false},
        {"exclude", DF_OPT_PATH, &exclude, "skip problems that appear in this file (JSON lines or parquet)", false},
        {"tool", DF_OPT_FLAG, &tool, "add \"messages\": a multi-turn SFT conversation calling the calculator tool "
         "(a bare-answer row answers without it; make demo ALGO=grpo_tool)", false},
        {0}};
    char *pos[1];
    int n_pos, code;
    static const df_opt_range ranges[] = {
        {"n", 1, INFINITY}, {"min-steps", 1, DF_SYNTH_MAX_STEPS}, {"max-steps", 1, DF_SYNTH_MAX_STEPS},
        {"max-operand", 1, 1e9}, {"max-value", 1, 1e9}, {"bare-answers", 0, 1}, {"bare-answers-short", 0, 1},
        {0}};
    if (df_cli_parse("data synth", "--out FILE --n N [--seed S] [knobs]", opts, argc, argv, pos, 0,
                     &n_pos, &code))
        return code;
    if ((code = df_cli_require("data synth", opts)) ||
        (code = df_cli_check_ranges("data synth", opts, ranges)) ||
        (code = df_cli_distinct("data synth", "out", out, "exclude", exclude)))
        return code;
    if (ops && strlen(ops) >= sizeof cfg.ops) { /* cfg.ops holds three; a longer text would be cut */
        fprintf(stderr, "distflow data synth: error: --ops \"%s\": 1 to 3 of \"+-*\", each once\n", ops);
        return 2;
    }
    cfg.seed = (uint64_t)seed;
    cfg.split = split;
    cfg.min_steps = (int)min_steps;
    cfg.max_steps = (int)max_steps;
    cfg.max_operand = (int)max_operand;
    cfg.max_value = (int)max_value;
    if (ops)
        snprintf(cfg.ops, sizeof cfg.ops, "%s", ops);
    cfg.bare_answer_frac = bare;
    cfg.bare_answer_frac_short = bare_short;
    cfg.tool = tool;
    df_dataset *ex = NULL;
    df_dataset_opts eo = {.reward_optional = true};
    if (exclude && df_dataset_load(&exclude, 1, &eo, &ex))
        return df_cli_fail("data synth");
    cfg.exclude = ex;
    char *made = NULL;
    int rc = df_mkdir_parent_undoable(out, &made) || df_synth_write(&cfg, n, out);
    df_mkdir_settle(made, rc);
    df_dataset_free(ex);
    if (rc)
        return df_cli_fail("data synth");
    fprintf(stderr, "distflow data synth: wrote %lld problems to %s\n", (long long)n, out);
    return 0;
}

/* Append one ChatML turn "<|im_start|>role\ncontent<|im_end|>\n". */
static void put_turn(df_sbuf *b, const char *role, const char *content)
{
    df_sbuf_printf(b, "<|im_start|>%s\n%s<|im_end|>\n", role, content);
}

/* Row i's conversation in column `key` (a list of messages with string contents) as ChatML turns,
   the `system` turn first unless the conversation opens with its own; false when the row has none
   (no such column, not a non-empty list). */
static bool put_conversation(const df_dataset *ds, int64_t i, const char *key, const char *system, df_sbuf *b)
{
    char *text = NULL;
    if (!key || df_dataset_field(ds, i, key, &text))
        return false;
    json_t *msgs = json_loads(text, 0, NULL);
    free(text);
    bool put = json_is_array(msgs) && json_array_size(msgs);
    const char *first = json_string_value(json_object_get(json_array_get(msgs, 0), "role"));
    if (put && !(first && !strcmp(first, "system")))
        put_turn(b, "system", system);
    size_t j;
    json_t *m;
    json_array_foreach(msgs, j, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        const char *content = json_string_value(json_object_get(m, "content"));
        if (put && role)
            put_turn(b, role, content ? content : "");
    }
    json_decref(msgs);
    return put;
}

/* The text a model sees for row i in ChatML: the row's conversation (the messages of `messages_key`:
   what multi-turn SFT trains on, tool calls and tool answers included), or else the system turn, its
   prompt and the answer of `answer_key` as the assistant turn. Counts the rows with a conversation in
   uses[0], those with an answer in uses[1]. NULL when out of memory. */
static char *chat_text(const df_dataset *ds, int64_t i, const char *system, const char *messages_key,
                       const char *answer_key, int64_t uses[2])
{
    df_sbuf b = {0};
    if (put_conversation(ds, i, messages_key, system, &b)) {
        uses[0]++;
    } else {
        put_turn(&b, "system", system);
        for (int j = 0; j < df_dataset_num_messages(ds, i); j++) {
            const char *role, *content;
            if (!df_dataset_message(ds, i, j, &role, &content))
                put_turn(&b, role, content);
        }
        char *answer = NULL;
        if (answer_key && df_dataset_field(ds, i, answer_key, &answer))
            answer = NULL;
        uses[1] += answer != NULL;
        put_turn(&b, "assistant", answer ? answer : "");
        free(answer);
    }
    char *s = NULL;
    return df_sbuf_finish(&b, &s) ? NULL : s;
}

/* The text the keys found (chat_text's uses[] over n rows): a --messages-key no row has would be
   ignored, and a --response-key that none of the rows without a conversation has would train on
   empty answers. */
static int check_keys(const df_opt *opts, const char *in, int64_t n, const int64_t uses[2])
{
    const df_opt *mk = df_cli_opt(opts, "messages-key"), *rk = df_cli_opt(opts, "response-key");
    const char *mkey = *(const char *const *)mk->dst, *rkey = *(const char *const *)rk->dst;
    if (mk->seen && *mkey && uses[0] == 0)
        return df_error(DF_EINVAL, "--messages-key %s: no row of %s has a conversation there ('' to train on "
                        "none)", mkey, in);
    if (uses[0] < n && uses[1] == 0)
        return df_error(DF_EINVAL, "--response-key %s%s: none of the %lld rows of %s without a conversation "
                        "has it: every answer would be empty",
                        rkey, rk->seen ? "" : " (default)", (long long)(n - uses[0]), in);
    return DF_OK;
}

static int cmd_tokenizer(int argc, char **argv)
{
    const char *in = NULL, *out = NULL, *answer_key = "extra_info.answer", *messages_key = "messages";
    const char *system = "You are a helpful assistant.";
    int64_t vocab = 0;
    df_opt opts[] = {
        {"in", DF_OPT_PATH, &in, "dataset in the verl schema (JSON lines or parquet) (required)", false},
        {"out", DF_OPT_PATH, &out, "output directory for tokenizer.json + tokenizer_config.json (required)", false},
        {"vocab-size", DF_OPT_INT, &vocab, "vocabulary size incl. 256 bytes and 3 specials (required)", false},
        {"messages-key", DF_OPT_TEXT, &messages_key, "field with a row's whole conversation, trained on when "
         "present (default messages: multi-turn SFT data, e.g. data synth --tool; '': none, every row's "
         "prompt and response); one given that no row has is refused", false},
        {"response-key", DF_OPT_STR, &answer_key, "field with the response text of rows without a conversation "
         "(default extra_info.answer); refused when none of those rows has it", false},
        {"system", DF_OPT_TEXT, &system, "default system message of the chat template", false},
        {0}};
    char *pos[1];
    int n_pos, code;
    if (df_cli_parse("data tokenizer", "--in DATA.jsonl --vocab-size N --out DIR", opts, argc, argv,
                     pos, 0, &n_pos, &code))
        return code;
    if ((code = df_cli_require("data tokenizer", opts)))
        return code;
    df_dataset *ds;
    df_dataset_opts dopt = {.reward_optional = true, .need_rows = true};
    if (df_dataset_load(&in, 1, &dopt, &ds))
        return df_cli_fail("data tokenizer");
    int64_t n = df_dataset_size(ds), uses[2] = {0, 0};
    char **texts = calloc((size_t)(n ? n : 1), sizeof *texts);
    int rc = texts ? 0 : df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; i < n && !rc; i++)
        if (!(texts[i] = chat_text(ds, i, system, *messages_key ? messages_key : NULL, answer_key, uses)))
            rc = df_error(DF_ENOMEM, "out of memory");
    if (!rc)
        rc = check_keys(opts, in, n, uses);
    df_tokenizer *tok = NULL;
    df_bpe_train_options bo = {.system_message = system};
    if (!rc)
        rc = df_tokenizer_train_bpe((const char *const *)texts, n, vocab, &bo, &tok);
    if (!rc)
        rc = df_tokenizer_save(tok, out);
    if (!rc)
        fprintf(stderr, "distflow data tokenizer: %lld tokens trained on %lld rows, saved to %s\n",
                (long long)df_tokenizer_vocab_size(tok), (long long)n, out);
    for (int64_t i = 0; texts && i < n; i++)
        free(texts[i]);
    free(texts);
    df_tokenizer_free(tok);
    df_dataset_free(ds);
    return rc ? df_cli_fail("data tokenizer") : 0;
}

int df_cmd_data(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "gsm8k"))
        return cmd_gsm8k(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "math"))
        return cmd_math(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "jsonl"))
        return cmd_jsonl(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "synth"))
        return cmd_synth(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "tokenizer"))
        return cmd_tokenizer(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "marft-demos"))
        return df_cmd_data_marft_demos(argc - 1, argv + 1);
    bool help = argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"));
    if (!help)
        return df_cli_bad_subcommand("data", USAGE, argc >= 2 ? argv[1] : NULL);
    df_cli_usage("data", USAGE, NULL);
    return 0;
}
