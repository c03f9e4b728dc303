/*
 * Saving: tokenizer.json in the HF tokenizers serialisation and a
 * tokenizer_config.json for transformers, each written atomically.
 */
#include "tokenizer/tok_internal.h"
#include "util/fsutil.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


/* One vocabulary-form string per model id (the first key seen for the id). */
static const char **model_strings(const df_tokenizer *t)
{
    const char **s = calloc((size_t)t->n_ids + 1, sizeof *s);
    if (!s)
        return NULL;
    for (int64_t i = 0; i < t->vocab.cap; i++) {
        const char *k = t->vocab.keys[i];
        int32_t id = k ? t->vocab.vals[i] : -1;
        if (id >= 0 && (!s[id] || strcmp(k, s[id]) < 0))
            s[id] = k;
    }
    return s;
}

static json_t *added_entry(const tok_added *a, bool with_id)
{
    json_t *o = json_object();
    if (with_id)
        json_object_set_new(o, "id", json_integer(a->id));
    json_object_set_new(o, "content", json_string(a->content));
    json_object_set_new(o, "single_word", json_boolean(a->single_word));
    json_object_set_new(o, "lstrip", json_boolean(a->lstrip));
    json_object_set_new(o, "rstrip", json_boolean(a->rstrip));
    json_object_set_new(o, "normalized", json_boolean(a->normalized));
    json_object_set_new(o, "special", json_boolean(a->special));
    return o;
}

static int cmp_added(const void *x, const void *y)
{
    const tok_added *a = *(const tok_added *const *)x, *b = *(const tok_added *const *)y;
    return (a->id > b->id) - (a->id < b->id);
}

static const tok_added **sorted_added(const df_tokenizer *t)
{
    const tok_added **v = malloc((size_t)(t->n_added + 1) * sizeof *v);
    if (!v)
        return NULL;
    for (int i = 0; i < t->n_added; i++)
        v[i] = &t->added[i];
    qsort(v, (size_t)t->n_added, sizeof *v, cmp_added);
    return v;
}

static json_t *model_json(const df_tokenizer *t, const char **str)
{
    json_t *vocab = json_object(), *merges = json_array();
    for (int64_t id = 0; id < t->n_ids; id++)
        if (str[id])
            json_object_set_new(vocab, str[id], json_integer(id));
    for (int64_t i = 0; i < t->vocab.cap; i++) /* extra strings sharing an id */
        if (t->vocab.keys[i] && str[t->vocab.vals[i]] != t->vocab.keys[i])
            json_object_set_new(vocab, t->vocab.keys[i], json_integer(t->vocab.vals[i]));
    bool pairs = false; /* "a b" strings unless a token holds a space */
    for (int64_t r = 0; r < t->n_merges && !pairs; r++)
        pairs = strchr(str[t->merges[2 * r]], ' ') || strchr(str[t->merges[2 * r + 1]], ' ');
    for (int64_t r = 0; r < t->n_merges; r++) {
        const char *a = str[t->merges[2 * r]], *b = str[t->merges[2 * r + 1]];
        if (pairs) {
            json_array_append_new(merges, json_pack("[s, s]", a, b));
        } else {
            size_t la = strlen(a), lb = strlen(b);
            char *s = malloc(la + lb + 2);
            if (!s)
                continue;
            memcpy(s, a, la);
            s[la] = ' ';
            memcpy(s + la + 1, b, lb + 1);
            json_array_append_new(merges, json_string(s));
            free(s);
        }
    }
    const char *unk = t->unk_id >= 0 ? str[t->unk_id] : NULL;
    return json_pack("{s:s, s:n, s:o, s:n, s:n, s:b, s:b, s:b, s:o, s:o}", "type", "BPE", "dropout",
                     "unk_token", unk ? json_string(unk) : json_null(), "continuing_subword_prefix",
                     "end_of_word_suffix", "fuse_unk", (int)t->fuse_unk, "byte_fallback", (int)t->byte_fallback, "ignore_merges",
                     (int)t->ignore_merges, "vocab", vocab, "merges", merges);
}

static json_t *tokenizer_json(const df_tokenizer *t)
{
    const char **str = model_strings(t);
    const tok_added **added = sorted_added(t);
    json_t *root = NULL;
    if (str && added) {
        json_t *arr = json_array();
        for (int i = 0; i < t->n_added; i++)
            json_array_append_new(arr, added_entry(added[i], true));
        root = json_pack("{s:s, s:n, s:n, s:o, s:O, s:O, s:O, s:O, s:o}", "version", "1.0", "truncation",
                         "padding", "added_tokens", arr, "normalizer", t->j_normalizer, "pre_tokenizer",
                         t->j_pre_tokenizer, "post_processor", t->j_post_processor, "decoder", t->j_decoder,
                         "model", model_json(t, str));
    }
    free(str);
    free(added);
    return root;
}

static json_t *token_or_null(const df_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_ids && t->tok_str[id] ? json_string(t->tok_str[id]) : json_null();
}

/* The loaded tokenizer_config.json (or a fresh one) with the fields this library owns updated. */
static json_t *config_json(const df_tokenizer *t)
{
    json_t *cfg = t->j_config ? json_deep_copy(t->j_config) : json_object();
    const tok_added **added = sorted_added(t);
    if (!cfg || !added) {
        json_decref(cfg);
        free(added);
        return NULL;
    }
    json_t *dec = json_object();
    for (int i = 0; i < t->n_added; i++) {
        char key[16];
        snprintf(key, sizeof key, "%d", added[i]->id);
        json_object_set_new(dec, key, added_entry(added[i], false));
    }
    free(added);
    json_object_set_new(cfg, "added_tokens_decoder", dec);
    json_object_set_new(cfg, "bos_token", token_or_null(t, t->bos_id));
    json_object_set_new(cfg, "eos_token", token_or_null(t, df_tokenizer_eos_id(t)));
    json_object_set_new(cfg, "pad_token", token_or_null(t, t->pad_id));
    if (t->chat_template)
        json_object_set_new(cfg, "chat_template", json_string(t->chat_template));
    else
        json_object_del(cfg, "chat_template");
    json_object_set_new(cfg, "clean_up_tokenization_spaces", json_boolean(t->clean_up_spaces));
    if (!json_object_get(cfg, "tokenizer_class"))
        json_object_set_new(cfg, "tokenizer_class", json_string("PreTrainedTokenizerFast"));
    return cfg;
}

static int dump(json_t *j, const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *path = malloc(n), *text = j ? json_dumps(j, JSON_INDENT(2)) : NULL;
    int rc;
    if (!path || !text) {
        rc = df_error(DF_ENOMEM, "tokenizer: out of memory writing %s/%s", dir, name);
    } else {
        snprintf(path, n, "%s/%s", dir, name);
        rc = df_write_file_atomic(path, text, strlen(text));
    }
    free(path);
    free(text);
    return rc;
}

int df_tokenizer_save(const df_tokenizer *t, const char *dir)
{
    if (!dir || !dir[0])
        return df_error(DF_EINVAL, "tokenizer: save needs a directory");
    int rc = df_mkdir_p(dir);
    if (rc)
        return rc;
    json_t *tj = tokenizer_json(t), *cj = config_json(t);
    rc = dump(tj, dir, "tokenizer.json");
    if (!rc)
        rc = dump(cj, dir, "tokenizer_config.json");
    json_decref(tj);
    json_decref(cj);
    return rc;
}
