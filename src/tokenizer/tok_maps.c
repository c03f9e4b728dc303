/* Hash maps, the GPT-2 byte-level alphabet and UTF-8 checks for the tokenizer. */
#include "tokenizer/tok_internal.h"
#include "util/hash.h"

#include <stdlib.h>
#include <string.h>

/* ---- string -> int32 ------------------------------------------------------ */

static uint64_t str_hash(const char *s, int64_t n)
{
    uint64_t h = df_fnv1a_n(s, (size_t)n);
    return h ^ (h >> 29);
}

static int strmap_grow_to(tok_strmap *m, int64_t cap)
{
    char **keys = calloc((size_t)cap, sizeof *keys);
    int32_t *klen = malloc((size_t)cap * sizeof *klen);
    int32_t *vals = malloc((size_t)cap * sizeof *vals);
    if (!keys || !klen || !vals) {
        free(keys);
        free(klen);
        free(vals);
        return df_error(DF_ENOMEM, "tokenizer: out of memory growing a string map to %lld slots",
                        (long long)cap);
    }
    for (int64_t i = 0; i < m->cap; i++) {
        if (!m->keys[i])
            continue;
        int64_t j = (int64_t)str_hash(m->keys[i], m->klen[i]) & (cap - 1);
        while (keys[j])
            j = (j + 1) & (cap - 1);
        keys[j] = m->keys[i];
        klen[j] = m->klen[i];
        vals[j] = m->vals[i];
    }
    free(m->keys);
    free(m->klen);
    free(m->vals);
    m->keys = keys;
    m->klen = klen;
    m->vals = vals;
    m->cap = cap;
    return 0;
}

int tok_strmap_reserve(tok_strmap *m, int64_t n)
{
    int64_t cap = m->cap ? m->cap : 64;
    while (n * 2 > cap)
        cap *= 2;
    return cap > m->cap ? strmap_grow_to(m, cap) : 0;
}

int tok_strmap_put(tok_strmap *m, const char *key, int64_t len, int32_t val)
{
    if ((m->n + 1) * 2 > m->cap) {
        int rc = tok_strmap_reserve(m, m->n + 1);
        if (rc)
            return rc;
    }
    int64_t mask = m->cap - 1, i = (int64_t)str_hash(key, len) & mask;
    while (m->keys[i]) {
        if (m->klen[i] == len && memcmp(m->keys[i], key, (size_t)len) == 0) {
            m->vals[i] = val;
            return 0;
        }
        i = (i + 1) & mask;
    }
    char *k = malloc((size_t)len + 1);
    if (!k)
        return df_error(DF_ENOMEM, "tokenizer: out of memory");
    memcpy(k, key, (size_t)len);
    k[len] = '\0';
    m->keys[i] = k;
    m->klen[i] = (int32_t)len;
    m->vals[i] = val;
    m->n++;
    return 0;
}

int32_t tok_strmap_get(const tok_strmap *m, const char *key, int64_t len)
{
    if (m->cap == 0)
        return -1;
    int64_t mask = m->cap - 1, i = (int64_t)str_hash(key, len) & mask;
    while (m->keys[i]) {
        if (m->klen[i] == len && memcmp(m->keys[i], key, (size_t)len) == 0)
            return m->vals[i];
        i = (i + 1) & mask;
    }
    return -1;
}

void tok_strmap_free(tok_strmap *m)
{
    for (int64_t i = 0; i < m->cap; i++)
        free(m->keys[i]);
    free(m->keys);
    free(m->klen);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

/* ---- (a, b) -> (rank, merged) ---------------------------------------------- */

static int pairmap_grow_to(tok_pairmap *m, int64_t cap)
{
    tok_pair_slot *slots = malloc((size_t)cap * sizeof *slots);
    if (!slots)
        return df_error(DF_ENOMEM, "tokenizer: out of memory growing the merge map");
    for (int64_t i = 0; i < cap; i++)
        slots[i].key = UINT64_MAX;
    tok_pairmap old = *m;
    m->slots = slots;
    m->cap = cap;
    m->n = 0;
    for (int64_t i = 0; i < old.cap; i++) {
        uint64_t k = old.slots[i].key;
        if (k != UINT64_MAX)
            tok_pairmap_put(m, (int32_t)(k >> 32), (int32_t)(uint32_t)k, old.slots[i].rank, old.slots[i].merged);
    }
    free(old.slots);
    return 0;
}

int tok_pairmap_reserve(tok_pairmap *m, int64_t n)
{
    int64_t cap = m->cap ? m->cap : 1024;
    while (n * 2 > cap)
        cap *= 2;
    return cap > m->cap ? pairmap_grow_to(m, cap) : 0;
}

int tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t merged)
{
    if ((m->n + 1) * 2 > m->cap) {
        int rc = tok_pairmap_reserve(m, m->n + 1);
        if (rc)
            return rc;
    }
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    int64_t mask = m->cap - 1, i = tok_pair_home(k, m->cap);
    while (m->slots[i].key != UINT64_MAX && m->slots[i].key != k)
        i = (i + 1) & mask;
    if (m->slots[i].key == UINT64_MAX)
        m->n++;
    m->slots[i] = (tok_pair_slot){k, rank, merged};
    return 0;
}

void tok_pairmap_free(tok_pairmap *m)
{
    free(m->slots);
    memset(m, 0, sizeof *m);
}

/* ---- GPT-2 bytes_to_unicode -------------------------------------------------
 * Printable bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) map to themselves;
 * the other 68 bytes map, in increasing order, to U+0100.. (so ' ' -> 'Ġ'). */

uint32_t tok_byte_to_cp(uint8_t b)
{
    if (b <= 32)
        return 256u + b;
    if (b >= 127 && b <= 160)
        return (uint32_t)b + 162u; /* 256 + 33 + (b - 127) */
    if (b == 173)
        return 323u;
    return b;
}

int tok_cp_to_byte(uint32_t cp)
{
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255))
        return (int)cp;
    if (cp >= 256 && cp <= 288)
        return (int)(cp - 256);
    if (cp >= 289 && cp <= 322)
        return (int)(cp - 162);
    if (cp == 323)
        return 173;
    return -1;
}

char *tok_bytes_to_vocab(const char *bytes, int64_t n)
{
    char *s = malloc((size_t)n * 2 + 1), *p = s;
    if (!s)
        return NULL;
    for (int64_t i = 0; i < n; i++) {
        uint32_t cp = tok_byte_to_cp((uint8_t)bytes[i]);
        if (cp < 0x80) {
            *p++ = (char)cp;
        } else { /* every code point of the alphabet is < 0x800: two bytes */
            *p++ = (char)(0xC0 | (cp >> 6));
            *p++ = (char)(0x80 | (cp & 0x3F));
        }
    }
    *p = '\0';
    return s;
}

/* Decode one UTF-8 code point from valid input; returns its length. */
static int utf8_next(const uint8_t *s, uint32_t *cp)
{
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    if ((s[0] & 0xE0) == 0xC0) {
        *cp = ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if ((s[0] & 0xF0) == 0xE0) {
        *cp = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    *cp = ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
          ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    return 4;
}

char *tok_vocab_to_bytes(const char *tok, int32_t *out_len)
{
    int64_t n = (int64_t)strlen(tok);
    char *out = malloc((size_t)n + 1);
    if (!out)
        return NULL;
    int64_t o = 0;
    bool ok = tok_utf8_invalid_at(tok, n) < 0;
    for (int64_t i = 0; ok && i < n;) {
        uint32_t cp;
        i += utf8_next((const uint8_t *)tok + i, &cp);
        int b = tok_cp_to_byte(cp);
        if (b < 0)
            ok = false;
        else
            out[o++] = (char)b;
    }
    if (!ok) { /* not byte-level: keep the text itself */
        memcpy(out, tok, (size_t)n);
        o = n;
    }
    out[o] = '\0';
    *out_len = (int32_t)o;
    return out;
}

/* Length of the valid UTF-8 sequence at s (0 when invalid), Unicode table 3-7. */
static int utf8_valid_len(const uint8_t *s, int64_t avail)
{
    uint8_t c = s[0];
    int need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0)
            lo = 0xA0;
        if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if (avail < need + 1 || s[1] < lo || s[1] > hi)
        return 0;
    for (int k = 2; k <= need; k++)
        if ((s[k] & 0xC0) != 0x80)
            return 0;
    return need + 1;
}

int64_t tok_utf8_invalid_at(const char *s, int64_t n)
{
    const uint8_t *u = (const uint8_t *)s;
    for (int64_t i = 0; i < n;) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        int l = utf8_valid_len(u + i, n - i);
        if (!l)
            return i;
        i += l;
    }
    return -1;
}

char *tok_replace_all(const char *s, int64_t n, const char *from, const char *to, int64_t max, int64_t *out_n)
{
    int64_t lf = (int64_t)strlen(from), lt = (int64_t)strlen(to), hits = 0;
    for (const char *p = s; (p = memmem(p, (size_t)(s + n - p), from, (size_t)lf)); p += lf)
        hits++;
    *out_n = -1;
    if (lt > lf && hits > (max - n) / (lt - lf))
        return NULL;
    char *out = malloc((size_t)(n + hits * (lt > lf ? lt - lf : 0)) + 1), *w = out;
    *out_n = 0;
    if (!out)
        return NULL;
    const char *r = s, *p;
    while ((p = memmem(r, (size_t)(s + n - r), from, (size_t)lf))) {
        memcpy(w, r, (size_t)(p - r));
        w += p - r;
        memcpy(w, to, (size_t)lt);
        w += lt;
        r = p + lf;
    }
    memcpy(w, r, (size_t)(s + n - r));
    w += s + n - r;
    *w = '\0';
    *out_n = w - out;
    return out;
}
