/* File, JSON-lines and jansson helpers for the data layer (src/data/jsonl.h). */
#include "data/jsonl.h"

#include "data/rows.h"

#include "distflow/common.h"
#include "util/fsutil.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void df_jsonl_lines_init(df_jsonl_lines *it, const char *buf, size_t len)
{
    it->p = buf;
    it->end = buf + len;
    it->line = 0;
}

bool df_jsonl_lines_next(df_jsonl_lines *it, const char **s, size_t *len)
{
    while (it->p < it->end) {
        const char *start = it->p;
        const char *nl = memchr(start, '\n', (size_t)(it->end - start));
        const char *stop = nl ? nl : it->end;
        it->p = nl ? nl + 1 : it->end;
        it->line++;
        const char *e = stop;
        if (e > start && e[-1] == '\r')
            e--;
        const char *q = start;
        while (q < e && (*q == ' ' || *q == '\t' || *q == '\r'))
            q++;
        if (q == e)
            continue; /* blank line */
        *s = start;
        *len = (size_t)(e - start);
        return true;
    }
    return false;
}

int df_jsonl_parse_line(const char *s, size_t len, const char *name, int64_t line, json_t **out)
{
    json_error_t err;
    json_t *v = json_loadb(s, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err);
    if (!v)
        return df_error(DF_EINVAL, "%s:%lld:%d: invalid JSON: %s", name, (long long)line,
                        err.column, err.text);
    if (!json_is_object(v)) {
        int rc = df_error(DF_EINVAL, "%s:%lld: expected a JSON object, got %s", name,
                          (long long)line, df_jsonl_type_name(v));
        json_decref(v);
        return rc;
    }
    *out = v;
    return DF_OK;
}

const char *df_jsonl_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "object";
    case JSON_ARRAY:
        return "array";
    case JSON_STRING:
        return "string";
    case JSON_INTEGER:
        return "integer";
    case JSON_REAL:
        return "real";
    case JSON_TRUE:
        return "true";
    case JSON_FALSE:
        return "false";
    default:
        return "null";
    }
}

char *df_jsonl_compact(const json_t *v)
{
    return json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
}

char *df_jsonl_dumps_py(const json_t *v)
{
    char *t = json_dumps(v, JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII | JSON_ENCODE_ANY);
    if (!t)
        return NULL;
    size_t dels = 0;
    for (const char *p = t; *p; p++)
        dels += *p == 0x7f;
    char *o = malloc(strlen(t) + 5 * dels + 1);
    if (!o) {
        free(t);
        return NULL;
    }
    char *w = o;
    for (const char *p = t; *p; p++) {
        if (*p == 0x7f) { /* Python escapes DEL; jansson does not */
            memcpy(w, "\\u007f", 6);
            w += 6;
        } else if (*p == '\\' && p[1] == 'u') { /* \uXXXX: Python writes lowercase hex */
            *w++ = *p++;
            *w++ = *p;
            for (int k = 0; k < 4 && p[1]; k++) {
                char c = *++p;
                *w++ = (c >= 'A' && c <= 'F') ? (char)(c - 'A' + 'a') : c;
            }
        } else if (*p == '\\') { /* any other escape: copy both bytes */
            *w++ = *p++;
            *w++ = *p;
        } else {
            *w++ = *p;
        }
    }
    *w = '\0';
    free(t);
    return o;
}

/* Shortest %.*g that reads back to the same double; ".0" added to integral
 * values so the text matches Python's str(float) for ordinary magnitudes. */
static char *real_text(double d)
{
    char tmp[64];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, d);
        if (strtod(tmp, NULL) == d)
            break;
    }
    if (!strpbrk(tmp, ".eEn")) /* n: inf / nan */
        strcat(tmp, ".0");
    return strdup(tmp);
}

int df_jsonl_text(const json_t *v, char **out)
{
    char *s;
    char tmp[32];
    switch (json_typeof(v)) {
    case JSON_STRING:
        s = strdup(json_string_value(v));
        break;
    case JSON_INTEGER:
        snprintf(tmp, sizeof tmp, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        s = strdup(tmp);
        break;
    case JSON_REAL:
        s = real_text(json_real_value(v));
        break;
    case JSON_TRUE:
        s = strdup("true");
        break;
    case JSON_FALSE:
        s = strdup("false");
        break;
    case JSON_NULL:
        s = strdup("");
        break;
    default:
        s = df_jsonl_compact(v);
    }
    if (!s)
        return df_error(DF_ENOMEM, "out of memory converting a JSON value to text");
    *out = s;
    return DF_OK;
}

json_t *df_jsonl_path(json_t *root, const char *path)
{
    if (!path || !*path)
        return NULL;
    json_t *cur = root;
    const char *p = path;
    char seg[256];
    while (cur && p && *p) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        if (n == 0 || n >= sizeof seg)
            return NULL;
        memcpy(seg, p, n);
        seg[n] = '\0';
        if (json_is_object(cur)) {
            cur = json_object_get(cur, seg);
        } else if (json_is_array(cur)) {
            char *end;
            errno = 0;
            unsigned long long k = strtoull(seg, &end, 10);
            if (*end || errno || seg[0] < '0' || seg[0] > '9')
                return NULL;
            cur = json_array_get(cur, (size_t)k);
        } else {
            return NULL;
        }
        p = dot ? dot + 1 : NULL;
    }
    return p ? NULL : cur; /* p left non-NULL: a trailing '.' */
}

static bool strbuf_reserve(df_jsonl_buf *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *np = realloc(b->p, cap);
    if (!np)
        return false;
    b->p = np;
    b->cap = cap;
    return true;
}

bool df_jsonl_buf_add(df_jsonl_buf *b, const char *s, size_t n)
{
    if (!strbuf_reserve(b, n))
        return false;
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return true;
}

bool df_jsonl_buf_addf(df_jsonl_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !strbuf_reserve(b, (size_t)n))
        return false;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return true;
}

int df_jsonl_get_string(json_t *obj, const char *key, const char *file, int64_t line, const char **out)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return df_error(DF_EINVAL, "%s:%lld: missing \"%s\"", file, (long long)line, key);
    if (!json_is_string(v))
        return df_error(DF_EINVAL, "%s:%lld: \"%s\" must be a string, got %s", file, (long long)line, key,
                        df_jsonl_type_name(v));
    *out = json_string_value(v);
    return DF_OK;
}

char *df_jsonl_split_name(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strchr(base, '.');
    size_t n = dot ? (size_t)(dot - base) : strlen(base);
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, base, n);
        s[n] = '\0';
    }
    return s;
}

int df_jsonl_convert(const char *in_path, const char *out_path, const char *split, bool need_rows,
                     df_jsonl_row_fn fn, void *user, int64_t *n_rows)
{
    char *text = NULL, *own_split = NULL;
    size_t len = 0;
    df_rows rows = {0};
    if (df_same_file(in_path, out_path)) /* the atomic write would replace the rows being converted */
        return df_error(DF_EINVAL, "%s: the output is the input file", out_path);
    int rc = df_read_file(in_path, &text, &len);
    if (!rc)
        rc = df_rows_open(&rows, text, len, in_path);
    if (!rc && !split && !(split = own_split = df_jsonl_split_name(in_path)))
        rc = df_error(DF_ENOMEM, "out of memory");
    df_jsonl_buf out = {0};
    int64_t index = 0;
    json_t *raw = NULL;
    while (!rc && !(rc = df_rows_next(&rows, &raw)) && raw) {
        rc = fn(user, raw, in_path, rows.where, split, index++, &out);
        json_decref(raw);
    }
    if (!rc && need_rows && index == 0)
        rc = df_error(DF_EINVAL, "%s: no rows", in_path);
    if (!rc)
        rc = df_write_file_atomic(out_path, out.p ? out.p : "", out.len);
    if (!rc && n_rows)
        *n_rows = index;
    df_rows_close(&rows);
    free(out.p);
    free(own_split);
    free(text);
    return rc;
}

bool df_jsonl_buf_add_py_line(df_jsonl_buf *b, json_t *row)
{
    char *text = row ? df_jsonl_dumps_py(row) : NULL;
    bool ok = text && df_jsonl_buf_add(b, text, strlen(text)) && df_jsonl_buf_add(b, "\n", 1);
    free(text);
    json_decref(row);
    return ok;
}
