/*
 * sampling.h (internal) — drawing one token from one row of logits with the
 * rules of df_sampling_params (include/distflow/rollout.h): temperature, top-k
 * (HF TopKLogitsWarper: keep logits >= the k-th largest), top-p (smallest
 * most-probable set whose mass >= top_p, ties -> lower id first, at least one
 * token; HF TopPLogitsWarper / vLLM _apply_top_k_top_p), greedy (argmax, ties
 * -> lowest id).
 */
#ifndef DF_ENGINE_SAMPLING_H
#define DF_ENGINE_SAMPLING_H

#include "distflow/rng.h"
#include "distflow/rollout.h"

/** Bytes of the `work` buffer the functions below need for a vocabulary of V. */
int64_t df_sample_work_bytes(int64_t V);

/**
 * Draw a token from logits[V] (raw LM-head outputs): the first kept token, in
 * id order, at which the cumulative filtered probability exceeds one
 * df_rng_uniform draw (none when greedy). *logp (may be NULL) receives
 * log_softmax(logits / T)[token] over the whole vocabulary, before top-k /
 * top-p filtering (T = 1 when greedy). `work`: df_sample_work_bytes(V) bytes,
 * 8-byte aligned. sp must have passed df_sampling_params_validate.
 */
int32_t df_sample_token(const float *logits, int64_t V, const df_sampling_params *sp,
                        df_rng *rng, void *work, float *logp);

/** df_sample_token with the uniform u in [0, 1) given instead of drawn (unused when greedy):
 *  what a device's sampler computes for the same u (backend.h `sample`). */
int32_t df_sample_token_u(const float *logits, int64_t V, const df_sampling_params *sp, double u,
                          void *work, float *logp);

/**
 * The distribution df_sample_token draws from: probs[V] = the filtered,
 * renormalised softmax (exactly 0 for excluded tokens; one-hot when greedy).
 * Used by tests and diagnostics.
 */
void df_sample_probs(const float *logits, int64_t V, const df_sampling_params *sp, void *work,
                     double *probs);

#endif /* DF_ENGINE_SAMPLING_H */
