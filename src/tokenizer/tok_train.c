/*
 * Byte-level BPE training (the algorithm of HF BpeTrainer / Sennrich et al. 2016):
 * count pre-tokens, then repeatedly merge the most frequent adjacent pair.
 *
 * Pair counts are updated incrementally: each pair keeps the list of words it
 * occurs in, and a max-heap holds (count, pair) entries that may be stale.
 * Counts of existing pairs only fall when a merge happens, and the pairs whose
 * counts rise all contain the new token, which are pushed afresh; so an entry
 * popped with its current count is the true maximum.
 */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

const char *const tok_qwen2_pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const char *const specials[3] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

typedef struct ivec {
    int32_t *v;
    int64_t n, cap;
} ivec;

typedef struct pair_info {
    int32_t a, b;
    int64_t count;
    int64_t pushed; /* merge iteration that last pushed this pair on the heap */
    ivec words;     /* may hold duplicates and words that lost the pair */
} pair_info;

typedef struct heap_e {
    int64_t count;
    int32_t pair;
} heap_e;

typedef struct trainer {
    /* tokens: raw bytes of each id */
    char **tb;
    int32_t *tl;
    int64_t n_tok, tok_cap;
    /* unique pre-tokens */
    tok_strmap word_map;
    ivec *words;
    int64_t *wcount;
    int64_t n_words, words_cap;
    int64_t *stamp;
    /* pairs */
    tok_pairmap pair_idx; /* (a, b) -> index in pairs, stored in `rank` */
    pair_info *pairs;
    int64_t n_pairs, pairs_cap;
    heap_e *heap;
    int64_t hn, hcap;
    int32_t (*merges)[2];
    int64_t n_merges;
} trainer;

static int ivec_push(ivec *v, int32_t x)
{
    if (v->n == v->cap) {
        int64_t cap = v->cap ? v->cap * 2 : 4;
        int32_t *p = realloc(v->v, (size_t)cap * sizeof *p);
        if (!p)
            return df_error(DF_ENOMEM, "BPE trainer: out of memory");
        v->v = p;
        v->cap = cap;
    }
    v->v[v->n++] = x;
    return 0;
}

static int reserve(void **p, int64_t *cap, int64_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    int64_t c = *cap ? *cap * 2 : 256;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q)
        return df_error(DF_ENOMEM, "BPE trainer: out of memory");
    *p = q;
    *cap = c;
    return 0;
}

/* ---- counting pre-tokens ------------------------------------------------------------- */

static int add_word(trainer *tr, const char *s, int64_t n)
{
    int32_t w = tok_strmap_get(&tr->word_map, s, n);
    if (w >= 0) {
        tr->wcount[w]++;
        return 0;
    }
    int64_t cap = tr->words_cap;
    int rc = reserve((void **)&tr->words, &cap, tr->n_words + 1, sizeof *tr->words);
    if (!rc) {
        cap = tr->words_cap;
        rc = reserve((void **)&tr->wcount, &cap, tr->n_words + 1, sizeof *tr->wcount);
    }
    if (!rc) {
        tr->words_cap = cap;
        rc = tok_strmap_put(&tr->word_map, s, n, (int32_t)tr->n_words);
    }
    if (rc)
        return rc;
    ivec *v = &tr->words[tr->n_words];
    memset(v, 0, sizeof *v);
    tr->wcount[tr->n_words++] = 1;
    for (int64_t i = 0; i < n && !rc; i++)
        rc = ivec_push(v, (int32_t)(uint8_t)s[i]); /* token id == byte until renumbered */
    return rc;
}

static int count_piece(trainer *tr, const pcre2_code *re, pcre2_match_data *md, const char *s, int64_t n)
{
    int64_t off = 0, prev = 0;
    while (off < n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, (PCRE2_SIZE)n, (PCRE2_SIZE)off, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(re, (PCRE2_SPTR)s, (PCRE2_SIZE)n, (PCRE2_SIZE)off,
                             PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0)
            return df_error(DF_EINTERNAL, "BPE trainer: PCRE2 match failed (%d)", rc);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        int64_t ms = (int64_t)ov[0], me = (int64_t)ov[1];
        if (me == ms) {
            off = ms + 1;
            while (off < n && ((uint8_t)s[off] & 0xC0) == 0x80)
                off++;
            continue;
        }
        if ((ms > prev && (rc = add_word(tr, s + prev, ms - prev))) || (rc = add_word(tr, s + ms, me - ms)))
            return rc;
        prev = off = me;
    }
    return prev < n ? add_word(tr, s + prev, n - prev) : 0;
}

/* Split the special-token strings out of a text (they become added tokens) and count the rest. */
static int count_text(trainer *tr, const df_tokenizer *nfc, const pcre2_code *re, pcre2_match_data *md,
                      const char *text, int64_t ti)
{
    int64_t n = (int64_t)strlen(text), bad = tok_utf8_invalid_at(text, n);
    if (bad >= 0)
        return df_error(DF_EINVAL, "BPE trainer: text %lld is not valid UTF-8 at byte %lld", (long long)ti,
                        (long long)bad);
    char *norm;
    int64_t nn;
    int rc = tok_normalize(nfc, text, n, &norm, &nn);
    const char *s = norm ? norm : text;
    for (int64_t seg = 0, i = 0; !rc && i <= nn; i++) {
        int64_t skip = 0;
        for (int k = 0; k < 3 && i < nn && s[i] == '<'; k++)
            if (strncmp(s + i, specials[k], strlen(specials[k])) == 0)
                skip = (int64_t)strlen(specials[k]);
        if (!skip && i < nn)
            continue;
        if (i > seg)
            rc = count_piece(tr, re, md, s + seg, i - seg);
        seg = i + skip;
        i = seg - 1;
        if (!skip)
            break;
    }
    free(norm);
    return rc;
}

/* ---- merging --------------------------------------------------------------------------- */

/* Heap order: higher count first, then the lexicographically smaller (left, right) bytes. */
static bool heap_before(const trainer *tr, heap_e x, heap_e y)
{
    if (x.count != y.count)
        return x.count > y.count;
    const pair_info *p = &tr->pairs[x.pair], *q = &tr->pairs[y.pair];
    for (int side = 0; side < 2; side++) {
        int32_t i = side ? p->b : p->a, j = side ? q->b : q->a;
        int32_t li = tr->tl[i], lj = tr->tl[j];
        int c = memcmp(tr->tb[i], tr->tb[j], (size_t)(li < lj ? li : lj));
        if (c || li != lj)
            return c ? c < 0 : li < lj;
    }
    return false;
}

static int heap_add(trainer *tr, int32_t pair)
{
    if (reserve((void **)&tr->heap, &tr->hcap, tr->hn + 1, sizeof *tr->heap))
        return DF_ENOMEM;
    heap_e e = {tr->pairs[pair].count, pair};
    int64_t i = tr->hn++;
    while (i > 0 && heap_before(tr, e, tr->heap[(i - 1) / 2])) {
        tr->heap[i] = tr->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    tr->heap[i] = e;
    return 0;
}

static heap_e heap_take(trainer *tr)
{
    heap_e top = tr->heap[0], last = tr->heap[--tr->hn];
    int64_t i = 0;
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, m = i;
        heap_e best = last;
        if (l < tr->hn && heap_before(tr, tr->heap[l], best))
            m = l, best = tr->heap[l];
        if (r < tr->hn && heap_before(tr, tr->heap[r], best))
            m = r;
        if (m == i)
            break;
        tr->heap[i] = tr->heap[m];
        i = m;
    }
    if (tr->hn > 0)
        tr->heap[i] = last;
    return top;
}

/* Add `delta` occurrences of (a, b) in word w; returns the pair index or -1 on error. */
static int64_t pair_add(trainer *tr, int32_t a, int32_t b, int64_t delta, int32_t w, bool track)
{
    const tok_pair_slot *slot = tok_pairmap_find(&tr->pair_idx, a, b);
    int32_t p;
    if (slot) {
        p = slot->rank;
    } else {
        if (reserve((void **)&tr->pairs, &tr->pairs_cap, tr->n_pairs + 1, sizeof *tr->pairs))
            return -1;
        p = (int32_t)tr->n_pairs++;
        tr->pairs[p] = (pair_info){.a = a, .b = b};
        if (tok_pairmap_put(&tr->pair_idx, a, b, p, 0))
            return -1;
    }
    tr->pairs[p].count += delta;
    if (track && ivec_push(&tr->pairs[p].words, w))
        return -1;
    return p;
}

static int new_token(trainer *tr, const char *bytes, int32_t len)
{
    if (reserve((void **)&tr->tb, &tr->tok_cap, tr->n_tok + 1, sizeof *tr->tb))
        return DF_ENOMEM;
    int32_t *tl = realloc(tr->tl, (size_t)tr->tok_cap * sizeof *tl); /* grows alongside tb */
    char *b = malloc((size_t)len + 1);
    if (tl)
        tr->tl = tl;
    if (!tl || !b) {
        free(b);
        return df_error(DF_ENOMEM, "BPE trainer: out of memory");
    }
    memcpy(b, bytes, (size_t)len);
    b[len] = '\0';
    tr->tb[tr->n_tok] = b;
    tr->tl[tr->n_tok++] = len;
    return 0;
}

/* Merge pair p into a new token in every word that holds it. */
static int apply_merge(trainer *tr, int32_t p, int64_t iter)
{
    int32_t a = tr->pairs[p].a, b = tr->pairs[p].b, c = (int32_t)tr->n_tok;
    char *buf = malloc((size_t)(tr->tl[a] + tr->tl[b]));
    if (!buf)
        return df_error(DF_ENOMEM, "BPE trainer: out of memory");
    memcpy(buf, tr->tb[a], (size_t)tr->tl[a]);
    memcpy(buf + tr->tl[a], tr->tb[b], (size_t)tr->tl[b]);
    int rc = new_token(tr, buf, tr->tl[a] + tr->tl[b]);
    free(buf);
    if (rc)
        return rc;
    ivec touched = {0};
    ivec list = tr->pairs[p].words; /* pairs may move while we add new ones */
    tr->pairs[p].words = (ivec){0};
    for (int64_t k = 0; k < list.n && !rc; k++) {
        int32_t w = list.v[k];
        if (tr->stamp[w] == iter)
            continue;
        tr->stamp[w] = iter;
        ivec *s = &tr->words[w];
        bool has = false;
        for (int64_t i = 0; i + 1 < s->n && !has; i++)
            has = s->v[i] == a && s->v[i + 1] == b;
        if (!has)
            continue;
        int64_t cnt = tr->wcount[w];
        for (int64_t i = 0; i + 1 < s->n; i++) /* every pair of the word exists already */
            tr->pairs[tok_pairmap_find(&tr->pair_idx, s->v[i], s->v[i + 1])->rank].count -= cnt;
        int64_t o = 0;
        for (int64_t i = 0; i < s->n; i++) {
            if (i + 1 < s->n && s->v[i] == a && s->v[i + 1] == b) {
                s->v[o++] = c;
                i++;
            } else {
                s->v[o++] = s->v[i];
            }
        }
        s->n = o;
        for (int64_t i = 0; i + 1 < s->n && !rc; i++) {
            bool fresh = s->v[i] == c || s->v[i + 1] == c;
            int64_t q = pair_add(tr, s->v[i], s->v[i + 1], cnt, w, fresh);
            if (q < 0)
                rc = DF_ENOMEM;
            else if (fresh)
                rc = ivec_push(&touched, (int32_t)q);
        }
    }
    for (int64_t k = 0; k < touched.n && !rc; k++) {
        pair_info *q = &tr->pairs[touched.v[k]];
        if (q->count > 0 && q->pushed != iter) {
            q->pushed = iter;
            rc = heap_add(tr, touched.v[k]);
        }
    }
    free(touched.v);
    free(list.v);
    return rc;
}

/* ---- the trained tokenizer ------------------------------------------------------------ */

/* A ChatML template of the Qwen form with `sys` as its default system message. */
static char *chatml_template(const char *sys)
{
    static const char head[] =
        "{%- if messages[0]['role'] == 'system' %}\n"
        "    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
        "{%- else %}\n"
        "    {{- '<|im_start|>system\\n";
    static const char tail[] =
        "<|im_end|>\\n' }}\n"
        "{%- endif %}\n"
        "{%- for message in messages %}\n"
        "    {%- if not (message['role'] == 'system' and loop.first) %}\n"
        "        {{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}\n"
        "    {%- endif %}\n"
        "{%- endfor %}\n"
        "{%- if add_generation_prompt %}\n"
        "    {{- '<|im_start|>assistant\\n' }}\n"
        "{%- endif %}\n";
    size_t n = strlen(sys);
    char *out = malloc(sizeof head + sizeof tail + 2 * n), *w = out;
    if (!out)
        return NULL;
    memcpy(w, head, sizeof head - 1);
    w += sizeof head - 1;
    for (size_t i = 0; i < n; i++) { /* escape for a single-quoted Jinja literal */
        if (sys[i] == '\\' || sys[i] == '\'')
            *w++ = '\\', *w++ = sys[i];
        else if (sys[i] == '\n')
            *w++ = '\\', *w++ = 'n';
        else
            *w++ = sys[i];
    }
    memcpy(w, tail, sizeof tail);
    return out;
}

static int build_tokenizer(trainer *tr, const char *pattern, const char *sys, df_tokenizer **out)
{
    json_t *vocab = json_object(), *merges = json_array(), *added = json_array();
    char **vs = calloc((size_t)tr->n_tok, sizeof *vs);
    int rc = 0;
    if (!vs || !vocab || !merges || !added)
        rc = df_error(DF_ENOMEM, "BPE trainer: out of memory");
    for (int64_t i = 0; !rc && i < tr->n_tok; i++) {
        if (!(vs[i] = tok_bytes_to_vocab(tr->tb[i], tr->tl[i])))
            rc = df_error(DF_ENOMEM, "BPE trainer: out of memory");
        else
            json_object_set_new(vocab, vs[i], json_integer(i));
    }
    for (int64_t r = 0; !rc && r < tr->n_merges; r++) {
        const char *a = vs[tr->merges[r][0]], *b = vs[tr->merges[r][1]];
        char *m = malloc(strlen(a) + strlen(b) + 2);
        if (!m) {
            rc = df_error(DF_ENOMEM, "BPE trainer: out of memory");
            break;
        }
        strcpy(m, a);
        strcat(m, " ");
        strcat(m, b);
        json_array_append_new(merges, json_string(m));
        free(m);
    }
    for (int k = 0; k < 3; k++)
        json_array_append_new(added, json_pack("{s:I, s:s, s:b, s:b, s:b, s:b, s:b}", "id",
                                               (json_int_t)(tr->n_tok + k), "content", specials[k],
                                               "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0,
                                               "special", 1));
    char *tmpl = chatml_template(sys);
    json_t *root = NULL, *cfg = NULL;
    if (!rc) {
        root = json_pack(
            "{s:O, s:{s:s}, s:{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]},"
            " s:{s:s, s:b, s:b, s:b}, s:{s:s, s:b, s:b, s:b},"
            " s:{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, s:O, s:O}}",
            "added_tokens", added, "normalizer", "type", "NFC", "pre_tokenizer", "type", "Sequence",
            "pretokenizers", "type", "Split", "pattern", "Regex", pattern, "behavior", "Isolated", "invert", 0,
            "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0, "post_processor",
            "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0, "decoder", "type",
            "ByteLevel", "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0, "model", "type", "BPE",
            "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", 0,
            "byte_fallback", 0, "ignore_merges", 0, "vocab", vocab, "merges", merges);
        cfg = json_pack("{s:b, s:b, s:n, s:s?, s:b, s:s, s:s, s:s, s:b, s:s, s:n}", "add_bos_token", 0,
                        "add_prefix_space", 0, "bos_token", "chat_template", tmpl,
                        "clean_up_tokenization_spaces", 0, "eos_token", specials[2], "errors", "replace",
                        "pad_token", specials[0], "split_special_tokens", 0, "tokenizer_class",
                        "PreTrainedTokenizerFast", "unk_token");
        if (!root || !cfg || !tmpl)
            rc = df_error(DF_ENOMEM, "BPE trainer: out of memory");
    }
    df_tokenizer *t = rc ? NULL : tok_new();
    if (!rc && !t)
        rc = df_error(DF_ENOMEM, "BPE trainer: out of memory");
    if (!rc)
        rc = tok_parse_pipeline(t, root, "BPE trainer");
    if (!rc)
        rc = tok_apply_config(t, cfg, "BPE trainer");
    for (int64_t i = 0; vs && i < tr->n_tok; i++)
        free(vs[i]);
    free(vs);
    free(tmpl);
    json_decref(root);
    json_decref(cfg);
    json_decref(vocab);
    json_decref(merges);
    json_decref(added);
    if (rc) {
        df_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

static void trainer_free(trainer *tr)
{
    for (int64_t i = 0; i < tr->n_tok; i++)
        free(tr->tb[i]);
    free(tr->tb);
    free(tr->tl);
    tok_strmap_free(&tr->word_map);
    for (int64_t i = 0; i < tr->n_words; i++)
        free(tr->words[i].v);
    free(tr->words);
    free(tr->wcount);
    free(tr->stamp);
    tok_pairmap_free(&tr->pair_idx);
    for (int64_t i = 0; i < tr->n_pairs; i++)
        free(tr->pairs[i].words.v);
    free(tr->pairs);
    free(tr->heap);
    free(tr->merges);
}

static int cmp_cp(const void *x, const void *y)
{
    uint32_t a = tok_byte_to_cp(*(const uint8_t *)x), b = tok_byte_to_cp(*(const uint8_t *)y);
    return (a > b) - (a < b);
}

/* Count, set up the byte alphabet and the initial pairs. */
static int prepare(trainer *tr, const char *const *texts, int64_t n_texts, const char *pattern)
{
    pcre2_code *re = NULL;
    int rc = tok_compile_regex(pattern, false, &re, "BPE trainer");
    if (rc)
        return rc;
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    df_tokenizer *nfc = tok_new();
    if (!md || !nfc)
        rc = df_error(DF_ENOMEM, "BPE trainer: out of memory");
    else
        nfc->norm[nfc->n_norm++].kind = TOK_NORM_NFC;
    for (int64_t i = 0; !rc && i < n_texts; i++)
        rc = texts[i] ? count_text(tr, nfc, re, md, texts[i], i)
                      : df_error(DF_EINVAL, "BPE trainer: text %lld is NULL", (long long)i);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    df_tokenizer_free(nfc);
    uint8_t order[256];
    int32_t byte_id[256];
    for (int b = 0; b < 256; b++)
        order[b] = (uint8_t)b;
    qsort(order, 256, 1, cmp_cp); /* GPT-2 vocabulary order: "!" = 0 */
    for (int i = 0; !rc && i < 256; i++) {
        byte_id[order[i]] = i;
        rc = new_token(tr, (const char *)&order[i], 1);
    }
    if (!rc && !(tr->stamp = calloc((size_t)tr->n_words + 1, sizeof *tr->stamp)))
        rc = df_error(DF_ENOMEM, "BPE trainer: out of memory");
    for (int64_t w = 0; !rc && w < tr->n_words; w++) {
        ivec *s = &tr->words[w];
        for (int64_t i = 0; i < s->n; i++)
            s->v[i] = byte_id[s->v[i]];
        for (int64_t i = 0; i + 1 < s->n && !rc; i++)
            if (pair_add(tr, s->v[i], s->v[i + 1], tr->wcount[w], (int32_t)w, true) < 0)
                rc = DF_ENOMEM;
    }
    for (int64_t p = 0; !rc && p < tr->n_pairs; p++)
        rc = heap_add(tr, (int32_t)p);
    return rc;
}

int df_tokenizer_train_bpe(const char *const *texts, int64_t n_texts, int64_t vocab_size,
                           const df_bpe_train_options *options, df_tokenizer **out)
{
    *out = NULL;
    if (vocab_size < 259 || vocab_size > (1 << 24))
        return df_error(DF_EINVAL, "BPE trainer: vocab_size %lld must be in [259, %d] (256 bytes + 3 special tokens)",
                        (long long)vocab_size, 1 << 24);
    if (n_texts < 0 || (n_texts > 0 && !texts))
        return df_error(DF_EINVAL, "BPE trainer: bad text list");
    const char *pattern = options && options->pattern ? options->pattern : tok_qwen2_pattern;
    const char *sys = options && options->system_message ? options->system_message : "You are a helpful assistant.";
    int64_t min_freq = options && options->min_frequency > 0 ? options->min_frequency : 2;
    trainer tr = {0};
    int rc = prepare(&tr, texts, n_texts, pattern);
    int64_t target = vocab_size - 3 - 256, iter = 0;
    if (!rc && !(tr.merges = malloc((size_t)(target + 1) * sizeof *tr.merges)))
        rc = df_error(DF_ENOMEM, "BPE trainer: out of memory");
    while (!rc && tr.n_merges < target && tr.hn > 0) {
        heap_e e = heap_take(&tr);
        int64_t cur = tr.pairs[e.pair].count;
        if (cur != e.count) { /* stale: counts only fall, so re-queue at the current value */
            if (cur > 0)
                rc = heap_add(&tr, e.pair);
            continue;
        }
        if (cur < min_freq)
            break;
        tr.merges[tr.n_merges][0] = tr.pairs[e.pair].a;
        tr.merges[tr.n_merges++][1] = tr.pairs[e.pair].b;
        rc = apply_merge(&tr, e.pair, ++iter);
    }
    if (!rc)
        rc = build_tokenizer(&tr, pattern, sys, out);
    trainer_free(&tr);
    return rc;
}
