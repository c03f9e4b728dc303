/*
 * Rendering for the multi-turn loop (distflow/agent.h) on the Qwen2.5 tokenizer and chat template
 * (../shared/data/tokenizers/qwen2.5): a conversation grown turn by turn — prompt, the model's tool
 * call, the calculator's response appended through df_agent_render_delta, the model's answer, the
 * GSM8K interaction's reply — must hold exactly the ids of one re-tokenisation of the whole
 * conversation. Then the errors of the delta and df_agent_truncate's three sides.
 */
#include "distflow/agent.h"

#include "testutil.h"

#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define QWEN DF_SHARED_DIR "/data/tokenizers/qwen2.5"

typedef struct seq {
    int32_t *ids;
    int64_t n;
} seq;

static void seq_append(seq *s, const int32_t *ids, int64_t n)
{
    s->ids = realloc(s->ids, (size_t)(s->n + n + 1) * sizeof *s->ids);
    assert_non_null(s->ids);
    memcpy(s->ids + s->n, ids, (size_t)n * sizeof *ids);
    s->n += n;
}

static void seq_append_text(const df_tokenizer *tok, seq *s, const char *text)
{
    int32_t *ids = NULL;
    int64_t n = 0;
    assert_int_equal(df_tokenizer_encode(tok, text, false, &ids, &n), DF_OK);
    seq_append(s, ids, n);
    free(ids);
}

/* The whole conversation rendered with the generation prompt and tokenised once must equal s. */
static void assert_same_as_whole(const df_tokenizer *tok, const seq *s, json_t *msgs, const char *tools)
{
    char *m = json_dumps(msgs, JSON_COMPACT), *text = NULL;
    assert_int_equal(df_tokenizer_apply_chat_template_json(tok, m, tools, true, NULL, &text), DF_OK);
    int32_t *ids = NULL;
    int64_t n = 0;
    assert_int_equal(df_tokenizer_encode(tok, text, false, &ids, &n), DF_OK);
    assert_int_equal(s->n, n);
    for (int64_t i = 0; i < n; i++)
        if (s->ids[i] != ids[i])
            fail_msg("token %lld: %d in the grown sequence, %d in one tokenisation", (long long)i, s->ids[i], ids[i]);
    free(ids);
    free(text);
    free(m);
}

/* Append `add` (a JSON array of new messages) to msgs and its delta to s. */
static void extend(const df_tokenizer *tok, seq *s, json_t *msgs, json_t *add, const char *tools)
{
    char *m = json_dumps(msgs, JSON_COMPACT), *a = json_dumps(add, JSON_COMPACT);
    df_agent_render_opts o = {.tools_json = tools, .kept_suffix = "<|im_end|>"};
    int32_t *ids = NULL;
    int64_t n = 0;
    int rc = df_agent_render_delta(tok, m, a, &o, &ids, &n);
    if (rc)
        fail_msg("%s", df_last_error());
    assert_true(n > 0);
    assert_int_equal(ids[0], df_tokenizer_token_to_id(tok, "\xc4\x8a")); /* the "\n" after <|im_end|> */
    seq_append(s, ids, n);
    json_array_extend(msgs, add);
    free(ids);
    free(m);
    free(a);
}

static json_t *message(const char *role, const char *content)
{
    return json_pack("{s:s, s:s}", "role", role, "content", content);
}

static void test_multi_turn_delta(void **state)
{
    (void)state;
    df_tokenizer *tok = NULL;
    assert_int_equal(df_tokenizer_load(QWEN, &tok), DF_OK);
    df_tool_set *set = NULL;
    assert_int_equal(df_tool_set_create(&set), DF_OK);
    assert_int_equal(df_tool_set_add(set, &df_tool_calculator, NULL, NULL), DF_OK);
    assert_int_equal(df_tool_set_add(set, &df_tool_gsm8k, NULL, NULL), DF_OK);
    char *tools = NULL;
    assert_int_equal(df_tool_set_tools_json(set, &tools), DF_OK);

    /* the prompt, as the rollout prefills it */
    json_t *msgs = json_pack("[o, o]", message("system", "You are a math expert."),
                             message("user", "What is 12345678 * 87654321? Answer after ####."));
    char *m = json_dumps(msgs, JSON_COMPACT), *prompt = NULL;
    assert_int_equal(df_tokenizer_apply_chat_template_json(tok, m, tools, true, NULL, &prompt), DF_OK);
    free(m);
    seq s = {0};
    seq_append_text(tok, &s, prompt);
    free(prompt);

    /* turn 1: the model calls the calculator; its tokens end with the stop token it generated */
    const char *turn1 = "Let me compute.\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": "
                        "\"12345678 * 87654321\"}}\n</tool_call>";
    seq_append_text(tok, &s, turn1);
    seq_append_text(tok, &s, "<|im_end|>");
    json_array_append_new(msgs, message("assistant", turn1));
    df_tool_calls calls;
    assert_int_equal(df_tool_calls_parse(turn1, df_tool_set_names(set), df_tool_set_size(set), 1, &calls), DF_OK);
    assert_int_equal(calls.n_calls, 1);
    df_tool_session *ts = NULL;
    assert_int_equal(df_tool_session_create(set, "t0", NULL, &ts), DF_OK);
    df_tool_result r;
    assert_int_equal(df_tool_session_execute(ts, &calls.calls[0], &r), DF_OK);
    char *cut = NULL;
    assert_int_equal(df_agent_truncate(tok, r.text, 256, "middle", &cut), DF_OK);
    assert_string_equal(cut, "12345678 * 87654321 = 1082152022374638");
    json_t *add = json_pack("[o]", message("tool", cut));
    extend(tok, &s, msgs, add, tools);
    json_decref(add);
    assert_same_as_whole(tok, &s, msgs, tools);

    /* turn 2: the answer; the interaction replies as the user */
    const char *turn2 = "The product is 1082152022374638.\n#### 1082152022374638";
    seq_append_text(tok, &s, turn2);
    seq_append_text(tok, &s, "<|im_end|>");
    json_array_append_new(msgs, message("assistant", turn2));
    df_interaction_set *is = NULL;
    assert_int_equal(df_interaction_set_create(&is), DF_OK);
    assert_int_equal(df_interaction_set_add(is, NULL, &df_interaction_gsm8k, NULL), DF_OK);
    df_interaction_session *ia = NULL;
    assert_int_equal(df_interaction_session_start(is, "t0", "{\"ground_truth\": \"1082152022374638\"}", &ia), DF_OK);
    m = json_dumps(msgs, JSON_COMPACT);
    df_interaction_result ir;
    assert_int_equal(df_interaction_session_respond(ia, m, &ir), DF_OK);
    free(m);
    assert_true(ir.should_terminate);
    add = json_pack("[o]", message("user", ir.text));
    extend(tok, &s, msgs, add, tools);
    json_decref(add);
    assert_same_as_whole(tok, &s, msgs, tools);

    df_interaction_result_clear(&ir);
    df_interaction_session_free(ia);
    df_interaction_set_free(is);
    free(cut);
    df_tool_result_clear(&r);
    df_tool_calls_clear(&calls);
    df_tool_session_free(ts);
    df_tool_set_free(set);
    json_decref(msgs);
    free(tools);
    free(s.ids);
    df_tokenizer_free(tok);
}

static void test_delta_errors(void **state)
{
    (void)state;
    df_tokenizer *tok = NULL;
    assert_int_equal(df_tokenizer_load(QWEN, &tok), DF_OK);
    const char *old = "[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"hello\"}]";
    const char *add = "[{\"role\": \"user\", \"content\": \"again\"}]";
    int32_t *ids = NULL;
    int64_t n = 0;
    /* no kept suffix: the delta starts at the <|im_end|> the sequence lacks */
    assert_int_equal(df_agent_render_delta(tok, old, add, NULL, &ids, &n), DF_OK);
    assert_int_equal(ids[0], df_tokenizer_token_to_id(tok, "<|im_end|>"));
    free(ids);
    df_agent_render_opts o = {.kept_suffix = "</s>"};
    assert_error_mentions(df_agent_render_delta(tok, old, add, &o, &ids, &n), DF_EINVAL, "verbatim");
    assert_null(ids);
    /* an empty model turn with nothing kept (its ids decode to no text): the sequence ends after the
       generation prompt, so the generation prompt's rendering + the delta is the whole rendering */
#define HI "{\"role\": \"user\", \"content\": \"hi\"}"
#define NOTHING "{\"role\": \"assistant\", \"content\": \"\"}"
    const char *head = "[" HI "]", *empty = "[" HI ", " NOTHING "]";
    const char *all = "[" HI ", " NOTHING ", {\"role\": \"user\", \"content\": \"again\"}]";
    assert_int_equal(df_agent_render_delta(tok, empty, add, NULL, &ids, &n), DF_OK);
    assert_int_equal(ids[0], df_tokenizer_token_to_id(tok, "<|im_end|>"));
    char *prompt = NULL, *whole = NULL, *delta = NULL;
    assert_int_equal(df_tokenizer_apply_chat_template_json(tok, head, NULL, true, NULL, &prompt), DF_OK);
    assert_int_equal(df_tokenizer_apply_chat_template_json(tok, all, NULL, true, NULL, &whole), DF_OK);
    assert_int_equal(df_tokenizer_decode(tok, ids, n, false, &delta), DF_OK);
    assert_int_equal(strlen(prompt) + strlen(delta), strlen(whole));
    assert_memory_equal(whole, prompt, strlen(prompt));
    assert_string_equal(whole + strlen(prompt), delta);
    free(prompt), free(whole), free(delta), free(ids);
    assert_error_mentions(df_agent_render_delta(tok, "[" NOTHING "]", add, NULL, &ids, &n), DF_EINVAL,
                          "the only message");
#undef HI
#undef NOTHING
    assert_error_mentions(df_agent_render_delta(tok, "{}", add, NULL, &ids, &n), DF_EINVAL, "messages is not a JSON array");
    assert_error_mentions(df_agent_render_delta(tok, old, "[1", NULL, &ids, &n), DF_EINVAL, "new_messages");
    assert_error_mentions(df_agent_render_delta(tok, "[]", add, NULL, &ids, &n), DF_EINVAL, "empty");
    /* a template whose rendering of a conversation is not a prefix of its longer rendering */
    assert_int_equal(df_tokenizer_set_chat_template(tok, "{% for m in messages %}{{ m.content }}|{% endfor %}"
                                                         "{{ messages | length }}"),
                     DF_OK);
    assert_error_mentions(df_agent_render_delta(tok, old, add, NULL, &ids, &n), DF_EINVAL,
                          "renders the conversation differently");
    df_tokenizer_free(tok);
}

static bool valid_utf8(const char *s)
{
    json_t *j = json_string(s); /* jansson refuses invalid UTF-8 */
    json_decref(j);
    return j != NULL;
}

static int64_t n_tokens(const df_tokenizer *tok, const char *s, size_t len)
{
    int32_t *ids = NULL;
    int64_t n = 0;
    assert_int_equal(df_tokenizer_encode_n(tok, s, (int64_t)len, false, &ids, &n), DF_OK);
    free(ids);
    return n;
}

static void test_truncate(void **state)
{
    (void)state;
    df_tokenizer *tok = NULL;
    assert_int_equal(df_tokenizer_load(QWEN, &tok), DF_OK);
    char text[4000] = "";
    for (int i = 0; i < 300; i++)
        snprintf(text + strlen(text), sizeof text - strlen(text), "w%d ", i);
    char *out = NULL;
    assert_int_equal(df_agent_truncate(tok, text, 100000, "left", &out), DF_OK);
    assert_string_equal(out, text);
    free(out);

    assert_int_equal(df_agent_truncate(tok, text, 10, "left", &out), DF_OK);
    const char *mark = strstr(out, "...(truncated)");
    assert_non_null(mark);
    assert_string_equal(mark, "...(truncated)");
    assert_int_equal(strncmp(out, text, (size_t)(mark - out)), 0);
    assert_int_equal(n_tokens(tok, out, (size_t)(mark - out)), 10);
    free(out);

    assert_int_equal(df_agent_truncate(tok, text, 10, "right", &out), DF_OK);
    assert_int_equal(strncmp(out, "(truncated)...", 14), 0);
    const char *kept = out + 14;
    assert_string_equal(text + strlen(text) - strlen(kept), kept);
    assert_int_equal(n_tokens(tok, kept, strlen(kept)), 10);
    free(out);

    assert_int_equal(df_agent_truncate(tok, text, 10, "middle", &out), DF_OK);
    mark = strstr(out, "...(truncated)...");
    assert_non_null(mark);
    assert_int_equal(strncmp(out, text, (size_t)(mark - out)), 0);
    assert_int_equal(n_tokens(tok, out, (size_t)(mark - out)), 5);
    const char *tail = mark + strlen("...(truncated)...");
    assert_string_equal(text + strlen(text) - strlen(tail), tail);
    assert_int_equal(n_tokens(tok, tail, strlen(tail)), 5);
    free(out);

    /* characters that byte-level tokens split: a cut never leaves half a character */
    char emoji[800] = "";
    for (int i = 0; i < 60; i++)
        strcat(emoji, i % 2 ? "\xf0\x9f\x98\x80" : "\xe4\xb8\xad\xf0\x9f\xa7\xaa");
    for (int64_t k = 1; k < 12; k++)
        for (int side = 0; side < 3; side++) {
            const char *sides[] = {"left", "middle", "right"};
            assert_int_equal(df_agent_truncate(tok, emoji, k, sides[side], &out), DF_OK);
            if (!valid_utf8(out))
                fail_msg("%s cut at %lld tokens is not valid UTF-8", sides[side], (long long)k);
            free(out);
        }
    assert_error_mentions(df_agent_truncate(tok, text, 10, "top", &out), DF_EINVAL, "left, middle or right");
    assert_error_mentions(df_agent_truncate(tok, text, 0, "left", &out), DF_EINVAL, "must be >= 1");
    df_tokenizer_free(tok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multi_turn_delta),
        cmocka_unit_test(test_delta_errors),
        cmocka_unit_test(test_truncate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
