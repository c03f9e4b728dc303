/* algo_internal.h (internal) — input checks shared by src/algo/. */
#ifndef DF_ALGO_INTERNAL_H
#define DF_ALGO_INTERNAL_H

#include "distflow/common.h"

/*
 * Check a packed layout: n >= 0, offsets non-NULL with offsets[0] == 0 and
 * non-decreasing. `who` names the caller in the message (e.g. "grpo").
 */
int df_algo_check_offsets(const char *who, int64_t n, const int64_t *offsets);

#endif /* DF_ALGO_INTERNAL_H */
