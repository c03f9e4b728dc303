/*
 * test_demo_tool.c — the data path of `make demo ALGO=grpo_tool` (docs/demo.md, "The tool variant").
 *
 * `distflow data tokenizer` on `data synth --tool` rows trains on the conversations the model reads
 * (their "messages": the tool call and the calculator's answer included), so the call's JSON is a
 * few tokens, where a tokenizer trained on the answers only (--messages-key '': the old input)
 * spells it byte by byte; digits stay one token each (the Qwen2 pre-tokenizer), so
 * copying a number is a token-for-token copy; the saved tokenizer.json loads and round-trips a
 * conversation. And the tokens a multi-turn rollout holds after a tool call (the prompt with its
 * generation prompt, the model's call, the stop token it keeps, the delta of
 * df_agent_render_delta for the tool message, the final answer) equal those multi-turn SFT trained
 * on, so the model reads the tool's answer in rollouts exactly as it learned to.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "distflow/agent.h"
#include "testutil.h"
#include "workers/sft/sft_chat.h"

#include <stdlib.h>
#include <string.h>

static const char *const CALL = "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"";

/* `distflow data synth --tool` (the demo's knobs, 400 rows) into dir/train.jsonl, then a tokenizer trained
   on it into dir/<name> with the extra options `opts`. */
static void make_tokenizer(const char *dir, const char *name, const char *opts)
{
    char cmd[2048], out[4096];
    snprintf(cmd, sizeof cmd,
             "%s/distflow data synth --out %s/train.jsonl --seed 1 --min-steps 1 --max-steps 2 --max-operand 999 "
             "--max-value 99999 --tool --bare-answers 0 --bare-answers-short 0.7 --n 400 2>&1 && "
             "%s/distflow data tokenizer --in %s/train.jsonl --vocab-size 400 --out %s/%s %s 2>&1",
             DF_BINARY_DIR, dir, DF_BINARY_DIR, dir, dir, name, opts);
    if (df_test_command(cmd, out, sizeof out))
        fail_msg("%s\n%s", cmd, out);
}

static df_tokenizer *load(const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    df_tokenizer *t = NULL;
    if (df_tokenizer_load(path, &t))
        fail_msg("%s: %s", path, df_last_error());
    return t;
}

static int64_t n_tokens(const df_tokenizer *t, const char *text)
{
    int32_t *ids;
    int64_t n;
    assert_int_equal(df_tokenizer_encode(t, text, false, &ids, &n), 0);
    free(ids);
    return n;
}

/* Row `i` of dir/train.jsonl's "messages" as compact JSON (malloc'd). */
static char *row_messages(const char *dir, int i)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/train.jsonl", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *line = NULL;
    size_t cap = 0;
    for (int k = 0; k <= i; k++)
        assert_true(getline(&line, &cap, f) > 0);
    fclose(f);
    json_t *row = json_loads(line, 0, NULL);
    free(line);
    assert_non_null(row);
    char *m = json_dumps(json_object_get(row, "messages"), JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(row);
    assert_non_null(m);
    return m;
}

static void test_tokenizer_trained_on_conversations(void **state)
{
    const char *dir = *state;
    make_tokenizer(dir, "conv", "");
    make_tokenizer(dir, "answers", "--messages-key ''");
    df_tokenizer *conv = load(dir, "conv"), *ans = load(dir, "answers");
    int64_t n_conv = n_tokens(conv, CALL), n_ans = n_tokens(ans, CALL);
    /* 16 tokens on the conversations against 58 (the call is not in the answers) */
    assert_in_range(n_conv, 1, 20);
    assert_true(n_ans >= 2 * n_conv);
    /* the digits of a number are one token each, in both */
    const char *num = "845 + 794 = 1639";
    int32_t *ids;
    int64_t n, digits = 0;
    assert_int_equal(df_tokenizer_encode(conv, num, false, &ids, &n), 0);
    for (int64_t k = 0; k < n; k++) {
        const char *b;
        int64_t len;
        assert_int_equal(df_tokenizer_token_bytes(conv, ids[k], &b, &len), 0);
        assert_false(len > 1 && memchr("0123456789", b[0], 10) && memchr("0123456789", b[1], 10));
        digits += len == 1 && b[0] >= '0' && b[0] <= '9';
    }
    assert_int_equal(digits, 10);
    free(ids);
    /* a whole conversation round-trips through the saved tokenizer.json */
    char *m = row_messages(dir, 0), *text, *back;
    assert_int_equal(df_tokenizer_apply_chat_template_json(conv, m, NULL, false, NULL, &text), 0);
    assert_non_null(strstr(text, CALL));
    assert_int_equal(df_tokenizer_encode(conv, text, false, &ids, &n), 0);
    assert_int_equal(df_tokenizer_decode(conv, ids, n, false, &back), 0);
    assert_string_equal(back, text);
    assert_true(n < n_tokens(ans, text));
    free(ids), free(back), free(text), free(m);
    df_tokenizer_free(conv);
    df_tokenizer_free(ans);
}

/* ids [*n] += encode(text) */
static void append(const df_tokenizer *t, const char *text, int32_t **ids, int64_t *n)
{
    int32_t *more;
    int64_t k;
    assert_int_equal(df_tokenizer_encode(t, text, false, &more, &k), 0);
    *ids = realloc(*ids, (size_t)(*n + k + 1) * sizeof **ids);
    assert_non_null(*ids);
    memcpy(*ids + *n, more, (size_t)k * sizeof *more);
    *n += k;
    free(more);
}

static void test_rollout_tokens_equal_sft_tokens(void **state)
{
    const char *dir = *state;
    make_tokenizer(dir, "conv", "");
    df_tokenizer *t = load(dir, "conv");
    int32_t end = df_tokenizer_token_to_id(t, "<|im_end|>");
    assert_true(end >= 0);
    df_sft_chat_prefix pre;
    assert_int_equal(df_sft_chat_prefix_init(t, &pre), 0);
    int checked = 0;
    for (int i = 0; i < 12; i++) {
        char *m = row_messages(dir, i);
        json_t *msgs = json_loads(m, 0, NULL);
        if (json_array_size(msgs) != 4) { /* a bare answer: no tool turn */
            json_decref(msgs), free(m);
            continue;
        }
        int32_t *sft_ids, *ids = NULL;
        uint8_t *mask;
        int64_t n_sft, n = 0;
        bool mismatch = false;
        assert_int_equal(df_sft_chat_encode(t, &pre, m, NULL, -1, &mismatch, &sft_ids, &mask, &n_sft), 0);
        assert_false(mismatch);
        /* the rollout: the prompt, the model's call and its stop token, the tool's delta, the answer */
        json_t *user = json_pack("[O]", json_array_get(msgs, 0)), *upto = json_pack("[O, O]", json_array_get(msgs, 0),
                                                                                 json_array_get(msgs, 1));
        json_t *tool = json_pack("[O]", json_array_get(msgs, 2));
        char *u = json_dumps(user, JSON_COMPACT), *o = json_dumps(upto, JSON_COMPACT), *tj = json_dumps(tool, JSON_COMPACT);
        char *prompt;
        assert_int_equal(df_tokenizer_apply_chat_template_json(t, u, NULL, true, NULL, &prompt), 0);
        append(t, prompt, &ids, &n);
        append(t, json_string_value(json_object_get(json_array_get(msgs, 1), "content")), &ids, &n);
        ids[n++] = end;
        int32_t *delta;
        int64_t n_delta;
        df_agent_render_opts ro = {.kept_suffix = "<|im_end|>"};
        assert_int_equal(df_agent_render_delta(t, o, tj, &ro, &delta, &n_delta), 0);
        int64_t at = n; /* where the tool's delta starts */
        ids = realloc(ids, (size_t)(n + n_delta + 1) * sizeof *ids);
        memcpy(ids + n, delta, (size_t)n_delta * sizeof *delta);
        n += n_delta;
        append(t, json_string_value(json_object_get(json_array_get(msgs, 3), "content")), &ids, &n);
        ids[n++] = end;
        /* SFT's sequence is that, and the "\n" the template writes after the last <|im_end|> */
        assert_int_equal(n_sft, n + 1);
        assert_memory_equal(sft_ids, ids, (size_t)n * sizeof *ids);
        /* the loss covers what the model writes, never the tool's answer: after the "\n" that ends the
           call's turn (SFT trains it with "<|im_end|>"; the rollout appends it), the delta is masked */
        assert_int_equal(mask[at - 1], 1);
        for (int64_t k = at + 1; k < at + n_delta; k++)
            assert_int_equal(mask[k], 0);
        for (int64_t k = at + n_delta; k < n_sft; k++)
            assert_int_equal(mask[k], 1);
        checked++;
        free(sft_ids), free(mask), free(ids), free(delta), free(prompt), free(u), free(o), free(tj), free(m);
        json_decref(user), json_decref(upto), json_decref(tool), json_decref(msgs);
    }
    assert_true(checked >= 4);
    df_sft_chat_prefix_free(&pre);
    df_tokenizer_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_tokenizer_trained_on_conversations, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_rollout_tokens_equal_sft_tokens, df_test_mkdtemp, df_test_rmtree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
