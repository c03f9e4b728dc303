/* sbuf.h (internal) — a growable NUL-terminated string builder. */
#ifndef DF_UTIL_SBUF_H
#define DF_UTIL_SBUF_H

#include "distflow/common.h"

#include <stdbool.h>
#include <stddef.h>

/* Zero-initialise to start. `failed` sticks after the first allocation failure, so a
   run of appends is checked once (df_sbuf_finish). s is NUL-terminated when non-NULL. */
typedef struct df_sbuf {
    char *s;
    size_t len, cap;
    bool failed;
} df_sbuf;

/** Append n bytes of p. */
void df_sbuf_put(df_sbuf *b, const char *p, size_t n);
/** Append a NUL-terminated string. */
void df_sbuf_puts(df_sbuf *b, const char *p);
/** Append printf-formatted text. */
void df_sbuf_printf(df_sbuf *b, const char *fmt, ...) DF_PRINTF(2, 3);
/** Hand the string to the caller (*out, malloc'd, "" when nothing was appended), or
    DF_ENOMEM (freeing it) when an append failed. The builder is reset either way. */
int df_sbuf_finish(df_sbuf *b, char **out);
/** Free the string and reset the builder. */
void df_sbuf_free(df_sbuf *b);

#endif
