/* Atomic files, paths and Python-style JSON output (hf_io.h). */
#include "model/hf_io.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- atomic files ------------------------------------------------------- */

int df_tmpfile_open(df_tmpfile *t, const char *path)
{
    memset(t, 0, sizeof *t);
    t->fd = -1;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t dlen = slash ? (size_t)(slash - path) + 1 : 0;
    size_t cap = dlen + strlen(base) + 32;
    t->path = strdup(path);
    t->tmp = malloc(cap);
    if (!t->path || !t->tmp) {
        df_tmpfile_discard(t);
        return df_error(DF_ENOMEM, "out of memory creating a temporary for %s", path);
    }
    snprintf(t->tmp, cap, "%.*s.%s.tmp.XXXXXX", (int)dlen, path, base);
    t->fd = mkstemp(t->tmp);
    if (t->fd < 0) {
        int e = errno;
        free(t->tmp); /* nothing was created: do not unlink the template */
        t->tmp = NULL;
        df_tmpfile_discard(t);
        return df_error(DF_EIO, "%s: cannot create a temporary file next to it: %s", path,
                        strerror(e));
    }
    return DF_OK;
}

int df_tmpfile_write(df_tmpfile *t, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(t->fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return df_error(DF_EIO, "%s: write failed: %s", t->path,
                            w < 0 ? strerror(errno) : "no progress");
        p += w;
        n -= (size_t)w;
    }
    return DF_OK;
}

int df_tmpfile_close(df_tmpfile *t)
{
    if (t->fd < 0)
        return DF_OK;
    int rc = fsync(t->fd);
    int e = errno;
    if (close(t->fd) && !rc) {
        rc = -1;
        e = errno;
    }
    t->fd = -1;
    if (rc)
        return df_error(DF_EIO, "%s: cannot flush the file to disk: %s", t->path, strerror(e));
    return DF_OK;
}

int df_tmpfile_commit(df_tmpfile *t)
{
    int rc = df_tmpfile_close(t);
    if (rc)
        return rc;
    /* Keep the mode of a file we replace; a new file gets 0644 (mkstemp gives 0600). */
    struct stat st;
    mode_t mode = stat(t->path, &st) == 0 ? (st.st_mode & 07777) : 0644;
    if (chmod(t->tmp, mode))
        return df_error(DF_EIO, "%s: chmod of the temporary failed: %s", t->path, strerror(errno));
    if (rename(t->tmp, t->path))
        return df_error(DF_EIO, "%s: cannot rename the temporary into place: %s", t->path,
                        strerror(errno));
    free(t->tmp);
    t->tmp = NULL;
    return DF_OK;
}

void df_tmpfile_discard(df_tmpfile *t)
{
    if (t->fd >= 0)
        close(t->fd);
    t->fd = -1;
    if (t->tmp)
        unlink(t->tmp);
    free(t->tmp);
    free(t->path);
    t->tmp = t->path = NULL;
}

int df_write_file_atomic(const char *path, const void *buf, size_t n)
{
    df_tmpfile t;
    int rc = df_tmpfile_open(&t, path);
    if (!rc)
        rc = df_tmpfile_write(&t, buf, n);
    if (!rc)
        rc = df_tmpfile_commit(&t);
    df_tmpfile_discard(&t);
    return rc;
}

/* ---- paths and whole files ------------------------------------------------ */

char *df_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (a && dir[a - 1] != '/')
        p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

bool df_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int df_read_file(const char *path, char **text, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return df_error(errno == ENOENT ? DF_ENOTFOUND : DF_EIO, "%s: cannot open: %s", path,
                        strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0)
            break;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf)
        return df_error(DF_ENOMEM, "%s: out of memory reading the file", path);
    if (err) {
        free(buf);
        return df_error(DF_EIO, "%s: read error", path);
    }
    buf[n] = '\0';
    *text = buf;
    if (len)
        *len = n;
    return DF_OK;
}

int df_mkdir_p(const char *dir)
{
    char *p = strdup(dir);
    if (!p)
        return df_error(DF_ENOMEM, "out of memory creating %s", dir);
    size_t n = strlen(p);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0')
            continue;
        char c = p[i];
        p[i] = '\0';
        struct stat st;
        if (stat(p, &st) != 0) {
            if (mkdir(p, 0755) != 0 && errno != EEXIST) {
                int rc = df_error(DF_EIO, "cannot create directory %s: %s", p, strerror(errno));
                free(p);
                return rc;
            }
        } else if (!S_ISDIR(st.st_mode)) {
            int rc = df_error(DF_EIO, "cannot create directory %s: a file of that name exists", p);
            free(p);
            return rc;
        }
        p[i] = c;
    }
    free(p);
    return DF_OK;
}

int df_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return df_error(DF_EIO, "%s: cannot open directory: %s", dir, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    /* Some file systems refuse fsync on directories; that is not a write failure. */
    if (rc && e != EINVAL && e != EROFS)
        return df_error(DF_EIO, "%s: cannot sync directory: %s", dir, strerror(e));
    return DF_OK;
}

/* ---- JSON output in Python's json.dumps(indent=2, sort_keys=True) style ------ */

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
