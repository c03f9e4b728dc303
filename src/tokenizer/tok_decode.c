/*
 * Decoding: the tokenizer.json decoder chain over the token strings (tokenizers
 * decoders/: ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace), then the
 * optional transformers clean-up. A ByteLevel-only chain takes a fast path over the
 * tokens' precomputed bytes.
 */
#include "tokenizer/tok_internal.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* Copy bytes [n] to out as UTF-8, replacing each maximal invalid subpart with U+FFFD
 * (Unicode 3.9 "U+FFFD substitution of maximal subparts", as Rust's from_utf8_lossy), and each
 * byte 0 too: the text is NUL-terminated, so a U+0000 (a token of a random or early model) would
 * end it there and drop the rest, or all of it. */
static int64_t utf8_lossy(const uint8_t *s, int64_t n, char *out)
{
    int64_t o = 0;
    for (int64_t i = 0; i < n;) {
        uint8_t c = s[i];
        if (c < 0x80 && c != 0) {
            out[o++] = (char)c;
            i++;
            continue;
        }
        int need = 0;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF)
            need = 1;
        else if (c >= 0xE0 && c <= 0xEF)
            need = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        else if (c >= 0xF0 && c <= 0xF4)
            need = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        int k = 1;
        if (need && i + 1 < n && s[i + 1] >= lo && s[i + 1] <= hi) {
            k = 2;
            while (k <= need && i + k < n && (s[i + k] & 0xC0) == 0x80)
                k++;
        }
        if (need && k == need + 1) {
            memcpy(out + o, s + i, (size_t)k);
            o += k;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
        }
        i += k;
    }
    return o;
}

/* In-place replacement of every `from` by `to` (strlen(to) <= strlen(from)). */
static void replace_all(char *s, const char *from, const char *to)
{
    size_t lf = strlen(from), lt = strlen(to);
    char *r = s, *w = s;
    while (*r) {
        if (strncmp(r, from, lf) == 0) {
            memcpy(w, to, lt);
            w += lt;
            r += lf;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
}

/* transformers PreTrainedTokenizerBase.clean_up_tokenization, in its order. */
static void clean_up(char *s)
{
    static const char *pairs[][2] = {{" .", "."},   {" ?", "?"},     {" !", "!"},   {" ,", ","},
                                     {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"},
                                     {" 've", "'ve"}, {" 're", "'re"}};
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; k++)
        replace_all(s, pairs[k][0], pairs[k][1]);
}

/* ---- the decoder chain over a list of token strings ------------------------------- */

typedef struct piece {
    char *s;
    int64_t n;
} piece;

typedef struct plist {
    piece *v;
    int64_t n;
} plist;

static void plist_free(plist *l)
{
    for (int64_t i = 0; i < l->n; i++)
        free(l->v[i].s);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

/* The byte of a "<0xHH>" token, or -1 (tokenizers ByteFallback: u8::from_str_radix of the two
 * chars, which also reads "+H"). */
static int byte_token(const char *s, int64_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>' || !isxdigit((unsigned char)s[4]) ||
        !(isxdigit((unsigned char)s[3]) || s[3] == '+'))
        return -1;
    char hex[3] = {s[3], s[4], '\0'};
    return (int)strtol(hex, NULL, 16);
}

static int step_replace(piece *p, const char *from, const char *to)
{
    int64_t n;
    char *r = tok_replace_all(p->s, p->n, from, to, INT64_MAX, &n);
    if (!r)
        return DF_ENOMEM;
    free(p->s);
    p->s = r;
    p->n = n;
    return 0;
}

/* Up to `start` leading and `stop` trailing copies of cp (tokenizers decoders/strip.rs). */
static void step_strip(piece *p, uint32_t cp, int64_t start, int64_t stop)
{
    char enc[4];
    int64_t l = (int64_t)utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)enc), a = 0, b = p->n;
    for (int64_t k = 0; k < start && b - a >= l && memcmp(p->s + a, enc, (size_t)l) == 0; k++)
        a += l;
    for (int64_t k = 0; k < stop && b - a >= l && memcmp(p->s + b - l, enc, (size_t)l) == 0; k++)
        b -= l;
    memmove(p->s, p->s + a, (size_t)(b - a));
    p->n = b - a;
    p->s[p->n] = '\0';
}

/* Join pieces [lo, hi) into one malloc'd piece. */
static int fuse(const piece *v, int64_t lo, int64_t hi, piece *out)
{
    int64_t n = 0;
    for (int64_t i = lo; i < hi; i++)
        n += v[i].n;
    if (!(out->s = malloc((size_t)n + 1)))
        return DF_ENOMEM;
    out->n = 0;
    for (int64_t i = lo; i < hi; i++) {
        memcpy(out->s + out->n, v[i].s, (size_t)v[i].n);
        out->n += v[i].n;
    }
    out->s[n] = '\0';
    return 0;
}

/* Runs of byte tokens -> their text when it is valid UTF-8, else one U+FFFD per byte. The list
 * is compacted in place: slot w <= i receives what slots [i, j) became. */
static int step_byte_fallback(plist *l)
{
    int64_t w = 0;
    for (int64_t i = 0; i < l->n;) {
        int64_t j = i, n = 0;
        while (j < l->n && byte_token(l->v[j].s, l->v[j].n) >= 0)
            j++;
        if (j == i) {
            l->v[w++] = l->v[i++];
            continue;
        }
        char *run = malloc((size_t)(j - i) * 3 + 1);
        if (!run) { /* keep the list whole for plist_free */
            memmove(l->v + w, l->v + i, (size_t)(l->n - i) * sizeof *l->v);
            l->n = w + (l->n - i);
            return DF_ENOMEM;
        }
        for (int64_t k = i; k < j; k++) {
            run[n++] = (char)byte_token(l->v[k].s, l->v[k].n);
            free(l->v[k].s);
        }
        if (tok_utf8_invalid_at(run, n) >= 0)
            for (n = 0; n < 3 * (j - i); n += 3)
                memcpy(run + n, "\xEF\xBF\xBD", 3);
        run[n] = '\0';
        l->v[w++] = (piece){run, n};
        i = j;
    }
    l->n = w;
    return 0;
}

static int step_byte_level(plist *l)
{
    int64_t total = 0;
    for (int64_t i = 0; i < l->n; i++)
        total += l->v[i].n;
    char *raw = malloc((size_t)total + 1), *out = malloc((size_t)total * 3 + 1);
    int64_t r = 0;
    for (int64_t i = 0; raw && out && i < l->n; i++) {
        int32_t bl = 0;
        char *b = tok_vocab_to_bytes(l->v[i].s, &bl); /* never longer than the token */
        if (!b) {
            free(raw);
            raw = NULL;
            break;
        }
        memcpy(raw + r, b, (size_t)bl);
        r += bl;
        free(b);
    }
    if (!raw || !out) {
        free(raw);
        free(out);
        return DF_ENOMEM;
    }
    int64_t o = utf8_lossy((const uint8_t *)raw, r, out);
    out[o] = '\0';
    free(raw);
    plist_free(l);
    if (!(l->v = malloc(sizeof *l->v))) {
        free(out);
        return DF_ENOMEM;
    }
    l->v[0] = (piece){out, o};
    l->n = 1;
    return 0;
}

static int apply_step(const tok_dec_step *d, plist *l)
{
    int rc = 0;
    switch (d->kind) {
    case TOK_DEC_BYTE_LEVEL:
        return step_byte_level(l);
    case TOK_DEC_BYTE_FALLBACK:
        return step_byte_fallback(l);
    case TOK_DEC_FUSE: {
        piece one;
        if (l->n <= 1)
            return 0;
        if (fuse(l->v, 0, l->n, &one))
            return DF_ENOMEM;
        plist_free(l);
        if (!(l->v = malloc(sizeof *l->v))) {
            free(one.s);
            return DF_ENOMEM;
        }
        l->v[0] = one;
        l->n = 1;
        return 0;
    }
    case TOK_DEC_REPLACE:
    case TOK_DEC_METASPACE:
        for (int64_t i = 0; !rc && i < l->n; i++)
            rc = step_replace(&l->v[i], d->from,
                              d->kind == TOK_DEC_REPLACE ? d->to : i == 0 && d->prepend ? "" : " ");
        return rc;
    case TOK_DEC_STRIP:
        for (int64_t i = 0; i < l->n; i++)
            step_strip(&l->v[i], d->cp, d->start, d->stop);
        return 0;
    }
    return 0;
}

char *tok_piece_bytes(const df_tokenizer *t, const char *tok, int32_t *out_len)
{
    *out_len = 0;
    if (t->n_dec == 0)
        return tok_vocab_to_bytes(tok, out_len);
    piece p = {strdup(tok), (int64_t)strlen(tok)};
    for (int k = 0; p.s && k < t->n_dec; k++) {
        const tok_dec_step *d = &t->dec[k];
        const char *to = d->kind == TOK_DEC_REPLACE ? d->to : " ";
        int b;
        if (d->kind == TOK_DEC_BYTE_LEVEL) {
            int32_t n = 0;
            char *r = tok_vocab_to_bytes(p.s, &n);
            free(p.s);
            p = (piece){r, n};
        } else if (d->kind == TOK_DEC_BYTE_FALLBACK && (b = byte_token(p.s, p.n)) >= 0) {
            p.s[0] = (char)b;
            p.s[p.n = 1] = '\0';
        } else if (d->kind == TOK_DEC_REPLACE || d->kind == TOK_DEC_METASPACE) {
            int64_t n;
            char *r = tok_replace_all(p.s, p.n, d->from, to, INT32_MAX, &n); /* tok_blen is int32 */
            free(p.s);
            p = (piece){r, n};
            if (!r && n < 0) {
                *out_len = -1;
                return NULL;
            }
        }
    }
    *out_len = (int32_t)p.n;
    return p.s;
}

/* The whole chain; *text is the joined result. */
static int decode_chain(const df_tokenizer *t, const int32_t *ids, int64_t n, bool skip_special, char **text,
                        int64_t *text_n)
{
    plist l = {malloc((size_t)(n + 1) * sizeof(piece)), 0};
    int rc = l.v ? 0 : DF_ENOMEM;
    for (int64_t i = 0; !rc && i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_ids || !t->tok_str[id] || (skip_special && (t->flags[id] & TOK_F_SPECIAL)))
            continue;
        char *s = strdup(t->tok_str[id]);
        if (!s)
            rc = DF_ENOMEM;
        else
            l.v[l.n++] = (piece){s, (int64_t)strlen(s)};
    }
    for (int k = 0; !rc && k < t->n_dec; k++)
        rc = apply_step(&t->dec[k], &l);
    piece all = {NULL, 0};
    if (!rc)
        rc = fuse(l.v, 0, l.n, &all);
    plist_free(&l);
    *text = all.s;
    *text_n = all.n;
    return rc;
}

int df_tokenizer_decode(const df_tokenizer *t, const int32_t *ids, int64_t n, bool skip_special_tokens,
                        char **text)
{
    *text = NULL;
    int64_t total = 0;
    char *raw = NULL;
    bool byte_level = t->n_dec == 0 || (t->n_dec == 1 && t->dec[0].kind == TOK_DEC_BYTE_LEVEL);
    if (byte_level) { /* every token's bytes, concatenated */
        for (int64_t i = 0; i < n; i++) {
            int32_t id = ids[i];
            if (id >= 0 && id < t->n_ids && t->tok_bytes[id])
                total += t->tok_blen[id];
        }
        if ((raw = malloc((size_t)total + 1))) {
            total = 0;
            for (int64_t i = 0; i < n; i++) {
                int32_t id = ids[i];
                if (id < 0 || id >= t->n_ids || !t->tok_bytes[id]) /* no such token: HF skips it */
                    continue;
                if (skip_special_tokens && (t->flags[id] & TOK_F_SPECIAL))
                    continue;
                memcpy(raw + total, t->tok_bytes[id], (size_t)t->tok_blen[id]);
                total += t->tok_blen[id];
            }
        }
    } else if (decode_chain(t, ids, n, skip_special_tokens, &raw, &total)) {
        free(raw);
        raw = NULL;
    }
    char *out = raw ? malloc((size_t)total * 3 + 1) : NULL;
    if (!out) {
        free(raw);
        return df_error(DF_ENOMEM, "tokenizer: out of memory decoding %lld ids", (long long)n);
    }
    int64_t o = utf8_lossy((const uint8_t *)raw, total, out); /* chain output: only NULs change */
    free(raw);
    out[o] = '\0';
    if (t->clean_up_spaces)
        clean_up(out);
    char *shrunk = realloc(out, strlen(out) + 1);
    *text = shrunk ? shrunk : out;
    return 0;
}

int df_tokenizer_token_bytes(const df_tokenizer *t, int32_t id, const char **bytes, int64_t *len)
{
    if (id < 0 || id >= t->n_ids || !t->tok_bytes[id]) {
        *bytes = NULL;
        *len = 0;
        return df_error(DF_ENOTFOUND, "tokenizer: id %d is not a token (vocab size %lld)", id,
                        (long long)t->n_ids);
    }
    *bytes = t->tok_bytes[id];
    *len = t->tok_blen[id];
    return 0;
}
