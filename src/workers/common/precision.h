/* precision.h (internal) — whether a role computes in bf16 (docs/mixed_precision.md). */
#ifndef DF_WORKER_PRECISION_H
#define DF_WORKER_PRECISION_H

#include <stdbool.h>

/**
 * Whether a role's matmuls run in bf16: its `...mixed_precision.param_dtype` (`key`, value
 * `dtype`) asks for bf16 / bfloat16 and this machine has native bf16 matmuls
 * (df_model_bf16_available). Where it has none, float32 is used and, when `say`, one notice per
 * process on stderr names the first key that asked and the reason.
 */
bool df_role_compute_bf16(const char *key, const char *dtype, bool say);

#endif
