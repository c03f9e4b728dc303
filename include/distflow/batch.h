/*
 * distflow/batch.h — df_batch, the sample protocol (siiRL's TensorDict / verl's
 * DataProto analog, docs/conventions.md §3).
 *
 * A batch holds N samples and a set of named columns. Column kinds:
 *   DF_COL_I64 / DF_COL_F32  one scalar per sample            data[n]
 *   DF_COL_STR               one NUL-terminated string per sample
 *   DF_COL_TOK_I32 / _F32    a ragged per-token array per sample, stored packed:
 *                            sample i owns data[offsets[i] .. offsets[i+1])
 * There is no padding anywhere. Ragged columns that describe the same tokens
 * (response_ids, old_log_probs, advantages, ...) share the same lengths.
 *
 * Standard column names (verl / siiRL): prompt_ids, response_ids, response_mask,
 * old_log_probs, ref_log_prob, values, token_level_scores, token_level_rewards,
 * advantages, returns, uid, index, data_source, ground_truth, extra_info.
 *
 * Batch-level metadata (siiRL's meta_info) is a small name -> double map.
 *
 * Ownership: a batch owns all of its column memory; pointers returned by the
 * getters stay valid until the column is replaced or the batch is freed.
 * All functions that can fail return 0 or a DF_E* status (see common.h).
 */
#ifndef DISTFLOW_BATCH_H
#define DISTFLOW_BATCH_H

#include "distflow/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum df_col_kind {
    DF_COL_I64 = 0,
    DF_COL_F32 = 1,
    DF_COL_STR = 2,
    DF_COL_TOK_I32 = 3,
    DF_COL_TOK_F32 = 4
} df_col_kind;

#define DF_COL_NAME_MAX 64

typedef struct df_column {
    char name[DF_COL_NAME_MAX];
    df_col_kind kind;
    int64_t *offsets; /**< ragged kinds only: [n + 1], offsets[0] = 0 */
    void *data;       /**< I64: int64_t[n]; F32: float[n]; STR: char*[n];
                           TOK_I32: int32_t[offsets[n]]; TOK_F32: float[offsets[n]] */
} df_column;

typedef struct df_batch df_batch;

/**
 * Per-sample summary used for balancing and redistribution (siiRL's SampleInfo,
 * siirl/data_coordinator/sample.py). Small and fixed-size apart from `uid`, so
 * ranks can allgather it (see coordinator.h for the wire form).
 */
typedef struct df_sample_info {
    int64_t prompt_length;   /**< tokens in prompt_ids (0 if absent) */
    int64_t response_length; /**< tokens in response_ids (0 if absent) */
    int64_t sum_tokens;      /**< prompt_length + response_length */
    const char *uid;         /**< the `uid` column, or NULL if absent (borrowed) */
    int64_t group;           /**< the I64 `index` column (integer group id), -1 if absent */
    double score;            /**< the F32 `score` column (sequence reward), NaN if absent */
    int32_t src_rank;        /**< rank (in the source stage) that holds the sample; 0 here */
    int64_t src_index;       /**< row of the sample within that rank's batch */
} df_sample_info;

/* ---- lifetime ---------------------------------------------------------- */

/** New batch of `n` samples (n >= 0) with no columns. NULL when n < 0 or on allocation failure. */
DF_API df_batch *df_batch_new(int64_t n);
DF_API void df_batch_free(df_batch *b);
/** Number of samples. */
DF_API int64_t df_batch_size(const df_batch *b);
DF_API int df_batch_num_columns(const df_batch *b);
/** The i-th column (0 <= i < num_columns), in insertion order. */
DF_API const df_column *df_batch_column_at(const df_batch *b, int i);
/** Column by name, or NULL when absent. */
DF_API const df_column *df_batch_column(const df_batch *b, const char *name);
DF_API bool df_batch_has(const df_batch *b, const char *name);
/** Remove a column; no-op if absent. */
DF_API void df_batch_drop(df_batch *b, const char *name);
/**
 * Rename column `from` to `to`, keeping its data and its position; a column already named `to` is
 * dropped first. Errors: DF_ENOTFOUND when `from` is absent; DF_EINVAL for a `to` of 0 or
 * DF_COL_NAME_MAX or more bytes (the batch is unchanged on error).
 */
DF_API int df_batch_rename(df_batch *b, const char *from, const char *to);

/*
 * ---- adding columns ---------------------------------------------------------
 * The setters copy the caller's data. A same-named column is replaced in
 * place (it keeps its position in the column order). Names are 1 to
 * DF_COL_NAME_MAX - 1 bytes. Errors: DF_EINVAL (bad name, NULL data for a
 * non-empty column, bad offsets), DF_ENOMEM; the batch is unchanged on error.
 */

DF_API int df_batch_set_i64(df_batch *b, const char *name, const int64_t *vals /* [n] */);
DF_API int df_batch_set_f32(df_batch *b, const char *name, const float *vals /* [n] */);
/** Strings are copied; a NULL entry is stored as "". */
DF_API int df_batch_set_str(df_batch *b, const char *name, const char *const *vals /* [n] */);
/**
 * Replace row i of an existing STR column with a copy of `val` (NULL -> "").
 * DF_ENOTFOUND when no STR column `name` exists, DF_EINVAL when i is out of range.
 */
DF_API int df_batch_set_str_at(df_batch *b, const char *name, int64_t i, const char *val);
/** offsets: [n + 1] with offsets[0] == 0 and non-decreasing; data: [offsets[n]]. */
DF_API int df_batch_set_tok_i32(df_batch *b, const char *name, const int64_t *offsets,
                                const int32_t *data);
DF_API int df_batch_set_tok_f32(df_batch *b, const char *name, const int64_t *offsets,
                                const float *data);
/**
 * Add (or replace) a zero-filled TOK_F32 column with the same per-sample
 * lengths as the ragged column `like` (e.g. token_level_scores like
 * response_ids) and return its writable data through *out ([offsets[n]] floats).
 */
DF_API int df_batch_alloc_tok_f32_like(df_batch *b, const char *name, const char *like,
                                       float **out);

/* ---- typed access (NULL / error when absent or of another kind) ------------ */

DF_API const int64_t *df_batch_i64(const df_batch *b, const char *name);
DF_API const float *df_batch_f32(const df_batch *b, const char *name);
/** String of sample i, or NULL when the column is absent. */
DF_API const char *df_batch_str(const df_batch *b, const char *name, int64_t i);
/**
 * Writable data of an existing column (any kind), or NULL. For STR columns this
 * is the char*[n] array; replace an entry with df_batch_set_str_at().
 */
DF_API void *df_batch_data_mut(df_batch *b, const char *name);
/** Sample i's token ids of a TOK_I32 column; *len receives its length. NULL if absent. */
DF_API const int32_t *df_batch_tok_i32(const df_batch *b, const char *name, int64_t i,
                                       int64_t *len);
/** Sample i's values of a TOK_F32 column; *len receives its length. NULL if absent. */
DF_API const float *df_batch_tok_f32(const df_batch *b, const char *name, int64_t i,
                                     int64_t *len);
/** Offsets [n + 1] of a ragged column, or NULL. */
DF_API const int64_t *df_batch_offsets(const df_batch *b, const char *name);

/**
 * The response_mask column of a multi-turn batch (verl's response_mask; written by the rollout
 * with a turn handler, distflow/rollout.h): TOK_I32, the lengths of response_ids, 1 on a model
 * token and 0 on an appended one (tool / user tokens), which losses, KL and advantages leave
 * out. *mask = its data ([total response tokens], packed as response_ids), or NULL when the
 * batch has none (every response token is the model's). Errors: DF_EINVAL when the column is
 * of another kind or its lengths differ from response_ids'.
 */
DF_API int df_batch_response_mask(const df_batch *b, const int32_t **mask);

/* ---- metadata (siiRL meta_info) ------------------------------------------ */

DF_API int df_batch_meta_set(df_batch *b, const char *key, double value);
/** Returns `dflt` when the key is absent. */
DF_API double df_batch_meta_get(const df_batch *b, const char *key, double dflt);
/** Number of metadata entries. */
DF_API int df_batch_meta_count(const df_batch *b);
/** i-th metadata key in insertion order (NULL when out of range); *value receives its value. */
DF_API const char *df_batch_meta_at(const df_batch *b, int i, double *value);

/*
 * ---- whole-batch operations ------------------------------------------------
 * Each returns a new batch through *out (the input is unchanged), with every
 * column of the input in the same order and the input's metadata copied.
 * Errors: DF_EINVAL for bad arguments (named in the message), DF_ENOMEM.
 */

/** Rows idx[0..k) in that order (repeats allowed; k = 0 gives an empty batch). */
DF_API int df_batch_select(const df_batch *b, const int64_t *idx, int64_t k, df_batch **out);
/** Rows [start, end), 0 <= start <= end <= n. */
DF_API int df_batch_slice(const df_batch *b, int64_t start, int64_t end, df_batch **out);
/** Every row: a deep copy (df_run_opts.copy_batch of the DAG worker). */
DF_API int df_batch_copy(const df_batch *b, df_batch **out);
/**
 * Concatenate n_parts >= 1 batches that have the same set of column names with
 * the same kinds (their order may differ; parts[0]'s order is kept, and so is
 * parts[0]'s metadata). A missing column or a kind mismatch is DF_EINVAL.
 */
DF_API int df_batch_concat(const df_batch *const *parts, int n_parts, df_batch **out);
/** Each row repeated k >= 1 times consecutively (verl DataProto.repeat(k, interleave=True)). */
DF_API int df_batch_repeat_interleave(const df_batch *b, int64_t k, df_batch **out);
/**
 * Split into ceil(n / chunk) consecutive batches of `chunk` rows, the last one
 * holding the rest (verl DataProto.split(chunk)). *parts receives a malloc'd
 * array of *n_parts batches (free each, then the array; for n = 0 it holds
 * none but must still be freed).
 */
DF_API int df_batch_split(const df_batch *b, int64_t chunk, df_batch ***parts, int *n_parts);

/*
 * ---- serialization (MPI payloads, checkpoints) --------------------------------
 * Format version 1, every integer little-endian whatever the host:
 *   "DFBATCH\0", u32 version, u32 n_cols, i64 n, u32 n_meta, u32 0,
 *   n_meta x {u32 key_len, key, f64 value},
 *   n_cols x {u32 name_len, name, u32 kind, payload}, u64 checksum.
 * Payloads: I64 / F32 n values; STR i64 offsets[n + 1] into a byte blob, then
 * the blob; TOK_* i64 offsets[n + 1], then offsets[n] values. The checksum
 * (a 64-bit word hash of every preceding byte) catches any change within one
 * 8-byte word, so a flipped byte is always detected.
 */

/** Serialize into a malloc'd buffer (*buf, *len). Errors: DF_ENOMEM. */
DF_API int df_batch_serialize(const df_batch *b, uint8_t **buf, size_t *len);
/**
 * Inverse of df_batch_serialize. Rejects with DF_EINVAL (and a message naming
 * the byte offset or column) a bad checksum, a truncated buffer, trailing
 * bytes, an unknown version or kind, bad name lengths, duplicate columns or
 * keys, offsets that do not start at 0, decrease or run past the buffer, and
 * NULs inside strings. *out is untouched on failure.
 */
DF_API int df_batch_deserialize(const uint8_t *buf, size_t len, df_batch **out);

/**
 * Per-sample summary of row i: the lengths of its prompt_ids and response_ids
 * rows (0 when a column is absent or not per-token; a multi-agent batch's
 * agent_group_<g>_prompt_ids / _response_ids add every agent's), its `uid` string (NULL
 * when there is no STR uid column), its I64 `index` (-1 when absent), its F32
 * `score` (NaN when absent), src_rank 0 and src_index i. i outside [0, n)
 * gives zero lengths, no uid, group -1.
 */
DF_API df_sample_info df_batch_sample_info(const df_batch *b, int64_t i);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_BATCH_H */
