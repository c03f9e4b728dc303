/* .safetensors reading (mmap + validation) and writing (safetensors.h). */
#include "model/safetensors.h"
#include "model/hf_io.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this reader assumes a little-endian host"
#endif

/* The reference reader refuses headers above 100 MB; so do we. */
#define MAX_HEADER_BYTES ((uint64_t)100 * 1000 * 1000)
/* Elements converted per step when streaming borrowed tensors to disk. */
#define WRITE_CHUNK 65536

/* ---- dtypes ----------------------------------------------------------------- */

static const struct {
    const char *name;
    int code;
    size_t size;
} k_dtypes[] = {
    {"F32", DF_DTYPE_F32, 4},  {"BF16", DF_DTYPE_BF16, 2}, {"F16", DF_DTYPE_F16, 2},
    {"F64", DF_ST_F64, 8},     {"I64", DF_ST_I64, 8},      {"I32", DF_ST_I32, 4},
    {"I16", DF_ST_I16, 2},     {"I8", DF_ST_I8, 1},        {"U8", DF_ST_U8, 1},
    {"BOOL", DF_ST_BOOL, 1},   {"U16", DF_ST_U16, 2},      {"U32", DF_ST_U32, 4},
    {"U64", DF_ST_U64, 8},     {"F8_E4M3", DF_ST_F8_E4M3, 1}, {"F8_E5M2", DF_ST_F8_E5M2, 1},
};
#define N_DTYPES (int)(sizeof k_dtypes / sizeof k_dtypes[0])

size_t df_st_dtype_size(int dtype)
{
    for (int i = 0; i < N_DTYPES; i++)
        if (k_dtypes[i].code == dtype)
            return k_dtypes[i].size;
    return 0;
}

const char *df_st_dtype_name(int dtype)
{
    for (int i = 0; i < N_DTYPES; i++)
        if (k_dtypes[i].code == dtype)
            return k_dtypes[i].name;
    return "?";
}

static int dtype_from_name(const char *s)
{
    for (int i = 0; i < N_DTYPES; i++)
        if (!strcmp(k_dtypes[i].name, s))
            return k_dtypes[i].code;
    return -1;
}

int df_st_tensor_to_f32(const df_st_tensor *t, float *dst)
{
    int64_t n = df_st_numel(t);
    const unsigned char *s = t->data;
    switch ((int)t->dtype) {
    case DF_DTYPE_F32:
        memcpy(dst, s, (size_t)n * 4);
        return DF_OK;
    case DF_DTYPE_BF16:
    case DF_DTYPE_F16:
        df_half_to_f32_array(t->dtype, s, dst, n);
        return DF_OK;
    case DF_ST_F64:
        for (int64_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, s + 8 * i, 8);
            dst[i] = (float)d;
        }
        return DF_OK;
    case DF_ST_I64:
        for (int64_t i = 0; i < n; i++) {
            int64_t v;
            memcpy(&v, s + 8 * i, 8);
            dst[i] = (float)v;
        }
        return DF_OK;
    case DF_ST_I32:
        for (int64_t i = 0; i < n; i++) {
            int32_t v;
            memcpy(&v, s + 4 * i, 4);
            dst[i] = (float)v;
        }
        return DF_OK;
    default:
        return df_error(DF_EUNSUPPORTED, "tensor \"%s\": dtype %s cannot be converted to float32",
                        t->name, df_st_dtype_name(t->dtype));
    }
}

/* ---- reading ------------------------------------------------------------------- */

typedef struct {
    char *name;
    int dtype;
    int ndim;
    int64_t shape[DF_ST_MAX_DIMS];
    uint64_t begin, end;
} st_entry;

struct df_st_file {
    char *path;
    void *map;
    size_t map_len;
    const unsigned char *data; /* byte buffer after the header */
    uint64_t data_len;
    int n;
    st_entry *e;  /* sorted by data offset */
    const st_entry **by_name; /* into e, sorted by name */
    int n_meta;
    char **meta_key, **meta_val;
};

const char *df_st_path(const df_st_file *f) { return f->path; }
int df_st_count(const df_st_file *f) { return f->n; }

int64_t df_st_numel(const df_st_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

void df_st_shape_str(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < cap)
        snprintf(buf + k, cap - k, "]");
}

/* Parse one tensor entry of the header into *e (name is set by the caller). */
static int parse_entry(const char *path, const char *name, json_t *v, st_entry *e,
                       uint64_t data_len)
{
    if (!json_is_object(v))
        return df_error(DF_EINVAL, "%s: tensor \"%s\": header entry is not an object", path, name);
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd) || !json_is_array(js) || !json_is_array(jo))
        return df_error(DF_EINVAL,
                        "%s: tensor \"%s\": header entry needs \"dtype\" (string), \"shape\" "
                        "(array) and \"data_offsets\" (array)", path, name);
    e->dtype = dtype_from_name(json_string_value(jd));
    if (e->dtype < 0)
        return df_error(DF_EINVAL, "%s: tensor \"%s\": unknown dtype \"%s\"", path, name,
                        json_string_value(jd));
    size_t nd = json_array_size(js);
    if (nd > DF_ST_MAX_DIMS)
        return df_error(DF_EUNSUPPORTED, "%s: tensor \"%s\": %zu dimensions (at most %d supported)",
                        path, name, nd, DF_ST_MAX_DIMS);
    e->ndim = (int)nd;
    uint64_t numel = 1;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return df_error(DF_EINVAL, "%s: tensor \"%s\": shape[%zu] is not a non-negative integer",
                            path, name, i);
        e->shape[i] = (int64_t)json_integer_value(d);
        if (__builtin_mul_overflow(numel, (uint64_t)e->shape[i], &numel))
            return df_error(DF_EINVAL, "%s: tensor \"%s\": shape overflows", path, name);
    }
    json_t *b = json_array_get(jo, 0), *en = json_array_get(jo, 1);
    if (json_array_size(jo) != 2 || !json_is_integer(b) || !json_is_integer(en) ||
        json_integer_value(b) < 0 || json_integer_value(en) < json_integer_value(b))
        return df_error(DF_EINVAL,
                        "%s: tensor \"%s\": data_offsets must be [begin, end] with 0 <= begin <= end",
                        path, name);
    e->begin = (uint64_t)json_integer_value(b);
    e->end = (uint64_t)json_integer_value(en);
    uint64_t need;
    char sh[160];
    df_st_shape_str(sh, sizeof sh, e->ndim, e->shape);
    if (__builtin_mul_overflow(numel, (uint64_t)df_st_dtype_size(e->dtype), &need) ||
        need != e->end - e->begin)
        return df_error(DF_EINVAL,
                        "%s: tensor \"%s\": shape %s of %s needs %llu bytes but data_offsets "
                        "[%llu, %llu] span %llu", path, name, sh, df_st_dtype_name(e->dtype),
                        (unsigned long long)need, (unsigned long long)e->begin,
                        (unsigned long long)e->end, (unsigned long long)(e->end - e->begin));
    if (e->end > data_len)
        return df_error(DF_EINVAL,
                        "%s: tensor \"%s\": data_offsets [%llu, %llu] lie outside the %llu-byte "
                        "data buffer", path, name, (unsigned long long)e->begin,
                        (unsigned long long)e->end, (unsigned long long)data_len);
    return DF_OK;
}

static int parse_metadata(df_st_file *f, json_t *v)
{
    if (!json_is_object(v))
        return df_error(DF_EINVAL, "%s: \"__metadata__\" must be an object of strings", f->path);
    size_t n = json_object_size(v);
    f->meta_key = calloc(n ? n : 1, sizeof(char *));
    f->meta_val = calloc(n ? n : 1, sizeof(char *));
    if (!f->meta_key || !f->meta_val)
        return df_error(DF_ENOMEM, "%s: out of memory", f->path);
    const char *k;
    json_t *s;
    json_object_foreach(v, k, s) {
        if (!json_is_string(s))
            return df_error(DF_EINVAL, "%s: \"__metadata__\" value of \"%s\" is not a string",
                            f->path, k);
        f->meta_key[f->n_meta] = strdup(k);
        f->meta_val[f->n_meta] = strdup(json_string_value(s));
        if (!f->meta_key[f->n_meta++] || !f->meta_val[f->n_meta - 1])
            return df_error(DF_ENOMEM, "%s: out of memory", f->path);
    }
    return DF_OK;
}

static int cmp_offset(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int cmp_name_ptr(const void *a, const void *b)
{
    return strcmp((*(const st_entry *const *)a)->name, (*(const st_entry *const *)b)->name);
}

/* Tensors must tile the data buffer exactly: no overlap, no gap, nothing after. */
static int check_tiling(const df_st_file *f)
{
    uint64_t pos = 0;
    for (int i = 0; i < f->n; i++) {
        const st_entry *e = &f->e[i];
        if (e->begin < pos)
            return df_error(DF_EINVAL,
                            "%s: tensor \"%s\" (data_offsets [%llu, %llu]) overlaps tensor \"%s\" "
                            "([%llu, %llu])", f->path, e->name, (unsigned long long)e->begin,
                            (unsigned long long)e->end, f->e[i - 1].name,
                            (unsigned long long)f->e[i - 1].begin,
                            (unsigned long long)f->e[i - 1].end);
        if (e->begin > pos)
            return df_error(DF_EINVAL,
                            "%s: bytes [%llu, %llu) of the data buffer belong to no tensor "
                            "(before tensor \"%s\")", f->path, (unsigned long long)pos,
                            (unsigned long long)e->begin, e->name);
        pos = e->end;
    }
    if (pos != f->data_len)
        return df_error(DF_EINVAL, "%s: %llu bytes after the last tensor belong to no tensor",
                        f->path, (unsigned long long)(f->data_len - pos));
    return DF_OK;
}

static int parse_header(df_st_file *f, const char *hdr, size_t hlen)
{
    if (hlen == 0 || hdr[0] != '{')
        return df_error(DF_EINVAL, "%s: header does not start with '{'", f->path);
    json_error_t jerr;
    json_t *root = json_loadb(hdr, hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return df_error(DF_EINVAL, "%s: header is not valid JSON: %s (header byte %d)", f->path,
                        jerr.text, jerr.position);
    int rc = DF_OK;
    if (!json_is_object(root)) {
        rc = df_error(DF_EINVAL, "%s: header is not a JSON object", f->path);
        goto done;
    }
    size_t cap = json_object_size(root);
    f->e = calloc(cap ? cap : 1, sizeof *f->e);
    f->by_name = calloc(cap ? cap : 1, sizeof *f->by_name);
    if (!f->e || !f->by_name) {
        rc = df_error(DF_ENOMEM, "%s: out of memory", f->path);
        goto done;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "__metadata__")) {
            if ((rc = parse_metadata(f, v)))
                goto done;
            continue;
        }
        st_entry *e = &f->e[f->n];
        if (!(e->name = strdup(key))) {
            rc = df_error(DF_ENOMEM, "%s: out of memory", f->path);
            goto done;
        }
        f->n++;
        if ((rc = parse_entry(f->path, key, v, e, f->data_len)))
            goto done;
    }
    qsort(f->e, (size_t)f->n, sizeof *f->e, cmp_offset);
    if ((rc = check_tiling(f)))
        goto done;
    for (int i = 0; i < f->n; i++)
        f->by_name[i] = &f->e[i];
    qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_name_ptr);
done:
    json_decref(root);
    return rc;
}

int df_st_open(const char *path, df_st_file **out)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return df_error(errno == ENOENT ? DF_ENOTFOUND : DF_EIO, "%s: cannot open: %s", path,
                        strerror(errno));
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return df_error(DF_EIO, "%s: not a regular file", path);
    }
    df_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        close(fd);
        free(f);
        return df_error(DF_ENOMEM, "%s: out of memory", path);
    }
    int rc = DF_OK;
    uint64_t size = (uint64_t)st.st_size;
    if (size < 8) {
        rc = df_error(DF_EINVAL, "%s: truncated file (%llu bytes; the 8-byte header length is "
                      "missing)", path, (unsigned long long)size);
        goto fail;
    }
    f->map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        rc = df_error(DF_EIO, "%s: mmap failed: %s", path, strerror(errno));
        goto fail;
    }
    f->map_len = (size_t)size;
    const unsigned char *p = f->map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | p[i];
    if (hlen > size - 8) {
        rc = df_error(DF_EINVAL, "%s: header length %llu exceeds the file (%llu bytes after the "
                      "8-byte length; truncated or not a safetensors file)", path,
                      (unsigned long long)hlen, (unsigned long long)(size - 8));
        goto fail;
    }
    if (hlen > MAX_HEADER_BYTES) {
        rc = df_error(DF_EINVAL, "%s: header length %llu is above the 100 MB limit", path,
                      (unsigned long long)hlen);
        goto fail;
    }
    f->data = p + 8 + hlen;
    f->data_len = size - 8 - hlen;
    if ((rc = parse_header(f, (const char *)p + 8, (size_t)hlen)))
        goto fail;
    close(fd);
    *out = f;
    return DF_OK;
fail:
    close(fd);
    df_st_close(f);
    return rc;
}

void df_st_close(df_st_file *f)
{
    if (!f)
        return;
    if (f->map)
        munmap(f->map, f->map_len);
    for (int i = 0; i < f->n; i++)
        free(f->e[i].name);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta_key[i]);
        free(f->meta_val[i]);
    }
    free(f->meta_key);
    free(f->meta_val);
    free(f->e);
    free(f->by_name);
    free(f->path);
    free(f);
}

static void fill_tensor(const df_st_file *f, const st_entry *e, df_st_tensor *t)
{
    t->name = e->name;
    t->dtype = (df_dtype)e->dtype;
    t->ndim = e->ndim;
    memset(t->shape, 0, sizeof t->shape);
    memcpy(t->shape, e->shape, sizeof e->shape[0] * (size_t)e->ndim);
    t->data = f->data + e->begin;
    t->nbytes = (size_t)(e->end - e->begin);
}

int df_st_at(const df_st_file *f, int i, df_st_tensor *t)
{
    if (i < 0 || i >= f->n)
        return df_error(DF_EINVAL, "%s: tensor index %d out of range [0, %d)", f->path, i, f->n);
    fill_tensor(f, &f->e[i], t);
    return DF_OK;
}

int df_st_find(const df_st_file *f, const char *name, df_st_tensor *t)
{
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const st_entry *e = f->by_name[mid];
        int c = strcmp(name, e->name);
        if (c == 0) {
            fill_tensor(f, e, t);
            return DF_OK;
        }
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return df_error(DF_ENOTFOUND, "%s: no tensor \"%s\"", f->path, name);
}

const char *df_st_metadata(const df_st_file *f, const char *key)
{
    for (int i = 0; i < f->n_meta; i++)
        if (!strcmp(f->meta_key[i], key))
            return f->meta_val[i];
    return NULL;
}

int df_st_read_f32(const df_st_file *f, const char *name, float *dst, int64_t numel)
{
    df_st_tensor t;
    int rc = df_st_find(f, name, &t);
    if (rc)
        return rc;
    if (df_st_numel(&t) != numel) {
        char sh[160];
        df_st_shape_str(sh, sizeof sh, t.ndim, t.shape);
        return df_error(DF_EINVAL, "%s: tensor \"%s\" has shape %s (%lld elements), expected %lld",
                        f->path, name, sh, (long long)df_st_numel(&t), (long long)numel);
    }
    rc = df_st_tensor_to_f32(&t, dst);
    return rc ? df_error_wrap(rc, "%s", f->path) : DF_OK;
}

/* ---- writing --------------------------------------------------------------------- */

typedef struct {
    char *name;
    df_dtype dtype;
    int ndim;
    int64_t shape[DF_ST_MAX_DIMS];
    int64_t numel;
    void *bytes;          /* converted copy, or NULL when borrowed */
    const float *part[DF_ST_MAX_PARTS]; /* borrowed: the data is these pieces in order */
    int64_t part_numel[DF_ST_MAX_PARTS];
    int n_parts;
    df_st_source_fn source; /* streamed (df_st_writer_add_stream): pulled while writing */
    void *source_user;
    size_t nbytes;
} w_entry;

struct df_st_writer {
    w_entry *e;
    int n, cap;
    json_t *meta;
    int64_t data_bytes;
};

int df_st_writer_new(df_st_writer **out)
{
    df_st_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->meta = json_object())) {
        free(w);
        return df_error(DF_ENOMEM, "out of memory creating a safetensors writer");
    }
    *out = w;
    return DF_OK;
}

void df_st_writer_free(df_st_writer *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->n; i++) {
        free(w->e[i].name);
        free(w->e[i].bytes);
    }
    free(w->e);
    json_decref(w->meta);
    free(w);
}

static int writer_add(df_st_writer *w, const char *name, df_dtype dtype, int ndim,
                      const int64_t *shape, const float *src, bool copy)
{
    if (!name || !name[0] || !strcmp(name, "__metadata__"))
        return df_error(DF_EINVAL, "safetensors writer: invalid tensor name \"%s\"",
                        name ? name : "(null)");
    if (dtype != DF_DTYPE_F32 && dtype != DF_DTYPE_BF16 && dtype != DF_DTYPE_F16)
        return df_error(DF_EINVAL, "safetensors writer: tensor \"%s\": dtype %d cannot be written "
                        "(F32, BF16, F16)", name, (int)dtype);
    if (ndim < 0 || ndim > DF_ST_MAX_DIMS)
        return df_error(DF_EINVAL, "safetensors writer: tensor \"%s\": ndim %d not in [0, %d]",
                        name, ndim, DF_ST_MAX_DIMS);
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0 || __builtin_mul_overflow(numel, shape[i], &numel))
            return df_error(DF_EINVAL, "safetensors writer: tensor \"%s\": bad shape", name);
    if (numel > 0 && !src)
        return df_error(DF_EINVAL, "safetensors writer: tensor \"%s\": no data", name);
    for (int i = 0; i < w->n; i++)
        if (!strcmp(w->e[i].name, name))
            return df_error(DF_EINVAL, "safetensors writer: tensor \"%s\" added twice", name);
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 64;
        w_entry *ne = realloc(w->e, (size_t)cap * sizeof *ne);
        if (!ne)
            return df_error(DF_ENOMEM, "safetensors writer: out of memory");
        w->e = ne;
        w->cap = cap;
    }
    w_entry *e = &w->e[w->n];
    memset(e, 0, sizeof *e);
    e->dtype = dtype;
    e->ndim = ndim;
    if (ndim) /* a scalar may come with shape NULL, which memcpy must not get even for 0 bytes */
        memcpy(e->shape, shape, sizeof *shape * (size_t)ndim);
    e->numel = numel;
    e->nbytes = (size_t)numel * df_st_dtype_size(dtype);
    e->name = strdup(name);
    if (copy && e->nbytes) {
        e->bytes = malloc(e->nbytes);
        if (e->bytes)
            df_half_from_f32_array(dtype, src, e->bytes, numel);
    } else {
        e->part[0] = src, e->part_numel[0] = numel, e->n_parts = 1;
    }
    if (!e->name || (copy && e->nbytes && !e->bytes)) {
        free(e->name);
        free(e->bytes);
        return df_error(DF_ENOMEM, "safetensors writer: out of memory for tensor \"%s\"", name);
    }
    w->n++;
    w->data_bytes += (int64_t)e->nbytes;
    return DF_OK;
}

int df_st_writer_add(df_st_writer *w, const char *name, df_dtype dtype, int ndim,
                     const int64_t *shape, const float *src)
{
    return writer_add(w, name, dtype, ndim, shape, src, true);
}

int df_st_writer_add_borrowed(df_st_writer *w, const char *name, df_dtype dtype, int ndim,
                              const int64_t *shape, const float *src)
{
    return writer_add(w, name, dtype, ndim, shape, src, false);
}

int df_st_writer_add_gathered(df_st_writer *w, const char *name, df_dtype dtype, int ndim,
                              const int64_t *shape, const float *const *parts,
                              const int64_t *part_numel, int n_parts)
{
    int64_t sum = 0;
    bool ok = n_parts >= 1 && n_parts <= DF_ST_MAX_PARTS;
    for (int i = 0; ok && i < n_parts; i++)
        ok = part_numel[i] >= 0 && (parts[i] || !part_numel[i]) && !__builtin_add_overflow(sum, part_numel[i], &sum);
    int rc = ok ? writer_add(w, name, dtype, ndim, shape, parts[0], false)
                : df_error(DF_EINVAL, "safetensors writer: tensor \"%s\": bad pieces", name ? name : "(null)");
    if (rc)
        return rc;
    w_entry *e = &w->e[w->n - 1];
    if (sum != e->numel) {
        free(e->name);
        w->n--;
        w->data_bytes -= (int64_t)e->nbytes;
        return df_error(DF_EINVAL, "safetensors writer: tensor \"%s\": its pieces hold %lld elements, its "
                        "shape %lld", name, (long long)sum, (long long)e->numel);
    }
    for (int i = 0; i < n_parts; i++)
        e->part[i] = parts[i], e->part_numel[i] = part_numel[i];
    e->n_parts = n_parts;
    return DF_OK;
}

int df_st_writer_add_stream(df_st_writer *w, const char *name, int64_t numel, df_st_source_fn fn, void *user)
{
    static const float none; /* the data comes from fn */
    int rc = fn ? writer_add(w, name, DF_DTYPE_F32, 1, &numel, &none, false)
                : df_error(DF_EINVAL, "safetensors writer: tensor \"%s\": no source", name ? name : "(null)");
    if (rc)
        return rc;
    w_entry *e = &w->e[w->n - 1];
    e->n_parts = 0;
    e->source = fn;
    e->source_user = user;
    return DF_OK;
}

int df_st_writer_set_metadata(df_st_writer *w, const char *key, const char *value)
{
    if (!key || !value)
        return df_error(DF_EINVAL, "safetensors writer: metadata key and value must be non-NULL");
    if (json_object_set_new(w->meta, key, json_string(value)))
        return df_error(DF_EINVAL, "safetensors writer: metadata \"%s\" is not valid UTF-8", key);
    return DF_OK;
}

int64_t df_st_writer_data_bytes(const df_st_writer *w) { return w->data_bytes; }

static char *build_header(const df_st_writer *w, size_t *len)
{
    json_t *root = json_object();
    if (!root)
        return NULL;
    int bad = 0;
    if (json_object_size(w->meta))
        bad |= json_object_set(root, "__metadata__", w->meta);
    uint64_t off = 0;
    for (int i = 0; i < w->n && !bad; i++) {
        const w_entry *e = &w->e[i];
        json_t *shape = json_array();
        for (int d = 0; d < e->ndim && shape; d++)
            bad |= json_array_append_new(shape, json_integer(e->shape[d]));
        json_t *t = json_pack("{s:s, s:o, s:[I, I]}", "dtype", df_st_dtype_name(e->dtype),
                              "shape", shape, "data_offsets", (json_int_t)off,
                              (json_int_t)(off + e->nbytes));
        bad |= !t || json_object_set_new(root, e->name, t);
        off += e->nbytes;
    }
    char *s = bad ? NULL : json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!s)
        return NULL;
    /* Pad with spaces so the data buffer starts 8-byte aligned, as the reference writer does. */
    size_t n = strlen(s), padded = (n + 8 + 7) / 8 * 8 - 8;
    char *h = realloc(s, padded + 1);
    if (!h) {
        free(s);
        return NULL;
    }
    memset(h + n, ' ', padded - n);
    h[padded] = '\0';
    *len = padded;
    return h;
}

/* n floats of src in dtype: float32 as they are, half types converted in chunks through `chunk`. */
static int write_piece(struct df_tmpfile *t, df_dtype dtype, const float *src, int64_t n, uint16_t *chunk)
{
    if (dtype == DF_DTYPE_F32)
        return n ? df_tmpfile_write(t, src, (size_t)n * sizeof *src) : DF_OK;
    int rc = DF_OK;
    for (int64_t s = 0; s < n && !rc; s += WRITE_CHUNK) {
        int64_t m = n - s < WRITE_CHUNK ? n - s : WRITE_CHUNK;
        df_half_from_f32_array(dtype, src + s, chunk, m);
        rc = df_tmpfile_write(t, chunk, (size_t)m * 2);
    }
    return rc;
}

/* A streamed tensor: its source's floats, WRITE_CHUNK at a time. */
static int write_stream(struct df_tmpfile *t, const w_entry *e)
{
    float *buf = malloc(WRITE_CHUNK * sizeof *buf);
    int rc = buf ? DF_OK : df_error(DF_ENOMEM, "%s: out of memory", t->path);
    for (int64_t s = 0; s < e->numel && !rc; s += WRITE_CHUNK) {
        int64_t m = e->numel - s < WRITE_CHUNK ? e->numel - s : WRITE_CHUNK;
        rc = e->source(e->source_user, buf, m);
        if (rc)
            rc = df_error_wrap(rc, "%s: tensor %s", t->path, e->name);
        else
            rc = df_tmpfile_write(t, buf, (size_t)m * sizeof *buf);
    }
    free(buf);
    return rc;
}

int df_st_writer_write_to(df_st_writer *w, struct df_tmpfile *t)
{
    size_t hlen;
    char *hdr = build_header(w, &hlen);
    if (!hdr)
        return df_error(DF_ENOMEM, "%s: out of memory building the safetensors header", t->path);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    int rc = df_tmpfile_write(t, len8, 8);
    if (!rc)
        rc = df_tmpfile_write(t, hdr, hlen);
    free(hdr);
    uint16_t *chunk = NULL;
    for (int i = 0; i < w->n && !rc; i++) {
        const w_entry *e = &w->e[i];
        if (e->bytes) {
            rc = df_tmpfile_write(t, e->bytes, e->nbytes);
            continue;
        }
        if (e->source) {
            rc = write_stream(t, e);
            continue;
        }
        if (e->dtype != DF_DTYPE_F32 && !chunk && !(chunk = malloc(WRITE_CHUNK * sizeof *chunk))) {
            rc = df_error(DF_ENOMEM, "%s: out of memory", t->path);
            break;
        }
        for (int p = 0; p < e->n_parts && !rc; p++)
            rc = write_piece(t, e->dtype, e->part[p], e->part_numel[p], chunk);
    }
    free(chunk);
    return rc;
}

int df_st_writer_write(df_st_writer *w, const char *path)
{
    df_tmpfile t;
    int rc = df_tmpfile_open(&t, path);
    if (rc)
        return rc;
    rc = df_st_writer_write_to(w, &t);
    if (!rc)
        rc = df_tmpfile_commit(&t);
    df_tmpfile_discard(&t);
    return rc ? rc : df_fsync_parent(path);
}
