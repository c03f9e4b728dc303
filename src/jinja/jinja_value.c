/*
 * The arena, strings under construction, and the value type of the Jinja
 * engine: constructors, truthiness, Python's == and <, str(), and JSON in
 * (the render context, through jansson) and out (`tojson`).
 */
#include "jinja/jinja_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors and arena ---------------------------------------------------- */

struct jj_chunk {
    jj_chunk *next;
    size_t cap, used;
    max_align_t data[];
};

_Noreturn void jj_fail_code(jj_ctx *c, int code)
{
    c->code = code;
    longjmp(c->jb, 1);
}

_Noreturn void jj_fail(jj_ctx *c, int line, int col, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *name = c->name ? c->name : "template";
    if (line > 0)
        df_error(DF_EINVAL, "%s:%d:%d: %s", name, line, col, msg);
    else
        df_error(DF_EINVAL, "%s: %s", name, msg);
    jj_fail_code(c, DF_EINVAL);
}

void *jj_alloc(jj_ctx *c, size_t n)
{
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    jj_chunk *k = c->chunks;
    if (!k || k->cap - k->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (c->limit > 0 && c->used + (int64_t)cap > c->limit) {
            df_error(DF_EINVAL, "%s: the render needs more than %lld bytes of memory (max_memory)",
                     c->name ? c->name : "template", (long long)c->limit);
            jj_fail_code(c, DF_EINVAL);
        }
        k = malloc(sizeof *k + cap);
        if (!k) {
            df_error(DF_ENOMEM, "%s: out of memory", c->name ? c->name : "template");
            jj_fail_code(c, DF_ENOMEM);
        }
        k->cap = cap;
        k->used = 0;
        k->next = c->chunks;
        c->chunks = k;
        c->used += (int64_t)cap;
    }
    void *p = (char *)k->data + k->used;
    k->used += n;
    memset(p, 0, n);
    return p;
}

char *jj_strndup(jj_ctx *c, const char *s, size_t n)
{
    char *p = jj_alloc(c, n + 1);
    memcpy(p, s, n);
    return p;
}

void jj_arena_free(jj_ctx *c)
{
    while (c->chunks) {
        jj_chunk *k = c->chunks;
        c->chunks = k->next;
        free(k);
    }
    c->used = 0;
}

/* ---- strings under construction ------------------------------------------ */

static void reserve(jj_buf *b, size_t extra)
{
    if (b->heap && b->limit > 0 && (int64_t)(b->n + extra) > b->limit) /* on every append, not on growth */
        jj_fail(b->c, 0, 0, "the output exceeds %lld bytes (max_output)", (long long)b->limit);
    if (b->n + extra + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap * 2 : 64;
    while (cap < b->n + extra + 1)
        cap *= 2;
    if (b->heap) {
        char *s = realloc(b->s, cap);
        if (!s) {
            df_error(DF_ENOMEM, "%s: out of memory", b->c->name ? b->c->name : "template");
            jj_fail_code(b->c, DF_ENOMEM);
        }
        b->s = s;
    } else {
        char *s = jj_alloc(b->c, cap);
        if (b->n)
            memcpy(s, b->s, b->n);
        b->s = s;
    }
    b->cap = cap;
}

void jj_put(jj_buf *b, const char *p, size_t n)
{
    reserve(b, n);
    memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = '\0';
}

void jj_puts(jj_buf *b, const char *p)
{
    jj_put(b, p, strlen(p));
}

void jj_printf(jj_buf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    jj_put(b, tmp, k < 0 ? 0 : (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

/* ---- constructors -------------------------------------------------------- */

const jj_val jj_undef = {.t = JT_UNDEF}, jj_none = {.t = JT_NONE};

jj_val jj_bool(bool b)
{
    return (jj_val){.t = JT_BOOL, .b = b};
}
jj_val jj_int(int64_t i)
{
    return (jj_val){.t = JT_INT, .i = i};
}
jj_val jj_float(double f)
{
    return (jj_val){.t = JT_FLOAT, .f = f};
}

jj_val jj_str_n(jj_ctx *c, const char *s, size_t n)
{
    jj_str *p = jj_alloc(c, sizeof *p + n + 1);
    p->n = n;
    if (n)
        memcpy(p->s, s, n);
    return (jj_val){.t = JT_STR, .s = p};
}

jj_val jj_cstr(jj_ctx *c, const char *s)
{
    return jj_str_n(c, s, strlen(s));
}

jj_val jj_list_new(jj_ctx *c, size_t cap)
{
    jj_list *l = jj_alloc(c, sizeof *l);
    l->cap = cap;
    l->v = cap ? jj_alloc(c, cap * sizeof *l->v) : NULL;
    return (jj_val){.t = JT_LIST, .l = l};
}

void jj_list_push(jj_ctx *c, jj_list *l, jj_val v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jj_val *nv = jj_alloc(c, cap * sizeof *nv);
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

jj_val jj_dict_new(jj_ctx *c)
{
    jj_dict *d = jj_alloc(c, sizeof *d);
    return (jj_val){.t = JT_DICT, .d = d};
}

jj_val *jj_dict_get(const jj_dict *d, jj_val k)
{
    for (size_t i = 0; i < d->n; i++)
        if (jj_equal(d->k[i], k))
            return &d->v[i];
    return NULL;
}

jj_val *jj_dict_getc(const jj_dict *d, const char *k)
{
    size_t n = strlen(k);
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JT_STR && d->k[i].s->n == n && memcmp(d->k[i].s->s, k, n) == 0)
            return &d->v[i];
    return NULL;
}

void jj_dict_set(jj_ctx *c, jj_dict *d, jj_val k, jj_val v)
{
    jj_val *old = jj_dict_get(d, k);
    if (old) {
        *old = v;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        jj_val *nk = jj_alloc(c, cap * sizeof *nk), *nv = jj_alloc(c, cap * sizeof *nv);
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof *nk);
            memcpy(nv, d->v, d->n * sizeof *nv);
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
}

/* ---- truthiness, equality, order ----------------------------------------- */

bool jj_truthy(jj_val v)
{
    switch (v.t) {
    case JT_UNDEF:
    case JT_NONE: return false;
    case JT_BOOL: return v.b;
    case JT_INT: return v.i != 0;
    case JT_FLOAT: return v.f != 0.0;
    case JT_STR: return v.s->n > 0;
    case JT_LIST: return v.l->n > 0;
    case JT_DICT: return v.d->n > 0;
    case JT_FUNC: return true;
    }
    return false;
}

static bool is_num(jj_val v)
{
    return v.t == JT_BOOL || v.t == JT_INT || v.t == JT_FLOAT;
}

static double num(jj_val v)
{
    return v.t == JT_FLOAT ? v.f : v.t == JT_INT ? (double)v.i : v.b;
}

bool jj_equal(jj_val a, jj_val b)
{
    if (is_num(a) && is_num(b)) { /* Python: True == 1 == 1.0 */
        if (a.t != JT_FLOAT && b.t != JT_FLOAT)
            return (a.t == JT_INT ? a.i : a.b) == (b.t == JT_INT ? b.i : b.b);
        return num(a) == num(b);
    }
    if (a.t != b.t)
        return false;
    switch (a.t) {
    case JT_UNDEF:
    case JT_NONE: return true;
    case JT_STR: return a.s->n == b.s->n && memcmp(a.s->s, b.s->s, a.s->n) == 0;
    case JT_LIST:
        if (a.l->n != b.l->n)
            return false;
        for (size_t i = 0; i < a.l->n; i++)
            if (!jj_equal(a.l->v[i], b.l->v[i]))
                return false;
        return true;
    case JT_DICT:
        if (a.d->n != b.d->n)
            return false;
        for (size_t i = 0; i < a.d->n; i++) {
            jj_val *o = jj_dict_get(b.d, a.d->k[i]);
            if (!o || !jj_equal(a.d->v[i], *o))
                return false;
        }
        return true;
    case JT_FUNC: return a.fn == b.fn;
    default: return false;
    }
}

const char *jj_type_name(jj_val v)
{
    static const char *names[] = {"Undefined", "NoneType", "bool", "int",     "float",
                                  "str",       "list",     "dict", "function"};
    return names[v.t];
}

int jj_compare(jj_eval *e, const jj_node *at, jj_val a, jj_val b)
{
    if (is_num(a) && is_num(b)) {
        double x = num(a), y = num(b);
        return x < y ? -1 : x > y;
    }
    if (a.t == JT_STR && b.t == JT_STR) { /* UTF-8 byte order is code-point order */
        size_t n = a.s->n < b.s->n ? a.s->n : b.s->n;
        int r = memcmp(a.s->s, b.s->s, n);
        return r ? (r < 0 ? -1 : 1) : a.s->n < b.s->n ? -1 : a.s->n > b.s->n;
    }
    if (a.t == JT_LIST && b.t == JT_LIST) {
        for (size_t i = 0; i < a.l->n && i < b.l->n; i++) {
            if (!jj_equal(a.l->v[i], b.l->v[i]))
                return jj_compare(e, at, a.l->v[i], b.l->v[i]);
        }
        return a.l->n < b.l->n ? -1 : a.l->n > b.l->n;
    }
    jj_rt_fail(e, at, "'<' not supported between instances of '%s' and '%s'", jj_type_name(a),
               jj_type_name(b));
}

/* ---- str() ---------------------------------------------------------------- */

void jj_print_float(jj_buf *b, double f)
{
    if (isnan(f)) {
        jj_puts(b, "nan");
        return;
    }
    if (isinf(f)) {
        jj_puts(b, f < 0 ? "-inf" : "inf");
        return;
    }
    char tmp[40];
    for (int p = 1; p <= 17; p++) { /* shortest text that reads back as f, as Python's repr */
        snprintf(tmp, sizeof tmp, "%.*g", p, f);
        if (strtod(tmp, NULL) == f)
            break;
    }
    double a = fabs(f);
    bool sci = a != 0.0 && (a >= 1e16 || a < 1e-4);
    if (!sci && strchr(tmp, 'e')) /* %g chose an exponent Python would not: print positionally */
        snprintf(tmp, sizeof tmp, "%.1f", f);
    if (sci) { /* Python writes 1e-05 as %g does, and 1e+16 */
        jj_puts(b, tmp);
        return;
    }
    jj_puts(b, tmp);
    if (!strpbrk(tmp, ".e"))
        jj_puts(b, ".0");
}

static void repr_str(jj_buf *b, const jj_str *s)
{
    char q = memchr(s->s, '\'', s->n) && !memchr(s->s, '"', s->n) ? '"' : '\'';
    jj_put(b, &q, 1);
    for (size_t i = 0; i < s->n; i++) {
        unsigned char ch = (unsigned char)s->s[i];
        if (ch == '\\' || ch == (unsigned char)q)
            jj_printf(b, "\\%c", ch);
        else if (ch == '\n')
            jj_puts(b, "\\n");
        else if (ch == '\t')
            jj_puts(b, "\\t");
        else if (ch == '\r')
            jj_puts(b, "\\r");
        else if (ch < 0x20 || ch == 0x7f)
            jj_printf(b, "\\x%02x", ch);
        else
            jj_put(b, (const char *)&ch, 1);
    }
    jj_put(b, &q, 1);
}

/* repr() inside containers, as Python prints a list or dict */
static void repr(jj_buf *b, jj_val v)
{
    if (v.t == JT_STR)
        repr_str(b, v.s);
    else
        jj_print(b, v);
}

void jj_print(jj_buf *b, jj_val v)
{
    switch (v.t) {
    case JT_UNDEF: break;
    case JT_NONE: jj_puts(b, "None"); break;
    case JT_BOOL: jj_puts(b, v.b ? "True" : "False"); break;
    case JT_INT: jj_printf(b, "%lld", (long long)v.i); break;
    case JT_FLOAT: jj_print_float(b, v.f); break;
    case JT_STR: jj_put(b, v.s->s, v.s->n); break;
    case JT_LIST:
        jj_puts(b, "[");
        for (size_t i = 0; i < v.l->n; i++) {
            if (i)
                jj_puts(b, ", ");
            repr(b, v.l->v[i]);
        }
        jj_puts(b, "]");
        break;
    case JT_DICT:
        if (v.d->ns)
            jj_puts(b, "<Namespace ");
        jj_puts(b, "{");
        for (size_t i = 0; i < v.d->n; i++) {
            if (i)
                jj_puts(b, ", ");
            repr(b, v.d->k[i]);
            jj_puts(b, ": ");
            repr(b, v.d->v[i]);
        }
        jj_puts(b, v.d->ns ? "}>" : "}");
        break;
    case JT_FUNC: jj_printf(b, "<function %s>", v.fn->name ? v.fn->name : "?"); break;
    }
}

jj_val jj_to_str(jj_ctx *c, jj_val v)
{
    if (v.t == JT_STR)
        return v;
    jj_buf b = {.c = c};
    jj_print(&b, v);
    return jj_str_n(c, b.s ? b.s : "", b.n);
}

/* ---- JSON ------------------------------------------------------------------ */

/* Decode one UTF-8 sequence at s (n bytes left); invalid bytes read as themselves. */
static uint32_t utf8_next(const unsigned char *s, size_t n, size_t *len)
{
    int k = s[0] < 0x80             ? 1
            : (s[0] & 0xe0) == 0xc0 ? 2
            : (s[0] & 0xf0) == 0xe0 ? 3
            : (s[0] & 0xf8) == 0xf0 ? 4
                                    : 1;
    if ((size_t)k > n)
        k = 1;
    uint32_t cp = k == 1 ? s[0] : s[0] & (0x7f >> k);
    for (int i = 1; i < k; i++)
        cp = cp << 6 | (s[i] & 0x3f);
    *len = (size_t)k;
    return cp;
}

static void json_str(jj_buf *b, const char *s, size_t n, bool ensure_ascii)
{
    jj_puts(b, "\"");
    for (size_t i = 0; i < n;) {
        unsigned char ch = (unsigned char)s[i];
        const char *esc = ch == '"'    ? "\\\""
                          : ch == '\\' ? "\\\\"
                          : ch == '\n' ? "\\n"
                          : ch == '\r' ? "\\r"
                          : ch == '\t' ? "\\t"
                          : ch == '\b' ? "\\b"
                          : ch == '\f' ? "\\f"
                                       : NULL;
        if (esc) {
            jj_puts(b, esc);
            i++;
        } else if (ch < 0x20) {
            jj_printf(b, "\\u%04x", ch);
            i++;
        } else if (ch >= 0x80 && ensure_ascii) {
            size_t len;
            uint32_t cp = utf8_next((const unsigned char *)s + i, n - i, &len);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                jj_printf(b, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
            } else {
                jj_printf(b, "\\u%04x", cp);
            }
            i += len;
        } else {
            jj_put(b, s + i, 1);
            i++;
        }
    }
    jj_puts(b, "\"");
}

static void newline_indent(jj_buf *b, int indent, int depth)
{
    jj_puts(b, "\n");
    for (int i = 0; i < indent * depth; i++)
        jj_puts(b, " ");
}

static int key_cmp(const void *x, const void *y)
{
    const jj_val *a = *(const jj_val *const *)x, *b = *(const jj_val *const *)y;
    if (a->t != JT_STR || b->t != JT_STR)
        return a->t - b->t;
    size_t n = a->s->n < b->s->n ? a->s->n : b->s->n;
    int r = memcmp(a->s->s, b->s->s, n);
    return r ? r : (a->s->n > b->s->n) - (a->s->n < b->s->n);
}

void jj_json_dump(jj_eval *e, jj_buf *b, jj_val v, int indent, bool ensure_ascii, bool sort_keys, int depth)
{
    if (depth > e->max_depth)
        jj_fail(e->c, 0, 0, "tojson: the value nests deeper than %d", e->max_depth);
    const char *sep = indent > 0 ? "," : ", ";
    switch (v.t) {
    case JT_UNDEF: jj_fail(e->c, 0, 0, "tojson: Object of type Undefined is not JSON serializable");
    case JT_NONE: jj_puts(b, "null"); break;
    case JT_BOOL: jj_puts(b, v.b ? "true" : "false"); break;
    case JT_INT: jj_printf(b, "%lld", (long long)v.i); break;
    case JT_FLOAT:
        if (isnan(v.f) || isinf(v.f))
            jj_puts(b, isnan(v.f) ? "NaN" : v.f < 0 ? "-Infinity" : "Infinity");
        else
            jj_print_float(b, v.f);
        break;
    case JT_STR: json_str(b, v.s->s, v.s->n, ensure_ascii); break;
    case JT_LIST:
        jj_puts(b, "[");
        for (size_t i = 0; i < v.l->n; i++) {
            if (i)
                jj_puts(b, sep);
            if (indent > 0)
                newline_indent(b, indent, depth + 1);
            jj_json_dump(e, b, v.l->v[i], indent, ensure_ascii, sort_keys, depth + 1);
        }
        if (indent > 0 && v.l->n)
            newline_indent(b, indent, depth);
        jj_puts(b, "]");
        break;
    case JT_DICT: {
        const jj_val **keys = jj_alloc(e->c, (v.d->n + 1) * sizeof *keys);
        for (size_t i = 0; i < v.d->n; i++)
            keys[i] = &v.d->k[i];
        if (sort_keys)
            qsort(keys, v.d->n, sizeof *keys, key_cmp);
        jj_puts(b, "{");
        for (size_t i = 0; i < v.d->n; i++) {
            if (i)
                jj_puts(b, sep);
            if (indent > 0)
                newline_indent(b, indent, depth + 1);
            jj_val k = *keys[i];
            if (k.t == JT_STR) {
                json_str(b, k.s->s, k.s->n, ensure_ascii);
            } else if (k.t == JT_INT || k.t == JT_FLOAT || k.t == JT_BOOL || k.t == JT_NONE) {
                jj_puts(b, "\"");
                jj_json_dump(e, b, k, 0, ensure_ascii, false, depth + 1);
                jj_puts(b, "\"");
            } else {
                jj_fail(e->c, 0, 0, "tojson: keys must be str, int, float, bool or None, not %s",
                        jj_type_name(k));
            }
            jj_puts(b, ": ");
            jj_json_dump(e, b, v.d->v[keys[i] - v.d->k], indent, ensure_ascii, sort_keys, depth + 1);
        }
        if (indent > 0 && v.d->n)
            newline_indent(b, indent, depth);
        jj_puts(b, "}");
        break;
    }
    case JT_FUNC: jj_fail(e->c, 0, 0, "tojson: Object of type function is not JSON serializable");
    }
}

static jj_val from_json(jj_ctx *c, json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        jj_val d = jj_dict_new(c);
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) jj_dict_set(c, d.d, jj_cstr(c, k), from_json(c, v));
        return d;
    }
    case JSON_ARRAY: {
        jj_val l = jj_list_new(c, json_array_size(j));
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v) jj_list_push(c, l.l, from_json(c, v));
        return l;
    }
    case JSON_STRING: return jj_str_n(c, json_string_value(j), json_string_length(j));
    case JSON_INTEGER: return jj_int(json_integer_value(j));
    case JSON_REAL: return jj_float(json_real_value(j));
    case JSON_TRUE: return jj_bool(true);
    case JSON_FALSE: return jj_bool(false);
    default: return jj_none;
    }
}

int jj_from_json_text(jj_ctx *c, const char *text, jj_val *out)
{
    json_error_t err;
    json_t *j = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
    if (!j)
        return df_error(DF_EINVAL, "%s: context JSON, line %d column %d: %s", c->name ? c->name : "template",
                        err.line, err.column, err.text);
    /* from_json allocates in the arena and may longjmp: the JSON is freed by the caller's handler */
    c->code = 0;
    json_t *volatile hold = j;
    if (setjmp(c->jb)) {
        json_decref(hold);
        return c->code;
    }
    *out = from_json(c, j);
    json_decref(j);
    return 0;
}

jj_list *jj_iter(jj_eval *e, const jj_node *at, jj_val v)
{
    switch (v.t) {
    case JT_LIST: return v.l;
    case JT_UNDEF: return jj_list_new(e->c, 0).l;
    case JT_DICT: {
        jj_list *l = jj_list_new(e->c, v.d->n).l;
        for (size_t i = 0; i < v.d->n; i++)
            jj_list_push(e->c, l, v.d->k[i]);
        return l;
    }
    case JT_STR: {
        jj_list *l = jj_list_new(e->c, v.s->n).l;
        for (size_t i = 0, len; i < v.s->n; i += len) {
            utf8_next((const unsigned char *)v.s->s + i, v.s->n - i, &len);
            jj_list_push(e->c, l, jj_str_n(e->c, v.s->s + i, len));
        }
        return l;
    }
    default: jj_rt_fail(e, at, "'%s' object is not iterable", jj_type_name(v));
    }
}
