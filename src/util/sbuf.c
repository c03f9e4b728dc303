/* A growable string builder (sbuf.h). */
#include "util/sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool reserve(df_sbuf *b, size_t extra)
{
    if (b->failed)
        return false;
    if (b->len + extra + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap * 2 : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) {
        b->failed = true;
        return false;
    }
    b->s = s;
    b->cap = cap;
    return true;
}

void df_sbuf_put(df_sbuf *b, const char *p, size_t n)
{
    if (!reserve(b, n))
        return;
    memcpy(b->s + b->len, p, n);
    b->len += n;
    b->s[b->len] = '\0';
}

void df_sbuf_puts(df_sbuf *b, const char *p) { df_sbuf_put(b, p, strlen(p)); }

void df_sbuf_printf(df_sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0)
        b->failed = true;
    if (k < 0 || !reserve(b, (size_t)k))
        return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)k;
}

int df_sbuf_finish(df_sbuf *b, char **out)
{
    reserve(b, 0);
    if (b->failed) {
        df_sbuf_free(b);
        return df_error(DF_ENOMEM, "out of memory");
    }
    b->s[b->len] = '\0';
    *out = b->s;
    *b = (df_sbuf){0};
    return DF_OK;
}

void df_sbuf_free(df_sbuf *b)
{
    free(b->s);
    *b = (df_sbuf){0};
}
