/*
 * The ROLLOUT node's agent loop (src/workers/rollout/agent_loop.h) on the Qwen2.5 tokenizer and
 * template, driven by a scripted policy in place of the engine (the engine's side of the seam,
 * appending replies with response_mask 0, is test_rollout_multiturn's):
 *   - tools + interaction: a calculator call, a wrong answer the GSM8K interaction asks to retry, a
 *     right one that ends it. The prompt carries the tool schemas; prompt + response equal one
 *     tokenisation of the whole conversation; the mask is 1 exactly on the scripted turns; the
 *     interaction's reward reaches agent_reward, which the REWARD stage (df_reward_naive) leaves out
 *     of the score as verl's reward manager does;
 *     tool_calls counts the call; max_user_turns ends the retries;
 *   - environment (guess_number): a bisecting policy that reads the replies wins; both samples of
 *     a row play one episode; env_return replaces the rule score.
 */
#include "distflow/agent.h"
#include "distflow/config.h"
#include "distflow/worker.h"
#include "distflow/env.h"
#include "distflow/reward.h"
#include "workers/rollout/agent_loop.h"

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

/* What the engine would hold for one sequence: response tokens and their mask. */
typedef struct sim {
    int32_t resp[4096];
    int8_t mask[4096];
    int64_t n;
} sim;

/* One scripted model turn: its text + <|im_end|> appended with mask 1, the handler called, its
   reply appended with mask 0. Returns whether the handler ended the sequence. */
static bool model_turn(const df_tokenizer *tok, df_agent_loop *l, sim *s, int64_t seq, int64_t turn, const char *text)
{
    int32_t *ids;
    int64_t n;
    assert_int_equal(df_tokenizer_encode(tok, text, false, &ids, &n), DF_OK);
    int64_t start = s->n;
    for (int64_t i = 0; i < n; i++)
        s->resp[s->n] = ids[i], s->mask[s->n++] = 1;
    s->resp[s->n] = df_tokenizer_token_to_id(tok, "<|im_end|>"), s->mask[s->n++] = 1;
    free(ids);
    df_turn_info t = {.seq = seq, .prompt = 0, .sample = seq, .turn = turn, .turn_tokens = s->resp + start,
                      .n_turn = s->n - start, .response = s->resp, .n_response = s->n, .budget_left = 100000};
    df_turn_reply r = {0};
    const df_turn_handler *h = df_agent_loop_handler(l);
    assert_int_equal(h->on_turn_end(h->user, &t, &r), DF_OK);
    for (int64_t i = 0; !r.done && i < r.n_tokens; i++)
        s->resp[s->n] = r.tokens[i], s->mask[s->n++] = 0;
    return r.done;
}

static df_batch *prompt_batch(int64_t n, const char *raw, const char *extra, int64_t index)
{
    df_batch *b = df_batch_new(n);
    assert_non_null(b);
    const char *raws[4] = {raw, raw, raw, raw}, *extras[4] = {extra, extra, extra, extra};
    const char *src[4] = {"openai/gsm8k", "openai/gsm8k", "openai/gsm8k", "openai/gsm8k"};
    const char *gt[4] = {"42", "42", "42", "42"};
    int64_t idx[4] = {index, index + 1, index + 2, index + 3}, off[5] = {0, 1, 2, 3, 4};
    int32_t dummy[4] = {0, 0, 0, 0};
    assert_int_equal(df_batch_set_str(b, "raw_prompt", raws), DF_OK);
    assert_int_equal(df_batch_set_str(b, "extra_info", extras), DF_OK);
    assert_int_equal(df_batch_set_str(b, "data_source", src), DF_OK);
    assert_int_equal(df_batch_set_str(b, "ground_truth", gt), DF_OK);
    assert_int_equal(df_batch_set_i64(b, "index", idx), DF_OK);
    assert_int_equal(df_batch_set_tok_i32(b, "prompt_ids", off, dummy), DF_OK);
    return b;
}

/* The generated batch the engine would give: gen_prompts' rows with the simulated responses. */
static df_batch *gen_batch(const df_batch *gp, int64_t n_samples, sim *const *s)
{
    df_batch *b = NULL;
    assert_int_equal(df_batch_repeat_interleave(gp, n_samples, &b), DF_OK);
    int64_t rows = df_batch_size(b), off[9] = {0};
    int32_t all[8192];
    for (int64_t i = 0; i < rows; i++) {
        memcpy(all + off[i], s[i]->resp, (size_t)s[i]->n * sizeof *all);
        off[i + 1] = off[i] + s[i]->n;
    }
    assert_int_equal(df_batch_set_tok_i32(b, "response_ids", off, all), DF_OK);
    return b;
}

static const char *CALL = "Let me compute.\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": "
                          "\"123456789 * 987654321\"}}\n</tool_call>";

static void test_tools_interaction(void **state)
{
    (void)state;
    df_tokenizer *tok = NULL;
    assert_int_equal(df_tokenizer_load(QWEN, &tok), DF_OK);
    df_agent_config cfg = {.max_parallel_calls = 1, .max_tool_response_length = 256, .truncate_side = "middle"};
    assert_int_equal(df_tool_set_create(&cfg.tools), DF_OK);
    assert_int_equal(df_tool_set_add(cfg.tools, &df_tool_calculator, NULL, NULL), DF_OK);
    assert_int_equal(df_tool_set_tools_json(cfg.tools, &cfg.tools_json), DF_OK);
    assert_int_equal(df_interaction_set_create(&cfg.interactions), DF_OK);
    assert_int_equal(df_interaction_set_add(cfg.interactions, "gsm8k", &df_interaction_gsm8k, NULL), DF_OK);
    const char *raw = "[{\"role\":\"user\",\"content\":\"What is 123456789 times 987654321, minus the answer plus 42?\"}]";
    df_batch *prompts = prompt_batch(1, raw, "{\"interaction_kwargs\":{\"name\":\"gsm8k\",\"ground_truth\":\"42\"}}", 7);
    df_agent_loop *l = NULL;
    df_batch *gp = NULL;
    assert_int_equal(df_agent_loop_begin(&cfg, tok, prompts, 1, 0, &l, &gp), DF_OK);

    sim *s = calloc(1, sizeof *s);
    assert_false(model_turn(tok, l, s, 0, 1, CALL));
    assert_false(model_turn(tok, l, s, 0, 2, "The answer is 41."));
    assert_true(model_turn(tok, l, s, 0, 3, "#### 42"));

    /* the whole conversation, with the calculator's answer from its own session */
    df_tool_session *ts = NULL;
    df_tool_calls calls = {0};
    df_tool_result tr = {0};
    assert_int_equal(df_tool_session_create(cfg.tools, "x", NULL, &ts), DF_OK);
    assert_int_equal(df_tool_calls_parse(CALL, df_tool_set_names(cfg.tools), 1, 1, &calls), DF_OK);
    assert_int_equal(df_tool_session_execute(ts, &calls.calls[0], &tr), DF_OK);
    assert_non_null(strstr(tr.text, "121932631112635269"));
    json_t *conv = json_loads(raw, 0, NULL);
    json_array_append_new(conv, json_pack("{s:s,s:s}", "role", "assistant", "content", CALL));
    json_array_append_new(conv, json_pack("{s:s,s:s}", "role", "tool", "content", tr.text));
    json_array_append_new(conv, json_pack("{s:s,s:s}", "role", "assistant", "content", "The answer is 41."));
    json_array_append_new(conv, json_pack("{s:s,s:s}", "role", "user", "content",
                                          "Your response is incorrect! You need to reflect on your answer and try again."));
    json_array_append_new(conv, json_pack("{s:s,s:s}", "role", "assistant", "content", "#### 42"));
    char *cj = json_dumps(conv, JSON_COMPACT), *text = NULL;
    assert_int_equal(df_tokenizer_apply_chat_template_json(tok, cj, cfg.tools_json, false, NULL, &text), DF_OK);
    assert_non_null(strstr(text, "\"name\": \"calculator\"")); /* the schemas are in the system prompt */
    int32_t *whole;
    int64_t nw, np;
    assert_int_equal(df_tokenizer_encode(tok, text, false, &whole, &nw), DF_OK);
    const int32_t *pids = df_batch_tok_i32(gp, "prompt_ids", 0, &np);
    assert_int_equal(np + s->n + 1, nw); /* the template's "\n" after the last <|im_end|> */
    assert_memory_equal(pids, whole, (size_t)np * sizeof *whole);
    assert_memory_equal(s->resp, whole + np, (size_t)s->n * sizeof *whole);
    /* mask 1 on the model's tokens only: the three turns' text and stop tokens */
    int64_t ones = 0, expect = 3;
    for (int64_t i = 0; i < s->n; i++)
        ones += s->mask[i];
    const char *turns[3] = {CALL, "The answer is 41.", "#### 42"};
    for (int t = 0; t < 3; t++) {
        int32_t *ids;
        int64_t n;
        assert_int_equal(df_tokenizer_encode(tok, turns[t], false, &ids, &n), DF_OK);
        expect += n;
        free(ids);
    }
    assert_int_equal(ones, expect);

    /* rewards: interaction 0 then 1, the calculator's step reward 0, kept in agent_reward; the
       REWARD stage scores the response alone (verl: tool_rewards / turn_scores are extra fields) */
    sim *rows[1] = {s};
    df_batch *g = gen_batch(gp, 1, rows);
    assert_int_equal(df_agent_loop_finish(l, g), DF_OK);
    assert_float_equal(df_batch_f32(g, "agent_reward")[0], 1.0, 1e-6);
    assert_int_equal(df_batch_i64(g, "tool_calls")[0], 1);
    char *resp_text = NULL;
    assert_int_equal(df_tokenizer_decode(tok, s->resp, s->n, true, &resp_text), DF_OK);
    const char *responses[1] = {resp_text};
    float score;
    assert_int_equal(df_reward_naive(NULL, g, responses, &score, NULL, NULL), DF_OK);
    assert_float_equal(score, 1.0, 1e-6); /* the GSM8K rule score ("#### 42") alone, as verl's manager */

    free(resp_text), free(whole), free(text), free(cj), json_decref(conv);
    df_tool_result_clear(&tr), df_tool_calls_clear(&calls), df_tool_session_free(ts);
    df_batch_free(g), df_batch_free(gp), df_batch_free(prompts), df_agent_loop_free(l), free(s);
    df_agent_config_clear(&cfg);
    df_tokenizer_free(tok);
}

/* max_user_turns 1: the second wrong answer gets no reply; no tools: the text is not parsed. */
static void test_user_turn_limit(void **state)
{
    (void)state;
    df_tokenizer *tok = NULL;
    assert_int_equal(df_tokenizer_load(QWEN, &tok), DF_OK);
    df_agent_config cfg = {.max_user_turns = 1, .max_parallel_calls = 1, .max_tool_response_length = 8};
    assert_int_equal(df_interaction_set_create(&cfg.interactions), DF_OK);
    assert_int_equal(df_interaction_set_add(cfg.interactions, "gsm8k", &df_interaction_gsm8k, NULL), DF_OK);
    df_batch *prompts = prompt_batch(1, "[{\"role\":\"user\",\"content\":\"6*7?\"}]",
                                     "{\"interaction_kwargs\":{\"ground_truth\":\"42\"}}", 0);
    df_agent_loop *l = NULL;
    df_batch *gp = NULL;
    assert_int_equal(df_agent_loop_begin(&cfg, tok, prompts, 1, 0, &l, &gp), DF_OK);
    sim *s = calloc(1, sizeof *s);
    assert_false(model_turn(tok, l, s, 0, 1, CALL)); /* no tool set: the interaction answers */
    assert_true(model_turn(tok, l, s, 0, 2, "41"));
    sim *rows[1] = {s};
    df_batch *g = gen_batch(gp, 1, rows);
    assert_int_equal(df_agent_loop_finish(l, g), DF_OK);
    assert_int_equal(df_batch_i64(g, "tool_calls")[0], 0);
    assert_float_equal(df_batch_f32(g, "agent_reward")[0], 0.0, 1e-9);
    df_batch_free(g), df_batch_free(gp), df_batch_free(prompts), df_agent_loop_free(l), free(s);
    df_agent_config_clear(&cfg);
    df_tokenizer_free(tok);
}

/* A turn that ends inside a UTF-8 character (a byte token: a sampled turn may) is answered, its
   text read with U+FFFD for the lone byte, as HF's decode(errors="replace"); a tool message that
   holds one byte of a character (a plugin's) is answered the same way. The calculator quotes a
   character it does not allow whole. */
static int cut_execute(const void *tool, void *inst, const char *arguments, df_tool_result *out)
{
    (void)tool, (void)inst, (void)arguments;
    out->text = strdup("cut: \xc3");
    return out->text ? DF_OK : DF_ENOMEM;
}

static int cut_create(const void *tool, const char *id, const char *kwargs, void **inst)
{
    (void)tool, (void)id, (void)kwargs;
    *inst = NULL;
    return DF_OK;
}

static const df_tool k_cut_tool = {
    .name = "cut",
    .schema = "{\"type\": \"function\", \"function\": {\"name\": \"cut\", \"description\": \"answers a lone "
              "byte\", \"parameters\": {\"type\": \"object\", \"properties\": {}}}}",
    .create = cut_create,
    .execute = cut_execute,
};

/* The reply the loop gives to `call` (one model turn) with tools tc, decoded. */
static char *tool_reply(const df_tokenizer *tok, df_agent_config *tc, const char *call)
{
    df_batch *prompts = prompt_batch(1, "[{\"role\":\"user\",\"content\":\"6*7?\"}]", "{}", 0), *gp = NULL;
    df_agent_loop *l = NULL;
    assert_int_equal(df_agent_loop_begin(tc, tok, prompts, 1, 0, &l, &gp), DF_OK);
    sim *sm = calloc(1, sizeof *sm);
    assert_false(model_turn(tok, l, sm, 0, 1, call));
    char *reply = NULL;
    int64_t k = 0;
    while (k < sm->n && sm->mask[k])
        k++;
    assert_int_equal(df_tokenizer_decode(tok, sm->resp + k, sm->n - k, true, &reply), DF_OK);
    free(sm);
    df_batch_free(gp), df_batch_free(prompts), df_agent_loop_free(l);
    return reply;
}

static void test_partial_utf8(void **state)
{
    (void)state;
    df_tokenizer *tok = NULL;
    assert_int_equal(df_tokenizer_load(QWEN, &tok), DF_OK);
    df_agent_config cfg = {.max_parallel_calls = 1, .max_tool_response_length = 8};
    assert_int_equal(df_interaction_set_create(&cfg.interactions), DF_OK);
    assert_int_equal(df_interaction_set_add(cfg.interactions, "gsm8k", &df_interaction_gsm8k, NULL), DF_OK);
    df_batch *prompts = prompt_batch(1, "[{\"role\":\"user\",\"content\":\"6*7?\"}]", "{}", 0);
    df_agent_loop *l = NULL;
    df_batch *gp = NULL;
    assert_int_equal(df_agent_loop_begin(&cfg, tok, prompts, 1, 0, &l, &gp), DF_OK);
    int32_t turn[3] = {df_tokenizer_token_to_id(tok, "4"), df_tokenizer_token_to_id(tok, "\xc3\xa4"), /* byte 0xE4 */
                       df_tokenizer_token_to_id(tok, "<|im_end|>")};
    assert_true(turn[0] >= 0 && turn[1] >= 0);
    df_turn_info t = {.seq = 0, .turn = 1, .turn_tokens = turn, .n_turn = 3, .response = turn, .n_response = 3,
                      .budget_left = 1000};
    df_turn_reply r = {0};
    const df_turn_handler *h = df_agent_loop_handler(l);
    assert_int_equal(h->on_turn_end(h->user, &t, &r), DF_OK);
    assert_false(r.done);
    assert_true(r.n_tokens > 5); /* the interaction's retry message */
    df_batch_free(gp), df_batch_free(prompts), df_agent_loop_free(l);
    df_agent_config_clear(&cfg);

    df_agent_config tc = {.max_parallel_calls = 1, .max_tool_response_length = 64, .truncate_side = "left"};
    assert_int_equal(df_tool_set_create(&tc.tools), DF_OK);
    assert_int_equal(df_tool_set_add(tc.tools, &df_tool_calculator, NULL, NULL), DF_OK);
    assert_int_equal(df_tool_set_add(tc.tools, &k_cut_tool, NULL, NULL), DF_OK);
    assert_int_equal(df_tool_set_tools_json(tc.tools, &tc.tools_json), DF_OK);
    char *reply = tool_reply(tok, &tc, "<tool_call>{\"name\": \"calculator\", \"arguments\": "
                                       "{\"expression\": \"12 \xc3\xa4 3\"}}</tool_call>");
    assert_non_null(strstr(reply, "unexpected '\xc3\xa4' (only numbers")); /* the whole character */
    free(reply);
    reply = tool_reply(tok, &tc, "<tool_call>{\"name\": \"cut\", \"arguments\": {}}</tool_call>");
    assert_non_null(strstr(reply, "cut: \xef\xbf\xbd")); /* U+FFFD for the lone byte */
    free(reply);
    df_agent_config_clear(&tc);
    df_tokenizer_free(tok);
}

/* Turns of a sampled (random or early) model that end at a stop string or an id that is no special
   token, with nothing of the template's end kept: one whose first token is byte 0 (its text is not cut
   there: U+FFFD) and one of ids past the tokenizer's vocabulary (an empty assistant message, as verl
   appends it). Both are answered, and prompt + response then decode to the conversation's rendering. */
static void test_turns_without_text(void **state)
{
    (void)state;
    df_tokenizer *tok = NULL;
    assert_int_equal(df_tokenizer_load(QWEN, &tok), DF_OK);
    df_agent_config cfg = {.max_parallel_calls = 1, .max_tool_response_length = 8};
    assert_int_equal(df_interaction_set_create(&cfg.interactions), DF_OK);
    assert_int_equal(df_interaction_set_add(cfg.interactions, "gsm8k", &df_interaction_gsm8k, NULL), DF_OK);
    const char *raw = "[{\"role\":\"user\",\"content\":\"6*7?\"}]";
    df_batch *prompts = prompt_batch(1, raw, "{}", 0), *gp = NULL;
    df_agent_loop *l = NULL;
    assert_int_equal(df_agent_loop_begin(&cfg, tok, prompts, 1, 0, &l, &gp), DF_OK);
    /* byte 0 then " a" (the stop string "a"); ids that name no token */
    const int32_t turns[2][2] = {
        {df_tokenizer_token_to_id(tok, "\xc4\x80"), df_tokenizer_token_to_id(tok, "\xc4\xa0" "a")},
        {151700, 151701}};
    assert_true(turns[0][0] >= 0 && turns[0][1] >= 0);
    sim *s = calloc(1, sizeof *s);
    const df_turn_handler *h = df_agent_loop_handler(l);
    for (int k = 0; k < 2; k++) {
        int64_t start = s->n;
        s->resp[s->n++] = turns[k][0], s->resp[s->n++] = turns[k][1];
        df_turn_info t = {.seq = 0, .turn = k + 1, .turn_tokens = s->resp + start, .n_turn = 2,
                          .response = s->resp, .n_response = s->n, .budget_left = 1000};
        df_turn_reply r = {0};
        if (h->on_turn_end(h->user, &t, &r))
            fail_msg("turn %d: %s", k + 1, df_last_error());
        assert_false(r.done);
        assert_int_equal(r.tokens[0], df_tokenizer_token_to_id(tok, "<|im_end|>")); /* nothing was kept */
        for (int64_t i = 0; i < r.n_tokens; i++)
            s->resp[s->n++] = r.tokens[i];
    }
    const char *retry = "Your response is incorrect! You need to reflect on your answer and try again.";
    json_t *conv = json_loads(raw, 0, NULL);
    json_array_append_new(conv, json_pack("{s:s,s:s}", "role", "assistant", "content", "\xef\xbf\xbd a"));
    json_array_append_new(conv, json_pack("{s:s,s:s}", "role", "user", "content", retry));
    json_array_append_new(conv, json_pack("{s:s,s:s}", "role", "assistant", "content", ""));
    json_array_append_new(conv, json_pack("{s:s,s:s}", "role", "user", "content", retry));
    char *cj = json_dumps(conv, JSON_COMPACT), *want = NULL, *got = NULL;
    assert_int_equal(df_tokenizer_apply_chat_template_json(tok, cj, NULL, true, NULL, &want), DF_OK);
    int64_t np;
    const int32_t *pids = df_batch_tok_i32(gp, "prompt_ids", 0, &np);
    int32_t *all = malloc((size_t)(np + s->n) * sizeof *all);
    memcpy(all, pids, (size_t)np * sizeof *all);
    memcpy(all + np, s->resp, (size_t)s->n * sizeof *all);
    assert_int_equal(df_tokenizer_decode(tok, all, np + s->n, false, &got), DF_OK);
    assert_string_equal(got, want);
    free(all), free(got), free(want), free(cj), json_decref(conv), free(s);
    df_batch_free(gp), df_batch_free(prompts), df_agent_loop_free(l);
    df_agent_config_clear(&cfg);
    df_tokenizer_free(tok);
}

/* The number in the reply's "... too low" / "too high" ... hint: +1 higher, -1 lower, 0 neither. */
static int hint(const df_tokenizer *tok, const sim *s, int64_t from)
{
    char *t = NULL;
    assert_int_equal(df_tokenizer_decode(tok, s->resp + from, s->n - from, true, &t), DF_OK);
    int h = strstr(t, "higher") ? 1 : strstr(t, "lower") ? -1 : 0;
    free(t);
    return h;
}

static void test_env_guess(void **state)
{
    (void)state;
    df_tokenizer *tok = NULL;
    assert_int_equal(df_tokenizer_load(QWEN, &tok), DF_OK);
    df_agent_config cfg = {.max_parallel_calls = 1, .max_tool_response_length = 8};
    assert_int_equal(df_env_spec_load("guess_number", NULL, &cfg.env), DF_OK);
    df_batch *prompts = prompt_batch(1, "[{\"role\":\"user\",\"content\":\"unused\"}]", "{}", 3);
    df_agent_loop *l = NULL;
    df_batch *gp = NULL;
    assert_int_equal(df_agent_loop_begin(&cfg, tok, prompts, 2, 99, &l, &gp), DF_OK);
    assert_null(strstr(df_batch_str(gp, "raw_prompt", 0), "unused")); /* the episode's observation */
    assert_non_null(strstr(df_batch_str(gp, "raw_prompt", 0), "<answer>"));
    sim *s[2] = {calloc(1, sizeof(sim)), calloc(1, sizeof(sim))};
    int guesses[2] = {0, 0};
    for (int j = 0; j < 2; j++) { /* sample 0 bisects; sample 1 scans down from 100 */
        int lo = 1, hi = 100, g = j ? 100 : 50;
        bool done = false;
        for (int turn = 1; !done && turn <= 10; turn++) {
            char text[64];
            snprintf(text, sizeof text, "I guess <answer>%d</answer>", g);
            int64_t before = s[j]->n;
            done = model_turn(tok, l, s[j], j, turn, text);
            guesses[j]++;
            int h = done ? 0 : hint(tok, s[j], before);
            if (j == 0)
                lo = h > 0 ? g + 1 : lo, hi = h < 0 ? g - 1 : hi, g = (lo + hi) / 2;
            else
                g--;
        }
    }
    df_batch *g = gen_batch(gp, 2, s);
    assert_int_equal(df_agent_loop_finish(l, g), DF_OK);
    const float *ret = df_batch_f32(g, "env_return");
    assert_int_equal(df_batch_i64(g, "env_success")[0], 1); /* bisection wins within 7 */
    assert_true(guesses[0] <= 7);
    assert_float_equal(ret[0], 1.0 - 0.05 * (guesses[0] - 1), 1e-5);
    /* the scan of one episode: a win iff the secret is in its 10 guesses, the same secret */
    assert_true(ret[1] <= ret[0]);
    const char *responses[2] = {"", ""};
    float score[2];
    assert_int_equal(df_reward_naive(NULL, g, responses, score, NULL, NULL), DF_OK);
    assert_float_equal(score[0], ret[0], 1e-6); /* the return, not the GSM8K rule score of "" */
    df_batch_free(g), df_batch_free(gp), df_batch_free(prompts), df_agent_loop_free(l), free(s[0]), free(s[1]);
    df_agent_config_clear(&cfg);
    df_tokenizer_free(tok);
}

/* df_train_check on a config that passes every check before the run's files, with overrides: fails
   with `code` and a message holding `msg`, or (code 0) gets past the multi-turn checks to the files. */
static void check(const char *const *ov, int n, int code, const char *msg)
{
    static const char *const base = "data: {train_batch_size: 8}\n"
                                    "actor_rollout_ref:\n"
                                    "  actor: {ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 4}\n"
                                    "  rollout: {n: 4}\n"
                                    "algorithm: {adv_estimator: grpo}\n";
    df_config *c = NULL;
    if (df_config_load_text(df_config_schema_train(), base, "base.yaml", ov, n, &c))
        fail_msg("%s", df_last_error());
    int rc = df_train_check(c, 1, NULL, NULL, NULL);
    if (code) {
        assert_int_equal(rc, code);
        if (!strstr(df_last_error(), msg))
            fail_msg("\"%s\" lacks \"%s\"", df_last_error(), msg);
    } else if (strstr(df_last_error(), "multi_turn")) {
        fail_msg("%s", df_last_error());
    }
    df_config_free(c);
}

#define MT "actor_rollout_ref.rollout.multi_turn."
#define TOOLS DF_SOURCE_DIR "/examples/gsm8k_multiturn/config/tool_config/gsm8k_tool_config.yaml"

static void test_config_errors(void **state)
{
    (void)state;
    const char *a[] = {MT "tool_config_path=" TOOLS};
    check(a, 1, DF_EINVAL, "multi_turn.tool_config_path is set but multi_turn.enable is false");
    /* verl's default_agent_loop: tool_agent is distflow's tool loop, which multi_turn.enable turns on */
    const char *al[] = {"actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent"};
    check(al, 1, DF_EINVAL, "default_agent_loop is tool_agent but the tool loop is off");
    const char *al2[] = {"actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent", MT "enable=true",
                         MT "tool_config_path=" TOOLS};
    check(al2, 3, 0, NULL);
    const char *al3[] = {"actor_rollout_ref.rollout.agent.default_agent_loop=react_agent"};
    assert_int_not_equal(df_config_load_text(df_config_schema_train(), "data: {}\n", "base.yaml", al3, 1,
                                             &(df_config *){NULL}), 0);
    assert_non_null(strstr(df_last_error(), "single_turn_agent|tool_agent"));
    const char *b[] = {MT "enable=true", MT "format=llama3_json"};
    check(b, 2, DF_EUNSUPPORTED, "multi_turn.format 'llama3_json' is not supported");
    const char *c[] = {MT "enable=true", MT "tool_config_path=/nonexistent/tools.yaml"};
    check(c, 2, DF_ENOTFOUND, "cannot open '/nonexistent/tools.yaml'");
    const char *d[] = {MT "enable=true", "dag.env_enable=true", "dag.environment_path=guess_number"};
    check(d, 3, DF_EINVAL, "multi_turn.enable and dag.env_enable are both set");
    const char *e[] = {MT "enable=true", MT "use_inference_chat_template=true"};
    check(e, 2, DF_EUNSUPPORTED, "use_inference_chat_template");
    const char *f[] = {MT "enable=true", MT "tokenization_sanity_check_mode=disable"};
    check(f, 2, DF_EUNSUPPORTED, "tokenization_sanity_check_mode");
    const char *g[] = {MT "enable=true", MT "tool_config_path=" TOOLS, MT "max_user_turns=2"};
    check(g, 3, 0, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tools_interaction),
        cmocka_unit_test(test_user_turn_limit),
        cmocka_unit_test(test_env_guess),
        cmocka_unit_test(test_partial_utf8),
        cmocka_unit_test(test_turns_without_text),
        cmocka_unit_test(test_config_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
