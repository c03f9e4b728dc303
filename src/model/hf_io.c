/* Python-style JSON output (hf_io.h). */
#include "model/hf_io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *s;
    size_t n, cap;
    bool oom;
} strbuf;

static void sb_put(strbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->n + n + 1 > cap)
            cap *= 2;
        char *ns = realloc(b->s, cap);
        if (!ns) {
            b->oom = true;
            return;
        }
        b->s = ns;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void sb_str(strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_indent(strbuf *b, int level)
{
    sb_put(b, "\n", 1);
    for (int i = 0; i < level; i++)
        sb_put(b, "  ", 2);
}

/* Python's ensure_ascii escaping: printable ASCII as is, everything else \uXXXX. */
static void sb_json_string(strbuf *b, const char *s, size_t len)
{
    sb_put(b, "\"", 1);
    const unsigned char *p = (const unsigned char *)s, *end = p + len;
    char tmp[16];
    while (p < end) {
        unsigned c = *p;
        const char *esc = NULL;
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default: break;
        }
        if (esc) {
            sb_str(b, esc);
            p++;
            continue;
        }
        if (c >= 0x20 && c < 0x7f) {
            sb_put(b, (const char *)p, 1);
            p++;
            continue;
        }
        /* Decode one UTF-8 sequence (jansson guarantees valid UTF-8). */
        uint32_t cp = c;
        int extra = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : c >= 0xc0 ? 1 : 0;
        if (extra)
            cp = c & (0x3fu >> extra);
        p++;
        for (int k = 0; k < extra && p < end; k++, p++)
            cp = (cp << 6) | (*p & 0x3fu);
        if (cp > 0xffff) {
            cp -= 0x10000;
            snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
        } else {
            snprintf(tmp, sizeof tmp, "\\u%04x", cp);
        }
        sb_str(b, tmp);
    }
    sb_put(b, "\"", 1);
}

void df_format_double_py(double v, char *buf, size_t cap)
{
    if (isnan(v)) {
        snprintf(buf, cap, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, cap, v > 0 ? "Infinity" : "-Infinity");
        return;
    }
    if (v == 0) {
        snprintf(buf, cap, signbit(v) ? "-0.0" : "0.0");
        return;
    }
    /* Shortest digit string that reads back to v (what repr() uses). */
    char e[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, v);
        if (strtod(e, NULL) == v)
            break;
    }
    /* e = "[-]d[.ddd]e[+-]XX": split into digits and decimal exponent. */
    const char *p = e;
    bool neg = *p == '-';
    if (neg)
        p++;
    char digits[24];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    int exp10 = atoi(p + 1);
    int decpt = exp10 + 1; /* value = 0.digits * 10^decpt */
    char out[64];
    int k = 0;
    if (neg)
        out[k++] = '-';
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            out[k++] = '0';
            out[k++] = '.';
            for (int i = 0; i < -decpt; i++)
                out[k++] = '0';
            for (int i = 0; i < nd; i++)
                out[k++] = digits[i];
        } else {
            for (int i = 0; i < decpt; i++)
                out[k++] = i < nd ? digits[i] : '0';
            out[k++] = '.';
            if (nd > decpt)
                for (int i = decpt; i < nd; i++)
                    out[k++] = digits[i];
            else
                out[k++] = '0';
        }
        out[k] = '\0';
    } else {
        out[k++] = digits[0];
        if (nd > 1) {
            out[k++] = '.';
            for (int i = 1; i < nd; i++)
                out[k++] = digits[i];
        }
        snprintf(out + k, sizeof out - (size_t)k, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    }
    snprintf(buf, cap, "%s", out);
}

static int cmp_key(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void dump_value(strbuf *b, const json_t *v, int level)
{
    char num[64];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        size_t n = json_object_size(v);
        if (n == 0) {
            sb_str(b, "{}");
            return;
        }
        const char **keys = malloc(n * sizeof *keys);
        if (!keys) {
            b->oom = true;
            return;
        }
        size_t k = 0;
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)v, key, val) keys[k++] = key;
        qsort(keys, n, sizeof *keys, cmp_key);
        sb_str(b, "{");
        for (size_t i = 0; i < n; i++) {
            sb_indent(b, level + 1);
            sb_json_string(b, keys[i], strlen(keys[i]));
            sb_str(b, ": ");
            dump_value(b, json_object_get(v, keys[i]), level + 1);
            if (i + 1 < n)
                sb_str(b, ",");
        }
        sb_indent(b, level);
        sb_str(b, "}");
        free(keys);
        return;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(v);
        if (n == 0) {
            sb_str(b, "[]");
            return;
        }
        sb_str(b, "[");
        for (size_t i = 0; i < n; i++) {
            sb_indent(b, level + 1);
            dump_value(b, json_array_get(v, i), level + 1);
            if (i + 1 < n)
                sb_str(b, ",");
        }
        sb_indent(b, level);
        sb_str(b, "]");
        return;
    }
    case JSON_STRING:
        sb_json_string(b, json_string_value(v), json_string_length(v));
        return;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%lld", (long long)json_integer_value(v));
        sb_str(b, num);
        return;
    case JSON_REAL:
        df_format_double_py(json_real_value(v), num, sizeof num);
        sb_str(b, num);
        return;
    case JSON_TRUE: sb_str(b, "true"); return;
    case JSON_FALSE: sb_str(b, "false"); return;
    case JSON_NULL: sb_str(b, "null"); return;
    }
}

char *df_json_dumps_py(const json_t *v)
{
    strbuf b = {0};
    dump_value(&b, v, 0);
    sb_str(&b, "\n");
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
