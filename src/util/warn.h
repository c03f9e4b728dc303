/* warn.h (internal) — formatted warnings through a df_warn_fn. */
#ifndef DF_UTIL_WARN_H
#define DF_UTIL_WARN_H

#include "distflow/common.h"

/** Format the message (at most 1023 bytes kept) and hand it to warn(user, msg); nothing when warn is NULL. */
void df_warnf(df_warn_fn warn, void *user, const char *fmt, ...) DF_PRINTF(3, 4);

#endif
