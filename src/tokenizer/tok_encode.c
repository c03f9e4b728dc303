/*
 * Encoding: added-token split -> normalizer -> pre-tokenizer -> BPE, over bytes
 * (byte-level models) or UTF-8 chars with byte fallback (SentencePiece-style models).
 *
 * Everything mutable lives in an enc_ctx on the caller's stack, so a const
 * tokenizer can be shared by many threads (no caches, PCRE2 match data per call).
 */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

typedef struct span {
    int64_t s, e;
    bool m; /* a delimiter (regex match, after `invert`) */
} span;

typedef struct heap_item {
    int32_t rank, pos, new_id;
} heap_item;

typedef struct enc_ctx {
    const df_tokenizer *t;
    int32_t *ids;
    int64_t n, cap;
    int32_t *sym, *prev, *next; /* BPE symbols of the current word, a linked list */
    int64_t scap;
    heap_item *heap;
    int64_t hn, hcap;
    char *vbuf; /* vocabulary form of a word (ignore_merges lookup) */
    int64_t vcap;
    pcre2_match_data *md;
    span *spans[TOK_MAX_PRE];
    int64_t span_cap[TOK_MAX_PRE];
} enc_ctx;

static int grow(void **p, int64_t *cap, int64_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    int64_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q)
        return df_error(DF_ENOMEM, "tokenizer: out of memory while encoding");
    *p = q;
    *cap = c;
    return 0;
}

static int push_id(enc_ctx *c, int32_t id)
{
    if (c->n == c->cap && grow((void **)&c->ids, &c->cap, c->n + 1, sizeof *c->ids))
        return DF_ENOMEM;
    c->ids[c->n++] = id;
    return 0;
}

/* ---- BPE on one pre-token: lowest-rank pair first, leftmost on ties ------------------
 * (tokenizers models/bpe/word.rs merge_all: a heap of candidate merges, stale entries
 * skipped when the pair at their position no longer produces their token). */

static bool heap_less(const heap_item *a, const heap_item *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(enc_ctx *c, heap_item it)
{
    int64_t i = c->hn++;
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!heap_less(&it, &c->heap[p]))
            break;
        c->heap[i] = c->heap[p];
        i = p;
    }
    c->heap[i] = it;
}

static heap_item heap_pop(enc_ctx *c)
{
    heap_item top = c->heap[0], last = c->heap[--c->hn];
    int64_t i = 0;
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, m = i;
        const heap_item *best = &last;
        if (l < c->hn && heap_less(&c->heap[l], best)) {
            m = l;
            best = &c->heap[l];
        }
        if (r < c->hn && heap_less(&c->heap[r], best))
            m = r;
        if (m == i)
            break;
        c->heap[i] = c->heap[m];
        i = m;
    }
    if (c->hn > 0)
        c->heap[i] = last;
    return top;
}

static void push_pair(enc_ctx *c, int32_t pos)
{
    int32_t j = c->next[pos];
    if (j < 0)
        return;
    const tok_pair_slot *m = tok_pairmap_find(&c->t->pairs, c->sym[pos], c->sym[j]);
    if (m)
        heap_push(c, (heap_item){m->rank, pos, m->merged});
}

/* Short words: the same merge order (lowest rank, leftmost) by scanning a small array,
 * which beats the heap for the few-byte pre-tokens that make up most text. */
#define TOK_SHORT_WORD 24

static int bpe_short(enc_ctx *c, const int32_t *init, int m)
{
    const tok_pairmap *pm = &c->t->pairs;
    int32_t sym[TOK_SHORT_WORD], rank[TOK_SHORT_WORD], merged[TOK_SHORT_WORD];
    memcpy(sym, init, (size_t)m * sizeof *sym);
    for (int i = 0; i + 1 < m; i++) {
        const tok_pair_slot *sl = tok_pairmap_find(pm, sym[i], sym[i + 1]);
        rank[i] = sl ? sl->rank : INT32_MAX;
        merged[i] = sl ? sl->merged : -1;
    }
    while (m > 1) {
        int best = 0;
        for (int i = 1; i + 1 < m; i++)
            if (rank[i] < rank[best])
                best = i;
        if (rank[best] == INT32_MAX)
            break;
        sym[best] = merged[best];
        m--;
        memmove(sym + best + 1, sym + best + 2, (size_t)(m - best - 1) * sizeof *sym);
        memmove(rank + best + 1, rank + best + 2, (size_t)(m > best + 1 ? m - best - 2 : 0) * sizeof *rank);
        memmove(merged + best + 1, merged + best + 2, (size_t)(m > best + 1 ? m - best - 2 : 0) * sizeof *merged);
        for (int i = best - 1; i <= best; i++) {
            if (i < 0 || i + 1 >= m)
                continue;
            const tok_pair_slot *sl = tok_pairmap_find(pm, sym[i], sym[i + 1]);
            rank[i] = sl ? sl->rank : INT32_MAX;
            merged[i] = sl ? sl->merged : -1;
        }
    }
    for (int i = 0; i < m; i++)
        if (push_id(c, sym[i]))
            return DF_ENOMEM;
    return 0;
}

static int utf8_len(uint8_t b) { return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }

/* Initial symbols of a word of a char-level model (tokenizers models/bpe/model.rs merge_word):
 * each char's id; else its "<0xHH>" ids (byte_fallback); else <unk>, runs of unknown chars
 * fused when fuse_unk. As there, a pending <unk> is written only before the next known char
 * or at the end, so it follows any byte-fallback ids in between. At most n symbols. */
static int64_t char_symbols(const df_tokenizer *t, const char *w, int64_t n, int32_t *out)
{
    int64_t m = 0;
    bool unk = false;
    for (int64_t i = 0, l; i < n; i += l) {
        l = utf8_len((uint8_t)w[i]);
        if (l > n - i) /* never past the word (whole chars when the input is valid UTF-8) */
            l = n - i;
        int32_t id = tok_strmap_get(&t->vocab, w + i, l);
        bool bytes = id < 0 && t->byte_fallback;
        for (int64_t k = 0; bytes && k < l; k++)
            bytes = t->fallback_id[(uint8_t)w[i + k]] >= 0;
        if (id >= 0) {
            if (unk)
                out[m++] = t->unk_id;
            unk = false;
            out[m++] = id;
        } else if (bytes) {
            for (int64_t k = 0; k < l; k++)
                out[m++] = t->fallback_id[(uint8_t)w[i + k]];
        } else if (t->unk_id >= 0) {
            if (unk && !t->fuse_unk)
                out[m++] = t->unk_id;
            unk = true;
        }
    }
    if (unk)
        out[m++] = t->unk_id;
    return m;
}

/* Initial symbols of a word: its chars (char-level models) or bytes; at most n. */
static int64_t word_symbols(const df_tokenizer *t, const char *w, int64_t n, int32_t *out)
{
    if (t->char_level)
        return char_symbols(t, w, n, out);
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[(uint8_t)w[i]];
        id = id >= 0 ? id : t->unk_id; /* HF drops a symbol with no id and no unk */
        if (id >= 0)
            out[m++] = id;
    }
    return m;
}

/* Id of the whole word when it is a vocabulary token, else -1 (ignore_merges). */
static int32_t whole_word(enc_ctx *c, const char *w, int64_t n)
{
    const df_tokenizer *t = c->t;
    if (t->char_level)
        return tok_strmap_get(&t->vocab, w, n);
    if (grow((void **)&c->vbuf, &c->vcap, 2 * n + 1, 1))
        return -2;
    char *p = c->vbuf;
    for (int64_t i = 0; i < n; i++) {
        uint32_t cp = tok_byte_to_cp((uint8_t)w[i]);
        if (cp < 0x80) {
            *p++ = (char)cp;
        } else {
            *p++ = (char)(0xC0 | (cp >> 6));
            *p++ = (char)(0x80 | (cp & 0x3F));
        }
    }
    return tok_strmap_get(&t->vocab, c->vbuf, p - c->vbuf);
}

static int bpe_word(enc_ctx *c, const char *w, int64_t n)
{
    const df_tokenizer *t = c->t;
    if (n == 1 && !t->char_level) {
        int32_t id = t->byte_id[(uint8_t)w[0]];
        id = id >= 0 ? id : t->unk_id;
        return id >= 0 ? push_id(c, id) : 0;
    }
    if (t->ignore_merges) { /* Llama-3: a pre-token that is itself a token is emitted whole */
        int32_t id = whole_word(c, w, n);
        if (id == -2)
            return DF_ENOMEM;
        if (id >= 0)
            return push_id(c, id);
    }
    if (n <= TOK_SHORT_WORD) {
        int32_t init[TOK_SHORT_WORD];
        return bpe_short(c, init, (int)word_symbols(t, w, n, init));
    }
    if (n > c->scap) { /* the three arrays share one capacity */
        int64_t cap = c->scap, pcap = c->scap, ncap = c->scap;
        if (grow((void **)&c->sym, &cap, n, sizeof *c->sym) || grow((void **)&c->prev, &pcap, n, sizeof *c->prev) ||
            grow((void **)&c->next, &ncap, n, sizeof *c->next))
            return DF_ENOMEM;
        c->scap = cap; /* grow() doubles from the same start, so cap == pcap == ncap */
    }
    if (grow((void **)&c->heap, &c->hcap, 3 * n, sizeof *c->heap))
        return DF_ENOMEM;
    int32_t m = (int32_t)word_symbols(t, w, n, c->sym);
    for (int32_t i = 0; i < m; i++) {
        c->prev[i] = i - 1;
        c->next[i] = i + 1 < m ? i + 1 : -1;
    }
    c->hn = 0;
    for (int32_t i = 0; i + 1 < m; i++)
        push_pair(c, i);
    while (c->hn > 0) {
        heap_item top = heap_pop(c);
        int32_t p = top.pos, j;
        if (c->sym[p] < 0 || (j = c->next[p]) < 0)
            continue;
        const tok_pair_slot *sl = tok_pairmap_find(&t->pairs, c->sym[p], c->sym[j]);
        if (!sl || sl->merged != top.new_id)
            continue;
        c->sym[p] = top.new_id;
        c->sym[j] = -1;
        c->next[p] = c->next[j];
        if (c->next[j] >= 0)
            c->prev[c->next[j]] = p;
        if (c->prev[p] >= 0)
            push_pair(c, c->prev[p]);
        push_pair(c, p);
    }
    for (int32_t i = m > 0 ? 0 : -1; i >= 0; i = c->next[i])
        if (push_id(c, c->sym[i]))
            return DF_ENOMEM;
    return 0;
}

/* ---- pre-tokenizers ---------------------------------------------------------------- */

static int add_span(enc_ctx *c, int depth, int64_t *k, int64_t s, int64_t e, bool m)
{
    if (grow((void **)&c->spans[depth], &c->span_cap[depth], *k + 1, sizeof(span)))
        return DF_ENOMEM;
    c->spans[depth][(*k)++] = (span){s, e, m};
    return 0;
}

/* The first match of re in s [n] from off, in [*ms, *me): 0; -1 when there is none; DF_EINTERNAL
 * (reported) when PCRE2 fails, e.g. at its match limit. A JIT stack too small for a long input
 * falls back to the interpreter. */
static int match_at(const pcre2_code *re, const char *s, int64_t n, int64_t off, pcre2_match_data *md,
                    int64_t *ms, int64_t *me)
{
    int rc = pcre2_match(re, (PCRE2_SPTR)s, (PCRE2_SIZE)n, (PCRE2_SIZE)off, PCRE2_NO_UTF_CHECK, md, NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(re, (PCRE2_SPTR)s, (PCRE2_SIZE)n, (PCRE2_SIZE)off, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                         NULL);
    if (rc == PCRE2_ERROR_NOMATCH)
        return -1;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        return df_error(DF_EINTERNAL, "tokenizer: PCRE2 match failed: %s", (const char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    *ms = (int64_t)ov[0];
    *me = (int64_t)ov[1];
    return 0;
}

/* The next match of re in s [n] as the onig crate's find_iter gives it (tokenizers' regexes): from
 * *off, an empty match right where the previous match (*last) ended skipped, the search going on
 * one char further; *off moves past the match (an empty one: by one char, past n at the end).
 * 0 with the match in [*ms, *me); -1 when there is none; DF_EINTERNAL when PCRE2 fails. */
static int next_match(const pcre2_code *re, const char *s, int64_t n, int64_t *off, int64_t *last,
                      pcre2_match_data *md, int64_t *ms, int64_t *me)
{
    for (;;) {
        if (*off > n)
            return -1;
        int rc = match_at(re, s, n, *off, md, ms, me);
        if (rc)
            return rc;
        *off = *me > *ms ? *me : *ms < n ? *ms + utf8_len((uint8_t)s[*ms]) : n + 1;
        if (*me > *ms || *ms != *last)
            break;
    }
    *last = *me;
    return 0;
}

/* Cut s [n] into match / gap spans covering it (tokenizers Pattern::find_matches: an empty match
 * is a span too, so it cuts the text there). */
static int find_spans(enc_ctx *c, int depth, const pcre2_code *re, bool invert, const char *s, int64_t n,
                      int64_t *k)
{
    int64_t off = 0, prev = 0, last = -1, ms, me;
    *k = 0;
    for (int rc; (rc = next_match(re, s, n, &off, &last, c->md, &ms, &me)) != -1;) {
        if (rc)
            return rc;
        if ((ms > prev && add_span(c, depth, k, prev, ms, invert)) || add_span(c, depth, k, ms, me, !invert))
            return DF_ENOMEM;
        prev = me;
    }
    if (prev < n && add_span(c, depth, k, prev, n, invert))
        return DF_ENOMEM;
    return 0;
}

/* Apply a SplitDelimiterBehavior in place (tokenizers normalizer.rs split). Returns the
 * range [*lo, *hi) of output spans. */
static void apply_behavior(span *v, int64_t k, tok_split_behavior b, int64_t *lo, int64_t *hi)
{
    int64_t w = 0;
    bool prev_m = false;
    switch (b) {
    case TOK_SPLIT_ISOLATED:
        *lo = 0, *hi = k;
        return;
    case TOK_SPLIT_REMOVED:
        for (int64_t i = 0; i < k; i++)
            if (!v[i].m)
                v[w++] = v[i];
        break;
    case TOK_SPLIT_MERGED_PREV:
        for (int64_t i = 0; i < k; i++) {
            if (v[i].m && !prev_m && w > 0)
                v[w - 1].e = v[i].e;
            else
                v[w++] = v[i];
            prev_m = v[i].m;
        }
        break;
    case TOK_SPLIT_CONTIGUOUS:
        for (int64_t i = 0; i < k; i++) {
            if (v[i].m == prev_m && w > 0)
                v[w - 1].e = v[i].e;
            else
                v[w++] = v[i];
            prev_m = v[i].m;
        }
        break;
    case TOK_SPLIT_MERGED_NEXT: /* the same walk backwards, writing from the end */
        w = k;
        for (int64_t i = k - 1; i >= 0; i--) {
            bool m = v[i].m;
            if (m && !prev_m && w < k)
                v[w].s = v[i].s;
            else
                v[--w] = v[i];
            prev_m = m;
        }
        *lo = w, *hi = k;
        return;
    }
    *lo = 0, *hi = w;
}

/* Metaspace (tokenizers pre_tokenizers/metaspace.rs): spaces become the replacement, which is
 * also put in front (always, or only for the piece at the start of the input, "first") unless
 * the piece already starts with it. malloc'd. */
static char *metaspace(const tok_pre_step *st, const char *s, int64_t n, bool at0, int64_t *out_n)
{
    int64_t lr = (int64_t)strlen(st->replacement);
    char *r = tok_replace_all(s, n, " ", st->replacement, INT64_MAX, out_n);
    bool lead = st->prepend == TOK_PREPEND_ALWAYS || (st->prepend == TOK_PREPEND_FIRST && at0);
    if (!r || !lead || (*out_n >= lr && memcmp(r, st->replacement, (size_t)lr) == 0))
        return r;
    char *q = malloc((size_t)(*out_n + lr) + 1);
    if (q) {
        memcpy(q, st->replacement, (size_t)lr);
        memcpy(q + lr, r, (size_t)*out_n + 1);
        *out_n += lr;
    }
    free(r);
    return q;
}

/* `at0`: the piece starts at offset 0 of the input (Metaspace's prepend_scheme "first"). */
static int pre_tokenize(enc_ctx *c, int depth, const char *s, int64_t n, bool at0)
{
    const df_tokenizer *t = c->t;
    if (n == 0)
        return 0;
    if (depth == t->n_pre)
        return bpe_word(c, s, n);
    const tok_pre_step *st = &t->pre[depth];
    char *tmp = NULL;
    int rc = 0;
    if (st->replacement) {
        if (!(tmp = metaspace(st, s, n, at0, &n)))
            return df_error(DF_ENOMEM, "tokenizer: out of memory while encoding");
        s = tmp;
    } else if (st->byte_level && st->add_prefix_space && s[0] != ' ') {
        if (!(tmp = malloc((size_t)n + 1)))
            return df_error(DF_ENOMEM, "tokenizer: out of memory while encoding");
        tmp[0] = ' ';
        memcpy(tmp + 1, s, (size_t)n);
        s = tmp;
        n++;
    }
    if (!st->re) {
        rc = pre_tokenize(c, depth + 1, s, n, at0);
    } else {
        int64_t k = 0, lo = 0, hi = 0;
        rc = find_spans(c, depth, st->re, st->invert, s, n, &k);
        if (!rc)
            apply_behavior(c->spans[depth], k, st->behavior, &lo, &hi);
        for (int64_t i = lo; !rc && i < hi; i++) {
            span sp = c->spans[depth][i];
            rc = pre_tokenize(c, depth + 1, s + sp.s, sp.e - sp.s, at0 && sp.s == 0);
        }
    }
    free(tmp);
    return rc;
}

/* ---- normalizers ------------------------------------------------------------------- */

/* Unicode normal form k of s [n]; *out NULL when unchanged (every form leaves ASCII alone). */
static int norm_unicode(tok_norm_kind k, const char *s, int64_t n, char **out, int64_t *out_n)
{
    static const int flags[] = {UTF8PROC_COMPOSE, UTF8PROC_DECOMPOSE, UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
                                UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT};
    bool ascii = true;
    for (int64_t i = 0; i < n && ascii; i++)
        ascii = (uint8_t)s[i] < 0x80;
    if (ascii)
        return 0;
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, n, &dst,
                                      (utf8proc_option_t)(UTF8PROC_STABLE | flags[k]));
    if (r < 0)
        return df_error(DF_EINVAL, "tokenizer: normalisation failed: %s", utf8proc_errmsg(r));
    *out = (char *)dst;
    *out_n = r;
    return 0;
}

/* Every match of a regex replaced by text, an empty one too (it inserts the text), found as
 * find_spans finds them; an empty string is left alone (tokenizers normalizers/replace.rs). */
static int norm_regex(const tok_norm_step *st, const char *s, int64_t n, char **out, int64_t *out_n)
{
    if (n == 0)
        return 0;
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    int64_t lt = (int64_t)strlen(st->text), cap = n + 16, o = 0, off = 0, prev = 0, last = -1, ms, me;
    char *r = malloc((size_t)cap);
    int rc = md && r ? 0 : DF_ENOMEM;
    while (!rc) {
        int m = next_match(st->re, s, n, &off, &last, md, &ms, &me);
        if (m) {
            rc = m < 0 ? 0 : m;
            break;
        }
        if ((rc = grow((void **)&r, &cap, o + (ms - prev) + lt + 1, 1)))
            break;
        memcpy(r + o, s + prev, (size_t)(ms - prev));
        memcpy(r + o + (ms - prev), st->text, (size_t)lt);
        o += ms - prev + lt;
        prev = me;
    }
    if (!rc && !(rc = grow((void **)&r, &cap, o + (n - prev) + 1, 1))) {
        memcpy(r + o, s + prev, (size_t)(n - prev));
        o += n - prev;
        r[o] = '\0';
    }
    pcre2_match_data_free(md);
    if (rc) {
        free(r);
        return rc == DF_ENOMEM ? df_error(DF_ENOMEM, "tokenizer: out of memory while normalising") : rc;
    }
    *out = r;
    *out_n = o;
    return 0;
}

static int norm_step(const tok_norm_step *st, const char *s, int64_t n, char **out, int64_t *out_n)
{
    *out = NULL;
    *out_n = n;
    switch (st->kind) {
    case TOK_NORM_PREPEND: /* tokenizers normalizers/prepend.rs: not on an empty string */
        if (n == 0)
            return 0;
        *out_n = (int64_t)strlen(st->text) + n;
        if (!(*out = malloc((size_t)*out_n + 1)))
            break;
        memcpy(*out, st->text, (size_t)(*out_n - n));
        memcpy(*out + (*out_n - n), s, (size_t)n);
        (*out)[*out_n] = '\0';
        return 0;
    case TOK_NORM_REPLACE:
        if (st->re)
            return norm_regex(st, s, n, out, out_n);
        if (!memmem(s, (size_t)n, st->literal, strlen(st->literal)))
            return 0;
        if (!(*out = tok_replace_all(s, n, st->literal, st->text, INT64_MAX, out_n)))
            break;
        return 0;
    default:
        return norm_unicode(st->kind, s, n, out, out_n);
    }
    return df_error(DF_ENOMEM, "tokenizer: out of memory while normalising");
}

int tok_normalize(const df_tokenizer *t, const char *s, int64_t n, char **out, int64_t *out_n)
{
    char *cur = NULL;
    *out_n = n;
    for (int k = 0; k < t->n_norm; k++) {
        char *next;
        int64_t nn;
        int rc = norm_step(&t->norm[k], cur ? cur : s, *out_n, &next, &nn);
        if (rc) {
            free(cur);
            return rc;
        }
        if (next) {
            free(cur);
            cur = next;
            *out_n = nn;
        }
    }
    *out = cur;
    return 0;
}

/* ---- added tokens -------------------------------------------------------------------- */

static int32_t prev_cp(const char *s, int64_t i, int64_t *start)
{
    int64_t j = i - 1;
    while (j > 0 && ((uint8_t)s[j] & 0xC0) == 0x80)
        j--;
    utf8proc_int32_t cp = -1;
    utf8proc_iterate((const utf8proc_uint8_t *)s + j, i - j, &cp);
    *start = j;
    return cp;
}

static bool is_space(int32_t cp)
{
    if ((cp >= 9 && cp <= 13) || cp == 32 || cp == 0x85)
        return true;
    utf8proc_category_t k = utf8proc_category(cp);
    return k == UTF8PROC_CATEGORY_ZS || k == UTF8PROC_CATEGORY_ZL || k == UTF8PROC_CATEGORY_ZP;
}

static bool is_word(int32_t cp) /* Rust regex \w: letters, marks, digits, connector punctuation */
{
    if (cp < 0)
        return false;
    utf8proc_category_t k = utf8proc_category(cp);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_ME) || k == UTF8PROC_CATEGORY_ND ||
           k == UTF8PROC_CATEGORY_PC;
}

/* Longest added token (of the given pass) starting at s[i]; -1 when none. */
static int match_added(const df_tokenizer *t, bool norm_pass, const char *s, int64_t n, int64_t i)
{
    int best = -1;
    for (int k = 0; k < t->n_added; k++) {
        const tok_added *a = &t->added[k];
        if (a->normalized != norm_pass || a->match_len == 0 || a->match_len > n - i ||
            a->match[0] != s[i] || (best >= 0 && a->match_len <= t->added[best].match_len))
            continue;
        if (memcmp(a->match, s + i, (size_t)a->match_len) == 0)
            best = k;
    }
    return best;
}

static int split_norm(enc_ctx *c, const char *s, int64_t n, bool at0);

static int segment(enc_ctx *c, bool norm_pass, const char *s, int64_t n, bool at0)
{
    return norm_pass ? pre_tokenize(c, 0, s, n, at0) : split_norm(c, s, n, at0);
}

/* Cut out added tokens (leftmost-longest, with single_word / lstrip / rstrip as in
 * tokenizers AddedVocabulary::find_matches) and pass the text between them on. */
static int split_added(enc_ctx *c, bool norm_pass, const char *s, int64_t n, bool at0)
{
    const df_tokenizer *t = c->t;
    const bool *first = norm_pass ? t->first_norm : t->first_raw;
    int64_t seg = 0, i = 0;
    int rc = 0;
    while (i < n && !rc) {
        if (!first[(uint8_t)s[i]]) {
            i++;
            continue;
        }
        int k = match_added(t, norm_pass, s, n, i);
        if (k < 0) {
            i++;
            continue;
        }
        const tok_added *a = &t->added[k];
        int64_t start = i, stop = i + a->match_len, tmp;
        if (a->single_word) {
            int32_t after = -1;
            if (stop < n)
                utf8proc_iterate((const utf8proc_uint8_t *)s + stop, n - stop, &after);
            if ((start > 0 && is_word(prev_cp(s, start, &tmp))) || is_word(after)) {
                i = stop; /* the automaton resumes after a discarded match */
                continue;
            }
        }
        if (a->lstrip)
            while (start > seg && is_space(prev_cp(s, start, &tmp)))
                start = tmp;
        if (a->rstrip) {
            int32_t cp;
            utf8proc_ssize_t l;
            while (stop < n && (l = utf8proc_iterate((const utf8proc_uint8_t *)s + stop, n - stop, &cp)) > 0 &&
                   is_space(cp))
                stop += l;
        }
        if (start > seg)
            rc = segment(c, norm_pass, s + seg, start - seg, at0 && seg == 0);
        if (!rc)
            rc = push_id(c, a->id);
        seg = i = stop;
    }
    if (!rc && seg < n)
        rc = segment(c, norm_pass, s + seg, n - seg, at0 && seg == 0);
    return rc;
}

static int split_norm(enc_ctx *c, const char *s, int64_t n, bool at0)
{
    char *norm;
    int64_t nn;
    int rc = tok_normalize(c->t, s, n, &norm, &nn);
    if (rc)
        return rc;
    const char *p = norm ? norm : s;
    rc = c->t->any_norm_added ? split_added(c, true, p, nn, at0) : pre_tokenize(c, 0, p, nn, at0);
    free(norm);
    return rc;
}

/* ---- entry points --------------------------------------------------------------------- */

int df_tokenizer_encode_n(const df_tokenizer *t, const char *text, int64_t len, bool add_special_tokens,
                          int32_t **ids, int64_t *n)
{
    *ids = NULL;
    *n = 0;
    if (!text || len < 0)
        return df_error(DF_EINVAL, "tokenizer: encode needs text and a length >= 0");
    int64_t bad = tok_utf8_invalid_at(text, len);
    if (bad >= 0)
        return df_error(DF_EINVAL, "tokenizer: input text is not valid UTF-8 at byte %lld", (long long)bad);
    enc_ctx c = {.t = t};
    int rc = 0;
    c.md = pcre2_match_data_create(1, NULL);
    if (!c.md || grow((void **)&c.ids, &c.cap, len / 3 + 16, sizeof *c.ids))
        rc = df_error(DF_ENOMEM, "tokenizer: out of memory while encoding");
    for (int k = 0; !rc && add_special_tokens && k < t->n_post_prefix; k++)
        rc = push_id(&c, t->post_prefix[k]);
    if (!rc)
        rc = split_added(&c, false, text, len, true);
    for (int k = 0; !rc && add_special_tokens && k < t->n_post_suffix; k++)
        rc = push_id(&c, t->post_suffix[k]);
    pcre2_match_data_free(c.md);
    free(c.sym);
    free(c.prev);
    free(c.next);
    free(c.heap);
    free(c.vbuf);
    for (int k = 0; k < TOK_MAX_PRE; k++)
        free(c.spans[k]);
    if (rc) {
        free(c.ids);
        return rc;
    }
    *ids = c.ids;
    *n = c.n;
    return 0;
}

int df_tokenizer_encode(const df_tokenizer *t, const char *text, bool add_special_tokens, int32_t **ids,
                        int64_t *n)
{
    if (!text) {
        *ids = NULL;
        *n = 0;
        return df_error(DF_EINVAL, "tokenizer: encode of a NULL text");
    }
    return df_tokenizer_encode_n(t, text, (int64_t)strlen(text), add_special_tokens, ids, n);
}
