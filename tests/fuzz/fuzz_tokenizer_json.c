/*
 * Fuzz target: a Hugging Face tokenizer.json (and optionally its
 * tokenizer_config.json) through df_tokenizer_load (src/tokenizer/tok_open.c,
 * tok_load.c, tok_config.c), then encoding and decoding with what it built.
 *
 * Input: the tokenizer.json text; when it contains a line
 * "//tokenizer_config.json", the bytes after that line are written as
 * tokenizer_config.json beside it. Properties of an accepted tokenizer: every
 * id that encoding produces names a token below the vocabulary size, and
 * decoding them succeeds.
 */
#include "fuzz.h"

#include "distflow/tokenizer.h"

int df_fuzz_status;

#define CONFIG_MARK "\n//tokenizer_config.json\n"

static const char k_sample[] = "Hello, world! 12 + 30 = 42\n<|im_end|><|endoftext|>  na\xc3\xafve "
                               "\xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82\ttabs\r\n";

static void check_ids(const df_tokenizer *t, const int32_t *ids, int64_t n)
{
    int64_t vocab = df_tokenizer_vocab_size(t);
    for (int64_t i = 0; i < n; i++) {
        const char *bytes;
        int64_t len;
        DF_FUZZ_CHECK(ids[i] >= 0 && ids[i] < vocab);
        DF_FUZZ_CHECK(df_tokenizer_token_bytes(t, ids[i], &bytes, &len) == DF_OK && len >= 0);
    }
    char *text = NULL;
    DF_FUZZ_CHECK(df_tokenizer_decode(t, ids, n, false, &text) == DF_OK && text);
    free(text);
    DF_FUZZ_CHECK(df_tokenizer_decode(t, ids, n, true, &text) == DF_OK && text);
    free(text);
}

/* Encode `len` bytes; invalid UTF-8 is the only refusal expected, besides a file's regex that hits
 * PCRE2's match limit on the text (DF_EINTERNAL, as include/distflow/tokenizer.h documents). */
static void encode(const df_tokenizer *t, const char *s, int64_t len, bool special)
{
    int32_t *ids = NULL;
    int64_t n = 0;
    char *copy = malloc(len ? (size_t)len : 1); /* exactly len bytes, no NUL: ASan sees a read past it */
    DF_FUZZ_CHECK(copy);
    memcpy(copy, s, (size_t)len);
    int rc = df_tokenizer_encode_n(t, copy, len, special, &ids, &n);
    free(copy);
    if (rc == DF_OK)
        check_ids(t, ids, n);
    else if (rc != DF_EINVAL)
        fprintf(stderr, "encode: %s\n", df_last_error());
    DF_FUZZ_CHECK(rc == DF_OK || rc == DF_EINVAL ||
                  (rc == DF_EINTERNAL && strstr(df_last_error(), "PCRE2 match failed")));
    free(ids);
}

static void exercise(df_tokenizer *t, const uint8_t *data, size_t size)
{
    DF_FUZZ_CHECK(df_tokenizer_vocab_size(t) >= 0);
    encode(t, k_sample, (int64_t)sizeof k_sample - 1, false);
    encode(t, k_sample, (int64_t)sizeof k_sample - 1, true);
    encode(t, (const char *)data, (int64_t)(size < 256 ? size : 256), false);
    {   /* any template: rendered, or refused with a message (no template, syntax, runtime error) */
        df_chat_message m[2] = {{"user", "What is 6 * 7?"}, {"assistant", " 42 "}};
        char *text = NULL;
        int rc = df_tokenizer_apply_chat_template(t, m, 2, true, &text);
        DF_FUZZ_CHECK(rc == DF_OK ? text != NULL : (rc == DF_EINVAL && text == NULL && *df_last_error()));
        DF_FUZZ_CHECK(rc == DF_OK || df_tokenizer_chat_template(t) == NULL || *df_last_error());
        free(text);
    }
    (void)df_tokenizer_token_to_id(t, "<|im_end|>");
    (void)df_tokenizer_id_to_token(t, 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    df_clear_error(); /* a message left by the previous input must not count for this one */
    const uint8_t *cfg = memmem(data, size, CONFIG_MARK, sizeof CONFIG_MARK - 1);
    size_t json_len = cfg ? (size_t)(cfg - data) : size;
    df_fuzz_file("tokenizer.json", data, json_len);
    if (cfg) {
        cfg += sizeof CONFIG_MARK - 1;
        df_fuzz_file("tokenizer_config.json", cfg, size - (size_t)(cfg - data));
    } else {
        df_fuzz_unlink("tokenizer_config.json");
    }
    df_tokenizer *t = NULL;
    df_fuzz_status = df_tokenizer_load(df_fuzz_dir(), &t);
    if (df_fuzz_status == DF_OK) {
        exercise(t, data, size);
        df_tokenizer_free(t);
    } else {
        DF_FUZZ_CHECK(t == NULL && df_last_error()[0] != '\0');
    }
    return 0;
}
