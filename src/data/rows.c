/* A dataset file's rows, JSON lines or Parquet (data/rows.h). */
#include "data/rows.h"

#include "data/parquet.h"
#include "distflow/common.h"

int df_rows_open(df_rows *r, const char *text, size_t len, const char *name)
{
    *r = (df_rows){.name = name};
    if (df_parquet_is(text, len))
        return df_parquet_rows(text, len, name, &r->table);
    df_jsonl_lines_init(&r->lines, text, len);
    return DF_OK;
}

bool df_rows_parquet(const df_rows *r) { return r->table != NULL; }

bool df_rows_skip(df_rows *r)
{
    const char *s;
    size_t n;
    if (r->table ? r->next >= json_array_size(r->table) : !df_jsonl_lines_next(&r->lines, &s, &n))
        return false;
    r->where = r->table ? (int64_t)++r->next : r->lines.line;
    return true;
}

int df_rows_next(df_rows *r, json_t **obj)
{
    *obj = NULL;
    if (r->table) {
        if (r->next < json_array_size(r->table)) {
            *obj = json_incref(json_array_get(r->table, r->next++));
            r->where = (int64_t)r->next;
        }
        return DF_OK;
    }
    const char *s;
    size_t n;
    if (!df_jsonl_lines_next(&r->lines, &s, &n))
        return DF_OK;
    r->where = r->lines.line;
    return df_jsonl_parse_line(s, n, r->name, r->where, obj);
}

void df_rows_close(df_rows *r)
{
    json_decref(r->table);
    r->table = NULL;
}
