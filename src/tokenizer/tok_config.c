/*
 * tokenizer_config.json / generation_config.json: special token ids, extra added
 * tokens and the chat template; plus the vocabulary accessors.
 */
#include "tokenizer/tok_internal.h"
#include "util/fsutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int tok_token_id_any(const df_tokenizer *t, const char *s)
{
    int64_t n = (int64_t)strlen(s);
    int32_t id = tok_strmap_get(&t->added_map, s, n);
    return id >= 0 ? id : tok_strmap_get(&t->vocab, s, n);
}

/* "eos_token": "<|im_end|>" | {"content": "<|im_end|>", ...} | null (-> -1); an absent
 * key leaves *id as it was (a class default). */
static int special_from_config(const df_tokenizer *t, json_t *cfg, const char *key, const char *src,
                               int32_t *id)
{
    json_t *v = json_object_get(cfg, key);
    if (!v)
        return 0;
    if (json_is_object(v))
        v = json_object_get(v, "content");
    *id = -1;
    if (!v || json_is_null(v))
        return 0;
    const char *s = json_string_value(v);
    if (!s)
        return df_error(DF_EINVAL, "%s: \"%s\" must be a string, {\"content\": ...} or null", src, key);
    *id = tok_token_id_any(t, s);
    if (*id < 0)
        return df_error(DF_EINVAL, "%s: %s \"%s\" is not in the vocabulary", src, key, s);
    return 0;
}

static int add_eos(df_tokenizer *t, int32_t id)
{
    for (int i = 0; i < t->n_eos; i++)
        if (t->eos_ids[i] == id)
            return 0;
    int32_t *v = realloc(t->eos_ids, (size_t)(t->n_eos + 1) * sizeof *v);
    if (!v)
        return df_error(DF_ENOMEM, "tokenizer: out of memory");
    t->eos_ids = v;
    t->eos_ids[t->n_eos++] = id;
    return 0;
}

static int parse_added_decoder(df_tokenizer *t, json_t *obj, const char *src)
{
    if (!obj || json_is_null(obj))
        return 0;
    if (!json_is_object(obj))
        return df_error(DF_EINVAL, "%s: \"added_tokens_decoder\" must be an object", src);
    const char *key;
    json_t *e;
    json_object_foreach(obj, key, e) {
        char *end;
        long id = strtol(key, &end, 10);
        const char *content = json_string_value(json_object_get(e, "content"));
        if (*end || end == key || id < 0 || id > INT32_MAX || !content)
            return df_error(DF_EINVAL, "%s: added_tokens_decoder[\"%s\"] needs an integer key and a \"content\"",
                            src, key);
        json_t *sp = json_object_get(e, "special");
        tok_added a = {.id = (int32_t)id, .content = (char *)content, .special = json_is_true(sp)};
        a.lstrip = json_is_true(json_object_get(e, "lstrip"));
        a.rstrip = json_is_true(json_object_get(e, "rstrip"));
        a.single_word = json_is_true(json_object_get(e, "single_word"));
        json_t *nz = json_object_get(e, "normalized");
        a.normalized = json_is_boolean(nz) ? json_is_true(nz) : !a.special;
        int rc = tok_add_token(t, &a, src);
        if (rc)
            return rc;
    }
    return tok_refresh_added(t);
}

/* chat_template: a string, or a list of {"name", "template"} (the "default" one is used). */
static int parse_template(df_tokenizer *t, json_t *v, const char *src)
{
    const char *s = json_string_value(v);
    if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
            const char *name = json_string_value(json_object_get(e, "name"));
            if (!s || (name && strcmp(name, "default") == 0))
                s = json_string_value(json_object_get(e, "template"));
        }
    } else if (v && !json_is_null(v) && !s) {
        return df_error(DF_EINVAL, "%s: \"chat_template\" must be a string or a list of templates", src);
    }
    return df_tokenizer_set_chat_template(t, s);
}

static int load_generation_config(df_tokenizer *t, const char *path)
{
    int rc;
    json_t *root = tok_load_json(path, &rc), *v, *e;
    if (!root)
        return rc;
    v = json_object_get(root, "eos_token_id");
    json_t *one = json_is_array(v) ? NULL : v;
    size_t n = json_is_array(v) ? json_array_size(v) : (v && !json_is_null(v));
    for (size_t i = 0; !rc && i < n; i++) {
        e = one ? one : json_array_get(v, i);
        json_int_t id = json_is_integer(e) ? json_integer_value(e) : -1;
        if (id < 0 || id >= t->n_ids || !t->tok_str[id])
            rc = df_error(DF_EINVAL, "%s: eos_token_id entry %zu does not name a token", path, i);
        else
            rc = add_eos(t, (int32_t)id);
    }
    json_decref(root);
    return rc;
}

static bool exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Index in classes[] of the config's tokenizer_class (with or without "Fast"), -1 for others. */
static int llama_class(json_t *cfg)
{
    static const char *classes[] = {"LlamaTokenizer", "CodeLlamaTokenizer", "GemmaTokenizer"};
    const char *cls = json_string_value(json_object_get(cfg, "tokenizer_class"));
    for (int k = 0; cls && k < 3; k++) {
        size_t n = strlen(classes[k]);
        if (strncmp(cls, classes[k], n) == 0 && (!cls[n] || strcmp(cls + n, "Fast") == 0))
            return k;
    }
    return -1;
}

/* transformers' LlamaTokenizerFast (CodeLlama, Gemma alike) rebuilds the post-processor from
 * add_bos_token (default true) and add_eos_token (default false) whatever tokenizer.json holds
 * (update_post_processor). Other classes keep the file's template. */
static int class_template(df_tokenizer *t, json_t *cfg, const char *src)
{
    json_t *b = json_object_get(cfg, "add_bos_token"), *e = json_object_get(cfg, "add_eos_token");
    bool bos = !json_is_boolean(b) || json_is_true(b), eos = json_is_true(e);
    int32_t eos_id = df_tokenizer_eos_id(t);
    if ((bos && t->bos_id < 0) || (eos && eos_id < 0))
        return df_error(DF_EINVAL, "%s: %s is true but there is no %s", src, bos && t->bos_id < 0 ?
                        "add_bos_token" : "add_eos_token", bos && t->bos_id < 0 ? "bos_token" : "eos_token");
    t->n_post_prefix = t->n_post_suffix = 0;
    if (bos)
        t->post_prefix[t->n_post_prefix++] = t->bos_id;
    if (eos)
        t->post_suffix[t->n_post_suffix++] = eos_id;
    return 0;
}

/* Whether t's pipeline is what transformers' LlamaConverter writes for `legacy` and
 * add_prefix_space `aps`: legacy, normalizer [Prepend "▁" when aps] + Replace " " -> "▁" and no
 * pre-tokenizer; else no normalizer and Metaspace "▁" (prepend_scheme first when aps, else
 * never; no split); the decoder ends with a Strip exactly when aps. */
static bool converter_layout(const df_tokenizer *t, bool legacy, bool aps)
{
    static const char *sp = "\xe2\x96\x81";
    bool strip = t->n_dec > 0 && t->dec[t->n_dec - 1].kind == TOK_DEC_STRIP;
    if (strip != aps)
        return false;
    if (!legacy)
        return t->n_norm == 0 && t->n_pre == 1 && t->pre[0].replacement && !strcmp(t->pre[0].replacement, sp) &&
               !t->pre[0].re && t->pre[0].prepend == (aps ? TOK_PREPEND_FIRST : TOK_PREPEND_NEVER);
    const tok_norm_step *r = &t->norm[aps ? 1 : 0];
    return t->n_pre == 0 && t->n_norm == (aps ? 2 : 1) &&
           (!aps || (t->norm[0].kind == TOK_NORM_PREPEND && !strcmp(t->norm[0].text, sp))) &&
           r->kind == TOK_NORM_REPLACE && r->literal && !strcmp(r->literal, " ") && !strcmp(r->text, sp);
}

/* LlamaTokenizerFast re-converts the tokenizer from its tokenizer.model when add_prefix_space is
 * set (from_slow), with LlamaConverter's pipeline for `legacy` (null: true) and that setting.
 * distflow reads tokenizer.json only: the setting is accepted when the file already has that
 * pipeline (Mistral v0.3's does) and refused otherwise. */
static int check_prefix_space(const df_tokenizer *t, json_t *cfg, const char *src)
{
    json_t *a = json_object_get(cfg, "add_prefix_space");
    if (!json_is_boolean(a))
        return 0;
    bool legacy = !json_is_false(json_object_get(cfg, "legacy"));
    if (converter_layout(t, legacy, json_is_true(a)))
        return 0;
    return df_error(DF_EUNSUPPORTED, "%s: add_prefix_space %s with legacy %s: transformers' LlamaTokenizerFast "
                    "then rebuilds the tokenizer from tokenizer.model with another pipeline than tokenizer.json's, "
                    "and distflow reads only tokenizer.json (save the tokenizer with transformers and load that "
                    "directory, or remove the key)", src, json_is_true(a) ? "true" : "false",
                    legacy ? "true" : "false");
}

int tok_apply_config(df_tokenizer *t, json_t *cfg, const char *src)
{
    int32_t eos = df_tokenizer_eos_id(t);
    int rc = parse_added_decoder(t, json_object_get(cfg, "added_tokens_decoder"), src);
    if (!rc)
        rc = special_from_config(t, cfg, "eos_token", src, &eos);
    t->n_eos = 0;
    if (!rc && eos >= 0)
        rc = add_eos(t, eos);
    if (!rc)
        rc = special_from_config(t, cfg, "pad_token", src, &t->pad_id);
    if (!rc)
        rc = special_from_config(t, cfg, "bos_token", src, &t->bos_id);
    int cls = llama_class(cfg);
    if (!rc && cls >= 0)
        rc = class_template(t, cfg, src);
    if (!rc && cls == 0)
        rc = check_prefix_space(t, cfg, src);
    if (!rc)
        rc = parse_template(t, json_object_get(cfg, "chat_template"), src);
    t->clean_up_spaces = json_is_true(json_object_get(cfg, "clean_up_tokenization_spaces"));
    if (!rc) {
        json_decref(t->j_config);
        t->j_config = json_incref(cfg);
    }
    return rc;
}

int df_tokenizer_set_chat_template_file(df_tokenizer *t, const char *path)
{
    char *text = NULL;
    size_t len = 0;
    int rc = df_read_file(path, &text, &len);
    int64_t bad = rc ? -1 : tok_utf8_invalid_at(text, (int64_t)len);
    if (!rc && bad >= 0)
        rc = df_error(DF_EINVAL, "%s: not UTF-8 text (an invalid byte at offset %lld)", path, (long long)bad);
    else if (!rc && strlen(text) != len)
        rc = df_error(DF_EINVAL, "%s: a NUL byte at offset %zu", path, strlen(text));
    if (!rc)
        rc = df_tokenizer_set_chat_template(t, text);
    free(text);
    return rc;
}

int tok_load_config(df_tokenizer *t, const char *dir, bool gpt2_layout)
{
    size_t n = strlen(dir) + 40;
    char *path = malloc(n);
    if (!path)
        return df_error(DF_ENOMEM, "tokenizer: out of memory");
    int rc = 0;
    int32_t eot = tok_strmap_get(&t->added_map, "<|endoftext|>", 13);
    if (gpt2_layout && eot >= 0) { /* GPT2Tokenizer's class defaults, which a config overrides */
        t->bos_id = eot;
        rc = add_eos(t, eot);
    } else if (t->n_post_prefix > 0) {
        t->bos_id = t->post_prefix[0];
    }
    snprintf(path, n, "%s/tokenizer_config.json", dir);
    if (!rc && exists(path)) {
        json_t *cfg = tok_load_json(path, &rc);
        if (cfg)
            rc = tok_apply_config(t, cfg, path);
        json_decref(cfg);
    }
    snprintf(path, n, "%s/chat_template.jinja", dir);
    if (!rc && exists(path))
        rc = df_tokenizer_set_chat_template_file(t, path); /* transformers 4.47+: wins over the entry */
    snprintf(path, n, "%s/generation_config.json", dir);
    if (!rc && exists(path))
        rc = load_generation_config(t, path);
    free(path);
    return rc;
}

/* ---- accessors ------------------------------------------------------------ */

int64_t df_tokenizer_vocab_size(const df_tokenizer *t) { return t->n_ids; }

int32_t df_tokenizer_token_to_id(const df_tokenizer *t, const char *token)
{
    return token ? tok_token_id_any(t, token) : -1;
}

const char *df_tokenizer_id_to_token(const df_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_ids ? t->tok_str[id] : NULL;
}

bool df_tokenizer_is_special(const df_tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_ids && (t->flags[id] & TOK_F_SPECIAL);
}

int32_t df_tokenizer_eos_id(const df_tokenizer *t) { return t->n_eos ? t->eos_ids[0] : -1; }

const int32_t *df_tokenizer_eos_ids(const df_tokenizer *t, int *n)
{
    *n = t->n_eos;
    return t->eos_ids;
}

bool df_tokenizer_is_eos(const df_tokenizer *t, int32_t id)
{
    for (int i = 0; i < t->n_eos; i++)
        if (t->eos_ids[i] == id)
            return true;
    return false;
}

int32_t df_tokenizer_pad_id(const df_tokenizer *t) { return t->pad_id; }

int32_t df_tokenizer_bos_id(const df_tokenizer *t) { return t->bos_id; }

int df_tokenizer_set_eos_ids(df_tokenizer *t, const int32_t *ids, int n)
{
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= t->n_ids || !t->tok_str[ids[i]])
            return df_error(DF_EINVAL, "tokenizer: eos id %d does not name a token", ids[i]);
    t->n_eos = 0;
    for (int i = 0; i < n; i++) {
        int rc = add_eos(t, ids[i]);
        if (rc)
            return rc;
    }
    return 0;
}
