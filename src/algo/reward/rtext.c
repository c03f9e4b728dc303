/* Python-compatible string helpers for the rule scorers (rtext.h). */
#include "algo/reward/rtext.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

size_t df_rt_cp_len(const char *p)
{
    unsigned char c = (unsigned char)*p;
    if (!c)
        return 0;
    size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    for (size_t i = 1; i < n; i++)
        if (((unsigned char)p[i] & 0xC0) != 0x80)
            return 1; /* truncated sequence: count its lead byte alone */
    return n;
}

size_t df_rt_cp_count(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i += df_rt_cp_len(s + i) ? df_rt_cp_len(s + i) : 1)
        k++;
    return k;
}

const char *df_rt_tail(const char *s, size_t n)
{
    size_t total = df_rt_cp_count(s, strlen(s));
    const char *p = s;
    for (size_t skip = total > n ? total - n : 0; skip; skip--)
        p += df_rt_cp_len(p);
    return p;
}

/* Decode the code point at p (valid sequences only; else the byte itself). */
static uint32_t cp_at(const char *p, size_t *len)
{
    const unsigned char *u = (const unsigned char *)p;
    *len = df_rt_cp_len(p);
    switch (*len) {
    case 2: return (uint32_t)(u[0] & 0x1F) << 6 | (u[1] & 0x3F);
    case 3: return (uint32_t)(u[0] & 0x0F) << 12 | (uint32_t)(u[1] & 0x3F) << 6 | (u[2] & 0x3F);
    case 4:
        return (uint32_t)(u[0] & 0x07) << 18 | (uint32_t)(u[1] & 0x3F) << 12 | (uint32_t)(u[2] & 0x3F) << 6 |
               (u[3] & 0x3F);
    default: return u[0];
    }
}

bool df_rt_is_space(const char *p, size_t *len)
{
    size_t l = 0;
    uint32_t c = *p ? cp_at(p, &l) : 0;
    if (len)
        *len = l;
    /* CPython's _PyUnicode_IsWhitespace table */
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

char *df_rt_ndup(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

char *df_rt_strip(char *s)
{
    if (!s)
        return NULL;
    const char *b = s, *e = s + strlen(s);
    size_t l;
    while (df_rt_is_space(b, &l))
        b += l;
    const char *end = b; /* the end of the last non-space code point */
    for (const char *p = b; p < e; p += l)
        if (!df_rt_is_space(p, &l))
            end = p + l;
    char *d = df_rt_ndup(b, (size_t)(end - b));
    free(s);
    return d;
}

void df_rt_add(df_rt_buf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            free(b->p);
            *b = (df_rt_buf){.oom = true};
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void df_rt_adds(df_rt_buf *b, const char *s)
{
    df_rt_add(b, s, strlen(s));
}

char *df_rt_take(df_rt_buf *b)
{
    char *p = b->oom ? NULL : b->p ? b->p : df_rt_ndup("", 0);
    *b = (df_rt_buf){0};
    return p;
}

char *df_rt_replace(char *s, const char *from, const char *to)
{
    if (!s || !strstr(s, from))
        return s;
    size_t fl = strlen(from);
    df_rt_buf b = {0};
    const char *p = s;
    for (const char *m; (m = strstr(p, from)); p = m + fl) {
        df_rt_add(&b, p, (size_t)(m - p));
        df_rt_adds(&b, to);
    }
    df_rt_adds(&b, p);
    free(s);
    return df_rt_take(&b);
}

size_t df_rt_count(const char *s, const char *needle)
{
    size_t n = 0, l = strlen(needle);
    for (const char *p = strstr(s, needle); p; p = strstr(p + l, needle))
        n++;
    return n;
}

const char *df_rt_rfind(const char *s, const char *needle)
{
    const char *last = NULL;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle))
        last = p;
    return last;
}
