/*
 * safetensors.h (internal) — read and write Hugging Face .safetensors files.
 *
 * Format (huggingface/safetensors README): an 8-byte little-endian u64 N, then
 * N bytes of UTF-8 JSON {name: {"dtype": "F32", "shape": [..], "data_offsets":
 * [begin, end]}, "__metadata__": {str: str}} (optionally padded with spaces),
 * then the byte buffer; offsets are relative to the buffer start.
 *
 * Reading maps the file (mmap) and validates everything before any data is
 * touched, with the rules of the reference Rust reader: header length inside the
 * file, valid JSON without duplicate keys, known dtypes, shape * dtype size ==
 * end - begin, offsets inside the buffer, and tensors that tile the buffer
 * exactly (no overlaps, no holes). Every error names the file and the tensor.
 *
 * F32, BF16 and F16 are read and written; F64, I64 and I32 are readable
 * (converted to float32); the other spec dtypes (BOOL, U8, I8, I16, U16, U32,
 * U64, F8_E4M3, F8_E5M2) are accepted by df_st_open so files carrying them still
 * open, but cannot be converted. Host byte order must be little-endian.
 */
#ifndef DF_MODEL_SAFETENSORS_H
#define DF_MODEL_SAFETENSORS_H

#include "distflow/model.h"

#include <stddef.h>
#include <stdint.h>

/**
 * dtype codes beyond df_dtype (F32 / BF16 / F16) that df_st_tensor.dtype can
 * hold: spec dtypes accepted in files but not produced by the engine.
 */
enum {
    DF_ST_F64 = 16, DF_ST_I64, DF_ST_I32, DF_ST_I16, DF_ST_I8, DF_ST_U8, DF_ST_BOOL,
    DF_ST_U16, DF_ST_U32, DF_ST_U64, DF_ST_F8_E4M3, DF_ST_F8_E5M2
};

#define DF_ST_MAX_DIMS 8

typedef struct df_st_file df_st_file; /* one mmap'd .safetensors file */

typedef struct df_st_tensor {
    const char *name;     /**< owned by the file */
    df_dtype dtype;       /**< DF_DTYPE_* or DF_ST_* code */
    int ndim;             /**< 0 (scalar) .. DF_ST_MAX_DIMS */
    int64_t shape[DF_ST_MAX_DIMS];
    const void *data;     /**< points into the mapping; may be unaligned */
    size_t nbytes;
} df_st_tensor;

/* ---- dtypes and scalar conversions ------------------------------------------ */

/** Bytes per element of a DF_DTYPE_* / DF_ST_* code (0 if unknown). */
size_t df_st_dtype_size(int dtype);
/** Spec name ("F32", "BF16", ...) of a code, or "?" if unknown. */
const char *df_st_dtype_name(int dtype);

/** bfloat16 -> float32 (exact: the high half of the float32 bits). */
float df_bf16_to_f32(uint16_t h);
/**
 * float32 -> bfloat16 with round-to-nearest-even (PyTorch's
 * round_to_nearest_even); NaN stays NaN (quiet bit set, sign kept), overflow
 * rounds to +-inf.
 */
uint16_t df_f32_to_bf16(float f);
/** IEEE binary16 -> float32 (exact, incl. subnormals and inf; a NaN keeps its payload, quieted). */
float df_f16_to_f32(uint16_t h);
/**
 * float32 -> IEEE binary16 with round-to-nearest-even: |x| >= 65520 -> inf,
 * results below 2^-14 become subnormals (2^-25 ties to 0), NaN stays NaN.
 */
uint16_t df_f32_to_f16(float f);

/**
 * Convert n float32 values to dtype (F32 copies, BF16 / F16 as the scalar
 * functions above, bit for bit) into dst (n elements of dtype).
 */
void df_half_from_f32_array(df_dtype dtype, const float *src, void *dst, int64_t n);
/** Convert n F32 / BF16 / F16 values (any alignment) to float32, bit for bit as the scalar functions. */
void df_half_to_f32_array(df_dtype dtype, const void *src, float *dst, int64_t n);

/* ---- reading --------------------------------------------------------------- */

/**
 * Map and validate `path`. DF_ENOTFOUND if it does not exist, DF_EIO if it
 * cannot be read, DF_EINVAL for a malformed file (message: path, tensor, problem),
 * DF_EUNSUPPORTED for more than DF_ST_MAX_DIMS dims.
 */
int df_st_open(const char *path, df_st_file **out);
void df_st_close(df_st_file *f);
/** Path given to df_st_open. */
const char *df_st_path(const df_st_file *f);
/** Number of tensors (the "__metadata__" entry is not a tensor). */
int df_st_count(const df_st_file *f);
/** Tensor i, 0 <= i < count, in the order of their data in the file. */
int df_st_at(const df_st_file *f, int i, df_st_tensor *t);
/** Tensor by name (binary search). DF_ENOTFOUND (message names file and tensor). */
int df_st_find(const df_st_file *f, const char *name, df_st_tensor *t);
/** "__metadata__" value for key, or NULL. */
const char *df_st_metadata(const df_st_file *f, const char *key);
/** Element count of t (product of its shape; 1 for a scalar). */
int64_t df_st_numel(const df_st_tensor *t);
/** A shape as text, "[2, 3]", into buf (truncated to cap), for error messages. */
void df_st_shape_str(char *buf, size_t cap, int ndim, const int64_t *shape);
/**
 * Convert t to float32 into dst[numel(t)]. F32 / BF16 / F16 exactly as stored;
 * F64 rounds, I32 / I64 convert. DF_EUNSUPPORTED for other dtypes.
 */
int df_st_tensor_to_f32(const df_st_tensor *t, float *dst);
/**
 * Convert tensor `name` to float32 into dst; numel must match the stored shape
 * (DF_EINVAL otherwise, DF_ENOTFOUND if absent).
 */
int df_st_read_f32(const df_st_file *f, const char *name, float *dst, int64_t numel);

/* ---- writing --------------------------------------------------------------- */

typedef struct df_st_writer df_st_writer;
struct df_tmpfile;

int df_st_writer_new(df_st_writer **out);
/**
 * Add a tensor from float32 data src[prod(shape)], converted to dtype
 * (F32 / BF16 / F16) and copied now, so src may be reused at once. ndim in
 * 0..DF_ST_MAX_DIMS. Tensors are laid out in the order added. DF_EINVAL for a
 * duplicate or empty name, "__metadata__", bad shape or dtype.
 */
int df_st_writer_add(df_st_writer *w, const char *name, df_dtype dtype, int ndim,
                     const int64_t *shape, const float *src);
/**
 * As df_st_writer_add, but src is NOT copied: it must stay valid and unchanged
 * until df_st_writer_write / _write_to returns. Converted in chunks while
 * writing, so saving needs no second copy of the weights.
 */
int df_st_writer_add_borrowed(df_st_writer *w, const char *name, df_dtype dtype, int ndim,
                              const int64_t *shape, const float *src);
/** Most pieces df_st_writer_add_gathered joins. */
#define DF_ST_MAX_PARTS 3
/**
 * As df_st_writer_add_borrowed, for a tensor whose data is the concatenation of n_parts (1 ..
 * DF_ST_MAX_PARTS) borrowed arrays parts[i][part_numel[i]] in order (a fused projection written
 * from its separate weights, e.g. phi3's qkv_proj from q, k and v); the numels must sum to
 * prod(shape). DF_EINVAL otherwise, and as df_st_writer_add.
 */
int df_st_writer_add_gathered(df_st_writer *w, const char *name, df_dtype dtype, int ndim,
                              const int64_t *shape, const float *const *parts,
                              const int64_t *part_numel, int n_parts);
/** The next n floats of a streamed tensor into buf; DF_OK, or an error (with df_error's message),
 *  which stops the write. */
typedef int (*df_st_source_fn)(void *user, float *buf, int64_t n);
/**
 * A 1-D F32 tensor [numel] whose data the writer pulls from fn while it writes the file, in
 * order, in pieces of at most 65536 floats, so that none of it is held whole (ZeRO-1's moments,
 * received slice by slice from their ranks: engine/train_shard.c). fn must give exactly numel
 * floats over its calls; a write that fails stops calling it. Errors as df_st_writer_add.
 */
int df_st_writer_add_stream(df_st_writer *w, const char *name, int64_t numel, df_st_source_fn fn, void *user);
/** Set a "__metadata__" entry (replaces an existing key), e.g. ("format", "pt"). */
int df_st_writer_set_metadata(df_st_writer *w, const char *key, const char *value);
/** Bytes of tensor data added so far (excluding the header). */
int64_t df_st_writer_data_bytes(const df_st_writer *w);
/** Write `path` atomically: temporary in the same directory, fsync, rename. */
int df_st_writer_write(df_st_writer *w, const char *path);
/**
 * Write the file into an open temporary (hf_io.h) without committing it, so a
 * caller can stage several files and rename them together.
 */
int df_st_writer_write_to(df_st_writer *w, struct df_tmpfile *t);
void df_st_writer_free(df_st_writer *w);

#endif /* DF_MODEL_SAFETENSORS_H */
