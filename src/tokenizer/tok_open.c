/*
 * Opening tokenizer files: df_tokenizer_load() finds tokenizer.json or GPT-2's
 * slow layout (vocab.json + merges.txt) and reads tokenizer_config.json beside it.
 */
#include "tokenizer/tok_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int read_file(const char *path, char **out, int64_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return df_error(errno == ENOENT ? DF_ENOTFOUND : DF_EIO, "%s: cannot open: %s", path, strerror(errno));
    char *buf = NULL;
    int64_t len = 0, cap = 0;
    for (;;) {
        if (len + 65536 + 1 > cap) {
            cap = (len + 65536 + 1) * 2;
            char *nb = realloc(buf, (size_t)cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return df_error(DF_ENOMEM, "%s: out of memory reading the file", path);
            }
            buf = nb;
        }
        size_t got = fread(buf + len, 1, 65536, f);
        len += (int64_t)got;
        if (got < 65536)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return df_error(DF_EIO, "%s: read error", path);
    }
    buf[len] = '\0';
    *out = buf;
    *n = len;
    return 0;
}

/* A whole-number real within +-2^53 as a new integer; NULL for anything else. */
static json_t *as_int(json_t *v)
{
    double d = json_is_real(v) ? json_real_value(v) : 0.5;
    return fabs(d) <= 9007199254740992.0 && d == floor(d) ? json_integer((json_int_t)d) : NULL;
}

/* Undo JSON_DECODE_INT_AS_REAL where it was not needed: transformers writes model_max_length
 * = int(1e30), beyond what jansson reads as an integer; the other integers keep their type. */
static void ints_back(json_t *j)
{
    const char *key;
    json_t *v, *k;
    size_t i;
    if (json_is_object(j)) {
        json_object_foreach(j, key, v) {
            if ((k = as_int(v)))
                json_object_set_new(j, key, k);
            else
                ints_back(v);
        }
    } else if (json_is_array(j)) {
        json_array_foreach(j, i, v) {
            if ((k = as_int(v)))
                json_array_set_new(j, i, k);
            else
                ints_back(v);
        }
    }
}

json_t *tok_load_json(const char *path, int *rc)
{
    char *text;
    int64_t len;
    if ((*rc = read_file(path, &text, &len)))
        return NULL;
    json_error_t err;
    json_t *root = json_loadb(text, (size_t)len, 0, &err); /* much faster than json_loadf's getc */
    if (!root && json_error_code(&err) == json_error_numeric_overflow) { /* "model_max_length": 1e30 as an int */
        root = json_loadb(text, (size_t)len, JSON_DECODE_INT_AS_REAL, &err);
        ints_back(root);
    }
    free(text);
    if (!root) {
        *rc = df_error(DF_EINVAL, "%s:%d:%d: invalid JSON: %s", path, err.line, err.column, err.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        *rc = df_error(DF_EINVAL, "%s: top level must be a JSON object", path);
        return NULL;
    }
    return root;
}

/* ---- tokenizer.json, and GPT-2 slow layout: vocab.json + merges.txt -------------- */

static int load_tokenizer_json(df_tokenizer *t, const char *path)
{
    int rc;
    json_t *root = tok_load_json(path, &rc);
    if (!root)
        return rc;
    rc = tok_parse_pipeline(t, root, path);
    json_decref(root);
    return rc;
}

static int load_gpt2_layout(df_tokenizer *t, const char *vocab_path, const char *merges_path)
{
    int rc;
    json_t *vocab = tok_load_json(vocab_path, &rc), *model = NULL, *root = NULL, *merges = NULL;
    char *text = NULL;
    int64_t len = 0;
    if (!vocab)
        return rc;
    if ((rc = read_file(merges_path, &text, &len)))
        goto done;
    merges = json_array();
    int64_t line = 0;
    for (char *p = text, *end; p < text + len; p = end + 1) {
        line++;
        end = strchr(p, '\n');
        if (!end)
            end = text + len;
        *end = '\0';
        if (end > p && end[-1] == '\r')
            end[-1] = '\0';
        if (!*p || (line == 1 && strncmp(p, "#version", 8) == 0))
            continue;
        char *sp = strchr(p, ' ');
        if (!sp || sp == p || !sp[1] || strchr(sp + 1, ' ')) {
            rc = df_error(DF_EINVAL, "%s:%lld: expected two tokens separated by one space, got \"%s\"",
                          merges_path, (long long)line, p);
            goto done;
        }
        json_array_append_new(merges, json_string(p));
    }
    /* The same pipeline as transformers' GPT-2 converter, so save() writes a tokenizer.json. */
    model = json_pack("{s:s, s:O, s:O, s:b}", "type", "BPE", "vocab", vocab, "merges", merges,
                      "ignore_merges", 0);
    if (model)
        root = json_pack("{s:O, s:{s:s, s:b, s:b, s:b}, s:{s:s, s:b, s:b, s:b}, s:{s:s, s:b, s:b, s:b}, s:n}",
                     "model", model, "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0,
                     "trim_offsets", 1, "use_regex", 1, "post_processor", "type", "ByteLevel",
                     "add_prefix_space", 1, "trim_offsets", 0, "use_regex", 1, "decoder", "type",
                     "ByteLevel", "add_prefix_space", 1, "trim_offsets", 1, "use_regex", 1, "normalizer");
    if (!model || !root) {
        rc = df_error(DF_ENOMEM, "tokenizer: out of memory");
        goto done;
    }
    rc = tok_parse_pipeline(t, root, vocab_path);
    int32_t eot = tok_strmap_get(&t->vocab, "<|endoftext|>", 13);
    if (!rc && eot >= 0) {
        tok_added a = {.id = eot, .content = "<|endoftext|>", .special = true};
        rc = tok_add_token(t, &a, vocab_path);
        if (!rc)
            rc = tok_refresh_added(t);
    }
done:
    json_decref(model);
    json_decref(root);
    json_decref(vocab);
    json_decref(merges);
    free(text);
    return rc;
}

/* ---- entry point ------------------------------------------------------------------ */

static bool is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

int df_tokenizer_load(const char *path, df_tokenizer **out)
{
    *out = NULL;
    struct stat st;
    if (!path || stat(path, &st) != 0)
        return df_error(DF_ENOTFOUND, "tokenizer: %s: %s", path ? path : "(null)",
                        path ? strerror(errno) : "no path");
    size_t n = strlen(path) + 32;
    char *dir = malloc(n), *f1 = malloc(n), *f2 = malloc(n);
    df_tokenizer *t = tok_new();
    int rc = 0;
    bool gpt2 = false;
    if (!dir || !f1 || !f2 || !t) {
        rc = df_error(DF_ENOMEM, "tokenizer: out of memory");
        goto done;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(dir, n, "%s", path);
        snprintf(f1, n, "%s/tokenizer.json", path);
        if (!is_file(f1)) {
            snprintf(f1, n, "%s/vocab.json", path);
            snprintf(f2, n, "%s/merges.txt", path);
            if (!is_file(f1) || !is_file(f2)) {
                snprintf(f2, n, "%s/tokenizer.model", path);
                rc = df_error(DF_ENOTFOUND, "tokenizer: %s has no tokenizer.json and no vocab.json + merges.txt%s",
                              path, is_file(f2) ? " (its SentencePiece tokenizer.model is not read: write a "
                              "tokenizer.json with transformers' AutoTokenizer(...).save_pretrained)" : "");
                goto done;
            }
            gpt2 = true;
        }
    } else {
        snprintf(f1, n, "%s", path);
        snprintf(dir, n, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(dir, n, ".");
    }
    rc = gpt2 ? load_gpt2_layout(t, f1, f2) : load_tokenizer_json(t, f1);
    if (!rc)
        rc = tok_load_config(t, dir, gpt2);
done:
    free(dir);
    free(f1);
    free(f2);
    if (rc) {
        df_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return 0;
}
