/*
 * Building a df_tokenizer from the HF tokenizers serialisation: the BPE model,
 * added tokens, normalizer, pre-tokenizer, post-processor and decoder.
 */
#include "tokenizer/tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* Largest id accepted from a file: guards the id tables against absurd sizes. */
#define TOK_MAX_ID (1 << 24)

const char *const tok_gpt2_pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

df_tokenizer *tok_new(void)
{
    df_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    for (int b = 0; b < 256; b++)
        t->byte_id[b] = t->fallback_id[b] = -1;
    t->unk_id = t->pad_id = t->bos_id = -1;
    return t;
}

void df_tokenizer_free(df_tokenizer *t)
{
    if (!t)
        return;
    for (int64_t i = 0; i < t->n_ids; i++) {
        free(t->tok_str[i]);
        free(t->tok_bytes[i]);
    }
    free(t->tok_str);
    free(t->tok_bytes);
    free(t->tok_blen);
    free(t->flags);
    tok_strmap_free(&t->vocab);
    free(t->merges);
    tok_pairmap_free(&t->pairs);
    for (int i = 0; i < t->n_added; i++) {
        free(t->added[i].content);
        free(t->added[i].match);
    }
    free(t->added);
    tok_strmap_free(&t->added_map);
    for (int i = 0; i < t->n_norm; i++) {
        free(t->norm[i].text);
        free(t->norm[i].literal);
        pcre2_code_free(t->norm[i].re);
    }
    for (int i = 0; i < t->n_pre; i++) {
        pcre2_code_free(t->pre[i].re);
        free(t->pre[i].replacement);
    }
    for (int i = 0; i < t->n_dec; i++) {
        free(t->dec[i].from);
        free(t->dec[i].to);
    }
    json_decref(t->j_normalizer);
    json_decref(t->j_pre_tokenizer);
    json_decref(t->j_post_processor);
    json_decref(t->j_decoder);
    json_decref(t->j_config);
    free(t->eos_ids);
    free(t->chat_template);
    tok_chat_free(t);
    json_decref(t->chat_kwargs);
    free(t);
}

int tok_reserve_ids(df_tokenizer *t, int64_t n)
{
    if (n <= t->n_ids)
        return 0;
    char **s = realloc(t->tok_str, (size_t)n * sizeof *s);
    if (s)
        t->tok_str = s;
    char **b = realloc(t->tok_bytes, (size_t)n * sizeof *b);
    if (b)
        t->tok_bytes = b;
    int32_t *l = realloc(t->tok_blen, (size_t)n * sizeof *l);
    if (l)
        t->tok_blen = l;
    uint8_t *f = realloc(t->flags, (size_t)n);
    if (f)
        t->flags = f;
    if (!s || !b || !l || !f)
        return df_error(DF_ENOMEM, "tokenizer: out of memory for %lld ids", (long long)n);
    for (int64_t i = t->n_ids; i < n; i++) {
        t->tok_str[i] = t->tok_bytes[i] = NULL;
        t->tok_blen[i] = 0;
        t->flags[i] = 0;
    }
    t->n_ids = n;
    return 0;
}

static int set_token(df_tokenizer *t, int32_t id, const char *vocab_form, const char *bytes,
                     int64_t blen, const char *src)
{
    free(t->tok_str[id]);
    free(t->tok_bytes[id]);
    t->tok_str[id] = strdup(vocab_form);
    if (bytes) {
        t->tok_bytes[id] = malloc((size_t)blen + 1);
        if (t->tok_bytes[id]) {
            memcpy(t->tok_bytes[id], bytes, (size_t)blen);
            t->tok_bytes[id][blen] = '\0';
        }
        t->tok_blen[id] = (int32_t)blen;
    } else {
        int32_t l = 0;
        t->tok_bytes[id] = tok_piece_bytes(t, vocab_form, &l);
        if (!t->tok_bytes[id] && l < 0)
            return df_error(DF_EINVAL, "%s: the decoder makes token %d (\"%.40s\") longer than %d bytes", src, id,
                            vocab_form, INT32_MAX);
        t->tok_blen[id] = l;
    }
    if (!t->tok_str[id] || !t->tok_bytes[id])
        return df_error(DF_ENOMEM, "tokenizer: out of memory");
    return 0;
}

int tok_build_model(df_tokenizer *t, const char *const *vocab_str, const int32_t *vocab_id,
                    int64_t n_vocab, const char *const *merge_l, const char *const *merge_r,
                    int64_t n_merges, const char *src)
{
    int64_t max_id = -1;
    for (int64_t i = 0; i < n_vocab; i++)
        if (vocab_id[i] > max_id)
            max_id = vocab_id[i];
    int rc = tok_reserve_ids(t, max_id + 1);
    if (!rc)
        rc = tok_strmap_reserve(&t->vocab, n_vocab);
    if (!rc)
        rc = tok_pairmap_reserve(&t->pairs, n_merges);
    for (int64_t i = 0; !rc && i < n_vocab; i++) {
        int64_t len = (int64_t)strlen(vocab_str[i]);
        rc = tok_strmap_put(&t->vocab, vocab_str[i], len, vocab_id[i]);
        if (!rc && !t->tok_str[vocab_id[i]]) /* a duplicated id keeps its first token */
            rc = set_token(t, vocab_id[i], vocab_str[i], NULL, 0, src);
    }
    if (rc)
        return rc;
    t->n_model = n_vocab;
    for (int b = 0; b < 256; b++) {
        char c = (char)b, *s = tok_bytes_to_vocab(&c, 1);
        if (!s)
            return df_error(DF_ENOMEM, "tokenizer: out of memory");
        t->byte_id[b] = tok_strmap_get(&t->vocab, s, (int64_t)strlen(s));
        free(s);
        char hex[8]; /* tokenizers formats the byte_fallback token as "<{b:#04X}>" */
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        t->fallback_id[b] = tok_strmap_get(&t->vocab, hex, 6);
    }
    t->merges = malloc((size_t)(n_merges ? n_merges : 1) * 2 * sizeof *t->merges);
    if (!t->merges)
        return df_error(DF_ENOMEM, "tokenizer: out of memory for %lld merges", (long long)n_merges);
    t->n_merges = n_merges;
    char small[512];
    for (int64_t r = 0; r < n_merges; r++) {
        int64_t la = (int64_t)strlen(merge_l[r]), lb = (int64_t)strlen(merge_r[r]);
        int32_t a = tok_strmap_get(&t->vocab, merge_l[r], la);
        int32_t b = tok_strmap_get(&t->vocab, merge_r[r], lb);
        const char *missing = a < 0 ? merge_l[r] : b < 0 ? merge_r[r] : NULL;
        if (missing)
            return df_error(DF_EINVAL, "%s: merge %lld (\"%s %s\") names \"%s\", which is not in the vocab",
                            src, (long long)r, merge_l[r], merge_r[r], missing);
        char *cat = la + lb < (int64_t)sizeof small ? small : malloc((size_t)(la + lb + 1));
        if (!cat)
            return df_error(DF_ENOMEM, "tokenizer: out of memory");
        memcpy(cat, merge_l[r], (size_t)la);
        memcpy(cat + la, merge_r[r], (size_t)lb);
        int32_t m = tok_strmap_get(&t->vocab, cat, la + lb);
        if (m < 0)
            rc = df_error(DF_EINVAL, "%s: merge %lld (\"%s %s\") makes \"%.*s\", which is not in the vocab",
                          src, (long long)r, merge_l[r], merge_r[r], (int)(la + lb), cat);
        if (cat != small)
            free(cat);
        if (rc || (rc = tok_pairmap_put(&t->pairs, a, b, (int32_t)r, m)))
            return rc;
        t->merges[2 * r] = a;
        t->merges[2 * r + 1] = b;
    }
    return 0;
}

int tok_add_token(df_tokenizer *t, const tok_added *a, const char *src)
{
    if (a->id < 0 || a->id >= TOK_MAX_ID)
        return df_error(DF_EINVAL, "%s: added token \"%s\": id %d out of range [0, %d)", src,
                        a->content, a->id, TOK_MAX_ID);
    if (!a->content[0])
        return df_error(DF_EINVAL, "%s: added token %d has empty content", src, a->id);
    int32_t other = tok_strmap_get(&t->added_map, a->content, (int64_t)strlen(a->content));
    if (other >= 0 && other != a->id)
        return df_error(DF_EINVAL, "%s: added token \"%s\" has two ids, %d and %d", src, a->content,
                        other, a->id);
    int rc = tok_reserve_ids(t, (int64_t)a->id + 1);
    if (rc)
        return rc;
    int slot = -1;
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].id == a->id)
            slot = i;
    if (slot >= 0 && strcmp(t->added[slot].content, a->content) != 0)
        return df_error(DF_EINVAL, "%s: id %d is both added token \"%s\" and \"%s\"", src, a->id,
                        t->added[slot].content, a->content);
    if (slot < 0) {
        tok_added *v = realloc(t->added, (size_t)(t->n_added + 1) * sizeof *v);
        if (!v)
            return df_error(DF_ENOMEM, "tokenizer: out of memory");
        t->added = v;
        slot = t->n_added++;
        memset(&t->added[slot], 0, sizeof t->added[slot]);
    }
    tok_added *d = &t->added[slot];
    char *content = strdup(a->content);
    if (!content)
        return df_error(DF_ENOMEM, "tokenizer: out of memory");
    free(d->content);
    free(d->match);
    *d = *a;
    d->content = content;
    d->match = NULL;
    rc = set_token(t, a->id, a->content, a->content, (int64_t)strlen(a->content), src);
    if (rc)
        return rc;
    t->flags[a->id] = (uint8_t)(TOK_F_ADDED | (a->special ? TOK_F_SPECIAL : 0));
    return tok_strmap_put(&t->added_map, a->content, (int64_t)strlen(a->content), a->id);
}

int tok_refresh_added(df_tokenizer *t)
{
    memset(t->first_raw, 0, sizeof t->first_raw);
    memset(t->first_norm, 0, sizeof t->first_norm);
    t->any_norm_added = false;
    for (int i = 0; i < t->n_added; i++) {
        tok_added *a = &t->added[i];
        free(a->match);
        a->match = NULL;
        int64_t n = (int64_t)strlen(a->content);
        char *norm = NULL;
        int64_t nn = n;
        if (a->normalized) {
            int rc = tok_normalize(t, a->content, n, &norm, &nn);
            if (rc)
                return rc;
        }
        a->match = norm ? norm : strdup(a->content);
        if (!a->match)
            return df_error(DF_ENOMEM, "tokenizer: out of memory");
        a->match_len = nn;
        if (nn == 0)
            continue;
        if (a->normalized) {
            t->first_norm[(uint8_t)a->match[0]] = true;
            t->any_norm_added = true;
        } else {
            t->first_raw[(uint8_t)a->match[0]] = true;
        }
    }
    return 0;
}

int tok_compile_regex(const char *pattern, bool literal, pcre2_code **out, const char *src)
{
    int err;
    PCRE2_SIZE off;
    /* LITERAL rejects UCP. NEVER_BACKSLASH_C: \C matches one byte even in UTF mode, so a split
     * or replacement could cut a character; the encoder relies on whole UTF-8 chars. */
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opts, &err, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return df_error(DF_EINVAL, "%s: bad regex at offset %zu: %s (pattern \"%s\")", src,
                        (size_t)off, (const char *)msg, pattern);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional: the interpreter is the fallback */
    *out = re;
    return 0;
}

/* ---- tokenizer.json --------------------------------------------------------- */

static bool jbool(json_t *obj, const char *key, bool dflt)
{
    json_t *v = json_object_get(obj, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static const char *jtype(json_t *obj) { return json_string_value(json_object_get(obj, "type")); }

/* A copy of the string at obj[key]; `what` names the component in the message. */
static int jstr_dup(json_t *obj, const char *key, const char *what, const char *src, char **out)
{
    const char *v = json_string_value(json_object_get(obj, key));
    if (!v)
        return df_error(DF_EINVAL, "%s: %s needs a string \"%s\"", src, what, key);
    if (!(*out = strdup(v)))
        return df_error(DF_ENOMEM, "tokenizer: out of memory");
    return 0;
}

static int parse_added_tokens(df_tokenizer *t, json_t *arr, const char *src)
{
    if (!arr || json_is_null(arr))
        return 0;
    if (!json_is_array(arr))
        return df_error(DF_EINVAL, "%s: \"added_tokens\" must be an array", src);
    size_t i;
    json_t *e;
    json_array_foreach(arr, i, e) {
        json_t *id = json_object_get(e, "id");
        const char *content = json_string_value(json_object_get(e, "content"));
        if (!json_is_integer(id) || !content)
            return df_error(DF_EINVAL, "%s: added_tokens[%zu] needs an integer \"id\" and a string \"content\"",
                            src, i);
        json_int_t v = json_integer_value(id);
        tok_added a = {.id = v < 0 || v >= TOK_MAX_ID ? -1 : (int32_t)v, .content = (char *)content};
        a.special = jbool(e, "special", false);
        a.lstrip = jbool(e, "lstrip", false);
        a.rstrip = jbool(e, "rstrip", false);
        a.single_word = jbool(e, "single_word", false);
        a.normalized = jbool(e, "normalized", !a.special);
        int rc = tok_add_token(t, &a, src);
        if (rc)
            return rc;
    }
    return 0;
}

static int parse_model(df_tokenizer *t, json_t *model, const char *src)
{
    if (!json_is_object(model))
        return df_error(DF_EINVAL, "%s: missing \"model\" object", src);
    const char *type = jtype(model);
    if (type && strcmp(type, "BPE") != 0)
        return df_error(DF_EUNSUPPORTED, "%s: model.type \"%s\" is not supported (only BPE)", src, type);
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (!json_is_object(vocab))
        return df_error(DF_EINVAL, "%s: model.vocab must be an object of token -> id", src);
    if (!json_is_array(merges))
        return df_error(DF_EINVAL, "%s: model.merges must be an array", src);
    t->byte_fallback = jbool(model, "byte_fallback", false);
    t->fuse_unk = jbool(model, "fuse_unk", false);
    json_t *dropout = json_object_get(model, "dropout");
    if (json_is_number(dropout) && json_number_value(dropout) > 0)
        return df_error(DF_EUNSUPPORTED, "%s: model.dropout is not supported", src);
    const char *fix[2] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        const char *s = json_string_value(json_object_get(model, fix[k]));
        if (s && s[0])
            return df_error(DF_EUNSUPPORTED, "%s: model.%s \"%s\" is not supported", src, fix[k], s);
    }
    t->ignore_merges = jbool(model, "ignore_merges", false);

    int64_t nv = (int64_t)json_object_size(vocab), nm = (int64_t)json_array_size(merges);
    const char **vs = malloc((size_t)(nv + 1) * sizeof *vs);
    int32_t *vi = malloc((size_t)(nv + 1) * sizeof *vi);
    const char **ml = malloc((size_t)(nm + 1) * sizeof *ml), **mr = malloc((size_t)(nm + 1) * sizeof *mr);
    char *mbuf = NULL; /* split copies of "a b" merges */
    int rc = 0;
    if (!vs || !vi || !ml || !mr) {
        rc = df_error(DF_ENOMEM, "tokenizer: out of memory");
        goto done;
    }
    const char *key;
    json_t *val;
    int64_t k = 0;
    json_object_foreach(vocab, key, val) {
        json_int_t id = json_is_integer(val) ? json_integer_value(val) : -1;
        if (id < 0 || id >= TOK_MAX_ID) {
            rc = df_error(DF_EINVAL, "%s: model.vocab[\"%s\"]: id must be an integer in [0, %d)", src, key,
                          TOK_MAX_ID);
            goto done;
        }
        vs[k] = key;
        vi[k++] = (int32_t)id;
    }
    size_t total = 0, i;
    json_array_foreach(merges, i, val) total += json_is_string(val) ? json_string_length(val) + 1 : 0;
    mbuf = malloc(total + 1);
    if (!mbuf) {
        rc = df_error(DF_ENOMEM, "tokenizer: out of memory");
        goto done;
    }
    char *p = mbuf;
    json_array_foreach(merges, i, val) {
        if (json_is_string(val)) { /* "a b": exactly one space (tokenizers convert_merges_to_hashmap) */
            const char *s = json_string_value(val), *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' ') || sp == s || !sp[1]) {
                rc = df_error(DF_EINVAL, "%s: model.merges[%zu] \"%s\" is not two tokens separated by one space",
                              src, i, s);
                goto done;
            }
            size_t n = strlen(s);
            memcpy(p, s, n + 1);
            p[sp - s] = '\0';
            ml[i] = p;
            mr[i] = p + (sp - s) + 1;
            p += n + 1;
        } else if (json_is_array(val) && json_array_size(val) == 2 &&
                   json_is_string(json_array_get(val, 0)) && json_is_string(json_array_get(val, 1))) {
            ml[i] = json_string_value(json_array_get(val, 0));
            mr[i] = json_string_value(json_array_get(val, 1));
        } else {
            rc = df_error(DF_EINVAL, "%s: model.merges[%zu] must be \"a b\" or [\"a\", \"b\"]", src, i);
            goto done;
        }
    }
    rc = tok_build_model(t, vs, vi, nv, ml, mr, nm, src);
    const char *unk = json_string_value(json_object_get(model, "unk_token"));
    if (!rc && unk && (t->unk_id = tok_strmap_get(&t->vocab, unk, (int64_t)strlen(unk))) < 0)
        rc = df_error(DF_EINVAL, "%s: model.unk_token \"%s\" is not in model.vocab", src, unk);
done:
    free(vs);
    free(vi);
    free(ml);
    free(mr);
    free(mbuf);
    return rc;
}

static int parse_normalizer(df_tokenizer *t, json_t *j, const char *src)
{
    if (!j || json_is_null(j))
        return 0;
    const char *type = jtype(j);
    if (!type)
        return df_error(DF_EINVAL, "%s: normalizer needs a \"type\"", src);
    if (strcmp(type, "Sequence") == 0) {
        json_t *arr = json_object_get(j, "normalizers"), *e;
        size_t i;
        if (!json_is_array(arr))
            return df_error(DF_EINVAL, "%s: normalizer Sequence needs a \"normalizers\" array", src);
        json_array_foreach(arr, i, e) {
            int rc = parse_normalizer(t, e, src);
            if (rc)
                return rc;
        }
        return 0;
    }
    static const char *names[] = {"NFC", "NFD", "NFKC", "NFKD", "Prepend", "Replace"};
    int k = 0;
    while (k < 6 && strcmp(type, names[k]) != 0)
        k++;
    if (k == 6)
        return df_error(DF_EUNSUPPORTED, "%s: normalizer type \"%s\" is not supported (NFC, NFD, NFKC, NFKD, "
                        "Prepend, Replace, Sequence)", src, type);
    if (t->n_norm == TOK_MAX_NORM)
        return df_error(DF_EUNSUPPORTED, "%s: more than %d normalizers", src, TOK_MAX_NORM);
    tok_norm_step *st = &t->norm[t->n_norm];
    *st = (tok_norm_step){.kind = (tok_norm_kind)k};
    int rc = 0;
    if (st->kind == TOK_NORM_PREPEND) {
        rc = jstr_dup(j, "prepend", "normalizer Prepend", src, &st->text);
    } else if (st->kind == TOK_NORM_REPLACE) {
        json_t *pat = json_object_get(j, "pattern");
        const char *rx = json_string_value(json_object_get(pat, "Regex"));
        rc = jstr_dup(j, "content", "normalizer Replace", src, &st->text);
        if (!rc && rx)
            rc = tok_compile_regex(rx, false, &st->re, src);
        else if (!rc)
            rc = jstr_dup(pat, "String", "normalizer Replace pattern", src, &st->literal);
        if (!rc && st->literal && !st->literal[0])
            rc = df_error(DF_EINVAL, "%s: normalizer Replace: empty pattern", src);
    }
    t->n_norm++; /* counted even on error, so that free() releases what was set */
    return rc;
}

static int parse_behavior(const char *s, tok_split_behavior *b)
{
    static const char *names[] = {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext",
                                  "Contiguous"};
    for (int k = 0; s && k < 5; k++)
        if (strcmp(s, names[k]) == 0) {
            *b = (tok_split_behavior)k;
            return 0;
        }
    return -1;
}

/* The code point of j[key] when that is a string of exactly one char, else -1 (jansson's
 * strings are valid UTF-8). */
static int32_t one_char(json_t *j, const char *key)
{
    const char *v = json_string_value(json_object_get(j, key));
    utf8proc_int32_t cp = -1;
    return v && v[0] && utf8proc_iterate((const utf8proc_uint8_t *)v, -1, &cp) == (utf8proc_ssize_t)strlen(v)
               ? cp : -1;
}

/* A copy of j["replacement"], a Metaspace component's one char; NULL when it is not one. */
static char *replacement(json_t *j)
{
    return one_char(j, "replacement") >= 0 ? strdup(json_string_value(json_object_get(j, "replacement"))) : NULL;
}

/* prepend_scheme "always" | "first" | "never"; older files say add_prefix_space instead
 * (tokenizers pre_tokenizers/metaspace.rs deserialisation: false -> never, else always). */
static int parse_prepend(json_t *j, const char *what, const char *src, tok_prepend_scheme *out)
{
    static const char *names[] = {"always", "first", "never"};
    json_t *v = json_object_get(j, "prepend_scheme");
    *out = jbool(j, "add_prefix_space", true) ? TOK_PREPEND_ALWAYS : TOK_PREPEND_NEVER;
    if (!v || json_is_null(v) || *out == TOK_PREPEND_NEVER)
        return 0;
    for (int k = 0; k < 3; k++)
        if (json_is_string(v) && strcmp(json_string_value(v), names[k]) == 0) {
            *out = (tok_prepend_scheme)k;
            return 0;
        }
    return df_error(DF_EINVAL, "%s: %s: prepend_scheme must be \"always\", \"first\" or \"never\"", src, what);
}

static int parse_metaspace(json_t *j, tok_pre_step *s, const char *src)
{
    if (!(s->replacement = replacement(j)))
        return df_error(DF_EINVAL, "%s: pre_tokenizer Metaspace: \"replacement\" must be one character", src);
    s->behavior = TOK_SPLIT_MERGED_NEXT;
    int rc = parse_prepend(j, "pre_tokenizer Metaspace", src, &s->prepend);
    if (!rc && jbool(j, "split", true))
        rc = tok_compile_regex(s->replacement, true, &s->re, src);
    return rc;
}

static int parse_pre(df_tokenizer *t, json_t *j, const char *src)
{
    if (!j || json_is_null(j))
        return 0;
    const char *type = jtype(j);
    if (!type)
        return df_error(DF_EINVAL, "%s: pre_tokenizer needs a \"type\"", src);
    if (strcmp(type, "Sequence") == 0) {
        json_t *arr = json_object_get(j, "pretokenizers"), *e;
        size_t i;
        if (!json_is_array(arr))
            return df_error(DF_EINVAL, "%s: pre_tokenizer Sequence needs a \"pretokenizers\" array", src);
        json_array_foreach(arr, i, e) {
            int rc = parse_pre(t, e, src);
            if (rc)
                return rc;
        }
        return 0;
    }
    if (t->n_pre == TOK_MAX_PRE)
        return df_error(DF_EUNSUPPORTED, "%s: more than %d pre-tokenizers", src, TOK_MAX_PRE);
    if (t->n_pre > 0 && t->pre[t->n_pre - 1].byte_level)
        return df_error(DF_EUNSUPPORTED, "%s: pre_tokenizer: ByteLevel must be the last step", src);
    tok_pre_step *s = &t->pre[t->n_pre];
    memset(s, 0, sizeof *s);
    int rc;
    if (strcmp(type, "ByteLevel") == 0) {
        s->byte_level = true;
        s->add_prefix_space = jbool(j, "add_prefix_space", true);
        s->behavior = TOK_SPLIT_ISOLATED;
        if (jbool(j, "use_regex", true) && (rc = tok_compile_regex(tok_gpt2_pattern, false, &s->re, src)))
            return rc;
    } else if (strcmp(type, "Split") == 0) {
        json_t *pat = json_object_get(j, "pattern");
        const char *rx = json_string_value(json_object_get(pat, "Regex"));
        const char *lit = json_string_value(json_object_get(pat, "String"));
        if (!rx && !lit)
            return df_error(DF_EINVAL, "%s: Split pre-tokenizer needs pattern {\"Regex\": ...} or {\"String\": ...}",
                            src);
        const char *beh = json_string_value(json_object_get(j, "behavior"));
        if (parse_behavior(beh, &s->behavior))
            return df_error(DF_EUNSUPPORTED, "%s: Split behavior \"%s\" is not supported", src,
                            beh ? beh : "(missing)");
        s->invert = jbool(j, "invert", false);
        if ((rc = tok_compile_regex(rx ? rx : lit, !rx, &s->re, src)))
            return rc;
    } else if (strcmp(type, "Metaspace") == 0) {
        t->n_pre++; /* counted now, so that free() releases the copies on error */
        return parse_metaspace(j, s, src);
    } else {
        return df_error(DF_EUNSUPPORTED, "%s: pre_tokenizer type \"%s\" is not supported (Split, Metaspace, "
                        "ByteLevel, Sequence)", src, type);
    }
    t->n_pre++;
    return 0;
}

static int parse_post(df_tokenizer *t, json_t *j, const char *src)
{
    if (!j || json_is_null(j))
        return 0;
    const char *type = jtype(j);
    if (type && strcmp(type, "ByteLevel") == 0)
        return 0; /* only changes offsets */
    if (type && strcmp(type, "Sequence") == 0) {
        json_t *arr = json_object_get(j, "processors"), *e;
        size_t i;
        json_array_foreach(arr, i, e) {
            int rc = parse_post(t, e, src);
            if (rc)
                return rc;
        }
        return 0;
    }
    if (!type || strcmp(type, "TemplateProcessing") != 0)
        return df_error(DF_EUNSUPPORTED, "%s: post_processor type \"%s\" is not supported "
                        "(ByteLevel, TemplateProcessing, Sequence)", src, type ? type : "(missing)");
    json_t *single = json_object_get(j, "single"), *specials = json_object_get(j, "special_tokens"), *e;
    size_t i;
    bool after = false;
    json_array_foreach(single, i, e) {
        if (json_object_get(e, "Sequence")) {
            after = true;
            continue;
        }
        const char *name = json_string_value(json_object_get(json_object_get(e, "SpecialToken"), "id"));
        json_t *ids = json_object_get(json_object_get(specials, name ? name : ""), "ids"), *id;
        if (!name || !json_is_array(ids))
            return df_error(DF_EINVAL, "%s: post_processor.single[%zu] names no entry of special_tokens", src, i);
        size_t k;
        json_array_foreach(ids, k, id) {
            int32_t *dst = after ? t->post_suffix : t->post_prefix;
            int *n = after ? &t->n_post_suffix : &t->n_post_prefix;
            json_int_t v = json_integer_value(id);
            if (*n == TOK_MAX_TEMPLATE || !json_is_integer(id) || v < 0 || v >= TOK_MAX_ID)
                return df_error(DF_EINVAL, "%s: post_processor special token \"%s\": bad or too many ids", src,
                                name);
            dst[(*n)++] = (int32_t)v;
        }
    }
    return 0;
}

static int parse_decoder_step(tok_dec_step *d, json_t *j, const char *type, const char *src)
{
    static const char *names[] = {"ByteLevel", "Replace", "ByteFallback", "Fuse", "Strip", "Metaspace"};
    int k = 0;
    while (k < 6 && strcmp(type, names[k]) != 0)
        k++;
    if (k == 6)
        return df_error(DF_EUNSUPPORTED, "%s: decoder \"%s\" is not supported (ByteLevel, Replace, ByteFallback, "
                        "Fuse, Strip, Metaspace, Sequence)", src, type);
    d->kind = (tok_dec_kind)k;
    if (d->kind == TOK_DEC_REPLACE) {
        json_t *pat = json_object_get(j, "pattern");
        if (json_object_get(pat, "Regex"))
            return df_error(DF_EUNSUPPORTED, "%s: decoder Replace with a Regex pattern is not supported", src);
        int rc = jstr_dup(pat, "String", "decoder Replace pattern", src, &d->from);
        if (!rc)
            rc = jstr_dup(j, "content", "decoder Replace", src, &d->to);
        if (!rc && !d->from[0])
            rc = df_error(DF_EINVAL, "%s: decoder Replace: empty pattern", src);
        return rc;
    }
    if (d->kind == TOK_DEC_STRIP) {
        json_t *a = json_object_get(j, "start"), *b = json_object_get(j, "stop");
        int32_t cp = one_char(j, "content");
        if (cp < 0 || !json_is_integer(a) || !json_is_integer(b) || json_integer_value(a) < 0 ||
            json_integer_value(b) < 0)
            return df_error(DF_EINVAL, "%s: decoder Strip needs one \"content\" character and integers "
                            "\"start\", \"stop\" >= 0", src);
        d->cp = (uint32_t)cp;
        d->start = (int64_t)json_integer_value(a);
        d->stop = (int64_t)json_integer_value(b);
    }
    if (d->kind == TOK_DEC_METASPACE) {
        tok_prepend_scheme p;
        if (!(d->from = replacement(j)))
            return df_error(DF_EINVAL, "%s: decoder Metaspace: \"replacement\" must be one character", src);
        int rc = parse_prepend(j, "decoder Metaspace", src, &p);
        d->prepend = p != TOK_PREPEND_NEVER;
        return rc;
    }
    return 0;
}

static int parse_decoder(df_tokenizer *t, json_t *j, const char *src)
{
    const char *type = jtype(j);
    if (!type)
        return df_error(DF_EUNSUPPORTED, "%s: decoder \"null\" is not supported (tokens would be joined by "
                        "spaces)", src);
    if (strcmp(type, "Sequence") == 0) {
        json_t *arr = json_object_get(j, "decoders"), *e;
        size_t i;
        if (json_array_size(arr) == 0)
            return df_error(DF_EUNSUPPORTED, "%s: decoder Sequence without decoders", src);
        json_array_foreach(arr, i, e) {
            int rc = parse_decoder(t, e, src);
            if (rc)
                return rc;
        }
        return 0;
    }
    if (t->n_dec == TOK_MAX_DEC)
        return df_error(DF_EUNSUPPORTED, "%s: more than %d decoders", src, TOK_MAX_DEC);
    tok_dec_step *d = &t->dec[t->n_dec++]; /* counted first, so that free() releases its strings */
    memset(d, 0, sizeof *d);
    return parse_decoder_step(d, j, type, src);
}

static json_t *keep(json_t *j) { return j ? json_incref(j) : json_null(); }

int tok_parse_pipeline(df_tokenizer *t, json_t *root, const char *src)
{
    /* the decoder first: it gives each model token its raw bytes */
    int rc = parse_decoder(t, json_object_get(root, "decoder"), src);
    if (!rc)
        rc = parse_model(t, json_object_get(root, "model"), src);
    if (!rc)
        rc = parse_normalizer(t, json_object_get(root, "normalizer"), src);
    if (!rc)
        rc = parse_pre(t, json_object_get(root, "pre_tokenizer"), src);
    t->char_level = t->n_pre == 0 || !t->pre[t->n_pre - 1].byte_level;
    if (!rc && t->byte_fallback && !t->char_level)
        rc = df_error(DF_EUNSUPPORTED, "%s: model.byte_fallback with a ByteLevel pre_tokenizer is not supported", src);
    if (!rc)
        rc = parse_post(t, json_object_get(root, "post_processor"), src);
    if (!rc)
        rc = parse_added_tokens(t, json_object_get(root, "added_tokens"), src);
    if (!rc)
        rc = tok_refresh_added(t);
    for (int k = 0; !rc && k < t->n_post_prefix + t->n_post_suffix; k++) {
        int32_t id = k < t->n_post_prefix ? t->post_prefix[k] : t->post_suffix[k - t->n_post_prefix];
        if (id >= t->n_ids || !t->tok_str[id])
            rc = df_error(DF_EINVAL, "%s: post_processor uses id %d, which is not a token", src, id);
    }
    if (rc)
        return rc;
    t->j_normalizer = keep(json_object_get(root, "normalizer"));
    t->j_pre_tokenizer = keep(json_object_get(root, "pre_tokenizer"));
    t->j_post_processor = keep(json_object_get(root, "post_processor"));
    t->j_decoder = keep(json_object_get(root, "decoder"));
    return 0;
}
