/* precision.h (internal) — whether a role computes in bf16 (docs/mixed_precision.md). */
#ifndef DF_WORKER_PRECISION_H
#define DF_WORKER_PRECISION_H

#include <stdbool.h>

/**
 * Whether a role's matmuls run in bf16: its `...mixed_precision.param_dtype` (`key`, value
 * `dtype`) asks for bf16 / bfloat16 and the role's device (trainer.device: `device`) has bf16
 * matmuls — the CPU where it has native ones (df_model_bf16_available), another backend where
 * its table has the mixed-precision entries (gemm_w16, embedding_fwd_w16, gemm_bf16). Where it has none,
 * float32 is used and, when `say`, one notice per process on stderr names the first key that
 * asked and the reason.
 */
bool df_role_compute_bf16(const char *key, const char *dtype, const char *device, bool say);

/** DF_OK when `device` (trainer.device) has bf16 matmuls (as above), else an error saying why
 *  (df_last_error): what the rollout's dtype=bfloat16 also needs. */
int df_device_bf16(const char *device);

#endif
