/*
 * test_cli_generate.c — `distflow generate` run as a child process on a tiny random Qwen2 with a
 * BPE tokenizer trained here (ChatML template, EOS <|im_end|>, max_position_embeddings 256):
 *   - greedy: two runs print the same text, which is --json's text, whose token_ids decode to it
 *     and equal, token for token, df_rollout_generate's greedy response in this process on the
 *     same prompt ids; the stderr summary counts those prompt and response tokens;
 *   - --n 2 --temperature 1: two `--- response i/2 ---` blocks, the same for the same --seed,
 *     others for another seed;
 *   - --max-new-tokens 3: exactly 3 tokens, finish_reason length, the greedy run's first 3;
 *   - the prompt: --raw's prompt_ids are `distflow tokenize`'s; --prompt / --system's and
 *     --messages' "prompt" is df_tokenizer_apply_chat_template's render with the generation
 *     prompt, its prompt_ids that render encoded without special tokens;
 *   - bad input: a non-zero exit and a message naming the problem.
 */
#include "testutil.h"

#include "distflow/rollout.h"

#include <stdarg.h>

#define PROMPT "Add 2 and 5. What do you get?"
#define GREEDY_LEN 12
/* a real tokenizer without a chat template, whose special tokens are a BOS */
#define LLAMA3 DF_SHARED_DIR "/data/tokenizers/llama3"
#define LLAMA3_BOS 128000

static char dir[256];

/* `distflow generate ARGS` (printf-style): its exit status, stdout in out[cap], stderr in err[cap] (may be
 * NULL). */
static int gen(char *out, char *err, size_t cap, const char *fmt, ...)
{
    char args[2048], cmd[4096], errfile[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(errfile, sizeof errfile, "%s/stderr.txt", dir);
    snprintf(cmd, sizeof cmd, "timeout -k 10 120 %s/distflow generate %s 2> %s", DF_BINARY_DIR, args,
             errfile);
    int rc = df_test_command(cmd, out, cap);
    char *text = NULL;
    if (err)
        snprintf(err, cap, "%s", df_read_file(errfile, &text, NULL) ? "" : text);
    free(text);
    return rc;
}

/* `distflow generate --model dir/MODEL ARGS --json`, which must succeed: its object. */
static json_t *gen_json_at(const char *model, const char *args)
{
    char out[65536], err[4096];
    int rc = gen(out, err, sizeof out, "--model %s/%s %s --json", dir, model, args);
    if (rc)
        fail_msg("generate %s: exit %d\n%s", args, rc, err);
    json_error_t je;
    json_t *o = json_loads(out, 0, &je);
    if (!o)
        fail_msg("generate %s --json: not JSON (%s):\n%s", args, je.text, out);
    return o;
}

static json_t *gen_json(const char *args)
{
    return gen_json_at("model", args);
}

static json_t *response(const json_t *o, size_t i)
{
    json_t *r = json_array_get(json_object_get(o, "responses"), i);
    assert_non_null(r);
    return r;
}

/* A JSON array of integers as ids (malloc'd), its length in *n. */
static int32_t *ids_of(const json_t *a, int64_t *n)
{
    assert_true(json_is_array(a));
    *n = (int64_t)json_array_size(a);
    int32_t *ids = malloc((size_t)(*n + 1) * sizeof *ids);
    for (int64_t i = 0; i < *n; i++) {
        assert_true(json_is_integer(json_array_get(a, (size_t)i)));
        ids[i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
    }
    return ids;
}

static df_tokenizer *load_tok(void)
{
    char p[300];
    df_tokenizer *tok = NULL;
    snprintf(p, sizeof p, "%s/model", dir);
    assert_int_equal(df_tokenizer_load(p, &tok), 0);
    return tok;
}

/* The greedy response to ids[n] of GREEDY_LEN tokens at most, generated here (malloc'd, *len). */
static int32_t *greedy_here(const int32_t *ids, int64_t n, int64_t *len)
{
    char p[300];
    snprintf(p, sizeof p, "%s/model", dir);
    df_model *m = NULL;
    df_tokenizer *tok = NULL;
    assert_int_equal(df_hf_dir_load(p, NULL, NULL, &m, &tok), 0);
    df_rollout_engine *e = NULL;
    assert_int_equal(df_rollout_engine_create(&m->cfg, 1, n + GREEDY_LEN, &e), 0);
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.greedy = true;
    sp.max_new_tokens = GREEDY_LEN;
    sp.stop_ids = df_tokenizer_eos_ids(tok, &sp.n_stop);
    int64_t offs[2] = {0, n};
    df_rollout_request req = {.n_prompts = 1, .prompt_offsets = offs, .prompt_tokens = ids, .n_samples = 1};
    df_rollout_result res = {0};
    assert_int_equal(df_rollout_generate(e, m, &req, &sp, &res, NULL, NULL), 0);
    *len = res.offsets[1];
    int32_t *out = malloc((size_t)(*len + 1) * sizeof *out);
    memcpy(out, res.tokens, (size_t)*len * sizeof *out);
    df_rollout_result_free(&res);
    df_rollout_engine_free(e);
    df_tokenizer_free(tok);
    df_model_free(m);
    return out;
}

static void test_greedy(void **state)
{
    (void)state;
    char a[8192], b[8192], err[4096], args[512];
    snprintf(args, sizeof args, "--model %s/model --prompt '" PROMPT "' --max-new-tokens %d", dir,
             GREEDY_LEN);
    assert_int_equal(gen(a, err, sizeof a, "%s", args), 0);
    assert_int_equal(gen(b, NULL, sizeof b, "%s", args), 0);
    assert_string_equal(a, b);
    assert_null(strstr(a, "--- response")); /* n = 1: the text alone */

    snprintf(args, sizeof args, "--prompt '" PROMPT "' --max-new-tokens %d", GREEDY_LEN);
    json_t *o = gen_json(args), *r = response(o, 0);
    const char *text = json_string_value(json_object_get(r, "text"));
    assert_non_null(text);
    snprintf(b, sizeof b, "%s\n", text);
    assert_string_equal(a, b); /* the text output is --json's text */

    int64_t np, nr;
    int32_t *p = ids_of(json_object_get(o, "prompt_ids"), &np),
            *t = ids_of(json_object_get(r, "token_ids"), &nr);
    df_tokenizer *tok = load_tok();
    char *dec = NULL;
    assert_int_equal(df_tokenizer_decode(tok, t, nr, true, &dec), 0);
    assert_string_equal(dec, text);
    int64_t nh;
    int32_t *here = greedy_here(p, np, &nh);
    assert_int_equal(nr, nh);
    assert_memory_equal(t, here, (size_t)nr * sizeof *t);
    assert_int_equal(json_array_size(json_object_get(r, "log_probs")), nr);
    bool stopped = df_tokenizer_is_eos(tok, t[nr - 1]);
    assert_string_equal(json_string_value(json_object_get(r, "finish_reason")), stopped ? "stop" : "length");
    if (!stopped)
        assert_int_equal(nr, GREEDY_LEN);

    char want[256]; /* the summary on stderr counts these tokens */
    snprintf(want, sizeof want, "prompt %lld tokens, response %lld tokens (%s)", (long long)np, (long long)nr,
             stopped ? "stop" : "length");
    if (!strstr(err, want) || !strstr(err, "tokens/s"))
        fail_msg("stderr lacks '%s':\n%s", want, err);
    free(dec);
    free(here);
    free(p);
    free(t);
    df_tokenizer_free(tok);
    json_decref(o);
}

/* --max-new-tokens 3: exactly the greedy run's first 3 tokens, ended by the length. None of them may
 * be an EOS, which the model's weights decide (seed 7): checked first, so the test cannot pass
 * vacuously. */
static void test_max_new_tokens(void **state)
{
    (void)state;
    char args[256];
    snprintf(args, sizeof args, "--prompt '" PROMPT "' --max-new-tokens %d", GREEDY_LEN);
    json_t *full = gen_json(args), *three = gen_json("--prompt '" PROMPT "' --max-new-tokens 3");
    int64_t nf, n3;
    int32_t *f = ids_of(json_object_get(response(full, 0), "token_ids"), &nf),
            *t = ids_of(json_object_get(response(three, 0), "token_ids"), &n3);
    df_tokenizer *tok = load_tok();
    assert_true(nf >= 3);
    for (int i = 0; i < 3; i++)
        if (df_tokenizer_is_eos(tok, f[i]))
            fail_msg("the greedy response has an EOS at %d: pick another model seed", i);
    assert_int_equal(n3, 3);
    assert_memory_equal(t, f, 3 * sizeof *t);
    assert_string_equal(json_string_value(json_object_get(response(three, 0), "finish_reason")), "length");
    assert_int_equal(json_array_size(json_object_get(response(three, 0), "log_probs")), 3);
    df_tokenizer_free(tok);
    free(f);
    free(t);
    json_decref(full);
    json_decref(three);
}

/* The text after `--- response i/2 ---` up to the next header (malloc'd); fails when missing. */
static char *block(const char *out, int i)
{
    char h[64];
    snprintf(h, sizeof h, "--- response %d/2 ---\n", i);
    const char *s = strstr(out, h);
    if (!s)
        fail_msg("no '%s' in:\n%s", h, out);
    s += strlen(h);
    const char *e = strstr(s, "--- response ");
    return strndup(s, e ? (size_t)(e - s) : strlen(s));
}

static void test_sampled_n2(void **state)
{
    (void)state;
    char a[8192], b[8192], c[8192], args[512];
    snprintf(args, sizeof args,
             "--model %s/model --prompt '" PROMPT "' --n 2 --temperature 1 --max-new-tokens 8", dir);
    assert_int_equal(gen(a, NULL, sizeof a, "%s --seed 5", args), 0);
    assert_int_equal(gen(b, NULL, sizeof b, "%s --seed 5", args), 0);
    assert_int_equal(gen(c, NULL, sizeof c, "%s --seed 6", args), 0);
    int headers = 0;
    for (const char *p = strstr(a, "--- response "); p; p = strstr(p + 1, "--- response "))
        headers++;
    assert_int_equal(headers, 2);
    assert_true(!strncmp(a, "--- response 1/2 ---\n", 21)); /* nothing before the first */
    assert_string_equal(a, b);                              /* the same seed, the same samples */
    /* a near-uniform random model: 8 tokens of 300 drawn again alike has no real chance */
    assert_string_not_equal(a, c);
    char *r1 = block(a, 1), *r2 = block(a, 2);
    assert_string_not_equal(r1, r2); /* each sample its own generator */
    /* --json's responses are those blocks, and their token_ids decode to their text */
    json_t *o = gen_json("--prompt '" PROMPT "' --n 2 --temperature 1 --max-new-tokens 8 --seed 5");
    df_tokenizer *tok = load_tok();
    assert_int_equal(json_array_size(json_object_get(o, "responses")), 2);
    for (int i = 0; i < 2; i++) {
        const char *text = json_string_value(json_object_get(response(o, i), "text"));
        int64_t n;
        int32_t *ids = ids_of(json_object_get(response(o, i), "token_ids"), &n);
        char *dec = NULL, want[4096];
        assert_int_equal(df_tokenizer_decode(tok, ids, n, true, &dec), 0);
        assert_string_equal(dec, text);
        snprintf(want, sizeof want, "%s\n", text);
        assert_string_equal(i ? r2 : r1, want);
        free(dec);
        free(ids);
    }
    df_tokenizer_free(tok);
    json_decref(o);
    free(r1);
    free(r2);
}

/* `distflow tokenize --tokenizer TOK FLAGS PROMPT`'s ids. */
static json_t *tokenize(const char *tok, const char *flags)
{
    char out[4096], cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/distflow tokenize --tokenizer %s %s '" PROMPT "'", DF_BINARY_DIR, tok,
             flags);
    assert_int_equal(df_test_command(cmd, out, sizeof out), 0);
    json_t *ids = json_loads(out, 0, NULL);
    assert_non_null(ids);
    assert_true(json_array_size(ids) > 3);
    return ids;
}

/* --raw: the text as `distflow tokenize` encodes it, with --special as `tokenize --special` (Llama-3's
 * tokenizer prepends its BOS, which the tiny one has none of). */
static void test_raw_ids(void **state)
{
    (void)state;
    char tok[300], args[512];
    snprintf(tok, sizeof tok, "%s/model", dir);
    json_t *want = tokenize(tok, ""), *o = gen_json("--raw --prompt '" PROMPT "' --max-new-tokens 2");
    assert_true(json_equal(json_object_get(o, "prompt_ids"), want));
    assert_string_equal(json_string_value(json_object_get(o, "prompt")), PROMPT);
    json_decref(want);
    json_decref(o);
    snprintf(args, sizeof args, "--tokenizer %s --raw --prompt '" PROMPT "' --max-new-tokens 2", LLAMA3);
    for (int special = 0; special < 2; special++) {
        want = tokenize(LLAMA3, special ? "--special" : "");
        assert_int_equal(json_integer_value(json_array_get(want, 0)) == LLAMA3_BOS, special);
        o = gen_json_at("llama/model", special ? strcat(args, " --special") : args);
        assert_true(json_equal(json_object_get(o, "prompt_ids"), want));
        json_decref(want);
        json_decref(o);
    }
}

/* o's prompt is the render of msgs[n] with the generation prompt, its ids that render's. */
static void expect_render(const json_t *o, const df_chat_message *msgs, int n)
{
    df_tokenizer *tok = load_tok();
    char *text = NULL;
    int32_t *ids = NULL;
    int64_t ni, np;
    assert_int_equal(df_tokenizer_apply_chat_template(tok, msgs, n, true, &text), 0);
    assert_int_equal(df_tokenizer_encode(tok, text, false, &ids, &ni), 0);
    assert_string_equal(json_string_value(json_object_get(o, "prompt")), text);
    int32_t *p = ids_of(json_object_get(o, "prompt_ids"), &np);
    assert_int_equal(np, ni);
    assert_memory_equal(p, ids, (size_t)ni * sizeof *ids);
    free(p);
    free(ids);
    free(text);
    df_tokenizer_free(tok);
}

static void test_chat_template(void **state)
{
    (void)state;
    df_chat_message msgs[2] = {{"system", "Be brief."}, {"user", PROMPT}};
    json_t *o = gen_json("--prompt '" PROMPT "' --max-new-tokens 2");
    expect_render(o, msgs + 1, 1);
    /* ChatML's default system message and the assistant header: the template really ran */
    const char *p = json_string_value(json_object_get(o, "prompt"));
    assert_non_null(strstr(p, "<|im_start|>system\nYou are a helpful assistant."));
    assert_non_null(strstr(p, "<|im_start|>assistant\n"));
    json_decref(o);
    o = gen_json("--system 'Be brief.' --prompt '" PROMPT "' --max-new-tokens 2");
    expect_render(o, msgs, 2);
    json_t *m = gen_json("--messages '[{\"role\": \"system\", \"content\": \"Be brief.\"}, "
                         "{\"role\": \"user\", \"content\": \"" PROMPT "\"}]' --max-new-tokens 2");
    assert_true(json_equal(json_object_get(m, "prompt"), json_object_get(o, "prompt")));
    assert_true(json_equal(json_object_get(m, "prompt_ids"), json_object_get(o, "prompt_ids")));
    json_decref(m);
    /* the same conversation from a file, and from stdin ('-') */
    const char *conv = "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \""
                       PROMPT "\"}]";
    char *path = df_path_join(dir, "conv.json"), args[1024];
    assert_int_equal(df_write_file_atomic(path, conv, strlen(conv)), 0);
    snprintf(args, sizeof args, "--messages %s --max-new-tokens 2", path);
    m = gen_json(args);
    assert_true(json_equal(json_object_get(m, "prompt_ids"), json_object_get(o, "prompt_ids")));
    json_decref(m);
    snprintf(args, sizeof args, "--messages - --max-new-tokens 2 < %s", path);
    m = gen_json(args);
    assert_true(json_equal(json_object_get(m, "prompt_ids"), json_object_get(o, "prompt_ids")));
    json_decref(m);
    free(path);
    json_decref(o);
}

/* generate ARGS exits with `code` and says each of msgs (NULL-terminated). */
static void expect_fail(int code, const char *args, ...)
{
    char out[8192], err[8192];
    int rc = gen(out, err, sizeof out, "%s", args);
    if (rc != code)
        fail_msg("generate %s: exit %d, expected %d; stderr:\n%s", args, rc, code, err);
    va_list ap;
    va_start(ap, args);
    for (const char *m; (m = va_arg(ap, const char *));)
        if (!strstr(err, m))
            fail_msg("generate %s: no '%s' in stderr:\n%s", args, m, err);
    va_end(ap);
}

static void test_bad_input(void **state)
{
    (void)state;
    char m[300], a[1024];
    snprintf(m, sizeof m, "--model %s/model", dir);
#define BAD(code, fmt, ...) (snprintf(a, sizeof a, "%s " fmt, m), expect_fail(code, a, __VA_ARGS__, NULL))
    BAD(2, "--prompt hi --messages '[]'", "--prompt or --messages, not both");
    BAD(2, "--max-new-tokens 4", "give --prompt TEXT or --messages JSON");
    BAD(2, "--messages '{\"role\": \"user\", \"content\": \"hi\"}'", "--messages must be a JSON array");
    BAD(2, "--messages '[{\"role\": '", "--messages is not JSON");
    BAD(1, "--messages no_such_conv.json", "--messages", "no_such_conv.json");
    BAD(2, "--raw --messages '[]'", "--raw", "--messages needs the chat template");
    BAD(2, "--system hi --messages '[]'", "--system");
    BAD(2, "--prompt hi --n 0", "--n must be >= 1, got 0");
    BAD(2, "--prompt hi --top-p 1.5", "--top-p must be in [0, 1], got 1.5");
    BAD(2, "--prompt hi --top-k 5", "--top-k shapes sampling", "greedy"); /* nothing it would change */
    /* past max_position_embeddings (256): alone, before the weights load, and with the prompt's length */
    BAD(1, "--prompt hi --max-new-tokens 300", "--max-new-tokens 300", "max_position_embeddings 256");
    df_tokenizer *tok = load_tok();
    int32_t *ids = NULL;
    int64_t n;
    char *text = NULL;
    df_chat_message msg = {"user", PROMPT};
    assert_int_equal(df_tokenizer_apply_chat_template(tok, &msg, 1, true, &text), 0);
    assert_int_equal(df_tokenizer_encode(tok, text, false, &ids, &n), 0);
    char want[128];
    snprintf(want, sizeof want, "the prompt's %lld tokens + --max-new-tokens %lld", (long long)n,
             (long long)(257 - n));
    snprintf(a, sizeof a, "%s --prompt '" PROMPT "' --max-new-tokens %lld", m, (long long)(257 - n));
    expect_fail(1, a, want, "max_position_embeddings 256", NULL);
    snprintf(a, sizeof a, "%s --prompt '" PROMPT "' --max-new-tokens %lld --json", m, (long long)(256 - n));
    char out[65536];
    assert_int_equal(gen(out, NULL, sizeof out, "%s", a), 0); /* exactly the limit fits */
    /* the default (512) shrinks to what the prompt leaves of the 256 positions */
    json_t *o = gen_json("--prompt '" PROMPT "'");
    int64_t nr;
    int32_t *t = ids_of(json_object_get(response(o, 0), "token_ids"), &nr);
    if (strcmp(json_string_value(json_object_get(response(o, 0), "finish_reason")), "length"))
        assert_true(nr <= 256 - n && df_tokenizer_is_eos(tok, t[nr - 1]));
    else
        assert_int_equal(nr, 256 - n);
    free(t);
    json_decref(o);
    snprintf(a, sizeof a, "--model %s/no_such_model --prompt hi", dir);
    expect_fail(1, a, "no_such_model", NULL);
    /* a tokenizer without a chat template: --raw is the way */
    snprintf(a, sizeof a, "--model %s/llama/model --tokenizer " LLAMA3 " --prompt hi", dir);
    expect_fail(1, a, "has no chat template", "give --raw", NULL);
#undef BAD
    free(ids);
    free(text);
    df_tokenizer_free(tok);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/df_generate_XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    const char *texts[] = {PROMPT, "Add 3 and 7. What do you get?", "Be brief.", "The answer is 12.",
                           "You are a helpful assistant."};
    df_test_tiny_model_ex(dir, texts, 5, 300, 32, 2, 7, 256);
    char llama[300]; /* Llama-3's vocabulary: one small layer */
    snprintf(llama, sizeof llama, "%s/llama", dir);
    df_tokenizer *tok = NULL;
    if (df_mkdir_p(llama) || df_tokenizer_load(LLAMA3, &tok))
        return -1;
    const int32_t eos = df_tokenizer_token_to_id(tok, "<|end_of_text|>"); /* its file names none */
    assert_int_equal(df_tokenizer_set_eos_ids(tok, &eos, 1), 0);
    df_test_random_model(llama, tok, "llama", 16, 1, 3, 256);
    df_tokenizer_free(tok);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return df_test_remove_tree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),        cmocka_unit_test(test_max_new_tokens),
        cmocka_unit_test(test_sampled_n2),    cmocka_unit_test(test_raw_ids),
        cmocka_unit_test(test_chat_template), cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
