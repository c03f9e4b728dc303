/*
 * Wire form of df_sample_info arrays for the coordinator's allgather
 * (include/distflow/coordinator.h): fixed 56-byte records, then the uid bytes.
 * Little-endian whatever the host, like df_batch_serialize.
 */
#include "distflow/coordinator.h"
#include "util/le.h"

#include <stdlib.h>
#include <string.h>

#define SINFO_MAGIC "DFSINFO"
#define SINFO_HEAD 24
#define SINFO_REC 56

static uint64_t f64_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static double bits_f64(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

int df_sample_infos_serialize(const df_sample_info *infos, int64_t n, uint8_t **buf, size_t *len)
{
    if (n < 0 || (n > 0 && !infos) || !buf || !len)
        return df_error(DF_EINVAL, "sample infos serialize: bad arguments (n=%lld)", (long long)n);
    size_t total = SINFO_HEAD + (size_t)n * SINFO_REC;
    for (int64_t i = 0; i < n; i++) {
        size_t l = infos[i].uid ? strlen(infos[i].uid) : 0;
        if (l > INT32_MAX)
            return df_error(DF_EINVAL, "sample infos serialize: uid of info %lld is too long",
                            (long long)i);
        total += l;
    }
    uint8_t *b = malloc(total);
    if (!b)
        return df_error(DF_ENOMEM, "sample infos serialize: out of memory for %zu bytes", total);
    memcpy(b, SINFO_MAGIC, 8);
    df_le_put32(b + 8, 1);
    df_le_put32(b + 12, 0);
    df_le_put64(b + 16, (uint64_t)n);
    uint8_t *blob = b + SINFO_HEAD + (size_t)n * SINFO_REC;
    for (int64_t i = 0; i < n; i++) {
        const df_sample_info *s = &infos[i];
        uint8_t *r = b + SINFO_HEAD + (size_t)i * SINFO_REC;
        int32_t ul = s->uid ? (int32_t)strlen(s->uid) : -1;
        df_le_put64(r, (uint64_t)s->prompt_length);
        df_le_put64(r + 8, (uint64_t)s->response_length);
        df_le_put64(r + 16, (uint64_t)s->sum_tokens);
        df_le_put64(r + 24, (uint64_t)s->group);
        df_le_put64(r + 32, f64_bits(s->score));
        df_le_put32(r + 40, (uint32_t)s->src_rank);
        df_le_put32(r + 44, (uint32_t)ul);
        df_le_put64(r + 48, (uint64_t)s->src_index);
        if (ul > 0) {
            memcpy(blob, s->uid, (size_t)ul);
            blob += ul;
        }
    }
    *buf = b;
    *len = total;
    return DF_OK;
}

/* Checks the records and returns the uid blob size through *blob. */
static int sinfo_check(const uint8_t *buf, size_t len, int64_t n, size_t *blob)
{
    size_t need = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *r = buf + SINFO_HEAD + (size_t)i * SINFO_REC;
        int32_t ul = (int32_t)df_le_get32(r + 44);
        if (ul < -1)
            return df_error(DF_EINVAL, "sample infos: byte %zu: uid length %d of info %lld",
                            (size_t)(r + 44 - buf), ul, (long long)i);
        need += ul > 0 ? (size_t)ul : 0;
    }
    size_t recs = SINFO_HEAD + (size_t)n * SINFO_REC;
    if (len - recs != need)
        return df_error(DF_EINVAL, "sample infos: %zu uid bytes after the records, expected %zu",
                        len - recs, need);
    if (memchr(buf + recs, 0, need))
        return df_error(DF_EINVAL, "sample infos: byte %zu: NUL inside a uid",
                        (size_t)((const uint8_t *)memchr(buf + recs, 0, need) - buf));
    *blob = need;
    return DF_OK;
}

int df_sample_infos_deserialize(const uint8_t *buf, size_t len, df_sample_info **out,
                                int64_t *n_out)
{
    if (!buf || !out || !n_out)
        return df_error(DF_EINVAL, "sample infos deserialize: NULL argument");
    if (len < SINFO_HEAD || memcmp(buf, SINFO_MAGIC, 8) != 0)
        return df_error(DF_EINVAL, "sample infos: byte 0: bad magic or truncated header");
    if (df_le_get32(buf + 8) != 1)
        return df_error(DF_EINVAL, "sample infos: byte 8: unknown version %u", df_le_get32(buf + 8));
    int64_t n = (int64_t)df_le_get64(buf + 16);
    if (n < 0 || (uint64_t)n > (len - SINFO_HEAD) / SINFO_REC)
        return df_error(DF_EINVAL, "sample infos: byte 16: count %lld does not fit %zu bytes",
                        (long long)n, len);
    size_t blob = 0;
    int rc = sinfo_check(buf, len, n, &blob);
    if (rc)
        return rc;
    size_t arr = (size_t)n * sizeof(df_sample_info);
    df_sample_info *v = malloc(arr + blob + (size_t)n + 1); /* records, then uid strings */
    if (!v)
        return df_error(DF_ENOMEM, "sample infos: out of memory for %lld infos", (long long)n);
    char *str = (char *)v + arr;
    const uint8_t *src = buf + SINFO_HEAD + (size_t)n * SINFO_REC;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *r = buf + SINFO_HEAD + (size_t)i * SINFO_REC;
        df_sample_info *s = &v[i];
        s->prompt_length = (int64_t)df_le_get64(r);
        s->response_length = (int64_t)df_le_get64(r + 8);
        s->sum_tokens = (int64_t)df_le_get64(r + 16);
        s->group = (int64_t)df_le_get64(r + 24);
        s->score = bits_f64(df_le_get64(r + 32));
        s->src_rank = (int32_t)df_le_get32(r + 40);
        int32_t ul = (int32_t)df_le_get32(r + 44);
        s->src_index = (int64_t)df_le_get64(r + 48);
        s->uid = NULL;
        if (ul >= 0) {
            memcpy(str, src, (size_t)ul);
            str[ul] = '\0';
            s->uid = str;
            str += ul + 1;
            src += ul;
        }
    }
    *out = v;
    *n_out = n;
    return DF_OK;
}
