/*
 * Tokenizer tests: the three shipped tokenizers against ids from HF Python
 * (data/tokenizers/SOURCES.md), round trips, normalisation, chat templates,
 * malformed files, a hand-made tokenizer.json for the pipeline options, the
 * BPE trainer, thread safety and GSM8K encoding throughput.
 */
/* rounding-free (scripts/test-variants.sh skips it): parsing, text and integers only */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include <ftw.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "distflow/tokenizer.h"

#define TOKDIR DF_SHARED_DIR "/data/tokenizers"
#define GSM8K DF_SHARED_DIR "/data/gsm8k/train.jsonl"

typedef struct fixture {
    df_tokenizer *qwen, *gpt2, *llama;
    char **texts; /* GSM8K train questions and answers */
    int64_t n_texts, n_bytes;
    char tmp[64];
} fixture;

static fixture F;

/* ---- helpers ---------------------------------------------------------------------- */

static int64_t enc(const df_tokenizer *t, const char *s, bool special, int32_t **ids)
{
    int64_t n = -1;
    int rc = df_tokenizer_encode(t, s, special, ids, &n);
    if (rc)
        fail_msg("encode failed: %s", df_last_error());
    return n;
}

static void expect_ids(const df_tokenizer *t, const char *s, bool special, const int32_t *want, int64_t nw)
{
    int32_t *ids;
    int64_t n = enc(t, s, special, &ids);
    if (n != nw)
        print_error("\"%s\": got %lld ids, want %lld\n", s, (long long)n, (long long)nw);
    assert_int_equal(n, nw);
    for (int64_t i = 0; i < n; i++)
        assert_int_equal(ids[i], want[i]);
    free(ids);
}

static char *dec(const df_tokenizer *t, const int32_t *ids, int64_t n, bool skip)
{
    char *s = NULL;
    assert_int_equal(df_tokenizer_decode(t, ids, n, skip, &s), 0);
    return s;
}

static void assert_roundtrip(const df_tokenizer *t, const char *s)
{
    int32_t *ids;
    int64_t n = enc(t, s, false, &ids);
    char *back = dec(t, ids, n, false);
    assert_string_equal(back, s);
    free(back);
    free(ids);
}

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static char *subdir(const char *name)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", F.tmp, name);
    mkdir(path, 0755);
    return path;
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    return s;
}

static int setup(void **state)
{
    (void)state;
    if (df_tokenizer_load(TOKDIR "/qwen2.5", &F.qwen) || df_tokenizer_load(TOKDIR "/gpt2", &F.gpt2) ||
        df_tokenizer_load(TOKDIR "/llama3/tokenizer.json", &F.llama)) {
        print_error("load failed: %s\n", df_last_error());
        return -1;
    }
    FILE *f = fopen(GSM8K, "r");
    if (!f)
        return -1;
    char *line = NULL;
    size_t cap = 0;
    F.texts = malloc(2 * 8000 * sizeof *F.texts);
    while (getline(&line, &cap, f) > 0 && F.n_texts < 2 * 8000) {
        json_t *j = json_loads(line, 0, NULL);
        for (int k = 0; k < 2 && j; k++) {
            const char *s = json_string_value(json_object_get(j, k ? "answer" : "question"));
            F.texts[F.n_texts++] = strdup(s);
            F.n_bytes += (int64_t)strlen(s);
        }
        json_decref(j);
    }
    free(line);
    fclose(f);
    snprintf(F.tmp, sizeof F.tmp, "/tmp/df_tok_test_XXXXXX");
    return mkdtemp(F.tmp) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    df_tokenizer_free(F.qwen);
    df_tokenizer_free(F.gpt2);
    df_tokenizer_free(F.llama);
    for (int64_t i = 0; i < F.n_texts; i++)
        free(F.texts[i]);
    free(F.texts);
    df_test_remove_tree(F.tmp);
    return 0;
}

/* ---- the shipped tokenizers -------------------------------------------------------- */

static void test_load_and_special_ids(void **state)
{
    (void)state;
    assert_int_equal(F.n_texts, 2 * 7473);
    assert_int_equal(df_tokenizer_vocab_size(F.qwen), 151665);
    assert_int_equal(df_tokenizer_eos_id(F.qwen), 151645);
    assert_int_equal(df_tokenizer_pad_id(F.qwen), 151643);
    assert_int_equal(df_tokenizer_bos_id(F.qwen), -1);
    assert_true(df_tokenizer_is_eos(F.qwen, 151645));
    assert_false(df_tokenizer_is_eos(F.qwen, 151643));
    assert_int_equal(df_tokenizer_vocab_size(F.gpt2), 50257);
    assert_int_equal(df_tokenizer_eos_id(F.gpt2), 50256);
    assert_int_equal(df_tokenizer_bos_id(F.gpt2), 50256);
    assert_int_equal(df_tokenizer_pad_id(F.gpt2), -1);
    assert_int_equal(df_tokenizer_vocab_size(F.llama), 128256);
    assert_int_equal(df_tokenizer_bos_id(F.llama), 128000); /* from the BOS template */
    assert_int_equal(df_tokenizer_eos_id(F.llama), -1);     /* no tokenizer_config.json */
    int n = -1;
    df_tokenizer_eos_ids(F.llama, &n);
    assert_int_equal(n, 0);
}

static void test_qwen_known_ids(void **state)
{
    (void)state;
    const int32_t chat[] = {151644, 872, 198, 13048, 11, 419, 374, 264, 1273, 0, 151645, 198, 151644, 77091, 198};
    expect_ids(F.qwen, "<|im_start|>user\nHi, this is a test!<|im_end|>\n<|im_start|>assistant\n", false, chat, 15);
    const int32_t hello[] = {9707, 1879};
    expect_ids(F.qwen, "Hello world", false, hello, 2);
    expect_ids(F.qwen, "Hello world", true, hello, 2); /* no BOS for Qwen */
    const int32_t digits[] = {16, 17, 18, 19, 20};
    expect_ids(F.qwen, "12345", false, digits, 5); /* \p{N}: one token per digit */
    expect_ids(F.qwen, "", false, NULL, 0);
}

/* `distflow tokenize`: a text that looks like an option is tokenized after `--`, as the library
   encodes it; before `--`, --help is the help. */
static void test_cli_text_after_double_dash(void **state)
{
    (void)state;
    const char *texts[] = {"--help", "-h", "--tokenizer x"};
    for (size_t t = 0; t < sizeof texts / sizeof *texts; t++) {
        int32_t *ids = NULL;
        int64_t n = 0;
        assert_int_equal(df_tokenizer_encode(F.qwen, texts[t], false, &ids, &n), 0);
        char want[256] = "[", cmd[1024], out[4096];
        for (int64_t i = 0; i < n; i++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%d", i ? ", " : "", ids[i]);
        strcat(want, "]\n");
        free(ids);
        snprintf(cmd, sizeof cmd, "%s/distflow tokenize --tokenizer %s/qwen2.5 -- '%s' 2>&1", DF_BINARY_DIR, TOKDIR,
                 texts[t]);
        assert_int_equal(df_test_command(cmd, out, sizeof out), 0);
        assert_string_equal(out, want);
    }
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "%s/distflow tokenize --tokenizer %s/qwen2.5 --help 2>&1", DF_BINARY_DIR, TOKDIR);
    assert_int_equal(df_test_command(cmd, out, sizeof out), 0);
    assert_non_null(strstr(out, "usage: distflow tokenize"));
}

/* `distflow tokenize --messages FILE --tools FILE [--render]`: a whole conversation through the template */
static void test_cli_chat_conversation(void **state)
{
    (void)state;
    char *dir = subdir("cli_chat");
    const char *conv = "[{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"Weather?\"},"
                       " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"type\": \"function\","
                       " \"function\": {\"name\": \"w\", \"arguments\": {\"city\": \"Paris\"}}}]},"
                       " {\"role\": \"tool\", \"content\": \"sunny\"}]";
    const char *tools = "[{\"type\": \"function\", \"function\": {\"name\": \"w\"}}]";
    write_file(dir, "conv.json", conv);
    write_file(dir, "tools.json", tools);
    char *want;
    assert_int_equal(df_tokenizer_apply_chat_template_json(F.qwen, conv, tools, true, NULL, &want), 0);
    assert_non_null(strstr(want, "<tool_call>\n{\"name\": \"w\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"));
    assert_non_null(strstr(want, "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n"));
    char cmd[2048], out[8192];
    snprintf(cmd, sizeof cmd, "%s/distflow tokenize --tokenizer %s/qwen2.5 --messages %s/conv.json --tools %s/tools.json --render",
             DF_BINARY_DIR, TOKDIR, dir, dir);
    assert_int_equal(df_test_command(cmd, out, sizeof out), 0);
    assert_string_equal(out, want);
    /* the ids are those of the rendered text; stdin and --no-generation-prompt */
    int32_t *ids;
    int64_t n = enc(F.qwen, want, false, &ids);
    snprintf(cmd, sizeof cmd, "%s/distflow tokenize --tokenizer %s/qwen2.5 --messages - --tools %s/tools.json < %s/conv.json",
             DF_BINARY_DIR, TOKDIR, dir, dir);
    assert_int_equal(df_test_command(cmd, out, sizeof out), 0);
    char expect[8192] = "[";
    for (int64_t i = 0; i < n; i++)
        snprintf(expect + strlen(expect), sizeof expect - strlen(expect), "%s%d", i ? ", " : "", ids[i]);
    strcat(expect, "]\n");
    assert_string_equal(out, expect);
    free(ids);
    free(want);
    snprintf(cmd, sizeof cmd, "%s/distflow tokenize --tokenizer %s/qwen2.5 --messages %s/conv.json --no-generation-prompt --render",
             DF_BINARY_DIR, TOKDIR, dir);
    assert_int_equal(df_test_command(cmd, out, sizeof out), 0);
    assert_true(strlen(out) > 10 && strcmp(out + strlen(out) - 11, "<|im_end|>\n") == 0);
    /* no template: the error, not a silent ChatML */
    snprintf(cmd, sizeof cmd, "%s/distflow tokenize --tokenizer %s/llama3/tokenizer.json --chat hi 2>&1", DF_BINARY_DIR, TOKDIR);
    assert_int_equal(df_test_command(cmd, out, sizeof out), 1);
    assert_non_null(strstr(out, "has no chat_template"));
    snprintf(cmd, sizeof cmd, "%s/distflow tokenize --tokenizer %s/qwen2.5 --tools x hi 2>&1", DF_BINARY_DIR, TOKDIR);
    assert_int_equal(df_test_command(cmd, out, sizeof out), 2);
    assert_non_null(strstr(out, "--tools and --extra need --messages"));
    /* options the mode given would ignore: --chat beside --messages, no generation prompt to leave out */
    snprintf(cmd, sizeof cmd, "%s/distflow tokenize --tokenizer %s/qwen2.5 --chat --messages %s/conv.json 2>&1",
             DF_BINARY_DIR, TOKDIR, dir);
    assert_int_equal(df_test_command(cmd, out, sizeof out), 2);
    assert_non_null(strstr(out, "--chat renders TEXT as a user message and --messages a conversation"));
    snprintf(cmd, sizeof cmd, "%s/distflow tokenize --tokenizer %s/qwen2.5 --no-generation-prompt hi 2>&1",
             DF_BINARY_DIR, TOKDIR);
    assert_int_equal(df_test_command(cmd, out, sizeof out), 2);
    assert_non_null(strstr(out, "--no-generation-prompt needs a chat rendering (--chat or --messages)"));
    snprintf(cmd, sizeof cmd, "%s/distflow tokenize --tokenizer %s/qwen2.5 --chat --no-generation-prompt --render "
             "hi 2>&1", DF_BINARY_DIR, TOKDIR);
    assert_int_equal(df_test_command(cmd, out, sizeof out), 0);
    assert_string_equal(out, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
                             "assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n");
}

static void test_gpt2_known_ids(void **state)
{
    (void)state;
    const int32_t hello[] = {15496, 995};
    expect_ids(F.gpt2, "Hello world", false, hello, 2);
    const int32_t eot[] = {15496, 11, 995, 0, 50256};
    expect_ids(F.gpt2, "Hello, world!<|endoftext|>", false, eot, 5);
    assert_true(df_tokenizer_is_special(F.gpt2, 50256));
}

static void test_llama3_known_ids(void **state)
{
    (void)state;
    const int32_t hello[] = {9906, 1917};
    expect_ids(F.llama, "Hello world", false, hello, 2);
    const int32_t bos_hello[] = {128000, 9906, 1917};
    expect_ids(F.llama, "Hello world", true, bos_hello, 3);
    const int32_t chat[] = {128006, 882, 128007, 271, 13347, 128009};
    expect_ids(F.llama, "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>", false, chat, 6);
    int32_t *ids; /* \p{N}{1,3}: digits in groups of three */
    int64_t n = enc(F.llama, "12345", false, &ids);
    assert_int_equal(n, 2);
    const char *b;
    int64_t bl;
    assert_int_equal(df_tokenizer_token_bytes(F.llama, ids[0], &b, &bl), 0);
    assert_int_equal(bl, 3);
    assert_memory_equal(b, "123", 3);
    free(ids);
}

static void test_vocabulary_lookups(void **state)
{
    (void)state;
    assert_int_equal(df_tokenizer_token_to_id(F.qwen, "\xc4\xa0world"), 1879); /* "Ġworld" */
    assert_string_equal(df_tokenizer_id_to_token(F.qwen, 1879), "\xc4\xa0world");
    assert_int_equal(df_tokenizer_token_to_id(F.qwen, "<|im_end|>"), 151645);
    assert_string_equal(df_tokenizer_id_to_token(F.qwen, 151644), "<|im_start|>");
    assert_int_equal(df_tokenizer_token_to_id(F.qwen, "no-such-token-here"), -1);
    assert_null(df_tokenizer_id_to_token(F.qwen, 151665));
    assert_null(df_tokenizer_id_to_token(F.qwen, -1));
    const char *b;
    int64_t n;
    assert_int_equal(df_tokenizer_token_bytes(F.qwen, 1879, &b, &n), 0);
    assert_int_equal(n, 6);
    assert_memory_equal(b, " world", 6);
    assert_int_equal(df_tokenizer_token_bytes(F.qwen, 151700, &b, &n), DF_ENOTFOUND);
}

static void test_roundtrip_unicode_and_code(void **state)
{
    (void)state;
    static const char *samples[] = {
        "h\xc3\xa9llo w\xc3\xb6rld \xe2\x80\x94 na\xc3\xafve caf\xc3\xa9",
        "\xe6\x95\xb0\xe5\xad\xa6\xe9\xa2\x98\xef\xbc\2323+4=7\xe3\x80\x82", /* octal \232: hex would eat the 3 */
        "emoji \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd \xf0\x9f\x87\xab\xf0\x9f\x87\xb7 family \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7",
        "def f(x):\n    return x**2  # square\n\n\tprint('it\\'s')\r\n",
        "Tabs\tand   spaces   \n\n\n  end  ",
        "I'LL SAY IT'S 'QUOTED', won't you?",
        "<<48/2=24>> 1,000,000 3.14159 -7e-3",
        "\xce\x95\xce\xbb\xce\xbb\xce\xb7\xce\xbd\xce\xb9\xce\xba\xce\xac \xd1\x80\xd1\x83\xd1\x81\xd1\x81\xd0\xba\xd0\xb8\xd0\xb9 \xd7\xa2\xd7\x91\xd7\xa8\xd7\x99\xd7\xaa",
        "<|im_start|>system\nx<|im_end|><|endoftext|>",
        " leading space and trailing newline\n",
    };
    df_tokenizer *all[3] = {F.qwen, F.gpt2, F.llama};
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; i < sizeof samples / sizeof *samples; i++)
            assert_roundtrip(all[k], samples[i]);
        for (int64_t i = 0; i < 1000; i++)
            assert_roundtrip(all[k], F.texts[i]);
    }
}

static void test_nfc_normalisation(void **state)
{
    (void)state;
    int32_t *a, *b;
    int64_t na = enc(F.qwen, "caf" "e\xcc\x81", false, &a); /* e + U+0301 */
    int64_t nb = enc(F.qwen, "caf\xc3\xa9", false, &b);    /* U+00E9 */
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, (size_t)na * sizeof *a);
    char *s = dec(F.qwen, a, na, false);
    assert_string_equal(s, "caf\xc3\xa9"); /* composed */
    free(s);
    free(a);
    free(b);
    /* Llama-3 has no normalizer: the two spellings differ */
    na = enc(F.llama, "caf" "e\xcc\x81", false, &a);
    nb = enc(F.llama, "caf\xc3\xa9", false, &b);
    assert_true(na != nb || memcmp(a, b, (size_t)na * sizeof *a) != 0);
    free(a);
    free(b);
}

static void test_decode_special_and_lossy(void **state)
{
    (void)state;
    int32_t *ids;
    int64_t n = enc(F.qwen, "<|im_start|>user\nHi!<|im_end|>\n", false, &ids);
    char *s = dec(F.qwen, ids, n, true);
    assert_string_equal(s, "user\nHi!\n");
    free(s);
    free(ids);
    /* ids without a token (an embedding larger than the vocab) are skipped, as in HF */
    const int32_t odd[] = {9707, 151700, -3, 1879};
    s = dec(F.qwen, odd, 4, false);
    assert_string_equal(s, "Hello world");
    free(s);
    /* bytes E4 B8 (a truncated 3-byte sequence) + "a" -> one U+FFFD; each stray FF -> U+FFFD */
    int32_t e4 = df_tokenizer_token_to_id(F.qwen, "\xc3\xa4"), b8 = df_tokenizer_token_to_id(F.qwen, "\xc2\xb8");
    int32_t ff = df_tokenizer_token_to_id(F.qwen, "\xc3\xbf"), a = df_tokenizer_token_to_id(F.qwen, "a");
    const int32_t bad[] = {e4, b8, a, ff, ff};
    s = dec(F.qwen, bad, 5, false);
    assert_string_equal(s, "\xef\xbf\xbd" "a" "\xef\xbf\xbd\xef\xbf\xbd");
    free(s);
    /* byte 0 ("\xc4\x80" in ByteLevel's alphabet) -> U+FFFD: a NUL would end the text there */
    const int32_t zero = df_tokenizer_token_to_id(F.qwen, "\xc4\x80"), nul[] = {zero, a, zero};
    assert_true(zero >= 0);
    s = dec(F.qwen, nul, 3, false);
    assert_string_equal(s, "\xef\xbf\xbd" "a" "\xef\xbf\xbd");
    free(s);
    /* streaming: a rare character spans tokens; their bytes concatenate to it */
    n = enc(F.qwen, "\xf0\x9f\xa6\xa9", false, &ids); /* U+1F9A9 flamingo */
    assert_true(n >= 2);
    char buf[16];
    int64_t len = 0;
    for (int64_t i = 0; i < n; i++) {
        const char *p;
        int64_t l;
        assert_int_equal(df_tokenizer_token_bytes(F.qwen, ids[i], &p, &l), 0);
        memcpy(buf + len, p, (size_t)l);
        len += l;
    }
    assert_int_equal(len, 4);
    assert_memory_equal(buf, "\xf0\x9f\xa6\xa9", 4);
    free(ids);
}

static void test_invalid_utf8_input(void **state)
{
    (void)state;
    int32_t *ids = (int32_t *)1;
    int64_t n = 5;
    assert_int_equal(df_tokenizer_encode(F.qwen, "ok\xff", false, &ids, &n), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "byte 2"));
    assert_null(ids);
    assert_int_equal(n, 0);
    assert_int_equal(df_tokenizer_encode(F.qwen, "\xed\xa0\x80", false, &ids, &n), DF_EINVAL); /* surrogate */
}

static void test_long_pretokens(void **state)
{
    (void)state;
    int64_t len = 200000;
    char *s = malloc((size_t)len + 1);
    memset(s, ' ', (size_t)len);
    s[len] = '\0';
    assert_roundtrip(F.qwen, s); /* one 200 kB whitespace pre-token: the heap path */
    memset(s, 'x', (size_t)len);
    assert_roundtrip(F.gpt2, s);
    int32_t *ids;
    int64_t n = enc(F.gpt2, s, false, &ids);
    assert_true(n < len / 2);
    free(ids);
    free(s);
}

/* ---- chat templates -------------------------------------------------------------------- */

static void test_chat_template_qwen(void **state)
{
    (void)state;
    /* the real Qwen2.5 template, rendered by the Jinja engine: its default system message first */
    df_chat_message m[2] = {{"user", "What is 2+3?"}, {"assistant", "5"}};
    char *s;
    assert_int_equal(df_tokenizer_apply_chat_template(F.qwen, m, 1, true, &s), 0);
    assert_string_equal(s, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
                           "assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+3?<|im_end|>\n"
                           "<|im_start|>assistant\n");
    free(s);
    df_chat_message ms[3] = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}};
    assert_int_equal(df_tokenizer_apply_chat_template(F.qwen, ms, 3, false, &s), 0);
    assert_string_equal(s, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                           "<|im_start|>assistant\nHello<|im_end|>\n");
    free(s);
    df_chat_message bad = {"user", NULL};
    assert_int_equal(df_tokenizer_apply_chat_template(F.qwen, &bad, 1, true, &s), DF_EINVAL);
    assert_null(s);
}

static void test_chat_template_families(void **state)
{
    (void)state;
    /* the Llama-3 dir has no tokenizer_config.json: no template, and rendering is an error (as transformers) */
    assert_null(df_tokenizer_chat_template(F.llama));
    df_chat_message m[2] = {{"system", " Be brief. "}, {"user", "Hi"}};
    char *s = (char *)1;
    assert_int_equal(df_tokenizer_apply_chat_template(F.llama, m + 1, 1, true, &s), DF_EINVAL);
    assert_null(s);
    assert_non_null(strstr(df_last_error(), "has no chat_template"));
    df_tokenizer *t;
    assert_int_equal(df_tokenizer_load(TOKDIR "/llama3", &t), 0);
    const char *llama = "{{ bos_token }}{% for message in messages %}"
                        "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
                        "message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
                        "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
    assert_int_equal(df_tokenizer_set_chat_template(t, llama), 0);
    assert_string_equal(df_tokenizer_chat_template(t), llama);
    assert_int_equal(df_tokenizer_apply_chat_template(t, m, 2, true, &s), 0);
    assert_string_equal(s, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                           "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                           "<|start_header_id|>assistant<|end_header_id|>\n\n");
    int32_t *ids;
    int64_t n = enc(t, s, false, &ids);
    assert_int_equal(ids[0], 128000);
    assert_int_equal(ids[n - 1], 271); /* "\n\n" */
    free(ids);
    free(s);
    /* any template renders now, not only ChatML / Llama-3 */
    assert_int_equal(df_tokenizer_set_chat_template(t, "{% for m in messages %}[{{ m.content }}]{% endfor %}"), 0);
    assert_int_equal(df_tokenizer_apply_chat_template(t, m, 2, true, &s), 0);
    assert_string_equal(s, "[ Be brief. ][Hi]");
    free(s);
    /* a template that does not parse loads, and applying it reports where it breaks */
    assert_int_equal(df_tokenizer_set_chat_template(t, "{% for m in messages %}\n{{ m.content }"), 0);
    assert_int_equal(df_tokenizer_apply_chat_template(t, m, 2, true, &s), DF_EINVAL);
    assert_string_equal(df_last_error(), "chat_template:2:1: missing '}}' to close the tag opened here");
    /* the JSON form: tool calls, a tools list and extra variables reach the template */
    assert_int_equal(df_tokenizer_set_chat_template(t, "{{ tools | length }}|{{ messages[0].tool_calls[0].function.name }}"
                                                       "|{{ flag }}|{{ bos_token }}|{{ eos_token }}"), 0);
    assert_int_equal(df_tokenizer_apply_chat_template_json(
                         t, "[{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"type\": \"function\", "
                            "\"function\": {\"name\": \"calc\", \"arguments\": {}}}]}]",
                         "[{}, {}]", false, "{\"flag\": 7}", &s),
                     0);
    assert_string_equal(s, "2|calc|7|<|begin_of_text|>|"); /* this directory names no eos */
    free(s);
    assert_int_equal(df_tokenizer_apply_chat_template_json(t, "[{\"content\": \"x\"}]", NULL, false, NULL, &s), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "message 0 is not an object with a string \"role\""));
    assert_int_equal(df_tokenizer_apply_chat_template_json(t, "[]", "{}", false, NULL, &s), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "tools must be a JSON array"));
    df_tokenizer_free(t);
}

/* ---- a hand-made tokenizer.json: pipeline options ----------------------------------------- */

/* vocab: a b c ab abc Ġ Ġa - a- -b ca --; added tokens use ids 7 and 8 */
#define TINY_VOCAB "{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"abc\":4,\"\xc4\xa0\":5,\"\xc4\xa0" "a\":6," \
                   "\"-\":9,\"a-\":10,\"-b\":11,\"ca\":12,\"--\":13}"
#define BYTELEVEL_PRE "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}"

static df_tokenizer *tiny(const char *name, const char *added, const char *pre, const char *model_extra,
                          const char *merges)
{
    char json[4096];
    snprintf(json, sizeof json,
             "{\"version\":\"1.0\",\"added_tokens\":%s,\"normalizer\":null,\"pre_tokenizer\":%s,"
             "\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\"},"
             "\"model\":{\"type\":\"BPE\"%s,\"vocab\":" TINY_VOCAB ",\"merges\":%s}}",
             added, pre, model_extra, merges);
    char *dir = subdir(name);
    write_file(dir, "tokenizer.json", json);
    df_tokenizer *t = NULL;
    if (df_tokenizer_load(dir, &t))
        fail_msg("tiny %s: %s", name, df_last_error());
    return t;
}

static void test_tiny_merges_and_added_tokens(void **state)
{
    (void)state;
    static const char merges[] = "[\"a b\",\"ab c\",\"\xc4\xa0 a\",\"a -\",\"- b\"]";
    df_tokenizer *t = tiny("plain", "[]", BYTELEVEL_PRE, "", merges);
    assert_int_equal(df_tokenizer_vocab_size(t), 14);
    expect_ids(t, "abc", false, (int32_t[]){4}, 1);
    expect_ids(t, "cab", false, (int32_t[]){2, 3}, 2);
    expect_ids(t, "a ab", false, (int32_t[]){0, 5, 3}, 3); /* "a", "Ġab": "a b" outranks "Ġ a" */
    expect_ids(t, "ca", false, (int32_t[]){2, 0}, 2);      /* "ca" has no merge */
    expect_ids(t, "zz", false, NULL, 0);                   /* bytes without a token are dropped */
    df_tokenizer_free(t);

    t = tiny("pairs", "[]", BYTELEVEL_PRE, ",\"ignore_merges\":true",
             "[[\"a\",\"b\"],[\"ab\",\"c\"],[\"\xc4\xa0\",\"a\"]]");
    expect_ids(t, "ca", false, (int32_t[]){12}, 1); /* ignore_merges: a whole-token word wins */
    expect_ids(t, "cab", false, (int32_t[]){2, 3}, 2);
    df_tokenizer_free(t);

    t = tiny("added",
             "[{\"id\":7,\"content\":\"<x>\",\"special\":true,\"lstrip\":true,\"rstrip\":true,\"normalized\":false},"
             "{\"id\":8,\"content\":\"ab\",\"special\":false,\"single_word\":true,\"normalized\":false}]",
             BYTELEVEL_PRE, "", merges);
    expect_ids(t, "a <x> a", false, (int32_t[]){0, 7, 0}, 3); /* both spaces stripped */
    expect_ids(t, "ab c", false, (int32_t[]){8, 5, 2}, 3);      /* a single word: added token */
    expect_ids(t, "cab", false, (int32_t[]){2, 3}, 2);          /* inside a word: plain BPE */
    int32_t ids[] = {0, 7, 8};
    char *s = dec(t, ids, 3, true);
    assert_string_equal(s, "aab"); /* <x> is special, "ab" is not */
    free(s);
    assert_int_equal(df_tokenizer_token_to_id(t, "ab"), 8); /* added tokens first, as HF */
    df_tokenizer_free(t);
}

static void test_tiny_split_behaviors(void **state)
{
    (void)state;
    static const char merges[] = "[\"a b\",\"a -\",\"- b\",\"- -\"]";
    static const struct {
        const char *behavior, *text;
        int32_t ids[4];
        int n;
    } cases[] = {{"Isolated", "a-b", {0, 9, 1}, 3},
                 {"Isolated", "a--b", {0, 9, 9, 1}, 4},
                 {"Removed", "a-b", {0, 1}, 2},
                 {"MergedWithPrevious", "a-b", {10, 1}, 2},
                 {"MergedWithNext", "a-b", {0, 11}, 2},
                 {"Contiguous", "a--b", {0, 13, 1}, 3}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char pre[512];
        snprintf(pre, sizeof pre,
                 "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"String\":\"-\"},"
                 "\"behavior\":\"%s\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
                 "\"use_regex\":false}]}",
                 cases[k].behavior);
        char name[64];
        snprintf(name, sizeof name, "split%zu", k);
        df_tokenizer *t = tiny(name, "[]", pre, "", merges);
        expect_ids(t, cases[k].text, false, cases[k].ids, cases[k].n);
        df_tokenizer_free(t);
    }
    /* add_prefix_space on the ByteLevel step */
    df_tokenizer *t = tiny("prefix", "[]", "{\"type\":\"ByteLevel\",\"add_prefix_space\":true}", "",
                           "[\"a b\",\"\xc4\xa0 a\"]");
    expect_ids(t, "a", false, (int32_t[]){6}, 1);
    expect_ids(t, " a", false, (int32_t[]){6}, 1);
    df_tokenizer_free(t);
}

/* ---- malformed files ------------------------------------------------------------------------ */

static void expect_load_error(const char *name, const char *tokenizer_json, const char *config, int code,
                              const char *needle)
{
    char *dir = subdir(name);
    char path[600];
    snprintf(path, sizeof path, "%s", dir);
    if (tokenizer_json)
        write_file(path, "tokenizer.json", tokenizer_json);
    if (config)
        write_file(path, "tokenizer_config.json", config);
    df_tokenizer *t = (df_tokenizer *)1;
    int rc = df_tokenizer_load(path, &t);
    if (rc != code || !strstr(df_last_error(), needle) || !strstr(df_last_error(), path))
        fail_msg("case %s: rc %d (want %d), message \"%s\" should name %s and \"%s\"", name, rc, code,
                 df_last_error(), path, needle);
    assert_null(t);
}

#define GOOD_MODEL "\"model\":{\"type\":\"BPE\",\"vocab\":" TINY_VOCAB ",\"merges\":[\"a b\"]}"
#define GOOD_PRE "\"pre_tokenizer\":" BYTELEVEL_PRE ",\"decoder\":{\"type\":\"ByteLevel\"}"

static void test_malformed_files(void **state)
{
    (void)state;
    expect_load_error("badjson", "{\"model\": {\"type\": \"BPE\",,}}", NULL, DF_EINVAL, "tokenizer.json:1:");
    expect_load_error("nomodel", "{\"version\":\"1.0\"," GOOD_PRE "}", NULL, DF_EINVAL, "\"model\"");
    expect_load_error("wordpiece", "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}," GOOD_PRE "}", NULL,
                      DF_EUNSUPPORTED, "WordPiece");
    expect_load_error("mergemissing",
                      "{\"model\":{\"type\":\"BPE\",\"vocab\":" TINY_VOCAB ",\"merges\":[\"a z\"]}," GOOD_PRE "}",
                      NULL, DF_EINVAL, "\"z\", which is not in the vocab");
    expect_load_error("mergeresult",
                      "{\"model\":{\"type\":\"BPE\",\"vocab\":" TINY_VOCAB ",\"merges\":[\"b c\"]}," GOOD_PRE "}",
                      NULL, DF_EINVAL, "makes \"bc\"");
    expect_load_error("mergeformat",
                      "{\"model\":{\"type\":\"BPE\",\"vocab\":" TINY_VOCAB ",\"merges\":[\"abc\"]}," GOOD_PRE "}",
                      NULL, DF_EINVAL, "merges[0]");
    expect_load_error("badid", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1},\"merges\":[]}," GOOD_PRE "}",
                      NULL, DF_EINVAL, "model.vocab[\"a\"]");
    expect_load_error("whitespace",
                      "{" GOOD_MODEL ",\"pre_tokenizer\":{\"type\":\"Whitespace\"},\"decoder\":{\"type\":\"Fuse\"}}",
                      NULL, DF_EUNSUPPORTED, "Whitespace");
    expect_load_error("nodecoder", "{" GOOD_MODEL ",\"pre_tokenizer\":" BYTELEVEL_PRE "}", NULL, DF_EUNSUPPORTED,
                      "decoder \"null\"");
    expect_load_error("fallbackbytelevel",
                      "{\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"vocab\":" TINY_VOCAB ",\"merges\":[]},"
                      GOOD_PRE "}", NULL, DF_EUNSUPPORTED, "byte_fallback with a ByteLevel pre_tokenizer");
    expect_load_error("unkmissing",
                      "{\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"vocab\":" TINY_VOCAB ",\"merges\":[]},"
                      GOOD_PRE "}", NULL, DF_EINVAL, "model.unk_token \"<unk>\" is not in model.vocab");
    expect_load_error("lowercase", "{" GOOD_MODEL "," GOOD_PRE ",\"normalizer\":{\"type\":\"Lowercase\"}}", NULL,
                      DF_EUNSUPPORTED, "Lowercase");
    expect_load_error("badregex",
                      "{" GOOD_MODEL ",\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":"
                      "\"Split\",\"pattern\":{\"Regex\":\"(a\"},\"behavior\":\"Isolated\"}," BYTELEVEL_PRE "]},"
                      "\"decoder\":{\"type\":\"ByteLevel\"}}",
                      NULL, DF_EINVAL, "bad regex");
    expect_load_error("decoder", "{" GOOD_MODEL ",\"pre_tokenizer\":" BYTELEVEL_PRE ",\"decoder\":{\"type\":\"WordPiece\"}}",
                      NULL, DF_EUNSUPPORTED, "decoder");
    expect_load_error("addedbad", "{" GOOD_MODEL "," GOOD_PRE ",\"added_tokens\":[{\"content\":\"x\"}]}", NULL,
                      DF_EINVAL, "added_tokens[0]");
    expect_load_error("cfgeos", "{" GOOD_MODEL "," GOOD_PRE "}", "{\"eos_token\": \"<|nope|>\"}", DF_EINVAL,
                      "tokenizer_config.json: eos_token \"<|nope|>\"");
    expect_load_error("cfgjson", "{" GOOD_MODEL "," GOOD_PRE "}", "{\n\"eos_token\": }", DF_EINVAL,
                      "tokenizer_config.json:2:");
    expect_load_error("empty", NULL, NULL, DF_ENOTFOUND, "no tokenizer.json");
    char *dir = subdir("gpt2bad");
    write_file(dir, "vocab.json", "{\"a\":0,\"b\":1,\"ab\":2}");
    write_file(dir, "merges.txt", "#version: 0.2\na b\na b c\n");
    df_tokenizer *t;
    assert_int_equal(df_tokenizer_load(dir, &t), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "merges.txt:3:"));
    assert_int_equal(df_tokenizer_load("/nonexistent/dir/tok", &t), DF_ENOTFOUND);
    assert_non_null(strstr(df_last_error(), "/nonexistent/dir/tok"));
}

/* ---- saving a loaded tokenizer, generation_config ---------------------------------------------- */

static void test_save_reload_gpt2(void **state)
{
    (void)state;
    char *dir = subdir("gpt2saved");
    assert_int_equal(df_tokenizer_save(F.gpt2, dir), 0);
    df_tokenizer *t;
    assert_int_equal(df_tokenizer_load(dir, &t), 0); /* now a tokenizer.json */
    assert_int_equal(df_tokenizer_vocab_size(t), 50257);
    assert_int_equal(df_tokenizer_eos_id(t), 50256);
    assert_int_equal(df_tokenizer_bos_id(t), 50256);
    for (int64_t i = 0; i < 300; i++) {
        int32_t *a, *b;
        int64_t na = enc(F.gpt2, F.texts[i], false, &a), nb = enc(t, F.texts[i], false, &b);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, (size_t)na * sizeof *a);
        free(a);
        free(b);
    }
    df_tokenizer_free(t);
}

static void test_config_cleanup_and_overrides(void **state)
{
    (void)state;
    char *dir = subdir("gpt2cfg");
    char link[600];
    snprintf(link, sizeof link, "%s/vocab.json", dir);
    assert_int_equal(symlink(TOKDIR "/gpt2/vocab.json", link), 0);
    snprintf(link, sizeof link, "%s/merges.txt", dir);
    assert_int_equal(symlink(TOKDIR "/gpt2/merges.txt", link), 0);
    /* clean_up_tokenization_spaces; bos null clears the GPT-2 default; eos keeps it (absent key) */
    write_file(dir, "tokenizer_config.json",
               "{\"clean_up_tokenization_spaces\": true, \"bos_token\": null, "
               "\"pad_token\": {\"content\": \"!\", \"special\": false}}");
    df_tokenizer *t;
    assert_int_equal(df_tokenizer_load(dir, &t), 0);
    assert_int_equal(df_tokenizer_bos_id(t), -1);
    assert_int_equal(df_tokenizer_eos_id(t), 50256);
    assert_int_equal(df_tokenizer_pad_id(t), 0);
    int32_t *ids;
    int64_t n = enc(t, "Hello , world . It 's fine , is n't it ?", false, &ids);
    char *s = dec(t, ids, n, false);
    assert_string_equal(s, "Hello, world. It's fine, isn't it?");
    free(s);
    free(ids);
    df_tokenizer_free(t);
}

/* chat_template.jinja (transformers 4.47+: save_pretrained's file) wins over tokenizer_config.json's
 * entry, as AutoTokenizer reads it; a file that is not UTF-8 text is refused naming it. */
static void test_chat_template_file(void **state)
{
    (void)state;
    char *dir = subdir("jinja");
    write_file(dir, "tokenizer.json", "{" GOOD_MODEL "," GOOD_PRE "}");
    write_file(dir, "tokenizer_config.json", "{\"chat_template\": \"config:{{ messages[0].content }}\"}");
    df_tokenizer *t;
    assert_int_equal(df_tokenizer_load(dir, &t), 0);
    assert_string_equal(df_tokenizer_chat_template(t), "config:{{ messages[0].content }}");
    df_tokenizer_free(t);
    write_file(dir, "chat_template.jinja", "file:{{ messages[0].content }}\n");
    assert_int_equal(df_tokenizer_load(dir, &t), 0);
    df_chat_message m = {.role = "user", .content = "hi"};
    char *s;
    assert_int_equal(df_tokenizer_apply_chat_template(t, &m, 1, false, &s), 0);
    assert_string_equal(s, "file:hi"); /* Jinja drops a template's one trailing newline */
    free(s);
    df_tokenizer_free(t);
    write_file(dir, "chat_template.jinja", "{{ messages }}\xc3(");
    t = (df_tokenizer *)1;
    assert_int_equal(df_tokenizer_load(dir, &t), DF_EINVAL);
    assert_null(t);
    if (!strstr(df_last_error(), "chat_template.jinja: not UTF-8 text (an invalid byte at offset 14)"))
        fail_msg("%s", df_last_error());
}

/* An added token with normalized = true matches the NFC form of the text. */
static void test_normalized_added_token(void **state)
{
    (void)state;
    char *dir = subdir("normadded");
    write_file(dir, "tokenizer.json",
               "{\"added_tokens\":[{\"id\":20,\"content\":\"caf\xc3\xa9\",\"special\":false,"
               "\"normalized\":true}],\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"}]},"
               "\"pre_tokenizer\":" BYTELEVEL_PRE ",\"decoder\":{\"type\":\"ByteLevel\"},"
               "\"model\":{\"type\":\"BPE\",\"vocab\":" TINY_VOCAB ",\"merges\":[]}}");
    df_tokenizer *t;
    assert_int_equal(df_tokenizer_load(dir, &t), 0);
    expect_ids(t, "a caf" "e\xcc\x81" "a", false, (int32_t[]){0, 5, 20, 0}, 4);
    int32_t ids[] = {20};
    char *s = dec(t, ids, 1, false);
    assert_string_equal(s, "caf\xc3\xa9");
    free(s);
    df_tokenizer_free(t);
}

/* ---- the BPE trainer ------------------------------------------------------------------------------ */

static char **arithmetic_corpus(int n)
{
    static const char *names[] = {"Tom", "Ana", "Li", "Sam", "Mia", "Omar"};
    static const char *things[] = {"apples", "pens", "books", "coins", "cards"};
    char **v = malloc((size_t)n * sizeof *v);
    uint32_t x = 12345;
    for (int i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        int a = (int)(x >> 16) % 90 + 10, b = (int)(x >> 8) % 50 + 2;
        const char *who = names[i % 6], *what = things[(i / 6) % 5];
        char buf[256];
        snprintf(buf, sizeof buf,
                 "%s has %d %s. %s buys %d more %s. How many %s does %s have now?\n"
                 "%s has %d + %d = %d %s.\n#### %d",
                 who, a, what, who, b, what, what, who, who, a, b, a + b, what, a + b);
        v[i] = strdup(buf);
    }
    return v;
}

static void test_bpe_trainer(void **state)
{
    (void)state;
    const int n = 300;
    char **corpus = arithmetic_corpus(n);
    df_tokenizer *t, *t2, *t3;
    assert_int_equal(df_tokenizer_train_bpe((const char *const *)corpus, n, 320, NULL, &t), 0);
    assert_int_equal(df_tokenizer_vocab_size(t), 320);
    assert_int_equal(df_tokenizer_token_to_id(t, "<|endoftext|>"), 317);
    assert_int_equal(df_tokenizer_token_to_id(t, "<|im_start|>"), 318);
    assert_int_equal(df_tokenizer_token_to_id(t, "<|im_end|>"), 319);
    assert_int_equal(df_tokenizer_eos_id(t), 319);
    assert_int_equal(df_tokenizer_pad_id(t), 317);
    assert_int_equal(df_tokenizer_bos_id(t), -1);
    assert_int_equal(df_tokenizer_token_to_id(t, "!"), 0); /* GPT-2 byte order */
    assert_int_equal(df_tokenizer_token_to_id(t, "\xc4\xa0"), 220);
    int32_t *ids;
    assert_int_equal(enc(t, " apples", false, &ids), 1); /* a frequent word is one token */
    free(ids);
    int64_t k = enc(t, "9081726354", false, &ids); /* digits stay single tokens */
    assert_int_equal(k, 10);
    for (int i = 0; i < 10; i++) {
        const char *b;
        int64_t l;
        assert_int_equal(df_tokenizer_token_bytes(t, ids[i], &b, &l), 0);
        assert_int_equal(l, 1);
        assert_int_equal(b[0], "9081726354"[i]);
    }
    free(ids);
    /* save, reload: identical ids and text */
    char *dir = subdir("trained");
    assert_int_equal(df_tokenizer_save(t, dir), 0);
    assert_int_equal(df_tokenizer_load(dir, &t2), 0);
    assert_int_equal(df_tokenizer_vocab_size(t2), 320);
    assert_int_equal(df_tokenizer_eos_id(t2), 319);
    assert_int_equal(df_tokenizer_pad_id(t2), 317);
    for (int i = 0; i < n; i++) {
        int32_t *a, *b;
        int64_t na = enc(t, corpus[i], false, &a), nb = enc(t2, corpus[i], false, &b);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, (size_t)na * sizeof *a);
        char *s = dec(t2, b, nb, false);
        assert_string_equal(s, corpus[i]);
        free(s);
        free(a);
        free(b);
    }
    /* the saved ChatML template renders with its default system message */
    df_chat_message m = {"user", "Hi"};
    char *s;
    assert_int_equal(df_tokenizer_apply_chat_template(t2, &m, 1, true, &s), 0);
    assert_string_equal(s, "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                           "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    k = enc(t2, s, false, &ids);
    assert_int_equal(ids[0], 318);    /* <|im_start|> */
    assert_int_equal(ids[k - 1], 198); /* "\n" = "Ċ" */
    int ends = 0;
    for (int64_t i = 0; i < k; i++)
        ends += ids[i] == 319;
    assert_int_equal(ends, 2);
    free(ids);
    free(s);
    /* deterministic: training again writes the same bytes */
    char *dir2 = strdup(subdir("trained2"));
    assert_int_equal(df_tokenizer_train_bpe((const char *const *)corpus, n, 320, NULL, &t3), 0);
    assert_int_equal(df_tokenizer_save(t3, dir2), 0);
    char p1[600], p2[600];
    snprintf(p1, sizeof p1, "%s/trained/tokenizer.json", F.tmp);
    snprintf(p2, sizeof p2, "%s/tokenizer.json", dir2);
    char *f1 = read_all(p1), *f2 = read_all(p2);
    assert_string_equal(f1, f2);
    free(f1);
    free(f2);
    free(dir2);
    df_tokenizer_free(t);
    df_tokenizer_free(t2);
    df_tokenizer_free(t3);
    for (int i = 0; i < n; i++)
        free(corpus[i]);
    free(corpus);
}

static void test_bpe_trainer_options_and_errors(void **state)
{
    (void)state;
    const char *texts[] = {"aaa bbb aaa bbb", "It's a test.", "aaa"};
    df_tokenizer *t;
    assert_int_equal(df_tokenizer_train_bpe(texts, 3, 258, NULL, &t), DF_EINVAL);
    const char *bad[] = {"fine", "broken \xc3"};
    assert_int_equal(df_tokenizer_train_bpe(bad, 2, 300, NULL, &t), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "text 1"));
    df_bpe_train_options o = {.pattern = "(", .min_frequency = 1};
    assert_int_equal(df_tokenizer_train_bpe(texts, 3, 300, &o, &t), DF_EINVAL);
    /* min_frequency 1 and a custom system message with characters to escape */
    o = (df_bpe_train_options){.min_frequency = 1, .system_message = "You're a 'calc'\nbot."};
    assert_int_equal(df_tokenizer_train_bpe(texts, 3, 300, &o, &t), 0);
    assert_true(df_tokenizer_vocab_size(t) < 300); /* ran out of pairs */
    assert_true(df_tokenizer_token_to_id(t, "aaa") >= 256);
    char *dir = subdir("trained_opts");
    assert_int_equal(df_tokenizer_save(t, dir), 0);
    df_tokenizer_free(t);
    write_file(dir, "generation_config.json", "{\"eos_token_id\": [5, 3]}");
    assert_int_equal(df_tokenizer_load(dir, &t), 0);
    df_chat_message hi = {"user", "Hi"};
    char *txt;
    assert_int_equal(df_tokenizer_apply_chat_template(t, &hi, 1, false, &txt), 0);
    assert_string_equal(txt, "<|im_start|>system\nYou're a 'calc'\nbot.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
    free(txt);
    int n;
    const int32_t *eos = df_tokenizer_eos_ids(t, &n);
    assert_int_equal(n, 3); /* <|im_end|> from the config, then 5 and 3 */
    assert_int_equal(eos[0], df_tokenizer_token_to_id(t, "<|im_end|>"));
    assert_int_equal(eos[1], 5);
    assert_int_equal(eos[2], 3);
    assert_int_equal(df_tokenizer_set_eos_ids(t, (int32_t[]){7}, 1), 0);
    assert_int_equal(df_tokenizer_eos_id(t), 7);
    assert_int_equal(df_tokenizer_set_eos_ids(t, (int32_t[]){100000}, 1), DF_EINVAL);
    df_tokenizer_free(t);
}

/* ---- threads and throughput ----------------------------------------------------------------------- */

typedef struct job {
    int64_t lo, hi;
    int64_t tokens;
    uint64_t hash;
} job;

static void *encode_range(void *arg)
{
    job *j = arg;
    j->hash = 1469598103934665603ull;
    for (int64_t i = j->lo; i < j->hi; i++) {
        int32_t *ids;
        int64_t n;
        if (df_tokenizer_encode(F.qwen, F.texts[i], false, &ids, &n))
            return NULL;
        j->tokens += n;
        for (int64_t k = 0; k < n; k++)
            j->hash = (j->hash ^ (uint32_t)ids[k]) * 1099511628211ull;
        free(ids);
    }
    return NULL;
}

static void test_concurrent_encode(void **state)
{
    (void)state;
    const int64_t per = 500;
    job serial[4], par[4];
    pthread_t th[4];
    for (int k = 0; k < 4; k++) {
        serial[k] = (job){k * per, (k + 1) * per, 0, 0};
        encode_range(&serial[k]);
        par[k] = (job){k * per, (k + 1) * per, 0, 0};
    }
    for (int k = 0; k < 4; k++)
        assert_int_equal(pthread_create(&th[k], NULL, encode_range, &par[k]), 0);
    for (int k = 0; k < 4; k++) {
        pthread_join(th[k], NULL);
        assert_int_equal(par[k].tokens, serial[k].tokens);
        assert_true(par[k].hash == serial[k].hash);
        assert_true(serial[k].tokens > 0);
    }
}

/* CPU time of this thread: the machine is shared, so wall time overstates the cost. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* FNV-1a over every id of every GSM8K text, in order. */
static uint64_t gsm8k_hash(const df_tokenizer *t, int64_t *tokens, double *cpu_s, int64_t *bad_roundtrips)
{
    uint64_t h = 1469598103934665603ull;
    *tokens = *bad_roundtrips = 0;
    *cpu_s = 0;
    for (int64_t i = 0; i < F.n_texts; i++) {
        int32_t *ids;
        int64_t n;
        double t0 = cpu_now();
        assert_int_equal(df_tokenizer_encode(t, F.texts[i], false, &ids, &n), 0);
        *cpu_s += cpu_now() - t0;
        *tokens += n;
        for (int64_t k = 0; k < n; k++)
            h = (h ^ (uint32_t)ids[k]) * 1099511628211ull;
        char *s = dec(t, ids, n, false);
        *bad_roundtrips += strcmp(s, F.texts[i]) != 0;
        free(s);
        free(ids);
    }
    return h;
}

/* The expected counts and hashes come from an independent encoder: tiktoken-style
 * rank BPE in Python over the original rank files (qwen.tiktoken, Llama-3's
 * tokenizer.model), which data/tokenizers/SOURCES.md checks against the same texts. */
static void test_gsm8k_throughput_and_roundtrip(void **state)
{
    (void)state;
    int64_t tokens, bad;
    double cpu_s;
    uint64_t h = gsm8k_hash(F.qwen, &tokens, &cpu_s, &bad);
    assert_int_equal(bad, 0);
    assert_int_equal(tokens, 1355905);
    assert_true(h == 0x6644a2565b6baaa6ull);
    print_message("[ PERF     ] Qwen 2.5 encode of GSM8K train (%.2f MB, %lld texts): %.3f s CPU, %.1f MB/s, %lld tokens\n",
                  (double)F.n_bytes / 1e6, (long long)F.n_texts, cpu_s, (double)F.n_bytes / 1e6 / cpu_s,
                  (long long)tokens);
    assert_true(cpu_s < 20.0); /* a guard against pathologies; the target is well under 2 s */
    h = gsm8k_hash(F.llama, &tokens, &cpu_s, &bad);
    assert_int_equal(bad, 0);
    assert_int_equal(tokens, 1177960);
    assert_true(h == 0x1ff89d688d1d9e21ull);
    print_message("[ PERF     ] Llama-3 encode of GSM8K train: %.3f s CPU, %.1f MB/s, %lld tokens\n", cpu_s,
                  (double)F.n_bytes / 1e6 / cpu_s, (long long)tokens);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_and_special_ids),
        cmocka_unit_test(test_qwen_known_ids),
        cmocka_unit_test(test_cli_text_after_double_dash),
        cmocka_unit_test(test_cli_chat_conversation),
        cmocka_unit_test(test_gpt2_known_ids),
        cmocka_unit_test(test_llama3_known_ids),
        cmocka_unit_test(test_vocabulary_lookups),
        cmocka_unit_test(test_roundtrip_unicode_and_code),
        cmocka_unit_test(test_nfc_normalisation),
        cmocka_unit_test(test_decode_special_and_lossy),
        cmocka_unit_test(test_invalid_utf8_input),
        cmocka_unit_test(test_long_pretokens),
        cmocka_unit_test(test_chat_template_qwen),
        cmocka_unit_test(test_chat_template_families),
        cmocka_unit_test(test_tiny_merges_and_added_tokens),
        cmocka_unit_test(test_tiny_split_behaviors),
        cmocka_unit_test(test_malformed_files),
        cmocka_unit_test(test_save_reload_gpt2),
        cmocka_unit_test(test_chat_template_file),
        cmocka_unit_test(test_config_cleanup_and_overrides),
        cmocka_unit_test(test_normalized_added_token),
        cmocka_unit_test(test_bpe_trainer),
        cmocka_unit_test(test_bpe_trainer_options_and_errors),
        cmocka_unit_test(test_concurrent_encode),
        cmocka_unit_test(test_gsm8k_throughput_and_roundtrip),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
