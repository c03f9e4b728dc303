/* One Parquet column chunk into levels and values: pages, decompression and the value encodings
 * of Parquet's Encodings.md (data/parquet_internal.h). */
#include "data/parquet_internal.h"

#include "distflow/common.h"

#include <brotli/decode.h>
#include <lz4.h>
#include <snappy-c.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#define MAX_PAGE_BYTES ((size_t)1 << 30) /* one page decompressed (pyarrow writes ~1 MiB pages, DuckDB a whole chunk) */
#define MAX_VALUE_BYTES ((size_t)1 << 30) /* a DELTA_BYTE_ARRAY page's values rebuilt */

typedef struct ctx {
    const char *name, *what;
    int type, width; /* width: FIXED_LEN_BYTE_ARRAY's bytes per value */
    pq_column *col;
    int64_t cap_rep, cap_def, cap_values;
    pq_value *dict;
    int64_t ndict;
} ctx;

static int corrupt(const ctx *c, const char *why)
{
    return df_error(DF_EINVAL, "%s: column '%s': corrupt data page (%s)", c->name, c->what, why);
}

static int oom(const ctx *c) { return df_error(DF_ENOMEM, "out of memory reading %s (column '%s')", c->name, c->what); }

static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

/* ---- decompression ----------------------------------------------------------------- */

static const char *codec_name(int codec)
{
    static const char *const names[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW"};
    return codec >= 0 && codec < 8 ? names[codec] : "unknown";
}

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

/* The deprecated LZ4 codec as Hadoop frames it (what older parquet-mr / Arrow wrote): blocks of
 * [uncompressed size, compressed size] (big-endian u32) and a raw LZ4 block. Readers fall back to
 * a bare block when this framing does not fit, as Arrow's does. */
static bool lz4_hadoop(const uint8_t *src, size_t n, uint8_t *dst, size_t want)
{
    size_t in = 0, out = 0;
    while (in < n) {
        if (n - in < 8)
            return false;
        uint32_t raw = be32(src + in), packed = be32(src + in + 4);
        in += 8;
        if (packed > n - in || raw > want - out || packed > INT32_MAX ||
            LZ4_decompress_safe((const char *)src + in, (char *)dst + out, (int)packed, (int)raw) != (int)raw)
            return false;
        in += packed;
        out += raw;
    }
    return out == want;
}

/* src[0, n) decompressed into dst[0, want); false when the stream does not make exactly that. */
static bool inflate_all(const uint8_t *src, size_t n, uint8_t *dst, size_t want, int codec)
{
    if (codec == PQ_SNAPPY) {
        size_t got = 0;
        return snappy_uncompressed_length((const char *)src, n, &got) == SNAPPY_OK && got == want &&
               snappy_uncompress((const char *)src, n, (char *)dst, &got) == SNAPPY_OK && got == want;
    }
    if (codec == PQ_ZSTD) {
        size_t got = ZSTD_decompress(dst, want, src, n);
        return !ZSTD_isError(got) && got == want;
    }
    if (codec == PQ_LZ4_RAW)
        return n <= INT32_MAX && want <= INT32_MAX && LZ4_decompress_safe((const char *)src, (char *)dst, (int)n,
                                                                           (int)want) == (int)want;
    if (codec == PQ_LZ4)
        return lz4_hadoop(src, n, dst, want) ||
               (n <= INT32_MAX && want <= INT32_MAX &&
                LZ4_decompress_safe((const char *)src, (char *)dst, (int)n, (int)want) == (int)want);
    if (codec == PQ_BROTLI) {
        size_t got = want;
        return BrotliDecoderDecompress(n, src, &got, dst) == BROTLI_DECODER_RESULT_SUCCESS && got == want;
    }
    z_stream z = {0}; /* GZIP: a gzip member (windowBits + 32 also takes a zlib stream) */
    if (inflateInit2(&z, 15 + 32) != Z_OK)
        return false;
    z.next_in = (Bytef *)src;
    z.avail_in = (uInt)n;
    z.next_out = dst;
    z.avail_out = (uInt)want;
    int zr = inflate(&z, Z_FINISH);
    bool ok = zr == Z_STREAM_END && z.total_out == want;
    inflateEnd(&z);
    return ok;
}

/* Whether `n` compressed bytes can make `want`, asked before allocating: snappy and zstd state the
 * size, deflate and LZ4 have a bounded expansion. */
static bool plausible(int codec, const uint8_t *src, size_t n, size_t want)
{
    size_t stated = 0;
    if (want > MAX_PAGE_BYTES)
        return false;
    if (codec == PQ_UNCOMPRESSED)
        return n == want;
    if (codec == PQ_SNAPPY)
        return snappy_uncompressed_length((const char *)src, n, &stated) == SNAPPY_OK && stated == want;
    if (codec == PQ_ZSTD) {
        unsigned long long z = ZSTD_getFrameContentSize(src, n);
        return z == ZSTD_CONTENTSIZE_UNKNOWN || z == want;
    }
    if (codec == PQ_LZ4_RAW || codec == PQ_LZ4)
        return want <= 256 * n + 64; /* an LZ4 block expands at most ~255:1 */
    if (codec == PQ_GZIP)
        return want <= 1032 * n + 64; /* deflate: at most ~1032:1 */
    return true;                     /* brotli: bounded by MAX_PAGE_BYTES only */
}

/* A new buffer of `size` bytes that lives as long as the column (values point into it). */
static int column_buffer(ctx *c, size_t size, uint8_t **out)
{
    uint8_t **nb = realloc(c->col->bufs, (size_t)(c->col->nbufs + 1) * sizeof *nb);
    if (nb)
        c->col->bufs = nb;
    if (!nb || !(*out = malloc(size ? size : 1)))
        return oom(c);
    c->col->bufs[c->col->nbufs++] = *out;
    return DF_OK;
}

/* A page's body, `n` stored bytes of which the first `keep` are never compressed (v2 levels), as
 * `want` plain bytes in a buffer the column keeps. */
static int page_body(ctx *c, int codec, const uint8_t *src, size_t n, size_t keep, size_t want, const uint8_t **out)
{
    if (keep > n || keep > want)
        return corrupt(c, "level sections larger than the page");
    if (!plausible(codec, src + keep, n - keep, want - keep))
        return df_error(DF_EINVAL, "%s: column '%s': a %s page cannot hold its stated %zu bytes", c->name, c->what,
                        codec_name(codec), want);
    uint8_t *dst = NULL;
    if (column_buffer(c, want, &dst))
        return DF_ENOMEM;
    memcpy(dst, src, keep);
    bool ok = codec == PQ_UNCOMPRESSED ? n == want && (memcpy(dst + keep, src + keep, n - keep), true)
                                       : inflate_all(src + keep, n - keep, dst + keep, want - keep, codec);
    if (!ok)
        return df_error(DF_EINVAL, "%s: column '%s': a %s page does not decompress to its stated %zu bytes", c->name,
                        c->what, codec_name(codec), want);
    *out = dst;
    return DF_OK;
}

/* ---- the RLE / bit-packing hybrid (levels, dictionary indices, RLE booleans) ------------- */

typedef struct bits {
    const uint8_t *p, *end;
} bits;

static bool uleb(bits *b, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (b->p >= b->end)
            return false;
        uint8_t x = *b->p++;
        *v |= (uint64_t)(x & 0x7f) << shift;
        if (!(x & 0x80))
            return true;
    }
    return false;
}

/* `width` bits (at most 64) at bit offset `bit` of p, least significant bit first. */
static uint64_t unpack(const uint8_t *p, uint64_t bit, int width)
{
    uint64_t v = 0;
    for (int k = 0; k < width;) {
        int off = (int)((bit + (uint64_t)k) % 8), take = 8 - off < width - k ? 8 - off : width - k;
        v |= (uint64_t)((p[(bit + (uint64_t)k) / 8] >> off) & ((1u << take) - 1)) << k;
        k += take;
    }
    return v;
}

/* `count` values of `width` bits (0..32) into out[]. */
static bool rle_hybrid(bits *b, int width, int64_t count, uint32_t *out)
{
    int64_t got = 0;
    while (got < count) {
        uint64_t h;
        if (!uleb(b, &h))
            return false;
        uint64_t groups = h >> 1;
        if (h & 1) { /* `groups` groups of 8 bit-packed values */
            if (groups > ((uint64_t)1 << 32) || groups * (uint64_t)width > (uint64_t)(b->end - b->p))
                return false;
            for (uint64_t i = 0; i < groups * 8 && got < count; i++)
                out[got++] = (uint32_t)unpack(b->p, i * (uint64_t)width, width);
            b->p += groups * (uint64_t)width;
        } else { /* a run: h >> 1 copies of one value stored in ceil(width / 8) bytes */
            int nb = (width + 7) / 8;
            if (nb > b->end - b->p)
                return false;
            uint64_t v = unpack(b->p, 0, nb * 8);
            b->p += nb;
            if (width < 32 && v >> width)
                return false;
            for (uint64_t i = 0; i < groups && got < count; i++)
                out[got++] = (uint32_t)v;
        }
    }
    return true;
}

static int bit_width(int64_t max)
{
    int w = 0;
    while (max >> w)
        w++;
    return w;
}

/* ---- levels ---------------------------------------------------------------------------- */

/* *p holds at least `need` elements, and is allocated even for none (p + 0 must not be NULL + 0). */
static bool grow(void **p, int64_t *cap, int64_t need, size_t elem)
{
    if (need <= *cap && *p)
        return true;
    int64_t nc = *cap ? *cap : 1024;
    while (nc < need)
        nc *= 2;
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q)
        return false;
    *p = q;
    *cap = nc;
    return true;
}

/* n levels (maximum `max`) from b into dst[]; a zero maximum stores zeros and reads nothing. */
static int levels(ctx *c, bits *b, int max, int64_t n, int16_t *dst, uint32_t *tmp)
{
    if (max == 0) {
        memset(dst, 0, (size_t)n * sizeof *dst);
        return DF_OK;
    }
    if (!rle_hybrid(b, bit_width(max), n, tmp))
        return corrupt(c, "levels");
    for (int64_t i = 0; i < n; i++) {
        if (tmp[i] > (uint32_t)max)
            return corrupt(c, "a level above the column's maximum");
        dst[i] = (int16_t)tmp[i];
    }
    return DF_OK;
}

/* ---- value encodings --------------------------------------------------------------------- */

static int plain(ctx *c, bits *b, int64_t n, pq_value *out)
{
    static const int width[] = {[PQ_INT32] = 4, [PQ_INT64] = 8, [PQ_FLOAT] = 4, [PQ_DOUBLE] = 8};
    if (c->type == PQ_BOOLEAN) {
        if ((n + 7) / 8 > b->end - b->p)
            return corrupt(c, "fewer booleans than values");
        for (int64_t i = 0; i < n; i++)
            out[i].i = (b->p[i / 8] >> (i % 8)) & 1;
        b->p += (n + 7) / 8;
        return DF_OK;
    }
    if (c->type == PQ_FIXED_LEN_BYTE_ARRAY) {
        if (n > (b->end - b->p) / c->width)
            return corrupt(c, "fewer fixed-length values than the levels say");
        for (int64_t i = 0; i < n; i++, b->p += c->width)
            out[i].s = b->p, out[i].n = (uint32_t)c->width;
        return DF_OK;
    }
    for (int64_t i = 0; i < n; i++) {
        if (c->type == PQ_BYTE_ARRAY) {
            if (b->end - b->p < 4 || le32(b->p) > (uint64_t)(b->end - b->p - 4))
                return corrupt(c, "a string runs past the page");
            out[i].n = le32(b->p);
            out[i].s = b->p + 4;
            b->p += 4 + out[i].n;
            continue;
        }
        if (b->end - b->p < width[c->type])
            return corrupt(c, "fewer values than the levels say");
        uint32_t u = le32(b->p);
        float f;
        memcpy(&f, &u, 4);
        uint64_t w = width[c->type] == 8 ? le64(b->p) : 0;
        if (c->type == PQ_INT32)
            out[i].i = (int32_t)u;
        else if (c->type == PQ_INT64)
            out[i].i = (int64_t)w;
        else if (c->type == PQ_FLOAT)
            out[i].d = f;
        else
            memcpy(&out[i].d, &w, 8);
        b->p += width[c->type];
    }
    return DF_OK;
}

static int dictionary_indices(ctx *c, bits *b, int64_t n, pq_value *out, uint32_t *tmp)
{
    if (!c->dict)
        return corrupt(c, "dictionary-encoded values without a dictionary page");
    if (n == 0)
        return DF_OK;
    if (b->p >= b->end || *b->p > 32)
        return corrupt(c, "dictionary index width");
    int w = *b->p++;
    if (!rle_hybrid(b, w, n, tmp))
        return corrupt(c, "dictionary indices");
    for (int64_t i = 0; i < n; i++) {
        if (tmp[i] >= (uint64_t)c->ndict)
            return corrupt(c, "a dictionary index past the dictionary");
        out[i] = c->dict[tmp[i]];
    }
    return DF_OK;
}

/* DELTA_BINARY_PACKED: n integers (Encodings.md: blocks of miniblocks of bit-packed deltas). */
static bool delta_ints(bits *b, int64_t n, int64_t *out)
{
    uint64_t block, nmini, total, zz;
    if (!uleb(b, &block) || !uleb(b, &nmini) || !uleb(b, &total) || !uleb(b, &zz) || !nmini || block % 128 ||
        nmini > block / 32 || block / nmini % 32 || block > (1u << 20) || total < (uint64_t)n)
        return false;
    uint64_t per_mini = block / nmini;
    int64_t v = (int64_t)(zz >> 1) ^ -(int64_t)(zz & 1);
    int64_t got = 0;
    if (n > 0)
        out[got++] = v;
    while (got < n) {
        uint64_t mz;
        if (!uleb(b, &mz) || (uint64_t)(b->end - b->p) < nmini)
            return false;
        int64_t min_delta = (int64_t)(mz >> 1) ^ -(int64_t)(mz & 1);
        const uint8_t *widths = b->p;
        b->p += nmini;
        for (uint64_t m = 0; m < nmini && got < n; m++) {
            int w = widths[m];
            uint64_t nbytes = per_mini * (uint64_t)w / 8;
            if (w > 64 || nbytes > (uint64_t)(b->end - b->p))
                return false;
            for (uint64_t i = 0; i < per_mini && got < n; i++) { /* sums wrap, as the writer's did */
                v = (int64_t)((uint64_t)v + (uint64_t)min_delta + unpack(b->p, i * (uint64_t)w, w));
                out[got++] = v;
            }
            b->p += nbytes;
        }
    }
    return true;
}

static int delta_lengths(ctx *c, bits *b, int64_t n, pq_value *out, int64_t *tmp)
{
    if (!delta_ints(b, n, tmp))
        return corrupt(c, "DELTA_BINARY_PACKED lengths");
    for (int64_t i = 0; i < n; i++) {
        if (tmp[i] < 0 || tmp[i] > b->end - b->p)
            return corrupt(c, "a string runs past the page");
        out[i].s = b->p;
        out[i].n = (uint32_t)tmp[i];
        b->p += tmp[i];
    }
    return DF_OK;
}

/* DELTA_BYTE_ARRAY: prefix lengths, then suffixes (DELTA_LENGTH_BYTE_ARRAY); each value is the
 * previous one's prefix followed by its suffix, rebuilt into a buffer the column keeps. */
static int delta_strings(ctx *c, bits *b, int64_t n, pq_value *out, int64_t *tmp)
{
    int64_t *prefix = malloc((size_t)(n ? n : 1) * sizeof *prefix);
    if (!prefix)
        return oom(c);
    int rc = delta_ints(b, n, prefix) ? delta_lengths(c, b, n, out, tmp) : corrupt(c, "DELTA_BYTE_ARRAY prefixes");
    size_t total = 0, prev = 0;
    for (int64_t i = 0; !rc && i < n; i++) {
        if (prefix[i] < 0 || (uint64_t)prefix[i] > prev)
            rc = corrupt(c, "a prefix longer than the previous value");
        prev = (size_t)prefix[i] + out[i].n;
        total += prev;
        if (!rc && total > MAX_VALUE_BYTES)
            rc = corrupt(c, "DELTA_BYTE_ARRAY values over 1 GiB");
    }
    uint8_t *buf = NULL;
    if (!rc)
        rc = column_buffer(c, total, &buf);
    for (int64_t i = 0; !rc && i < n; i++) {
        if (i)
            memcpy(buf, out[i - 1].s, (size_t)prefix[i]);
        memcpy(buf + prefix[i], out[i].s, out[i].n);
        out[i].s = buf;
        out[i].n += (uint32_t)prefix[i];
        buf += out[i].n;
    }
    free(prefix);
    return rc;
}

/* BYTE_STREAM_SPLIT: byte k of every value together, stream after stream; reassembled into the
 * PLAIN layout and read as such. */
static int byte_stream_split(ctx *c, bits *b, int64_t n, pq_value *out)
{
    int w = c->type == PQ_FIXED_LEN_BYTE_ARRAY ? c->width : c->type == PQ_INT32 || c->type == PQ_FLOAT ? 4 : 8;
    if (c->type == PQ_BOOLEAN || c->type == PQ_BYTE_ARRAY)
        return corrupt(c, "BYTE_STREAM_SPLIT on a boolean or string column");
    if (n > (b->end - b->p) / w)
        return corrupt(c, "fewer BYTE_STREAM_SPLIT bytes than values");
    uint8_t *plain_bytes = NULL; /* kept with the column: fixed-length values point into it */
    if (column_buffer(c, (size_t)n * (size_t)w, &plain_bytes))
        return DF_ENOMEM;
    for (int64_t i = 0; i < n; i++)
        for (int k = 0; k < w; k++)
            plain_bytes[i * w + k] = b->p[(int64_t)k * n + i];
    b->p += n * w;
    bits pb = {plain_bytes, plain_bytes + n * w};
    return plain(c, &pb, n, out);
}

static int values(ctx *c, int encoding, bits *b, int64_t n, pq_value *out, uint32_t *tmp)
{
    if (encoding == PQ_PLAIN)
        return plain(c, b, n, out);
    if (encoding == PQ_BYTE_STREAM_SPLIT)
        return byte_stream_split(c, b, n, out);
    if (encoding == PQ_PLAIN_DICTIONARY || encoding == PQ_RLE_DICTIONARY)
        return dictionary_indices(c, b, n, out, tmp);
    if (encoding == PQ_RLE && c->type == PQ_BOOLEAN) { /* a 4-byte length, then the hybrid at width 1 */
        if (b->end - b->p < 4 || le32(b->p) > (uint64_t)(b->end - b->p - 4))
            return corrupt(c, "RLE booleans");
        bits r = {b->p + 4, b->p + 4 + le32(b->p)};
        if (!rle_hybrid(&r, 1, n, tmp))
            return corrupt(c, "RLE booleans");
        for (int64_t i = 0; i < n; i++)
            out[i].i = tmp[i];
        return DF_OK;
    }
    int64_t *t64 = NULL;
    int rc = DF_OK;
    if ((encoding == PQ_DELTA_BINARY_PACKED && (c->type == PQ_INT32 || c->type == PQ_INT64)) ||
        (encoding == PQ_DELTA_LENGTH_BYTE_ARRAY && c->type == PQ_BYTE_ARRAY) ||
        (encoding == PQ_DELTA_BYTE_ARRAY && (c->type == PQ_BYTE_ARRAY || c->type == PQ_FIXED_LEN_BYTE_ARRAY))) {
        if (!(t64 = malloc((size_t)(n ? n : 1) * sizeof *t64)))
            return oom(c);
        if (encoding == PQ_DELTA_BINARY_PACKED) {
            if (!delta_ints(b, n, t64))
                rc = corrupt(c, "DELTA_BINARY_PACKED");
            for (int64_t i = 0; !rc && i < n; i++)
                out[i].i = c->type == PQ_INT32 ? (int32_t)t64[i] : t64[i];
        } else
            rc = encoding == PQ_DELTA_BYTE_ARRAY ? delta_strings(c, b, n, out, t64) : delta_lengths(c, b, n, out, t64);
        free(t64);
        return rc;
    }
    return df_error(DF_EUNSUPPORTED,
                    "%s: column '%s': value encoding %d is not supported (distflow reads PLAIN, dictionaries, RLE "
                    "booleans, the DELTA encodings and BYTE_STREAM_SPLIT)",
                    c->name, c->what, encoding);
}

/* ---- pages ------------------------------------------------------------------------------- */

static int dictionary(ctx *c, const pq_page *pg, const uint8_t *body)
{
    if (c->dict)
        return corrupt(c, "a second dictionary page");
    if (pg->encoding != PQ_PLAIN && pg->encoding != PQ_PLAIN_DICTIONARY)
        return corrupt(c, "a dictionary page not PLAIN-encoded");
    if (!(c->dict = malloc((size_t)(pg->num_values ? pg->num_values : 1) * sizeof *c->dict)))
        return oom(c);
    c->ndict = pg->num_values;
    bits b = {body, body + pg->uncompressed_size};
    return plain(c, &b, pg->num_values, c->dict);
}

static int data_page(ctx *c, const pq_page *pg, const uint8_t *body, int max_rep, int max_def)
{
    pq_column *col = c->col;
    int64_t n = pg->num_values, base = col->n_levels;
    uint32_t *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
    if (!tmp || !grow((void **)&col->rep, &c->cap_rep, base + n, sizeof *col->rep) ||
        !grow((void **)&col->def, &c->cap_def, base + n, sizeof *col->def)) {
        free(tmp);
        return oom(c);
    }
    bits b = {body, body + pg->uncompressed_size};
    bits rb = b, db = b;
    int rc = DF_OK;
    if (pg->type == PQ_DATA_PAGE_V2) {
        rb.end = body + pg->rep_bytes;
        db = (bits){rb.end, rb.end + pg->def_bytes};
        b.p = db.end;
    } else {
        for (int k = 0; k < 2 && !rc; k++) { /* v1: each level section behind its 4-byte length */
            int max = k ? max_def : max_rep, enc = k ? pg->def_encoding : pg->rep_encoding;
            bits *lv = k ? &db : &rb;
            if (!max)
                continue;
            if (enc != PQ_RLE)
                rc = df_error(DF_EUNSUPPORTED, "%s: column '%s': level encoding %d is not supported (RLE only)",
                              c->name, c->what, enc);
            else if (b.end - b.p < 4 || le32(b.p) > (uint64_t)(b.end - b.p - 4))
                rc = corrupt(c, "level section length");
            else {
                *lv = (bits){b.p + 4, b.p + 4 + le32(b.p)};
                b.p = lv->end;
            }
        }
    }
    if (!rc)
        rc = levels(c, &rb, max_rep, n, col->rep + base, tmp);
    if (!rc)
        rc = levels(c, &db, max_def, n, col->def + base, tmp);
    int64_t present = 0;
    for (int64_t i = 0; !rc && i < n; i++)
        present += col->def[base + i] == max_def;
    if (!rc && !grow((void **)&col->values, &c->cap_values, col->n_values + present, sizeof *col->values))
        rc = oom(c);
    if (!rc)
        rc = values(c, pg->encoding, &b, present, col->values + col->n_values, tmp);
    if (!rc) {
        col->n_levels += n;
        col->n_values += present;
    }
    free(tmp);
    return rc;
}

static int check_chunk(const ctx *c, const pq_chunk *ch, size_t len)
{
    if (ch->external)
        return df_error(DF_EUNSUPPORTED, "%s: column '%s': its data lives in another file (ColumnChunk.file_path)",
                        c->name, c->what);
    if (ch->codec < PQ_UNCOMPRESSED || ch->codec > PQ_LZ4_RAW || ch->codec == PQ_LZO)
        return df_error(DF_EUNSUPPORTED,
                        "%s: column '%s': compression %s is not supported (distflow reads UNCOMPRESSED, SNAPPY, GZIP, "
                        "ZSTD, LZ4_RAW, LZ4 and BROTLI; rewrite the file with one of them)",
                        c->name, c->what, codec_name(ch->codec));
    int64_t start = ch->dictionary_page_offset > 0 && ch->dictionary_page_offset < ch->data_page_offset
                        ? ch->dictionary_page_offset
                        : ch->data_page_offset;
    if (start < 4 || ch->total_compressed_size < 0 || start > (int64_t)len ||
        ch->total_compressed_size > (int64_t)len - start || ch->num_values < 0)
        return df_error(DF_EINVAL, "%s: column '%s': corrupt column chunk (its pages lie outside the file)", c->name,
                        c->what);
    return DF_OK;
}

int pq_column_read(const uint8_t *file, size_t len, const pq_chunk *ch, int type_length, int max_rep, int max_def,
                   const char *name, const char *what, pq_column *out)
{
    *out = (pq_column){0};
    ctx c = {.name = name, .what = what, .type = ch->type, .width = type_length, .col = out};
    int rc = check_chunk(&c, ch, len);
    if (!rc && (ch->type < PQ_BOOLEAN || ch->type > PQ_FIXED_LEN_BYTE_ARRAY || ch->type == PQ_INT96))
        rc = df_error(DF_EUNSUPPORTED, "%s: column '%s': physical type %s is not supported", name, what,
                      ch->type == PQ_INT96 ? "INT96 (legacy timestamps; rewrite them as INT64)" : "unknown");
    if (!rc && ch->type == PQ_FIXED_LEN_BYTE_ARRAY && (type_length < 1 || type_length > (1 << 20)))
        rc = df_error(DF_EINVAL, "%s: column '%s': FIXED_LEN_BYTE_ARRAY of %d bytes", name, what, type_length);
    int64_t pos = ch->dictionary_page_offset > 0 && ch->dictionary_page_offset < ch->data_page_offset
                      ? ch->dictionary_page_offset
                      : ch->data_page_offset;
    int64_t end = pos + ch->total_compressed_size;
    while (!rc && out->n_levels < ch->num_values) {
        pq_page pg;
        size_t hl = 0;
        const uint8_t *body = NULL;
        if (pos >= end) {
            rc = corrupt(&c, "the chunk ends before its values");
            break;
        }
        if ((rc = pq_page_parse(file + pos, (size_t)(end - pos), name, what, &pg, &hl)))
            break;
        pos += (int64_t)hl;
        if (pg.compressed_size > end - pos) {
            rc = corrupt(&c, "a page runs past its column chunk");
            break;
        }
        bool v2 = pg.type == PQ_DATA_PAGE_V2;
        size_t keep = v2 ? (size_t)pg.rep_bytes + (size_t)pg.def_bytes : 0;
        int codec = v2 && !pg.is_compressed ? PQ_UNCOMPRESSED : ch->codec;
        if (v2 && (pg.rep_bytes < 0 || pg.def_bytes < 0))
            rc = corrupt(&c, "negative level sizes");
        else if (pg.type == PQ_DATA_PAGE || v2 || pg.type == PQ_DICTIONARY_PAGE) {
            if (!(rc = page_body(&c, codec, file + pos, (size_t)pg.compressed_size, keep, (size_t)pg.uncompressed_size,
                                 &body)))
                rc = pg.type == PQ_DICTIONARY_PAGE ? dictionary(&c, &pg, body) : data_page(&c, &pg, body, max_rep, max_def);
        } /* index pages and unknown page types are skipped */
        pos += pg.compressed_size;
    }
    if (!rc && out->n_levels != ch->num_values)
        rc = corrupt(&c, "more values than the column chunk states");
    free(c.dict);
    if (rc)
        pq_column_free(out);
    return rc;
}

void pq_column_free(pq_column *c)
{
    for (int i = 0; i < c->nbufs; i++)
        free(c->bufs[i]);
    free(c->bufs);
    free(c->rep);
    free(c->def);
    free(c->values);
    *c = (pq_column){0};
}
