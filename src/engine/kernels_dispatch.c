/*
 * The engine kernels' plain names in a multi-variant build: each calls the copy
 * of the variant in use (util/kernels.h). Compiled only when DF_NATIVE=OFF on
 * x86-64.
 */
#include "engine/sampling.h"
#include "util/kernels.h"

/* sampling.c */
DF_KDISPATCH(int64_t, df_sample_work_bytes, (int64_t V), (V))
DF_KDISPATCH_VOID(df_sampling_params_defaults, (df_sampling_params * sp), (sp))
DF_KDISPATCH(int, df_sampling_params_validate, (const df_sampling_params *sp, int64_t vocab),
             (sp, vocab))
DF_KDISPATCH(int32_t, df_sample_token,
             (const float *logits, int64_t V, const df_sampling_params *sp, df_rng *rng,
              void *work, float *logp),
             (logits, V, sp, rng, work, logp))
DF_KDISPATCH(int32_t, df_sample_token_u,
             (const float *logits, int64_t V, const df_sampling_params *sp, double u, void *work,
              float *logp),
             (logits, V, sp, u, work, logp))
DF_KDISPATCH_VOID(df_sample_probs,
                  (const float *logits, int64_t V, const df_sampling_params *sp, void *work,
                   double *probs),
                  (logits, V, sp, work, probs))
