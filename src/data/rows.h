/*
 * rows.h (internal) — the rows of a dataset file, whichever format it is: JSON lines (one object
 * per line) or Parquet (data/parquet.h: each row as the same object). The dataset loader, the
 * converters and the value scans read files through it.
 */
#ifndef DF_DATA_ROWS_H
#define DF_DATA_ROWS_H

#include "data/jsonl.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct df_rows {
    const char *name;
    df_jsonl_lines lines; /**< JSON lines */
    json_t *table;        /**< Parquet: every row, read at open */
    size_t next;
    int64_t where; /**< where the row last returned is: its line (JSON lines) or its 1-based row (Parquet) */
} df_rows;

/**
 * Start reading `text` (`len` bytes; `name` names it in errors; the buffer must outlive the
 * iterator). A Parquet file (its "PAR1" magic) is decoded whole here: its errors (data/parquet.h)
 * come from this call. DF_OK, or the reader's DF_EINVAL / DF_EUNSUPPORTED / DF_ENOMEM.
 */
int df_rows_open(df_rows *r, const char *text, size_t len, const char *name);

/**
 * The next row as a new reference in *obj, NULL after the last. DF_OK; a JSON line that is not an
 * object is DF_EINVAL "<name>:<line>:<column>: ..." (df_jsonl_parse_line), *obj NULL.
 */
int df_rows_next(df_rows *r, json_t **obj);

/** Step over the next row without decoding it (a JSON line is not parsed); false at the end. */
bool df_rows_skip(df_rows *r);

/** True when the rows come from a Parquet file (r->where counts rows, not lines). */
bool df_rows_parquet(const df_rows *r);

void df_rows_close(df_rows *r);

#endif /* DF_DATA_ROWS_H */
