/* Decoding: ByteLevel bytes -> lossy UTF-8 -> optional transformers clean-up. */
#include "tokenizer/tok_internal.h"

#include <stdlib.h>
#include <string.h>

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

int df_tokenizer_decode(const df_tokenizer *t, const int32_t *ids, int64_t n, bool skip_special_tokens,
                        char **text)
{
    *text = NULL;
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id >= 0 && id < t->n_ids && t->tok_bytes[id])
            total += t->tok_blen[id];
    }
    char *raw = malloc((size_t)total + 1), *out = malloc((size_t)total * 3 + 1);
    if (!raw || !out) {
        free(raw);
        free(out);
        return df_error(DF_ENOMEM, "tokenizer: out of memory decoding %lld ids", (long long)n);
    }
    int64_t r = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_ids || !t->tok_bytes[id]) /* no such token: HF skips it */
            continue;
        if (skip_special_tokens && (t->flags[id] & TOK_F_SPECIAL))
            continue;
        memcpy(raw + r, t->tok_bytes[id], (size_t)t->tok_blen[id]);
        r += t->tok_blen[id];
    }
    int64_t o = utf8_lossy((const uint8_t *)raw, r, out);
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
