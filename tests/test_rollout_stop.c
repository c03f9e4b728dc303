/* Stop strings (df_sampling_params.stop, rollout.stop) on a random model with a tiny byte-level
 * BPE tokenizer: a response ends after the first token whose text completes a stop string, the
 * strings spanning token boundaries; the same sampled tokens up to there; special tokens add no
 * text; with a turn handler a stop string ends the turn. The oracle searches the whole text of
 * each prefix, the engine a rolling tail. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

#include <cmocka.h>

#include "distflow/model.h"
#include "distflow/rollout.h"
#include "distflow/tokenizer.h"
#include "testutil.h"

static const char *const TEXTS[] = {
    "the answer is 42. the answer is not 41.",
    "<answer>7</answer> then stop here",
    "tools: calculator, search. call them with json",
};

static df_tokenizer *tiny_tokenizer(void)
{
    df_tokenizer *tok = NULL;
    assert_int_equal(df_tokenizer_train_bpe(TEXTS, 3, 300, NULL, &tok), 0);
    return tok;
}

static df_model *model_for(const df_tokenizer *tok)
{
    df_model_config c;
    df_model_config_defaults(&c);
    c.vocab_size = df_tokenizer_vocab_size(tok);
    c.hidden_size = 32;
    c.intermediate_size = 64;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 8;
    c.max_position_embeddings = 256;
    c.initializer_range = 0.1;
    c.n_eos = 0;
    return df_test_biased_model(&c, 77);
}

#define NP 6
#define MAXR 48
static const int64_t POFF[NP + 1] = {0, 2, 5, 6, 10, 13, 15};
static int32_t PTOK[15];

static df_rollout_request request(void)
{
    for (int i = 0; i < 15; i++)
        PTOK[i] = (int32_t)(97 + (i * 7) % 26); /* byte tokens 'a'..'z' */
    return (df_rollout_request){NP, POFF, PTOK, 1, 3, NULL, NULL};
}

static df_rollout_result generate(df_rollout_engine *e, const df_model *m, const df_sampling_params *sp,
                                  const df_turn_handler *h)
{
    df_rollout_request q = request();
    df_rollout_result r;
    if (df_rollout_generate_turns(e, m, &q, sp, h, &r, NULL, NULL))
        fail_msg("generate: %s", df_last_error());
    return r;
}

/* The text of tokens [0, n) (special tokens none) into buf; returns its bytes; ends[t]: the
 * bytes after token t. */
static int64_t text_of(const df_tokenizer *tok, const int32_t *ids, int64_t n, char *buf, int64_t *ends)
{
    int64_t len = 0;
    for (int64_t t = 0; t < n; t++) {
        const char *b;
        int64_t k = 0;
        if (!df_tokenizer_is_special(tok, ids[t]) && df_tokenizer_token_bytes(tok, ids[t], &b, &k) == DF_OK) {
            memcpy(buf + len, b, (size_t)k);
            len += k;
        }
        ends[t] = len;
    }
    return len;
}

static bool has(const char *hay, int64_t m, const char *s)
{
    int64_t n = (int64_t)strlen(s);
    for (int64_t i = 0; i + n <= m; i++)
        if (!memcmp(hay + i, s, (size_t)n))
            return true;
    return false;
}

/* A string of the last byte of token k's text and token k + 1's text: across a boundary. */
static bool boundary_string(const df_tokenizer *tok, const int32_t *ids, int64_t k, char *out)
{
    char buf[4096];
    int64_t ends[MAXR];
    text_of(tok, ids, k + 2, buf, ends);
    int64_t a = ends[k] - 1, b = ends[k + 1];
    if (k < 1 || ends[k] <= ends[k - 1] || b <= ends[k] || b - a > 8)
        return false;
    for (int64_t i = a; i < b; i++)
        if (!buf[i])
            return false; /* no NUL in a C string */
    memcpy(out, buf + a, (size_t)(b - a));
    out[b - a] = 0;
    return true;
}

static void test_stop_strings(void **state)
{
    (void)state;
    df_tokenizer *tok = tiny_tokenizer();
    df_model *m = model_for(tok);
    df_rollout_engine *e = NULL;
    assert_int_equal(df_rollout_engine_create(&m->cfg, 4, 96, &e), 0);
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.max_new_tokens = MAXR;
    df_rollout_result full = generate(e, m, &sp, NULL);
    /* stop strings across token boundaries inside three of the responses */
    char strs[3][16];
    const char *stop[3];
    int ns = 0;
    for (int64_t s = 0; s < NP && ns < 3; s += 2) {
        const int32_t *ids = full.tokens + full.offsets[s];
        for (int64_t k = 10 + s; k + 1 < full.offsets[s + 1] - full.offsets[s] && ns < 3; k++)
            if (boundary_string(tok, ids, k, strs[ns])) {
                stop[ns] = strs[ns];
                ns++;
                break;
            }
    }
    assert_true(ns == 3);
    sp.stop = stop;
    sp.n_stop_str = ns;
    sp.tokenizer = tok;
    df_rollout_result cut = generate(e, m, &sp, NULL);
    int64_t stopped = 0;
    for (int64_t s = 0; s < NP; s++) {
        const int32_t *ids = full.tokens + full.offsets[s];
        const int64_t R = full.offsets[s + 1] - full.offsets[s];
        char buf[4096];
        int64_t ends[MAXR];
        text_of(tok, ids, R, buf, ends);
        int64_t want = R; /* the first prefix whose text holds a stop string */
        for (int64_t j = 0; j < R && want == R; j++)
            for (int i = 0; i < ns; i++)
                if (has(buf, ends[j], stop[i]))
                    want = j + 1;
        assert_int_equal(cut.offsets[s + 1] - cut.offsets[s], want);
        assert_memory_equal(cut.tokens + cut.offsets[s], ids, (size_t)want * sizeof(int32_t));
        assert_int_equal(cut.finish_reason[s], want < R ? DF_FINISH_STOP : full.finish_reason[s]);
        stopped += want < R;
    }
    print_message("stop strings across token boundaries ended %lld of %d responses\n", (long long)stopped, NP);
    assert_true(stopped >= 3);
    df_rollout_result_free(&cut);
    df_rollout_result_free(&full);
    /* bad parameters */
    const char *empty[] = {""};
    sp.stop = empty;
    assert_int_equal(df_sampling_params_validate(&sp, m->cfg.vocab_size), DF_EINVAL);
    sp.stop = stop;
    sp.tokenizer = NULL;
    assert_int_equal(df_sampling_params_validate(&sp, m->cfg.vocab_size), DF_EINVAL);
    df_rollout_engine_free(e);
    df_model_free(m);
    df_tokenizer_free(tok);
}

/* Special tokens add no text: a stop string that is a special token's content never matches. */
static void test_special_tokens_add_no_text(void **state)
{
    (void)state;
    df_tokenizer *tok = tiny_tokenizer();
    df_model *m = model_for(tok);
    df_rollout_engine *e = NULL;
    assert_int_equal(df_rollout_engine_create(&m->cfg, 4, 96, &e), 0);
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.max_new_tokens = MAXR;
    sp.ignore_eos = true;
    df_rollout_result full = generate(e, m, &sp, NULL);
    const char *stop[] = {"<|endoftext|>", "<|im_end|>", "<|im_start|>"};
    sp.stop = stop;
    sp.n_stop_str = 3;
    sp.tokenizer = tok;
    df_rollout_result r = generate(e, m, &sp, NULL);
    int64_t specials = 0;
    for (int64_t t = 0; t < full.offsets[NP]; t++)
        specials += df_tokenizer_is_special(tok, full.tokens[t]);
    print_message("%lld special tokens generated, none stopped a response\n", (long long)specials);
    assert_memory_equal(r.offsets, full.offsets, sizeof(int64_t) * (NP + 1));
    assert_memory_equal(r.tokens, full.tokens, (size_t)full.offsets[NP] * sizeof(int32_t));
    df_rollout_result_free(&r);
    df_rollout_result_free(&full);
    df_rollout_engine_free(e);
    df_model_free(m);
    df_tokenizer_free(tok);
}

typedef struct {
    const char *stop;
    const df_tokenizer *tok;
    int64_t calls;
} stop_turns;

/* Ends after the first turn; checks the turn ended at the token completing the stop string. */
static int on_turn(void *user, const df_turn_info *t, df_turn_reply *r)
{
    stop_turns *st = user;
    char buf[4096];
    int64_t ends[MAXR];
    text_of(st->tok, t->turn_tokens, t->n_turn, buf, ends);
    assert_true(has(buf, ends[t->n_turn - 1], st->stop));
    assert_false(t->n_turn > 1 && has(buf, ends[t->n_turn - 2], st->stop));
    st->calls++;
    r->done = true;
    return DF_OK;
}

/* With a turn handler, a stop string ends the turn and the handler decides. */
static void test_stop_string_ends_a_turn(void **state)
{
    (void)state;
    df_tokenizer *tok = tiny_tokenizer();
    df_model *m = model_for(tok);
    df_rollout_engine *e = NULL;
    assert_int_equal(df_rollout_engine_create(&m->cfg, 4, 96, &e), 0);
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.max_new_tokens = MAXR;
    df_rollout_result full = generate(e, m, &sp, NULL);
    char str[16];
    int64_t k = 5;
    while (!boundary_string(tok, full.tokens, k, str))
        k++;
    const char *stop[] = {str};
    sp.stop = stop;
    sp.n_stop_str = 1;
    sp.tokenizer = tok;
    stop_turns st = {str, tok, 0};
    df_turn_handler h = {&st, on_turn, 0};
    df_rollout_result r = generate(e, m, &sp, &h);
    int64_t stopped = 0;
    for (int64_t s = 0; s < NP; s++)
        stopped += r.finish_reason[s] == DF_FINISH_STOP;
    assert_true(st.calls >= 1);
    assert_int_equal(st.calls, stopped);
    df_rollout_result_free(&r);
    df_rollout_result_free(&full);
    df_rollout_engine_free(e);
    df_model_free(m);
    df_tokenizer_free(tok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stop_strings),
        cmocka_unit_test(test_special_tokens_add_no_text),
        cmocka_unit_test(test_stop_string_ends_a_turn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
