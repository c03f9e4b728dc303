/*
 * packing.h (internal) — turn batch rows (prompt_ids + response_ids) into the
 * packed df_seq_batch the model consumes, and plan micro-batches.
 *
 * For a sample with prompt p[0..P) and response r[0..R), the packed sequence
 * is p ++ r and row P - 1 + j predicts r[j]; so every response token is an
 * output row and nothing else goes through the LM head. Requires P >= 1.
 */
#ifndef DF_ENGINE_PACKING_H
#define DF_ENGINE_PACKING_H

#include "distflow/batch.h"
#include "distflow/model.h"

typedef struct df_packed {
    df_seq_batch sb;   /* views into the buffers below */
    int32_t *tokens;
    int64_t *seq_offsets;
    int64_t *out_rows;
    int32_t *out_targets;
    int64_t cap_tokens, cap_seqs, cap_out;
} df_packed;

/** Pack rows [start, end) of `b` (columns prompt_ids, response_ids). Grows buffers as needed. */
int df_pack_responses(df_packed *p, const df_batch *b, int64_t start, int64_t end);
void df_packed_free(df_packed *p);
/** Packed tokens of row i of b: its prompt_ids' and response_ids' lengths (an absent column 0). */
int64_t df_pack_row_tokens(const df_batch *b, int64_t i);

/**
 * Split rows [0, n) into consecutive micro-batches of at most max_samples rows
 * (<= 0: unlimited) and at most max_tokens packed tokens (<= 0: unlimited; a
 * single row larger than the budget gets a micro-batch of its own): as few as
 * the budget allows, with balanced token counts (the smallest per-micro-batch
 * cap that keeps that count; verl's rearrange_micro_batches balances too, by
 * reordering, where rows here keep their order).
 * *bounds receives a malloc'd array of *n_mb + 1 row boundaries.
 */
int df_plan_micro_batches(const df_batch *b, int64_t max_samples, int64_t max_tokens,
                          int64_t **bounds, int64_t *n_mb);

/** Largest packed token count / response token count over the micro-batches of a plan. */
void df_plan_extent(const df_batch *b, const int64_t *bounds, int64_t n_mb, int64_t *max_tokens,
                    int64_t *max_out);

#endif
