/* utf8.h (internal) — UTF-8 character boundaries, for text quoted or cut in messages: a cut in the
 * middle of a character would hand the model (or a JSON encoder, or the tokenizer) a partial
 * sequence. */
#ifndef DF_UTIL_UTF8_H
#define DF_UTIL_UTF8_H

#include <stddef.h>

/* Length of the valid UTF-8 sequence at p (1 to 4), or 0 (as Python's decoder: no overlongs,
   surrogates or code points above U+10FFFF; a NUL ends the text, so p[0] must not be one). */
static inline int df_utf8_len(const unsigned char *p)
{
    int n = p[0] < 0x80 ? 1 : p[0] >= 0xc2 && p[0] <= 0xdf ? 2 : p[0] >= 0xe0 && p[0] <= 0xef ? 3
          : p[0] >= 0xf0 && p[0] <= 0xf4 ? 4 : 0;
    for (int i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    if ((n == 3 && ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0))) ||
        (n == 4 && ((p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))))
        return 0;
    return n;
}

/* The longest prefix of the NUL-terminated s, at most max bytes, made of whole valid characters:
   it stops before a character that would cross max and before an invalid byte. */
static inline size_t df_utf8_prefix(const char *s, size_t max)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = 0;
    for (int k; p[n] && (k = df_utf8_len(p + n)) > 0 && n + (size_t)k <= max;)
        n += (size_t)k;
    return n;
}

#endif
