/* strutil.h (internal) — string helpers shared by src/model/ (config.json, checkpoint I/O, layout). */
#ifndef DF_MODEL_STRUTIL_H
#define DF_MODEL_STRUTIL_H

#include <stdbool.h>
#include <string.h>

/* Whether `s` ends with `suffix`. */
static inline bool df_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

#endif /* DF_MODEL_STRUTIL_H */
