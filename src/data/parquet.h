/*
 * parquet.h (internal) — a Parquet file's rows as JSON objects, so that the dataset loader, the
 * converters and the scans read verl's parquet datasets as they read JSON lines.
 *
 * A row is an object with one member per top-level column, in schema order. Values: BOOLEAN ->
 * true / false; INT32 / INT64 (any integer annotation, dates and timestamps as the stored count)
 * -> integer, unsigned 64-bit values above INT64_MAX refused; DECIMAL (on INT32, INT64,
 * FIXED_LEN_BYTE_ARRAY or BYTE_ARRAY) -> real, the double nearest its decimal text; FLOAT /
 * DOUBLE / FLOAT16 -> real, NaN and infinities -> null (as pandas' to_json); UUID -> its
 * 8-4-4-4-12 hex text; other BYTE_ARRAY / FIXED_LEN_BYTE_ARRAY -> string (must be UTF-8); a null
 * -> null. Groups: a LIST (3-level, or the older 2-level forms of parquet's LogicalTypes.md) ->
 * array, a bare repeated field -> array, a MAP -> object (keys as text, a repeated key's last
 * value), any other group -> object. Refused with DF_EUNSUPPORTED: INT96, LZO compression
 * (UNCOMPRESSED, SNAPPY, GZIP, ZSTD, LZ4_RAW, LZ4, BROTLI are read), encodings other than PLAIN,
 * dictionaries, RLE booleans, the DELTA encodings and BYTE_STREAM_SPLIT, column data in other
 * files.
 */
#ifndef DF_DATA_PARQUET_H
#define DF_DATA_PARQUET_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/** True when buf starts with Parquet's "PAR1" magic. */
bool df_parquet_is(const char *buf, size_t len);

/**
 * Every row of the Parquet file held in buf[0, len) (`name` names it in errors), in file
 * order, as a new JSON array of objects in *rows.
 * Errors: DF_EINVAL "<name>: ..." for a truncated file, a corrupt footer or page, or a value that
 * is not UTF-8 text ("<name>: row N, column 'c': ..."); DF_EUNSUPPORTED for the features listed
 * above, naming the column; DF_ENOMEM. *rows is untouched on error.
 */
int df_parquet_rows(const char *buf, size_t len, const char *name, json_t **rows);

#endif /* DF_DATA_PARQUET_H */
