/*
 * rtext.h (internal) — the small string toolkit the rule scorers need to
 * reproduce verl's Python string handling in C: Python's str.replace, counts
 * and slices by code point (a Python str indexes code points, not bytes), and
 * Python's whitespace set (str.isspace / the `\s` of a str pattern).
 *
 * Strings are NUL-terminated UTF-8. Functions that build a string return a
 * new malloc'd one and take ownership of (free) their input, so calls chain:
 * `s = df_rt_replace(s, a, b)` propagates NULL (out of memory) untouched.
 */
#ifndef DF_ALGO_REWARD_RTEXT_H
#define DF_ALGO_REWARD_RTEXT_H

#include <stdbool.h>
#include <stddef.h>

/* Bytes of the code point starting at p (1 for a stray continuation or invalid byte); 0 at the NUL. */
size_t df_rt_cp_len(const char *p);

/* Number of code points in s[0, n). */
size_t df_rt_cp_count(const char *s, size_t n);

/* Python s[-n:]: the start of the last n code points of s (s itself when it has fewer). */
const char *df_rt_tail(const char *s, size_t n);

/* Python str.isspace() for the code point at p (its byte length via *len); false at the NUL. */
bool df_rt_is_space(const char *p, size_t *len);

/* Python s.strip(): a new copy without leading / trailing whitespace; frees s. NULL on OOM. */
char *df_rt_strip(char *s);

/* Copy of s[0, n). NULL on OOM. */
char *df_rt_ndup(const char *s, size_t n);

/* Python s.replace(from, to) (left to right, non-overlapping; `from` non-empty); frees s. NULL on OOM. */
char *df_rt_replace(char *s, const char *from, const char *to);

/* Occurrences of `needle` (non-empty, non-overlapping, Python str.count). */
size_t df_rt_count(const char *s, const char *needle);

/* The last occurrence of `needle` in s (Python str.rfind), or NULL. */
const char *df_rt_rfind(const char *s, const char *needle);

/* A growable output string; `p` is NUL-terminated after every successful append. */
typedef struct df_rt_buf {
    char *p;
    size_t len, cap;
    bool oom; /* an append failed: p is freed and stays NULL */
} df_rt_buf;

/* Append n bytes of s. */
void df_rt_add(df_rt_buf *b, const char *s, size_t n);

/* Append a NUL-terminated string. */
void df_rt_adds(df_rt_buf *b, const char *s);

/* The built string (never NULL unless b->oom: an empty string then); the buffer is reset. */
char *df_rt_take(df_rt_buf *b);

#endif /* DF_ALGO_REWARD_RTEXT_H */
