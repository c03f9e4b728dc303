/* The Parquet footer and page headers: Thrift's compact protocol, read field by field
 * (parquet.thrift names each field; unknown fields are skipped, as Thrift intends). */
#include "data/parquet_internal.h"

#include "distflow/common.h"

#include <stdlib.h>
#include <string.h>

/* Compact protocol element types. */
enum { T_STOP, T_TRUE, T_FALSE, T_BYTE, T_I16, T_I32, T_I64, T_DOUBLE, T_BINARY, T_LIST, T_SET, T_MAP, T_STRUCT };

#define MAX_DEPTH 32 /* nesting of structs / lists the skipper follows (parquet.thrift needs ~6) */

typedef struct tin {
    const uint8_t *p, *end, *base;
    const char *bad; /* first problem, NULL while fine */
} tin;

static bool fail(tin *t, const char *why)
{
    if (!t->bad)
        t->bad = why;
    t->p = t->end;
    return false;
}

static uint64_t varint(tin *t)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (t->p >= t->end)
            return fail(t, "truncated integer"), 0;
        uint8_t b = *t->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
    return fail(t, "integer longer than 10 bytes"), 0;
}

static int64_t zigzag(tin *t)
{
    uint64_t u = varint(t);
    return (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
}

static int32_t i32(tin *t)
{
    int64_t v = zigzag(t);
    if (v < INT32_MIN || v > INT32_MAX)
        return fail(t, "i32 out of range"), 0;
    return (int32_t)v;
}

static const uint8_t *binary(tin *t, uint32_t *n)
{
    uint64_t len = varint(t);
    if (len > (uint64_t)(t->end - t->p) || len > UINT32_MAX)
        return fail(t, "string runs past the end"), NULL;
    const uint8_t *s = t->p;
    t->p += len;
    *n = (uint32_t)len;
    return s;
}

static char *string(tin *t)
{
    uint32_t n = 0;
    const uint8_t *s = binary(t, &n);
    if (!s)
        return NULL;
    char *c = malloc((size_t)n + 1);
    if (!c)
        return fail(t, "out of memory"), NULL;
    memcpy(c, s, n);
    c[n] = 0;
    return c;
}

/* A list header: its element type in *et, its size returned (bounded by the bytes left). */
static int64_t list_header(tin *t, int *et)
{
    if (t->p >= t->end)
        return fail(t, "truncated list"), 0;
    uint8_t h = *t->p++;
    uint64_t n = h >> 4;
    if (n == 15)
        n = varint(t);
    *et = h & 0x0f;
    if (n > (uint64_t)(t->end - t->p))
        return fail(t, "list longer than the bytes left"), 0;
    return (int64_t)n;
}

/* The next field of a struct: false at its STOP. *id / *type of the field; `last` the previous id. */
static bool field(tin *t, int16_t *last, int *type)
{
    if (t->p >= t->end)
        return fail(t, "truncated struct");
    uint8_t b = *t->p++;
    if (b == T_STOP)
        return false;
    *type = b & 0x0f;
    int delta = b >> 4;
    *last = delta ? (int16_t)(*last + delta) : (int16_t)zigzag(t);
    return !t->bad;
}

static void skip(tin *t, int type, int depth);

static void skip_struct(tin *t, int depth)
{
    int16_t id = 0;
    int type;
    while (field(t, &id, &type))
        skip(t, type, depth + 1);
}

static void skip(tin *t, int type, int depth)
{
    if (depth > MAX_DEPTH) {
        fail(t, "nested too deeply");
        return;
    }
    uint32_t n;
    int et, kt;
    switch (type) {
    case T_TRUE:
    case T_FALSE:
        return; /* a field's boolean lives in its header */
    case T_BYTE:
        if (t->p >= t->end)
            fail(t, "truncated byte");
        else
            t->p++;
        return;
    case T_I16:
    case T_I32:
    case T_I64:
        varint(t);
        return;
    case T_DOUBLE:
        if (t->end - t->p < 8)
            fail(t, "truncated double");
        else
            t->p += 8;
        return;
    case T_BINARY:
        binary(t, &n);
        return;
    case T_LIST:
    case T_SET:
        for (int64_t i = list_header(t, &et); i > 0 && !t->bad; i--)
            skip(t, et == T_TRUE || et == T_FALSE ? T_BYTE : et, depth + 1); /* one byte per element */
        return;
    case T_MAP: {
        uint64_t m = varint(t);
        if (m && t->p < t->end) {
            kt = *t->p >> 4;
            et = *t->p++ & 0x0f;
            for (uint64_t i = 0; i < m && !t->bad; i++) {
                skip(t, kt == T_TRUE || kt == T_FALSE ? T_BYTE : kt, depth + 1);
                skip(t, et == T_TRUE || et == T_FALSE ? T_BYTE : et, depth + 1);
            }
        } else if (m)
            fail(t, "truncated map");
        return;
    }
    case T_STRUCT:
        skip_struct(t, depth);
        return;
    default:
        fail(t, "unknown field type");
    }
}

/* A field expected to be `want`; anything else is skipped (forward compatibility) and false. */
static bool is(tin *t, int type, int want)
{
    bool ok = type == want || (want == T_TRUE && type == T_FALSE);
    if (!ok)
        skip(t, type, 0);
    return ok;
}

/* ---- footer structures ----------------------------------------------------------- */

/* LogicalType: a union; its member's id is what the reader needs (and INTEGER's signedness). */
static void logical_type(tin *t, pq_schema_el *e)
{
    int16_t id = 0;
    int type;
    while (field(t, &id, &type)) {
        if (type != T_STRUCT) {
            skip(t, type, 1);
            continue;
        }
        e->logical = id;
        int16_t sid = 0;
        int st;
        while (field(t, &sid, &st)) {
            if (id == PQ_LT_INTEGER && sid == 2 && (st == T_TRUE || st == T_FALSE))
                e->int_unsigned = st == T_FALSE;
            else
                skip(t, st, 2);
        }
    }
}

static void schema_element(tin *t, pq_schema_el *e)
{
    *e = (pq_schema_el){.type = -1, .converted = -1};
    int16_t id = 0;
    int type;
    while (field(t, &id, &type)) {
        if (id == 1 && is(t, type, T_I32))
            e->type = i32(t);
        else if (id == 2 && is(t, type, T_I32))
            e->type_length = i32(t);
        else if (id == 3 && is(t, type, T_I32))
            e->repetition = i32(t);
        else if (id == 4 && is(t, type, T_BINARY)) {
            char *name = string(t); /* a field given twice: the last one counts */
            free(e->name);
            e->name = name;
        } else if (id == 5 && is(t, type, T_I32))
            e->num_children = i32(t);
        else if (id == 6 && is(t, type, T_I32))
            e->converted = i32(t);
        else if (id == 7 && is(t, type, T_I32))
            e->scale = i32(t);
        else if (id == 10 && is(t, type, T_STRUCT))
            logical_type(t, e);
        else if (id > 10 || id < 1 || (id >= 8 && id <= 9))
            skip(t, type, 1);
    }
    if (!e->name && !t->bad)
        fail(t, "schema element without a name");
}

static void column_meta(tin *t, pq_chunk *c)
{
    int16_t id = 0;
    int type, et;
    while (field(t, &id, &type)) {
        if (id == 1 && is(t, type, T_I32))
            c->type = i32(t);
        else if (id == 3 && is(t, type, T_LIST) && c->path)
            skip(t, type, 1); /* a field given twice: the first one counts */
        else if (id == 3 && type == T_LIST) {
            int64_t n = list_header(t, &et);
            if (et != T_BINARY && n) {
                fail(t, "path_in_schema is not a list of strings");
                break;
            }
            if (!(c->path = calloc((size_t)n + 1, sizeof(char *))))
                fail(t, "out of memory");
            for (int64_t i = 0; i < n && !t->bad; i++)
                c->path[c->npath++] = string(t);
        } else if (id == 4 && is(t, type, T_I32))
            c->codec = i32(t);
        else if (id == 5 && is(t, type, T_I64))
            c->num_values = zigzag(t);
        else if (id == 7 && is(t, type, T_I64))
            c->total_compressed_size = zigzag(t);
        else if (id == 9 && is(t, type, T_I64))
            c->data_page_offset = zigzag(t);
        else if (id == 11 && is(t, type, T_I64))
            c->dictionary_page_offset = zigzag(t);
        else if (!(id == 1 || id == 3 || id == 4 || id == 5 || id == 7 || id == 9 || id == 11))
            skip(t, type, 1);
    }
}

static void column_chunk(tin *t, pq_chunk *c)
{
    *c = (pq_chunk){.dictionary_page_offset = -1, .data_page_offset = -1};
    int16_t id = 0;
    int type;
    bool meta = false;
    while (field(t, &id, &type)) {
        if (id == 1 && is(t, type, T_BINARY)) {
            uint32_t n = 0;
            c->external = binary(t, &n) && n > 0;
        } else if (id == 3 && is(t, type, T_STRUCT)) {
            column_meta(t, c);
            meta = true;
        } else if (id != 1 && id != 3)
            skip(t, type, 1);
    }
    if (!meta && !c->external && !t->bad)
        fail(t, "column chunk without its metadata");
}

static void row_group(tin *t, pq_row_group *g)
{
    int16_t id = 0;
    int type, et;
    while (field(t, &id, &type)) {
        if (id == 1 && is(t, type, T_LIST) && g->cols)
            skip(t, type, 1); /* a field given twice: the first one counts */
        else if (id == 1 && type == T_LIST) {
            int64_t n = list_header(t, &et);
            if (n && et != T_STRUCT) {
                fail(t, "columns is not a list of structs");
                break;
            }
            if (!(g->cols = calloc((size_t)n + 1, sizeof *g->cols)))
                fail(t, "out of memory");
            for (int64_t i = 0; i < n && !t->bad; i++)
                column_chunk(t, &g->cols[g->ncols++]);
        } else if (id == 3 && is(t, type, T_I64))
            g->num_rows = zigzag(t);
        else if (id != 1 && id != 3)
            skip(t, type, 1);
    }
}

/* A list of structs at the current field into a calloc'd array of `size` bytes each. */
static void *struct_list(tin *t, size_t size, int *n_out)
{
    int et;
    int64_t n = list_header(t, &et);
    if (n && et != T_STRUCT)
        return fail(t, "expected a list of structs"), NULL;
    void *a = calloc((size_t)n + 1, size);
    if (!a)
        return fail(t, "out of memory"), NULL;
    *n_out = (int)n;
    return a;
}

int pq_meta_parse(const uint8_t *p, size_t len, const char *name, pq_meta *m)
{
    *m = (pq_meta){0};
    tin t = {p, p + len, p, NULL};
    int16_t id = 0;
    int type;
    while (!t.bad && field(&t, &id, &type)) {
        if (id == 2 && is(&t, type, T_LIST) && m->schema)
            skip(&t, type, 0); /* a field given twice: the first one counts */
        else if (id == 2 && type == T_LIST) {
            int n = 0;
            m->schema = struct_list(&t, sizeof *m->schema, &n);
            for (int i = 0; i < n && !t.bad; i++, m->nschema++)
                schema_element(&t, &m->schema[i]);
        } else if (id == 3 && is(&t, type, T_I64))
            m->num_rows = zigzag(&t);
        else if (id == 4 && is(&t, type, T_LIST) && m->rgs)
            skip(&t, type, 0);
        else if (id == 4 && type == T_LIST) {
            int n = 0;
            m->rgs = struct_list(&t, sizeof *m->rgs, &n);
            for (int i = 0; i < n && !t.bad; i++, m->nrgs++)
                row_group(&t, &m->rgs[i]);
        } else if (id != 2 && id != 3 && id != 4)
            skip(&t, type, 0);
    }
    if (!t.bad && !m->nschema)
        fail(&t, "no schema");
    if (t.bad) {
        int rc = strcmp(t.bad, "out of memory")
                     ? df_error(DF_EINVAL, "%s: corrupt Parquet footer (%s, at byte %lld of %zu)", name, t.bad,
                                (long long)(t.p - t.base), len)
                     : df_error(DF_ENOMEM, "out of memory reading %s", name);
        pq_meta_free(m);
        return rc;
    }
    return DF_OK;
}

void pq_meta_free(pq_meta *m)
{
    for (int i = 0; m->schema && i < m->nschema; i++)
        free(m->schema[i].name);
    for (int g = 0; m->rgs && g < m->nrgs; g++) {
        for (int c = 0; c < m->rgs[g].ncols; c++) {
            for (int k = 0; k < m->rgs[g].cols[c].npath; k++)
                free(m->rgs[g].cols[c].path[k]);
            free(m->rgs[g].cols[c].path);
        }
        free(m->rgs[g].cols);
    }
    free(m->schema);
    free(m->rgs);
    *m = (pq_meta){0};
}

/* ---- page headers ------------------------------------------------------------------ */

/* A struct whose fields 1..n are i32s, into dst[id - 1] (a NULL entry: skipped), and whose field
   `flag_id` (0: none) is a bool, into *flag; any other field skipped. */
static void i32_struct(tin *t, int32_t *const *dst, int n, int flag_id, bool *flag)
{
    int16_t id = 0;
    int type;
    while (field(t, &id, &type)) {
        if (flag_id && id == flag_id && is(t, type, T_TRUE))
            *flag = type == T_TRUE;
        else if (id >= 1 && id <= n && dst[id - 1] && is(t, type, T_I32))
            *dst[id - 1] = i32(t);
        else if (!((flag_id && id == flag_id) || (id >= 1 && id <= n && dst[id - 1])))
            skip(t, type, 1);
    }
}

int pq_page_parse(const uint8_t *p, size_t avail, const char *name, const char *what, pq_page *pg,
                  size_t *hdr_len)
{
    *pg = (pq_page){.is_compressed = true, .type = -1};
    tin t = {p, p + avail, p, NULL};
    int16_t id = 0;
    int type;
    while (field(&t, &id, &type)) {
        if (id == 1 && is(&t, type, T_I32))
            pg->type = i32(&t);
        else if (id == 2 && is(&t, type, T_I32))
            pg->uncompressed_size = i32(&t);
        else if (id == 3 && is(&t, type, T_I32))
            pg->compressed_size = i32(&t);
        else if (id == 5 && is(&t, type, T_STRUCT)) /* DataPageHeader */
            i32_struct(&t, (int32_t *const[]){&pg->num_values, &pg->encoding, &pg->def_encoding, &pg->rep_encoding}, 4,
                       0, NULL);
        else if (id == 7 && is(&t, type, T_STRUCT)) /* DictionaryPageHeader */
            i32_struct(&t, (int32_t *const[]){&pg->num_values, &pg->encoding}, 2, 0, NULL);
        else if (id == 8 && is(&t, type, T_STRUCT)) /* DataPageHeaderV2 */
            i32_struct(&t,
                       (int32_t *const[]){&pg->num_values, &pg->num_nulls, &pg->num_rows, &pg->encoding,
                                          &pg->def_bytes, &pg->rep_bytes},
                       6, 7, &pg->is_compressed);
        else if (!(id == 1 || id == 2 || id == 3 || id == 5 || id == 7 || id == 8))
            skip(&t, type, 0);
    }
    if (!t.bad && (pg->type < 0 || pg->compressed_size < 0 || pg->uncompressed_size < 0 || pg->num_values < 0))
        fail(&t, "missing or negative sizes");
    if (t.bad)
        return df_error(DF_EINVAL, "%s: column '%s': corrupt page header (%s, at byte %lld of it)", name, what,
                        t.bad, (long long)(t.p - t.base));
    *hdr_len = (size_t)(t.p - p);
    return DF_OK;
}
