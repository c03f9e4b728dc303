/*
 * parquet_internal.h (internal) — the pieces of the Parquet reader (data/parquet.h): the footer's
 * Thrift compact structures (parquet_meta.c), a column chunk decoded into levels and values
 * (parquet_column.c), and the record assembly into JSON rows (parquet.c).
 *
 * Format: Apache Parquet's parquet.thrift and its Encodings.md / Compression.md; nested
 * columns follow the Dremel repetition / definition levels (Melnik et al., VLDB 2010).
 */
#ifndef DF_DATA_PARQUET_INTERNAL_H
#define DF_DATA_PARQUET_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* parquet.thrift's enums, as far as the reader names them. */
enum { PQ_BOOLEAN, PQ_INT32, PQ_INT64, PQ_INT96, PQ_FLOAT, PQ_DOUBLE, PQ_BYTE_ARRAY, PQ_FIXED_LEN_BYTE_ARRAY };
enum { PQ_REQUIRED, PQ_OPTIONAL, PQ_REPEATED };
enum { PQ_PLAIN = 0, PQ_PLAIN_DICTIONARY = 2, PQ_RLE = 3, PQ_BIT_PACKED = 4, PQ_DELTA_BINARY_PACKED = 5,
       PQ_DELTA_LENGTH_BYTE_ARRAY = 6, PQ_DELTA_BYTE_ARRAY = 7, PQ_RLE_DICTIONARY = 8, PQ_BYTE_STREAM_SPLIT = 9 };
enum { PQ_UNCOMPRESSED, PQ_SNAPPY, PQ_GZIP, PQ_LZO, PQ_BROTLI, PQ_LZ4, PQ_ZSTD, PQ_LZ4_RAW };
enum { PQ_DATA_PAGE, PQ_INDEX_PAGE, PQ_DICTIONARY_PAGE, PQ_DATA_PAGE_V2 };
/* ConvertedType values the reader acts on. */
enum { PQ_CT_UTF8 = 0, PQ_CT_MAP = 1, PQ_CT_MAP_KEY_VALUE = 2, PQ_CT_LIST = 3, PQ_CT_ENUM = 4,
       PQ_CT_DECIMAL = 5, PQ_CT_UINT_8 = 11, PQ_CT_UINT_16 = 12, PQ_CT_UINT_32 = 13, PQ_CT_UINT_64 = 14,
       PQ_CT_JSON = 19, PQ_CT_BSON = 20, PQ_CT_INTERVAL = 21 };
/* LogicalType union members (their field ids). */
enum { PQ_LT_STRING = 1, PQ_LT_MAP = 2, PQ_LT_LIST = 3, PQ_LT_ENUM = 4, PQ_LT_DECIMAL = 5, PQ_LT_INTEGER = 10,
       PQ_LT_JSON = 12, PQ_LT_BSON = 13, PQ_LT_UUID = 14, PQ_LT_FLOAT16 = 15 };

/** One SchemaElement of the footer's depth-first schema list. */
typedef struct pq_schema_el {
    char *name;
    int type;         /**< physical type; -1 for a group */
    int type_length;  /**< FIXED_LEN_BYTE_ARRAY's width */
    int repetition;   /**< PQ_REQUIRED / OPTIONAL / REPEATED; the root has none (REQUIRED) */
    int num_children; /**< > 0: a group */
    int converted;    /**< ConvertedType, -1 when absent */
    int scale;        /**< DECIMAL's scale */
    int logical;      /**< LogicalType member id, 0 when absent */
    bool int_unsigned; /**< LogicalType INTEGER(isSigned=false) */
} pq_schema_el;

/** One column chunk's ColumnMetaData. */
typedef struct pq_chunk {
    int type, codec;
    char **path; /**< path_in_schema */
    int npath;
    int64_t num_values, total_compressed_size, data_page_offset, dictionary_page_offset; /* offset -1: none */
    bool external; /**< ColumnChunk.file_path set: the data lives in another file */
} pq_chunk;

typedef struct pq_row_group {
    pq_chunk *cols;
    int ncols;
    int64_t num_rows;
} pq_row_group;

typedef struct pq_meta {
    pq_schema_el *schema;
    int nschema;
    int64_t num_rows;
    pq_row_group *rgs;
    int nrgs;
} pq_meta;

/** A PageHeader (data page v1 / v2 and dictionary page fields merged). */
typedef struct pq_page {
    int type;
    int32_t uncompressed_size, compressed_size;
    int32_t num_values, num_nulls, num_rows;
    int32_t encoding, def_encoding, rep_encoding;
    int32_t def_bytes, rep_bytes; /**< v2: the level sections' sizes (never compressed) */
    bool is_compressed;           /**< v2 only; true by default */
} pq_page;

/**
 * Decode the footer's FileMetaData (`len` bytes). DF_EINVAL "<name>: corrupt Parquet footer
 * (...)" on a truncated or malformed structure; DF_ENOMEM.
 */
int pq_meta_parse(const uint8_t *p, size_t len, const char *name, pq_meta *out);
void pq_meta_free(pq_meta *m);

/**
 * Decode a PageHeader at p (at most `avail` bytes); *hdr_len its size. DF_EINVAL naming `what`
 * (the column) on a malformed header.
 */
int pq_page_parse(const uint8_t *p, size_t avail, const char *name, const char *what, pq_page *out,
                  size_t *hdr_len);

/** One value of a column: integers and booleans in i, FLOAT / DOUBLE in d, BYTE_ARRAY and
 *  FIXED_LEN_BYTE_ARRAY in s / n. */
typedef struct pq_value {
    union {
        int64_t i;
        double d;
        const uint8_t *s;
    };
    uint32_t n;
} pq_value;

/**
 * A column chunk decoded: one (repetition, definition) level pair per slot and the values of
 * the slots whose definition level is the column's maximum, in order. Byte-array values point
 * into `bufs` (the decompressed pages), freed with the column.
 */
typedef struct pq_column {
    int16_t *rep, *def;
    int64_t n_levels;
    pq_value *values;
    int64_t n_values;
    uint8_t **bufs;
    int nbufs;
} pq_column;

/**
 * Read column chunk `c` of `file` (`len` bytes; `type_length` its FIXED_LEN_BYTE_ARRAY width) into *out: its dictionary and data pages (v1 and
 * v2), decompressed (UNCOMPRESSED, SNAPPY, GZIP, ZSTD, LZ4_RAW, LZ4, BROTLI), decoded (PLAIN,
 * PLAIN_ / RLE_DICTIONARY, RLE booleans, DELTA_BINARY_PACKED, DELTA_LENGTH_BYTE_ARRAY,
 * DELTA_BYTE_ARRAY, BYTE_STREAM_SPLIT). `max_rep` /
 * `max_def` are the leaf's maximum levels. Errors name `name` and the column `what`:
 * DF_EUNSUPPORTED (codec, encoding), DF_EINVAL (corrupt pages), DF_ENOMEM.
 */
int pq_column_read(const uint8_t *file, size_t len, const pq_chunk *c, int type_length, int max_rep, int max_def,
                   const char *name, const char *what, pq_column *out);
void pq_column_free(pq_column *c);

#endif /* DF_DATA_PARQUET_INTERNAL_H */
