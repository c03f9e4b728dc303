/*
 * df_batch wire format (version 1), all integers little-endian:
 *
 *   "DFBATCH\0"  u32 version  u32 n_cols  i64 n  u32 n_meta  u32 0
 *   n_meta x  { u32 key_len, key bytes, f64 value }
 *   n_cols x  { u32 name_len, name bytes, u32 kind, payload }
 *     I64 / F32       n values
 *     STR             i64 offsets[n + 1] into a byte blob, then the blob (no NULs)
 *     TOK_I32 / _F32  i64 offsets[n + 1], then offsets[n] values
 *   u64 checksum of every preceding byte
 *
 * The checksum makes any change confined to one 8-byte word detectable, so a
 * flipped byte is always caught; the structural checks catch everything else.
 */
#include "data/batch_internal.h"

#include <stdlib.h>
#include <string.h>

#define MAGIC "DFBATCH"
#define VERSION 1u

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define HOST_BE 1
#else
#define HOST_BE 0
#endif

/* Copy `count` elements of size `es` converting host <-> little-endian. */
static void copy_le(uint8_t *dst, const uint8_t *src, size_t count, size_t es)
{
    if (!HOST_BE || es == 1) {
        if (count)
            memcpy(dst, src, count * es);
        return;
    }
    for (size_t i = 0; i < count; i++)
        for (size_t j = 0; j < es; j++)
            dst[i * es + j] = src[i * es + es - 1 - j];
}

/* Word-at-a-time hash: each step is a bijection of the state for a fixed word
 * and injective in the word, so a change within one word always shows. */
uint64_t df_batch_wire_checksum(const uint8_t *p, size_t len)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)len;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        copy_le((uint8_t *)&w, p + i, 1, 8);
        h ^= w;
        h *= 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    uint64_t w = 0;
    for (size_t j = 0; i + j < len; j++)
        w |= (uint64_t)p[i + j] << (8 * j);
    h ^= w;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

/* ---- writer ------------------------------------------------------------------ */

typedef struct {
    uint8_t *p;
    size_t at;
} wbuf;

static void put(wbuf *w, const void *src, size_t count, size_t es)
{
    copy_le(w->p + w->at, src, count, es);
    w->at += count * es;
}
static void put_u32(wbuf *w, uint32_t v) { put(w, &v, 1, 4); }
static void put_i64(wbuf *w, int64_t v) { put(w, &v, 1, 8); }

static size_t col_payload_size(const df_column *c, int64_t n)
{
    size_t sz = 4 + strlen(c->name) + 4;
    if (c->kind == DF_COL_STR) {
        sz += (size_t)(n + 1) * 8;
        for (int64_t i = 0; i < n; i++)
            sz += strlen(((char **)c->data)[i]);
    } else if (df_col_is_ragged(c->kind)) {
        sz += (size_t)(n + 1) * 8 + (size_t)c->offsets[n] * df_col_elem_size(c->kind);
    } else {
        sz += (size_t)n * df_col_elem_size(c->kind);
    }
    return sz;
}

static void put_col(wbuf *w, const df_column *c, int64_t n)
{
    uint32_t nl = (uint32_t)strlen(c->name);
    put_u32(w, nl);
    put(w, c->name, nl, 1);
    put_u32(w, (uint32_t)c->kind);
    if (c->kind == DF_COL_STR) {
        char *const *s = c->data;
        int64_t off = 0;
        put_i64(w, 0);
        for (int64_t i = 0; i < n; i++) {
            off += (int64_t)strlen(s[i]);
            put_i64(w, off);
        }
        for (int64_t i = 0; i < n; i++)
            put(w, s[i], strlen(s[i]), 1);
    } else if (df_col_is_ragged(c->kind)) {
        put(w, c->offsets, (size_t)n + 1, 8);
        put(w, c->data, (size_t)c->offsets[n], df_col_elem_size(c->kind));
    } else {
        put(w, c->data, (size_t)n, df_col_elem_size(c->kind));
    }
}

int df_batch_serialize(const df_batch *b, uint8_t **buf, size_t *len)
{
    size_t sz = 8 + 4 + 4 + 8 + 4 + 4;
    for (int i = 0; i < b->nmeta; i++)
        sz += 4 + strlen(b->meta[i].key) + 8;
    for (int i = 0; i < b->ncol; i++)
        sz += col_payload_size(b->cols[i], b->n);
    sz += 8;
    wbuf w = {malloc(sz), 0};
    if (!w.p)
        return df_error(DF_ENOMEM, "batch serialize: out of memory for %zu bytes", sz);
    put(&w, MAGIC, 8, 1); /* includes the terminating NUL */
    put_u32(&w, VERSION);
    put_u32(&w, (uint32_t)b->ncol);
    put_i64(&w, b->n);
    put_u32(&w, (uint32_t)b->nmeta);
    put_u32(&w, 0);
    for (int i = 0; i < b->nmeta; i++) {
        uint32_t kl = (uint32_t)strlen(b->meta[i].key);
        put_u32(&w, kl);
        put(&w, b->meta[i].key, kl, 1);
        put(&w, &b->meta[i].value, 1, 8);
    }
    for (int i = 0; i < b->ncol; i++)
        put_col(&w, b->cols[i], b->n);
    uint64_t h = df_batch_wire_checksum(w.p, w.at);
    put(&w, &h, 1, 8);
    *buf = w.p;
    *len = w.at;
    return DF_OK;
}

/* ---- reader ------------------------------------------------------------------- */

typedef struct {
    const uint8_t *p;
    size_t len, at;
} rbuf;

static int need(rbuf *r, size_t count, size_t es, const char *what)
{
    if (es && count > (r->len - r->at) / es)
        return df_error(DF_EINVAL, "batch deserialize: truncated at byte %zu reading %s (%zu bytes left)",
                        r->at, what, r->len - r->at);
    return DF_OK;
}

static int get(rbuf *r, void *dst, size_t count, size_t es, const char *what)
{
    int rc = need(r, count, es, what);
    if (rc)
        return rc;
    copy_le(dst, r->p + r->at, count, es);
    r->at += count * es;
    return DF_OK;
}

static int read_offsets(rbuf *r, int64_t n, int64_t **out, const char *name)
{
    int rc = need(r, (size_t)n + 1, 8, "offsets");
    if (rc)
        return rc;
    int64_t *off = malloc(((size_t)n + 1) * sizeof *off);
    if (!off)
        return df_error(DF_ENOMEM, "batch deserialize: out of memory");
    get(r, off, (size_t)n + 1, 8, "offsets");
    if (off[0] != 0) {
        long long first = (long long)off[0];
        free(off);
        return df_error(DF_EINVAL, "batch deserialize: column %s: offsets[0] = %lld", name, first);
    }
    for (int64_t i = 0; i < n; i++)
        if (off[i + 1] < off[i]) {
            free(off);
            return df_error(DF_EINVAL, "batch deserialize: column %s: offsets decrease at row %lld",
                            name, (long long)i);
        }
    *out = off;
    return DF_OK;
}

static int read_strings(rbuf *r, df_column *c, int64_t n)
{
    int64_t *off;
    int rc = read_offsets(r, n, &off, c->name);
    if (rc)
        return rc;
    char **s = calloc((size_t)n + 1, sizeof *s);
    if (!s) {
        free(off);
        return df_error(DF_ENOMEM, "batch deserialize: out of memory");
    }
    c->data = s;
    if ((rc = need(r, (size_t)off[n], 1, "string bytes")))
        goto out;
    for (int64_t i = 0; i < n; i++) {
        size_t l = (size_t)(off[i + 1] - off[i]);
        const uint8_t *src = r->p + r->at + off[i];
        if (memchr(src, 0, l)) {
            rc = df_error(DF_EINVAL, "batch deserialize: column %s row %lld: NUL inside a string",
                          c->name, (long long)i);
            goto out;
        }
        if (!(s[i] = malloc(l + 1))) {
            rc = df_error(DF_ENOMEM, "batch deserialize: out of memory");
            goto out;
        }
        memcpy(s[i], src, l);
        s[i][l] = '\0';
    }
    r->at += (size_t)off[n];
out:
    free(off);
    return rc;
}

static int read_col(rbuf *r, int64_t n, df_batch *b)
{
    uint32_t nl, kind;
    char name[DF_COL_NAME_MAX];
    int rc = get(r, &nl, 1, 4, "column name length");
    if (rc)
        return rc;
    if (nl == 0 || nl >= DF_COL_NAME_MAX)
        return df_error(DF_EINVAL, "batch deserialize: column name length %u out of [1, %d]", nl,
                        DF_COL_NAME_MAX - 1);
    if ((rc = get(r, name, nl, 1, "column name")))
        return rc;
    name[nl] = '\0';
    if (strlen(name) != nl)
        return df_error(DF_EINVAL, "batch deserialize: NUL inside column name");
    if (df_batch_has(b, name))
        return df_error(DF_EINVAL, "batch deserialize: duplicate column %s", name);
    if ((rc = get(r, &kind, 1, 4, "column kind")))
        return rc;
    if (kind > DF_COL_TOK_F32)
        return df_error(DF_EINVAL, "batch deserialize: column %s has unknown kind %u", name, kind);
    df_column *c = calloc(1, sizeof *c);
    if (!c)
        return df_error(DF_ENOMEM, "batch deserialize: out of memory");
    memcpy(c->name, name, nl + 1);
    c->kind = (df_col_kind)kind;
    size_t es = df_col_elem_size(c->kind);
    if (c->kind == DF_COL_STR) {
        rc = read_strings(r, c, n);
    } else {
        int64_t count = n;
        if (df_col_is_ragged(c->kind) && !(rc = read_offsets(r, n, &c->offsets, name)))
            count = c->offsets[n];
        if (!rc && !(rc = need(r, (size_t)count, es, name))) {
            if (!(c->data = malloc(count ? (size_t)count * es : 1)))
                rc = df_error(DF_ENOMEM, "batch deserialize: out of memory for column %s", name);
            else
                get(r, c->data, (size_t)count, es, name);
        }
    }
    if (rc) {
        df_column_free(c, n);
        return rc;
    }
    return df_batch_adopt(b, c);
}

static int read_header(rbuf *r, uint32_t *ncol, int64_t *n, uint32_t *nmeta)
{
    char magic[8];
    uint32_t version, pad;
    int rc = get(r, magic, 8, 1, "magic");
    if (rc)
        return rc;
    if (memcmp(magic, MAGIC, 8))
        return df_error(DF_EINVAL, "batch deserialize: bad magic (not a serialized df_batch)");
    if ((rc = get(r, &version, 1, 4, "version")))
        return rc;
    if (version != VERSION)
        return df_error(DF_EINVAL, "batch deserialize: format version %u, this build reads %u",
                        version, VERSION);
    if ((rc = get(r, ncol, 1, 4, "column count")) || (rc = get(r, n, 1, 8, "row count")) ||
        (rc = get(r, nmeta, 1, 4, "metadata count")) || (rc = get(r, &pad, 1, 4, "header")))
        return rc;
    if (*n < 0 || pad != 0)
        return df_error(DF_EINVAL, "batch deserialize: corrupt header (rows %lld)", (long long)*n);
    /* every column stores at least n + 1 offsets or n values of >= 4 bytes */
    if (*ncol > 0 && (uint64_t)*n > (r->len - r->at) / 4)
        return df_error(DF_EINVAL, "batch deserialize: %lld rows cannot fit in %zu bytes",
                        (long long)*n, r->len);
    if (*ncol > INT32_MAX || *nmeta > INT32_MAX)
        return df_error(DF_EINVAL, "batch deserialize: corrupt header counts");
    return DF_OK;
}

static bool has_meta(const df_batch *b, const char *key)
{
    for (int i = 0; i < b->nmeta; i++)
        if (!strcmp(b->meta[i].key, key))
            return true;
    return false;
}

static int read_meta(rbuf *r, uint32_t nmeta, df_batch *b)
{
    for (uint32_t i = 0; i < nmeta; i++) {
        uint32_t kl;
        double v;
        int rc = get(r, &kl, 1, 4, "metadata key length");
        if (rc || (rc = need(r, (size_t)kl + 8, 1, "metadata entry")))
            return rc;
        if (kl == 0 || memchr(r->p + r->at, 0, kl))
            return df_error(DF_EINVAL, "batch deserialize: bad metadata key %u", i);
        char *key = malloc((size_t)kl + 1);
        if (!key)
            return df_error(DF_ENOMEM, "batch deserialize: out of memory");
        get(r, key, kl, 1, "metadata key");
        key[kl] = '\0';
        get(r, &v, 1, 8, "metadata value");
        rc = has_meta(b, key) ? df_error(DF_EINVAL, "batch deserialize: duplicate metadata key %s", key)
                 : df_batch_meta_set(b, key, v);
        free(key);
        if (rc)
            return rc;
    }
    return DF_OK;
}

int df_batch_deserialize(const uint8_t *buf, size_t len, df_batch **out)
{
    if (!buf || len < 8 + 32)
        return df_error(DF_EINVAL, "batch deserialize: %zu bytes is shorter than the header", len);
    uint64_t want;
    copy_le((uint8_t *)&want, buf + len - 8, 1, 8);
    if (df_batch_wire_checksum(buf, len - 8) != want)
        return df_error(DF_EINVAL, "batch deserialize: checksum mismatch (corrupt or truncated buffer of %zu bytes)",
                        len);
    rbuf r = {buf, len - 8, 0};
    uint32_t ncol, nmeta;
    int64_t n;
    int rc = read_header(&r, &ncol, &n, &nmeta);
    if (rc)
        return rc;
    df_batch *b = df_batch_new(n);
    if (!b)
        return df_error(DF_ENOMEM, "batch deserialize: out of memory");
    rc = read_meta(&r, nmeta, b);
    for (uint32_t i = 0; !rc && i < ncol; i++)
        rc = read_col(&r, n, b);
    if (!rc && r.at != r.len)
        rc = df_error(DF_EINVAL, "batch deserialize: %zu unexpected trailing bytes", r.len - r.at);
    if (rc) {
        df_batch_free(b);
        return rc;
    }
    *out = b;
    return DF_OK;
}
