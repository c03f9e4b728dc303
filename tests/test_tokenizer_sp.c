/*
 * SentencePiece-style BPE tokenizers (Llama 2 / Mistral layouts: byte_fallback, "▁" for
 * spaces) against Hugging Face tokenizers: tests/golden/sp_tokenizers.json holds the ids and
 * decodings of tests/golden/gen_sp_tokenizers.mjs for the four variants of
 * tests/fixtures/sp_tokenizers (README there). Also: token bytes, save / reload, the
 * LlamaTokenizer class's add_bos_token / add_eos_token, malformed components.
 */
/* rounding-free (scripts/test-variants.sh skips it): parsing, text and integers only */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distflow/tokenizer.h"
#include "util/fsutil.h"
#include "util/hash.h"

#define FIXTURES DF_SOURCE_DIR "/tests/fixtures/sp_tokenizers"
#define GOLDEN DF_SOURCE_DIR "/tests/golden/sp_tokenizers.json"

static const char *const variants[] = {"llama2_legacy", "metaspace_first", "metaspace_split", "unk_fused"};

static df_tokenizer *load_variant(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", FIXTURES, name);
    df_tokenizer *t = NULL;
    if (df_tokenizer_load(path, &t))
        fail_msg("load %s: %s", path, df_last_error());
    return t;
}

/* Line `line` (0-based) of a ../shared/data file, parsed; each file is read once (kept, reachable,
 * until the test exits). */
static json_t *data_row(const char *source, int64_t line)
{
    static struct {
        char name[64];
        char *text;
    } files[4];
    int k = 0;
    while (k < 4 && files[k].text && strcmp(files[k].name, source) != 0)
        k++;
    assert_true(k < 4);
    char path[512];
    snprintf(path, sizeof path, "%s/data/%s", DF_SHARED_DIR, source);
    if (!files[k].text) {
        if (df_read_file(path, &files[k].text, NULL))
            fail_msg("cannot read %s", path);
        snprintf(files[k].name, sizeof files[k].name, "%s", source);
    }
    const char *p = files[k].text;
    for (int64_t i = 0; p && i < line; i++)
        if ((p = strchr(p, '\n')))
            p++;
    json_t *row = p ? json_loadb(p, strcspn(p, "\n"), 0, NULL) : NULL;
    if (!row)
        fail_msg("%s: no line %lld", path, (long long)line);
    return row;
}

static void expect_ids(const df_tokenizer *t, const char *what, const char *text, bool special, json_t *want)
{
    int32_t *ids;
    int64_t n;
    if (df_tokenizer_encode(t, text, special, &ids, &n))
        fail_msg("%s: encode: %s", what, df_last_error());
    bool same = n == (int64_t)json_array_size(want);
    for (int64_t i = 0; same && i < n; i++)
        same = ids[i] == json_integer_value(json_array_get(want, (size_t)i));
    if (!same) {
        print_error("%s (special %d): got", what, special);
        for (int64_t i = 0; i < n; i++)
            print_error(" %d", ids[i]);
        print_error("\n");
        fail_msg("%s: ids differ from HF (%lld ids, want %zu)", what, (long long)n, json_array_size(want));
    }
    free(ids);
}

/* Ids of a JSON array, malloc'd. */
static int32_t *id_array(json_t *a, int64_t *n)
{
    *n = (int64_t)json_array_size(a);
    int32_t *v = malloc((size_t)(*n + 1) * sizeof *v);
    assert_non_null(v);
    for (int64_t i = 0; i < *n; i++)
        v[i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
    return v;
}

/* The golden text with U+0000 as U+FFFD, as df_tokenizer_decode documents. */
static char *want_text(json_t *s)
{
    size_t n = json_string_length(s);
    const char *p = json_string_value(s);
    char *o = malloc(3 * n + 1), *w = o;
    assert_non_null(o);
    for (size_t i = 0; i < n; i++) {
        if (p[i]) {
            *w++ = p[i];
        } else {
            memcpy(w, "\xEF\xBF\xBD", 3);
            w += 3;
        }
    }
    *w = '\0';
    return o;
}

/* decode(ids, skip) equals the case's string `key`, or its FNV-1a hash and length (dataset
 * texts are not copied into the golden file). */
static void expect_decode(const df_tokenizer *t, const char *what, const int32_t *ids, int64_t n, bool skip,
                          json_t *c, const char *key)
{
    char *got;
    if (df_tokenizer_decode(t, ids, n, skip, &got))
        fail_msg("%s: decode: %s", what, df_last_error());
    json_t *s = json_object_get(c, key);
    if (s) {
        char *want = want_text(s);
        if (strcmp(got, want) != 0)
            fail_msg("%s: decode(skip %d) = \"%s\", HF \"%s\"", what, skip, got, want);
        free(want);
    } else {
        char hk[64], bk[64];
        snprintf(hk, sizeof hk, "%s_fnv1a64", key);
        snprintf(bk, sizeof bk, "%s_bytes", key);
        unsigned long long h = strtoull(json_string_value(json_object_get(c, hk)), NULL, 16);
        if ((int64_t)strlen(got) != json_integer_value(json_object_get(c, bk)) || df_fnv1a(got) != h)
            fail_msg("%s: decode(skip %d) = \"%s\" differs from HF's (%lld bytes)", what, skip, got,
                     (long long)json_integer_value(json_object_get(c, bk)));
    }
    free(got);
}

static void check_case(const df_tokenizer *t, json_t *c, const char *variant, int64_t k)
{
    char what[256];
    const char *name = json_string_value(json_object_get(c, "name"));
    const char *source = json_string_value(json_object_get(c, "source"));
    json_t *row = source ? data_row(source, json_integer_value(json_object_get(c, "line"))) : NULL;
    const char *text = row ? json_string_value(json_object_get(row, json_string_value(json_object_get(c, "field"))))
                           : json_string_value(json_object_get(c, "text"));
    snprintf(what, sizeof what, "%s case %lld (%s)", variant, (long long)k,
             name ? name : source ? source : "decode");
    if (text) {
        expect_ids(t, what, text, false, json_object_get(c, "ids"));
        expect_ids(t, what, text, true, json_object_get(c, "ids_special"));
    }
    int64_t n;
    int32_t *ids = id_array(json_object_get(c, text ? "ids_special" : "ids"), &n);
    expect_decode(t, what, ids, n, false, c, "decoded");
    expect_decode(t, what, ids, n, true, c, "decoded_skip");
    free(ids);
    json_decref(row);
}

static void test_hf_goldens(void **state)
{
    (void)state;
    json_error_t err;
    json_t *g = json_load_file(GOLDEN, JSON_ALLOW_NUL, &err);
    if (!g)
        fail_msg("%s:%d: %s", GOLDEN, err.line, err.text);
    int64_t seen[4][2] = {{0}};
    for (int v = 0; v < 4; v++) {
        df_tokenizer *t = load_variant(variants[v]);
        assert_int_equal(df_tokenizer_vocab_size(t), v == 1 ? 1360 : 1359);
        const char *lists[] = {"cases", "decode_cases"};
        for (int l = 0; l < 2; l++) {
            json_t *arr = json_object_get(g, lists[l]), *c;
            size_t i;
            json_array_foreach(arr, i, c) {
                if (strcmp(json_string_value(json_object_get(c, "tokenizer")), variants[v]) != 0)
                    continue;
                check_case(t, c, variants[v], (int64_t)i);
                seen[v][l]++;
            }
        }
        df_tokenizer_free(t);
    }
    for (int v = 0; v < 4; v++) /* the file holds every variant's cases */
        assert_true(seen[v][0] >= 70 && seen[v][1] >= 15);
    json_decref(g);
}

/* Raw bytes per token: "▁" is a space, "<0x0A>" the byte 10; decode strips the first space. */
static void test_token_bytes_and_lookups(void **state)
{
    (void)state;
    df_tokenizer *t = load_variant("llama2_legacy");
    const char *b;
    int64_t n;
    int32_t nl = df_tokenizer_token_to_id(t, "<0x0A>"), sp = df_tokenizer_token_to_id(t, "\xe2\x96\x81");
    assert_int_equal(nl, 3 + 10);
    assert_true(sp > 258);
    assert_int_equal(df_tokenizer_token_bytes(t, nl, &b, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(b[0], '\n');
    assert_int_equal(df_tokenizer_token_bytes(t, sp, &b, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(b[0], ' ');
    assert_int_equal(df_tokenizer_token_bytes(t, 1, &b, &n), 0); /* added token: its content */
    assert_int_equal(n, 3);
    assert_memory_equal(b, "<s>", 3);
    assert_string_equal(df_tokenizer_id_to_token(t, sp), "\xe2\x96\x81");
    assert_int_equal(df_tokenizer_bos_id(t), 1);
    assert_int_equal(df_tokenizer_eos_id(t), 2);
    assert_true(df_tokenizer_is_special(t, 0) && df_tokenizer_is_special(t, 2));
    const int32_t ids[] = {sp, nl, sp}; /* " \n " -> "\n " (one leading space stripped) */
    char *text;
    assert_int_equal(df_tokenizer_decode(t, ids, 3, false, &text), 0);
    assert_string_equal(text, "\n ");
    free(text);
    df_tokenizer_free(t);
}

static void expect_same_encoding(const df_tokenizer *a, const df_tokenizer *b, const char *text)
{
    int32_t *x, *y;
    int64_t nx, ny;
    assert_int_equal(df_tokenizer_encode(a, text, true, &x, &nx), 0);
    assert_int_equal(df_tokenizer_encode(b, text, true, &y, &ny), 0);
    assert_int_equal(nx, ny);
    assert_memory_equal(x, y, (size_t)nx * sizeof *x);
    free(x);
    free(y);
}

/* The saved tokenizer.json keeps byte_fallback / fuse_unk and the pipeline: same ids after reload. */
static void test_save_reload(void **state)
{
    const char *dir = *state;
    for (int v = 0; v < 4; v++) {
        char out[512];
        snprintf(out, sizeof out, "%s/%s", dir, variants[v]);
        df_tokenizer *t = load_variant(variants[v]), *r = NULL;
        assert_int_equal(df_tokenizer_save(t, out), 0);
        if (df_tokenizer_load(out, &r))
            fail_msg("reload %s: %s", out, df_last_error());
        expect_same_encoding(t, r, "  Naïve café: 你好 🚀\n\tx <s>y</s> ");
        expect_same_encoding(t, r, "A long line with many words, numbers 12345 and <|tool|> text.");
        df_tokenizer_free(t);
        df_tokenizer_free(r);
    }
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    assert_int_equal(df_write_file_atomic(p, text, strlen(text)), 0);
}

/* A copy of a fixture variant's tokenizer.json beside the given tokenizer_config.json. */
static char *variant_with_config(const char *dir, const char *variant, const char *name, const char *config)
{
    static char d[600];
    snprintf(d, sizeof d, "%s/%s", dir, name);
    assert_int_equal(mkdir(d, 0755), 0);
    char *src = NULL, p[600];
    snprintf(p, sizeof p, "%s/%s/tokenizer.json", FIXTURES, variant);
    assert_int_equal(df_read_file(p, &src, NULL), 0);
    write_text(d, "tokenizer.json", src);
    free(src);
    if (config)
        write_text(d, "tokenizer_config.json", config);
    return d;
}

static char *with_config(const char *dir, const char *name, const char *config)
{
    return variant_with_config(dir, "llama2_legacy", name, config);
}

static void expect_encoding(const char *dir, const int32_t *want, int64_t nw)
{
    df_tokenizer *t = NULL;
    if (df_tokenizer_load(dir, &t))
        fail_msg("load %s: %s", dir, df_last_error());
    int32_t *ids;
    int64_t n;
    assert_int_equal(df_tokenizer_encode(t, "", true, &ids, &n), 0);
    assert_int_equal(n, nw);
    assert_memory_equal(ids, want, (size_t)n * sizeof *ids);
    free(ids);
    df_tokenizer_free(t);
}

/* transformers' LlamaTokenizerFast rebuilds the template from add_bos_token / add_eos_token;
 * other classes keep the file's. The empty text shows exactly the added specials. */
static void test_llama_class_template(void **state)
{
    const char *dir = *state;
    const int32_t bos[] = {1}, bos_eos[] = {1, 2}, eos[] = {2};
    expect_encoding(with_config(dir, "default", "{\"tokenizer_class\": \"LlamaTokenizer\"}"), bos, 1);
    expect_encoding(with_config(dir, "eos", "{\"tokenizer_class\": \"LlamaTokenizerFast\", \"eos_token\": \"</s>\","
                                            "\"add_eos_token\": true}"), bos_eos, 2);
    expect_encoding(with_config(dir, "nobos", "{\"tokenizer_class\": \"LlamaTokenizer\", \"eos_token\": \"</s>\","
                                              "\"add_bos_token\": false, \"add_eos_token\": true}"), eos, 1);
    expect_encoding(with_config(dir, "other", "{\"tokenizer_class\": \"PreTrainedTokenizerFast\","
                                              "\"add_bos_token\": false, \"add_eos_token\": true}"), bos, 1);
    /* transformers writes model_max_length = int(1e30), beyond int64 */
    expect_encoding(with_config(dir, "bigint", "{\"tokenizer_class\": \"LlamaTokenizer\", \"add_bos_token\": true,"
                                               "\"model_max_length\": 1000000000000000019884624838656}"), bos, 1);
    char *d = with_config(dir, "nobostoken", "{\"tokenizer_class\": \"LlamaTokenizer\", \"bos_token\": null}");
    df_tokenizer *t = (df_tokenizer *)1;
    assert_int_equal(df_tokenizer_load(d, &t), DF_EINVAL);
    assert_null(t);
    assert_non_null(strstr(df_last_error(), "add_bos_token is true but there is no bos_token"));
    assert_non_null(strstr(df_last_error(), "nobostoken/tokenizer_config.json"));
    /* add_prefix_space makes LlamaTokenizerFast rebuild the pipeline from tokenizer.model: accepted
       when tokenizer.json already has LlamaConverter's pipeline for it, refused otherwise */
    expect_encoding(with_config(dir, "aps_legacy", "{\"tokenizer_class\": \"LlamaTokenizer\", "
                                                   "\"add_prefix_space\": true, \"legacy\": null}"), bos, 1);
    expect_encoding(variant_with_config(dir, "metaspace_first", "aps_first", "{\"tokenizer_class\": "
                                        "\"LlamaTokenizerFast\", \"add_prefix_space\": true, \"legacy\": false}"),
                    bos, 1);
    const char *refused[][2] = {{"aps_off", "{\"tokenizer_class\": \"LlamaTokenizer\", \"add_prefix_space\": false}"},
                                {"aps_nonlegacy", "{\"tokenizer_class\": \"LlamaTokenizer\", \"add_prefix_space\": true, "
                                                  "\"legacy\": false}"}};
    for (int k = 0; k < 2; k++) {
        d = with_config(dir, refused[k][0], refused[k][1]);
        t = (df_tokenizer *)1;
        assert_int_equal(df_tokenizer_load(d, &t), DF_EUNSUPPORTED);
        assert_null(t);
        assert_non_null(strstr(df_last_error(), "rebuilds the tokenizer from tokenizer.model"));
        assert_non_null(strstr(df_last_error(), refused[k][0]));
    }
}

/* A component of a Llama-2 file replaced by a malformed or unsupported one. */
static void expect_refused(const char *dir, const char *name, const char *key, const char *value, int code,
                           const char *needle)
{
    char d[600];
    snprintf(d, sizeof d, "%s/%s", dir, name);
    assert_int_equal(mkdir(d, 0755), 0);
    json_t *root = json_load_file(FIXTURES "/llama2_legacy/tokenizer.json", 0, NULL);
    assert_non_null(root);
    json_t *v = json_loads(value, JSON_DECODE_ANY, NULL);
    assert_non_null(v);
    if (strcmp(key, "model.byte_fallback") == 0)
        json_object_set_new(json_object_get(root, "model"), "byte_fallback", v);
    else
        json_object_set_new(root, key, v);
    char p[700];
    snprintf(p, sizeof p, "%s/tokenizer.json", d);
    assert_int_equal(json_dump_file(root, p, 0), 0);
    json_decref(root);
    df_tokenizer *t = (df_tokenizer *)1;
    int rc = df_tokenizer_load(d, &t);
    if (rc != code || !strstr(df_last_error(), needle) || !strstr(df_last_error(), p))
        fail_msg("%s: rc %d (want %d): \"%s\" should name %s and say \"%s\"", name, rc, code, df_last_error(), p,
                 needle);
    assert_null(t);
}

static void test_malformed_components(void **state)
{
    const char *dir = *state;
    expect_refused(dir, "prepend", "normalizer", "{\"type\": \"Prepend\"}", DF_EINVAL,
                   "normalizer Prepend needs a string \"prepend\"");
    expect_refused(dir, "replace", "normalizer", "{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}}", DF_EINVAL,
                   "normalizer Replace needs a string \"content\"");
    expect_refused(dir, "precompiled", "normalizer", "{\"type\": \"Precompiled\", \"precompiled_charsmap\": \"\"}",
                   DF_EUNSUPPORTED, "normalizer type \"Precompiled\"");
    expect_refused(dir, "scheme", "pre_tokenizer",
                   "{\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", \"prepend_scheme\": \"sometimes\"}",
                   DF_EINVAL, "prepend_scheme must be");
    expect_refused(dir, "twochars", "pre_tokenizer", "{\"type\": \"Metaspace\", \"replacement\": \"__\"}", DF_EINVAL,
                   "\"replacement\" must be one character");
    expect_refused(dir, "strip", "decoder", "{\"type\": \"Strip\", \"content\": \" \", \"start\": -1, \"stop\": 0}",
                   DF_EINVAL, "decoder Strip needs");
    expect_refused(dir, "regexdec", "decoder",
                   "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"a+\"}, \"content\": \" \"}", DF_EUNSUPPORTED,
                   "decoder Replace with a Regex pattern");
    expect_refused(dir, "wordpiece", "decoder", "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Fuse\"}, "
                   "{\"type\": \"WordPiece\"}]}", DF_EUNSUPPORTED, "decoder \"WordPiece\"");
    expect_refused(dir, "bytelevel", "pre_tokenizer", "{\"type\": \"ByteLevel\"}", DF_EUNSUPPORTED,
                   "byte_fallback with a ByteLevel pre_tokenizer");
    /* \C matches one byte of a UTF-8 char: a piece could end inside one (found by fuzzing) */
    expect_refused(dir, "backslash_c", "pre_tokenizer", "{\"type\": \"Split\", \"pattern\": {\"Regex\": "
                   "\"a+\\\\C\"}, \"behavior\": \"Isolated\"}", DF_EINVAL, "bad regex");
    /* Replace decoders that make one token's bytes longer than INT32_MAX (46341^2 for "ab"): its
       int32 length came out negative (found by reading the code). One small token, so that without
       the check the load costs 2 GB, not one such string per token of a real vocabulary. */
    char d[600];
    snprintf(d, sizeof d, "%s/huge_piece", dir);
    assert_int_equal(mkdir(d, 0755), 0);
    size_t cap = 2 * 46341 + 400;
    char *big = malloc(46342), *text = malloc(cap);
    assert_non_null(big);
    assert_non_null(text);
    memset(big, 'c', 46341);
    big[46341] = '\0';
    snprintf(text, cap, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, "
             "\"merges\": [\"a b\"]}, \"decoder\": {\"type\": \"Sequence\", \"decoders\": ["
             "{\"type\": \"Replace\", \"pattern\": {\"String\": \"ab\"}, \"content\": \"%s\"}, "
             "{\"type\": \"Replace\", \"pattern\": {\"String\": \"c\"}, \"content\": \"%s\"}]}}", big, big);
    write_text(d, "tokenizer.json", text);
    free(big);
    free(text);
    df_tokenizer *t = (df_tokenizer *)1;
    assert_int_equal(df_tokenizer_load(d, &t), DF_EINVAL);
    assert_null(t);
    assert_non_null(strstr(df_last_error(), "decoder makes token 2 (\"ab\") longer than 2147483647 bytes"));
    /* a directory with only SentencePiece's tokenizer.model says how to convert it */
    snprintf(d, sizeof d, "%s/spm_only", dir);
    assert_int_equal(mkdir(d, 0755), 0);
    write_text(d, "tokenizer.model", "\n\x0f<unk>");
    assert_int_equal(df_tokenizer_load(d, &t), DF_ENOTFOUND);
    assert_non_null(strstr(df_last_error(), "tokenizer.model is not read"));
}

/* A char-level model whose unknown chars have no byte tokens: <unk>, fused when fuse_unk, and
 * a pending <unk> written after byte-fallback ids that follow it (tokenizers merge_word). */
static void test_unk_and_partial_byte_fallback(void **state)
{
    const char *dir = *state;
    char d[600];
    snprintf(d, sizeof d, "%s/partial", dir);
    assert_int_equal(mkdir(d, 0755), 0);
    for (int fuse = 0; fuse < 2; fuse++) {
        char text[600];
        snprintf(text, sizeof text,
                 "{\"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"fuse_unk\": %s, \"unk_token\": \"<unk>\","
                 "\"vocab\": {\"<unk>\": 0, \"a\": 1, \"b\": 2, \"ab\": 3, \"<0xC3>\": 4, \"<0xA9>\": 5},"
                 "\"merges\": [\"a b\"]}, \"decoder\": {\"type\": \"Sequence\", \"decoders\": "
                 "[{\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}]}}",
                 fuse ? "true" : "false");
        write_text(d, "tokenizer.json", text);
        df_tokenizer *t = NULL;
        if (df_tokenizer_load(d, &t))
            fail_msg("%s", df_last_error());
        int32_t *ids;
        int64_t n;
        /* x y: unknown, no bytes; é: bytes C3 A9; then "ab" */
        assert_int_equal(df_tokenizer_encode(t, "xy\xc3\xa9" "ab", false, &ids, &n), 0);
        const int32_t fused[] = {4, 5, 0, 3}, unfused[] = {0, 4, 5, 0, 3};
        assert_int_equal(n, fuse ? 4 : 5);
        assert_memory_equal(ids, fuse ? fused : unfused, (size_t)n * sizeof *ids);
        free(ids);
        df_tokenizer_free(t);
    }
}

/* Regexes that match the empty string (lookaheads, "$", "b*"): tokenizers' find_matches (onig's
 * find_iter) gives empty matches too, except right where the previous match ended; a Split cuts
 * there and a Replace inserts its content. The ids are HF tokenizers 0.23.2's for this char-level
 * vocabulary (a b c X ab bc abc; merges a b, ab c, b c) on "abcabc", "b", "bb", "abc", "". */
static void test_empty_regex_matches(void **state)
{
    const char *dir = *state;
    static const char *texts[5] = {"abcabc", "b", "bb", "abc", ""};
    static const struct {
        const char *kind, *arg; /* Split: behavior (suffix "!" = invert); Replace: the regex */
        int32_t ids[5][9];
        int n[5];
    } cases[] = {
        {"Split", "Isolated", {{0, 1, 2, 0, 1, 2}, {1}, {1, 1}, {0, 1, 2}}, {6, 1, 2, 3, 0}},
        {"Split", "Isolated!", {{0, 1, 2, 0, 1, 2}, {1}, {1, 1}, {0, 1, 2}}, {6, 1, 2, 3, 0}},
        {"Split", "Removed", {{0, 1, 0, 1}, {1}, {1, 1}, {0, 1}}, {4, 1, 2, 2, 0}},
        {"Split", "Removed!", {{2, 2}, {0}, {0}, {2}}, {2, 0, 0, 1, 0}},
        {"Split", "MergedWithPrevious", {{0, 5, 0, 5}, {1}, {1, 1}, {0, 5}}, {4, 1, 2, 2, 0}},
        {"Split", "MergedWithPrevious!", {{0, 1, 2, 0, 1, 2}, {1}, {1, 1}, {0, 1, 2}}, {6, 1, 2, 3, 0}},
        {"Split", "MergedWithNext", {{0, 1, 2, 0, 1, 2}, {1}, {1, 1}, {0, 1, 2}}, {6, 1, 2, 3, 0}},
        {"Split", "MergedWithNext!", {{0, 5, 0, 5}, {1}, {1, 1}, {0, 5}}, {4, 1, 2, 2, 0}},
        {"Split", "Contiguous", {{0, 1, 2, 0, 1, 2}, {1}, {1, 1}, {0, 1, 2}}, {6, 1, 2, 3, 0}},
        {"Replace", "(?=b)", {{0, 3, 5, 0, 3, 5}, {3, 1}, {3, 1, 3, 1}, {0, 3, 5}}, {6, 2, 4, 3, 0}},
        {"Replace", "$", {{6, 6, 3}, {1, 3}, {1, 1, 3}, {6, 3}}, {3, 2, 3, 2, 0}},
        {"Replace", "^", {{3, 6, 6}, {3, 1}, {3, 1, 1}, {3, 6}}, {3, 2, 3, 2, 0}},
        {"Replace", "b*", {{3, 0, 3, 2, 3, 0, 3, 2, 3}, {3}, {3}, {3, 0, 3, 2, 3}}, {9, 1, 1, 5, 0}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char d[600], comp[256], text[1024];
        snprintf(d, sizeof d, "%s/empty%zu", dir, k);
        assert_int_equal(mkdir(d, 0755), 0);
        bool split = !strcmp(cases[k].kind, "Split"), invert = strchr(cases[k].arg, '!') != NULL;
        if (split)
            snprintf(comp, sizeof comp, "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": "
                     "\"(?=b)|c\"}, \"behavior\": \"%.*s\", \"invert\": %s}", (int)strcspn(cases[k].arg, "!"),
                     cases[k].arg, invert ? "true" : "false");
        else
            snprintf(comp, sizeof comp, "\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"Regex\": \"%s\"}, "
                     "\"content\": \"X\"}", cases[k].arg);
        snprintf(text, sizeof text,
                 "{%s, \"decoder\": {\"type\": \"Fuse\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, "
                 "\"b\": 1, \"c\": 2, \"X\": 3, \"ab\": 4, \"bc\": 5, \"abc\": 6}, \"merges\": [\"a b\", \"ab c\", "
                 "\"b c\"]}}", comp);
        write_text(d, "tokenizer.json", text);
        df_tokenizer *t = NULL;
        if (df_tokenizer_load(d, &t))
            fail_msg("%s %s: %s", cases[k].kind, cases[k].arg, df_last_error());
        for (int i = 0; i < 5; i++) {
            int32_t *ids;
            int64_t n;
            assert_int_equal(df_tokenizer_encode(t, texts[i], false, &ids, &n), 0);
            bool same = n == cases[k].n[i] && !memcmp(ids, cases[k].ids[i], (size_t)n * sizeof *ids);
            if (!same) {
                print_error("%s %s on \"%s\": got", cases[k].kind, cases[k].arg, texts[i]);
                for (int64_t j = 0; j < n; j++)
                    print_error(" %d", ids[j]);
                fail_msg("ids differ from HF's");
            }
            free(ids);
        }
        df_tokenizer_free(t);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hf_goldens),
        cmocka_unit_test(test_token_bytes_and_lookups),
        cmocka_unit_test_setup_teardown(test_save_reload, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_llama_class_template, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_malformed_components, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_unk_and_partial_byte_fallback, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_empty_regex_matches, df_test_mkdtemp, df_test_rmtree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
