/*
 * batch_internal.h (internal) — the df_batch layout shared by batch.c and
 * batch_serde.c. Columns are held by pointer so that a df_column* handed out
 * by the getters survives later insertions.
 */
#ifndef DF_DATA_BATCH_INTERNAL_H
#define DF_DATA_BATCH_INTERNAL_H

#include "distflow/batch.h"

typedef struct df_meta_entry {
    char *key;
    double value;
} df_meta_entry;

struct df_batch {
    int64_t n;
    df_column **cols;
    int ncol, capcol;
    df_meta_entry *meta;
    int nmeta, capmeta;
};

/** Bytes per element of a numeric kind (I64 8, F32 / TOK_* 4); 0 for STR. */
size_t df_col_elem_size(df_col_kind kind);

static inline bool df_col_is_ragged(df_col_kind k)
{
    return k == DF_COL_TOK_I32 || k == DF_COL_TOK_F32;
}

/**
 * Insert a fully built column, taking ownership of c (and of its offsets /
 * data / strings, which must match b->n). Replaces a same-named column in
 * place. On failure c is freed.
 */
int df_batch_adopt(df_batch *b, df_column *c);

/** Free a column and everything it owns (n = rows, needed for STR). */
void df_column_free(df_column *c, int64_t n);

/** Check a column name (1..DF_COL_NAME_MAX-1 bytes). */
int df_col_name_check(const char *name);

/** The wire format's trailing checksum of p[0..len) (exposed for tests that forge buffers). */
uint64_t df_batch_wire_checksum(const uint8_t *p, size_t len);

#endif /* DF_DATA_BATCH_INTERNAL_H */
