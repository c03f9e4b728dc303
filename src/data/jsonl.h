/*
 * jsonl.h (internal) — helpers shared by the dataset loader, the GSM8K
 * and MATH converters and the synthetic task: JSON-lines iteration, jansson value
 * helpers and a growable string buffer. (File reads and atomic writes come
 * from util/fsutil.h.)
 */
#ifndef DF_DATA_JSONL_H
#define DF_DATA_JSONL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Iterator over the lines of a buffer ('\n' separated, a trailing '\r' removed). */
typedef struct df_jsonl_lines {
    const char *p, *end;
    int64_t line; /**< 1-based number of the line last returned */
} df_jsonl_lines;

void df_jsonl_lines_init(df_jsonl_lines *it, const char *buf, size_t len);
/** Next line that is not blank (only spaces / tabs / '\r'); false at the end. */
bool df_jsonl_lines_next(df_jsonl_lines *it, const char **s, size_t *len);

/**
 * Parse one JSON line that must hold an object (duplicate keys rejected).
 * On failure returns DF_EINVAL with "<name>:<line>:<column>: invalid JSON: ...".
 */
int df_jsonl_parse_line(const char *s, size_t len, const char *name, int64_t line, json_t **out);

/**
 * JSON text identical to Python's json.dumps(v) with its defaults
 * (ensure_ascii, ", " and ": " separators, lowercase \uXXXX, DEL escaped) for
 * values without reals. malloc'd; NULL on OOM.
 */
char *df_jsonl_dumps_py(const json_t *v);

/** "string", "integer", "real", "object", "array", "true", "false", "null". */
const char *df_jsonl_type_name(const json_t *v);

/**
 * Text of a JSON value: strings as-is; integers in decimal; reals in the
 * shortest form that reads back exactly (Python repr style, "2.0" not "2");
 * true / false; null -> ""; objects and arrays as compact JSON. malloc'd.
 */
int df_jsonl_text(const json_t *v, char **out);

/** Compact JSON of a value (insertion order kept, UTF-8 kept as is). malloc'd; NULL on OOM. */
char *df_jsonl_compact(const json_t *v);

/**
 * Value at a dotted path ("extra_info.answer", "prompt.0.content": a numeric
 * segment indexes an array). Borrowed reference; NULL when absent.
 */
json_t *df_jsonl_path(json_t *root, const char *path);

/**
 * The string member `key` of `obj` into *out (borrowed). DF_EINVAL naming
 * file:line when it is missing or not a string.
 */
int df_jsonl_get_string(json_t *obj, const char *key, const char *file, int64_t line, const char **out);

/** A converter's default split name: the path's base name up to its first '.' ("dir/train.jsonl" ->
 * "train"). malloc'd; NULL on OOM. */
char *df_jsonl_split_name(const char *path);

/** Append `n` bytes to a growable buffer; false on OOM. */
typedef struct df_jsonl_buf {
    char *p;
    size_t len, cap;
} df_jsonl_buf;
bool df_jsonl_buf_add(df_jsonl_buf *b, const char *s, size_t n);
bool df_jsonl_buf_addf(df_jsonl_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/** Append df_jsonl_dumps_py(row) and a newline, then release `row` (its reference is taken; NULL:
 *  nothing appended). False on NULL or OOM. */
bool df_jsonl_buf_add_py_line(df_jsonl_buf *b, json_t *row);

/**
 * A converter's row: append the output line of `raw` (line `line` of `file`, or
 * its row for a Parquet file; the `index`-th row from 0) to *out. DF_* status
 * with file:line.
 */
typedef int (*df_jsonl_row_fn)(void *user, json_t *raw, const char *file, int64_t line, const char *split,
                               int64_t index, df_jsonl_buf *out);

/**
 * The converters' driver (distflow data gsm8k / math): read the rows of
 * `in_path` (JSON lines or Parquet, data/rows.h), pass each row to fn (`split` NULL: df_jsonl_split_name of the
 * path), write the output to `out_path` atomically and the row count to
 * *n_rows (may be NULL). `need_rows`: an input without rows is DF_EINVAL.
 * Errors: DF_EINVAL when out_path is the input file (df_same_file), those of reading the file (DF_ENOTFOUND, DF_EIO; a Parquet file's
 * DF_EINVAL / DF_EUNSUPPORTED), of a line (DF_EINVAL with file:line:column), of fn, of the
 * write; DF_ENOMEM. Nothing is written on failure.
 */
int df_jsonl_convert(const char *in_path, const char *out_path, const char *split, bool need_rows,
                     df_jsonl_row_fn fn, void *user, int64_t *n_rows);

#endif /* DF_DATA_JSONL_H */
