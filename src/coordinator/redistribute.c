/*
 * The collective exchange of df_data_buffers_put (include/distflow/coordinator.h):
 *   1. allgatherv of {status, schema hash} + the sender's SampleInfo wire form,
 *      so a failure or a column mismatch on any rank is seen by every rank
 *      before payloads move;
 *   2. the same plan on every rank;
 *   3. rows serialized once per destination DP rank, copied to its mp replicas;
 *   4. a status allreduce, ONE alltoallv of the payloads (MPI's, or a backend's:
 *      payload_dev.c), a final allreduce so
 *      the put succeeds or fails on every rank alike.
 */
#include "coordinator/buffers_internal.h"
#include "util/hash.h"
#include "util/le.h"
#include "util/sbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Allgather header, little-endian words: status, has-schema flag, schema hash. */
enum { HDR_STATUS, HDR_SCHEMA, HDR_HASH, HDR_WORDS };
#define HDR_BYTES (8 * HDR_WORDS)

typedef struct rd {
    df_comm *w;
    const df_payload_dev *dev; /* NULL: the payloads move over MPI */
    int rank, size;
    int ref; /* reference source: lowest sender with rows or columns, else 0 */
    const char *key;
    df_dp_layout src, dst;
    const df_put_opts *o;
    const df_batch *in;
    df_redist_stats *st;
    char *schema; /* "kind name\n" per column, sorted; NULL when this rank has none */
    uint64_t hash;
    uint8_t hdr[HDR_BYTES];  /* fallback message when the full one cannot be allocated */
    df_sample_info **blocks; /* [size] decoded wire forms (they own the uid strings) */
    df_sample_info *infos;   /* all gathered infos, concatenated in rank order */
    int64_t n_infos;
    df_redist_plan *plan;
} rd;

/* ---- agreement ----------------------------------------------------------------- */

/* The outcome every rank reports: `code` first raised by rank `who` during `stage`.
 * A rank that failed itself keeps its own message; the others name `who`. */
static int agreed(const rd *r, int my_rc, int code, int who, const char *stage)
{
    if (!code)
        return DF_OK;
    if (my_rc)
        return df_error_wrap(code, "put '%s' (rank %d of %d, %s)", r->key, r->rank, r->size, stage);
    return df_error(code,
                    "put '%s': rank %d of %d failed %s (its own error says why); no rank stored anything",
                    r->key, who, r->size, stage);
}

int df_coord_agree(df_comm *w, int rc, int *code, int *who)
{
    const int size = df_comm_size(w);
    int64_t v = rc ? ((int64_t)(size - df_comm_rank(w)) << 8) | (rc & 0xff) : 0;
    int crc = df_comm_allreduce(w, &v, 1, DF_COMM_INT64, DF_COMM_MAX);
    *code = (int)(v & 0xff);
    *who = size - (int)(v >> 8);
    return crc;
}

/* The put's agreed status after `stage`. */
static int agree(rd *r, int rc, const char *stage)
{
    int code, who, crc = df_coord_agree(r->w, rc, &code, &who);
    if (crc)
        return df_error_wrap(crc, "put '%s': status allreduce %s", r->key, stage);
    return agreed(r, rc, code, who, stage);
}

/* ---- schema: which columns a batch has ------------------------------------------- */

static int cmp_col(const void *a, const void *b)
{
    return strcmp((*(const df_column *const *)a)->name, (*(const df_column *const *)b)->name);
}

/* Equal texts <=> df_batch_concat accepts the two batches together. */
static int schema_text(const df_batch *b, char **out)
{
    int nc = df_batch_num_columns(b);
    const df_column **c = malloc((size_t)(nc ? nc : 1) * sizeof *c);
    if (!c)
        return df_error(DF_ENOMEM, "out of memory for %d column names", nc);
    for (int i = 0; i < nc; i++)
        c[i] = df_batch_column_at(b, i);
    qsort(c, (size_t)nc, sizeof *c, cmp_col);
    df_sbuf sb = {0};
    for (int i = 0; i < nc; i++)
        df_sbuf_printf(&sb, "%d %s\n", (int)c[i]->kind, c[i]->name);
    free(c);
    int rc = df_sbuf_finish(&sb, out);
    return rc ? df_error(rc, "out of memory for the column list") : DF_OK;
}

/* FNV-1a, kept below 2^62 so it survives any signed handling. */
static uint64_t text_hash(const char *s)
{
    return df_fnv1a(s) & ((1ULL << 62) - 1);
}

static const char *kind_name(int k)
{
    static const char *names[] = {"i64", "f32", "str", "tok_i32", "tok_f32"};
    return k >= 0 && k < 5 ? names[k] : "?";
}

/* Next "kind name\n" line of a schema text; false at the end. */
static bool next_col(const char **p, int *kind, char name[DF_COL_NAME_MAX])
{
    if (!**p)
        return false;
    *kind = (int)strtol(*p, (char **)p, 10);
    if (**p == ' ')
        (*p)++;
    size_t n = strcspn(*p, "\n");
    snprintf(name, DF_COL_NAME_MAX, "%.*s", (int)n, *p);
    *p += n + ((*p)[n] == '\n');
    return true;
}

/* The first difference between the column lists of ranks ra and rb (both sorted by name). */
static int schema_diff(const rd *r, const char *a, int ra, const char *b, int rb)
{
    char na[DF_COL_NAME_MAX], nb[DF_COL_NAME_MAX];
    int ka = 0, kb = 0;
    bool ha = next_col(&a, &ka, na), hb = next_col(&b, &kb, nb);
    while (ha && hb && strcmp(na, nb) == 0 && ka == kb) {
        ha = next_col(&a, &ka, na);
        hb = next_col(&b, &kb, nb);
    }
    const char *why = "put '%s': the source batches differ: ";
    if (ha && hb && strcmp(na, nb) == 0)
        return df_error(DF_EINVAL, "%scolumn '%s' is %s on rank %d but %s on rank %d", why, na, kind_name(ka),
                        ra, kind_name(kb), rb);
    if (ha && (!hb || strcmp(na, nb) < 0))
        return df_error(DF_EINVAL, "%srank %d's batch lacks column '%s' (%s) that rank %d's has", why, rb, na,
                        kind_name(ka), ra);
    return df_error(DF_EINVAL, "%srank %d's batch lacks column '%s' (%s) that rank %d's has", why, ra, nb,
                    kind_name(kb), rb);
}

/* Every rank saw the hashes differ: gather the column lists to say how. */
static int schema_mismatch(rd *r, int other)
{
    const char *mine = r->schema ? r->schema : "";
    void *all = NULL;
    int64_t *displs = NULL;
    int rc = df_comm_allgatherv(r->w, mine, (int64_t)strlen(mine) + 1, &all, NULL, &displs);
    if (rc)
        return df_error_wrap(rc, "put '%s': gathering column lists", r->key);
    const char *t = all;
    rc = schema_diff(r, t + displs[r->ref], r->ref, t + displs[other], other);
    free(all);
    free(displs);
    return rc;
}

/* ---- 1. the gathered summaries --------------------------------------------------- */

/* This rank's allgather message: header, then (senders) the filtered infos' wire form. */
static int gather_message(rd *r, int rc, uint8_t **msg, size_t *len)
{
    bool sender = df_dp_layout_sender(r->src, r->rank);
    df_sample_info *li = NULL;
    uint8_t *wire = NULL;
    size_t wlen = 0;
    int64_t n = sender && r->in ? df_batch_size(r->in) : 0, kept = 0;
    if (!rc && sender && (n > 0 || df_batch_num_columns(r->in) > 0)) {
        rc = schema_text(r->in, &r->schema);
        if (!rc)
            r->hash = text_hash(r->schema);
    }
    if (!rc && sender)
        rc = df_batch_sample_infos(r->in, r->rank, &li);
    if (!rc && sender)
        rc = df_sample_infos_filter(li, n, r->o->filter, r->o->filter_user, &kept);
    if (!rc && sender) {
        r->st->rows_in = n;
        r->st->rows_dropped = n - kept;
        rc = df_sample_infos_serialize(li, kept, &wire, &wlen);
    }
    free(li);
    uint8_t *m = rc ? NULL : malloc(HDR_BYTES + wlen);
    if (!rc && !m)
        rc = df_error(DF_ENOMEM, "out of memory for %zu bytes of sample infos", wlen);
    if (!m)
        m = r->hdr; /* a failing rank still tells the others why they stop */
    df_le_put64(m + 8 * HDR_STATUS, (uint64_t)rc);
    df_le_put64(m + 8 * HDR_SCHEMA, r->schema != NULL);
    df_le_put64(m + 8 * HDR_HASH, r->hash);
    if (!rc && wlen)
        memcpy(m + HDR_BYTES, wire, wlen);
    free(wire);
    *msg = m;
    *len = rc ? HDR_BYTES : HDR_BYTES + wlen;
    r->st->info_bytes = (int64_t)*len;
    return rc;
}

/* Decode every rank's infos into one array (uids point into r->blocks). */
static int decode_infos(rd *r, const uint8_t *all, const int64_t *counts, const int64_t *displs)
{
    int64_t *nb = calloc((size_t)r->size, sizeof *nb);
    r->blocks = calloc((size_t)r->size, sizeof *r->blocks);
    int rc = nb && r->blocks ? DF_OK : df_error(DF_ENOMEM, "out of memory for %d info blocks", r->size);
    for (int s = 0; !rc && s < r->size; s++) {
        if (counts[s] == HDR_BYTES)
            continue;
        rc = df_sample_infos_deserialize(all + displs[s] + HDR_BYTES, (size_t)(counts[s] - HDR_BYTES),
                                         &r->blocks[s], &nb[s]);
        for (int64_t i = 0; !rc && i < nb[s]; i++)
            if (r->blocks[s][i].src_rank != s)
                rc = df_error(DF_EINTERNAL, "sample info %lld from rank %d names rank %d", (long long)i, s,
                              (int)r->blocks[s][i].src_rank);
        r->n_infos += rc ? 0 : nb[s];
    }
    if (!rc && !(r->infos = malloc((size_t)(r->n_infos ? r->n_infos : 1) * sizeof *r->infos)))
        rc = df_error(DF_ENOMEM, "out of memory for %lld sample infos", (long long)r->n_infos);
    int64_t o = 0;
    for (int s = 0; !rc && s < r->size; o += nb[s], s++)
        if (nb[s])
            memcpy(r->infos + o, r->blocks[s], (size_t)nb[s] * sizeof *r->infos);
    free(nb);
    return rc;
}

/* Allgather the messages; agree on failures and columns; decode the infos.
 * *settled: a failure every rank has seen (no further collective is needed). */
static int gather_infos(rd *r, int my_rc, const uint8_t *msg, size_t len, bool *settled)
{
    void *all = NULL;
    int64_t *counts = NULL, *displs = NULL;
    *settled = true;
    int rc = df_comm_allgatherv(r->w, msg, (int64_t)len, &all, &counts, &displs);
    if (rc)
        return df_error_wrap(rc, "put '%s': gathering sample infos", r->key);
    const uint8_t *a = all;
    int failed = -1, other = -1;
    r->ref = -1;
    for (int s = 0; s < r->size && !rc; s++) {
        if (counts[s] < HDR_BYTES) {
            rc = df_error(DF_EINTERNAL, "put '%s': rank %d sent a %lld-byte info message", r->key, s,
                          (long long)counts[s]);
            break;
        }
        const uint8_t *h = a + displs[s];
        if (failed < 0 && df_le_get64(h + 8 * HDR_STATUS))
            failed = s;
        if (!df_le_get64(h + 8 * HDR_SCHEMA))
            continue;
        if (r->ref < 0)
            r->ref = s;
        else if (other < 0 && df_le_get64(h + 8 * HDR_HASH) != df_le_get64(a + displs[r->ref] + 8 * HDR_HASH))
            other = s;
    }
    if (!rc && failed >= 0)
        rc = agreed(r, my_rc, (int)df_le_get64(a + displs[failed] + 8 * HDR_STATUS), failed,
                    "before the exchange");
    if (r->ref < 0)
        r->ref = 0; /* nobody has columns: rank 0 still sends every destination its metadata */
    if (!rc && other >= 0)
        rc = schema_mismatch(r, other);
    if (!rc) {
        *settled = false;
        rc = decode_infos(r, a, counts, displs);
    }
    free(all);
    free(counts);
    free(displs);
    return rc;
}

/* ---- 3. payloads ------------------------------------------------------------------- */

/* Send buffer: each destination DP rank's rows serialized once, repeated for its mp ranks. */
static int build_payload(rd *r, uint8_t **send, int64_t *counts)
{
    if (!df_dp_layout_sender(r->src, r->rank))
        return DF_OK;
    int k = r->dst.dp_size, mp = r->dst.mp;
    int64_t *cnt = malloc((size_t)k * sizeof *cnt), *rows = NULL, nrows = 0;
    uint8_t **pb = calloc((size_t)k, sizeof *pb);
    size_t *pl = calloc((size_t)k, sizeof *pl);
    int rc = cnt && pb && pl ? DF_OK : df_error(DF_ENOMEM, "out of memory for %d destinations", k);
    if (!rc)
        rc = df_redist_plan_send(r->plan, r->rank, cnt, &rows, &nrows);
    int64_t off = 0, total = 0;
    for (int d = 0; !rc && d < k; off += cnt[d], d++) {
        if (cnt[d] == 0 && r->rank != r->ref)
            continue;
        df_batch *part = NULL;
        rc = df_batch_select(r->in, rows + off, cnt[d], &part);
        if (!rc)
            rc = df_batch_serialize(part, &pb[d], &pl[d]);
        df_batch_free(part);
        total += (int64_t)pl[d] * mp;
    }
    uint8_t *buf = rc ? NULL : malloc((size_t)(total ? total : 1));
    if (!rc && !buf)
        rc = df_error(DF_ENOMEM, "out of memory for %lld payload bytes", (long long)total);
    size_t o = 0; /* world rank d * mp + m's block: ranks are in (d, m) order */
    for (int d = 0; !rc && d < k; d++)
        for (int m = 0; m < mp; m++, o += pl[d]) {
            counts[d * mp + m] = (int64_t)pl[d];
            if (pl[d])
                memcpy(buf + o, pb[d], pl[d]);
        }
    *send = buf;
    for (int d = 0; pb && d < k; d++)
        free(pb[d]);
    free(pb);
    free(pl);
    free(cnt);
    free(rows);
    return rc;
}

/* ---- 4. receiving -------------------------------------------------------------------- */

/* This rank's destination batch: parts in source order, then the plan's order. */
static int assemble(rd *r, const uint8_t *recv, const int64_t *bytes, const int64_t *displs, df_batch **out)
{
    int d = df_dp_layout_dp_rank(r->dst, r->rank), np = 0;
    int64_t *rows = malloc((size_t)r->size * sizeof *rows), *perm = NULL, nr = 0;
    df_batch **parts = calloc((size_t)r->size, sizeof *parts), *joined = NULL;
    int rc = rows && parts ? DF_OK : df_error(DF_ENOMEM, "out of memory for %d parts", r->size);
    if (!rc)
        rc = df_redist_plan_recv(r->plan, d, r->size, rows, &perm, &nr);
    for (int s = 0; !rc && s < r->size; s++) {
        if (bytes[s] == 0) {
            if (rows[s] > 0)
                rc = df_error(DF_EINTERNAL, "rank %d sent no bytes for %lld planned rows", s,
                              (long long)rows[s]);
            continue;
        }
        rc = df_batch_deserialize(recv + displs[s], (size_t)bytes[s], &parts[np]);
        if (rc)
            rc = df_error_wrap(rc, "payload from rank %d", s);
        else if (df_batch_size(parts[np++]) != rows[s])
            rc = df_error(DF_EINTERNAL, "rank %d sent %lld rows, the plan says %lld", s,
                          (long long)df_batch_size(parts[np - 1]), (long long)rows[s]);
    }
    if (!rc && np == 0)
        rc = df_error(DF_EINTERNAL, "nothing arrived from reference rank %d", r->ref);
    if (!rc && np > 1)
        rc = df_batch_concat((const df_batch *const *)parts, np, &joined);
    else if (!rc) {
        joined = parts[0];
        parts[0] = NULL;
    }
    bool identity = true;
    for (int64_t i = 0; i < nr && identity; i++)
        identity = perm[i] == i;
    if (!rc && identity) {
        *out = joined;
        joined = NULL;
    } else if (!rc) {
        rc = df_batch_select(joined, perm, nr, out);
    }
    df_batch_free(joined);
    for (int i = 0; parts && i < np; i++)
        df_batch_free(parts[i]);
    free(parts);
    free(rows);
    free(perm);
    return rc;
}

static void count_traffic(rd *r, const int64_t *sent, const int64_t *got)
{
    for (int s = 0; s < r->size; s++) {
        if (s == r->rank) {
            r->st->bytes_self = sent[s];
            continue;
        }
        r->st->bytes_sent += sent[s];
        r->st->messages_sent += sent[s] > 0;
        r->st->bytes_received += got[s];
    }
}

/* Payload build, agreement, the alltoallv, assembly, final agreement. */
static int exchange(rd *r, int rc, df_batch **out)
{
    uint8_t *send = NULL;
    void *recv = NULL;
    int64_t *counts = calloc((size_t)r->size, sizeof *counts), *got = NULL, *displs = NULL;
    if (!rc && !counts)
        rc = df_error(DF_ENOMEM, "out of memory for %d counts", r->size);
    if (!rc)
        rc = build_payload(r, &send, counts);
    rc = agree(r, rc, "planning");
    if (!rc) {
        rc = r->dev ? df_payload_alltoallv_dev(r->w, r->dev, send, counts, &recv, &got, &displs)
                    : df_comm_alltoallv(r->w, send, counts, &recv, &got, &displs);
        r->st->device = r->dev != NULL;
        if (rc)
            rc = df_error_wrap(rc, "put '%s': payload exchange", r->key);
    }
    free(send);
    if (!rc) {
        count_traffic(r, counts, got);
        if (df_dp_layout_dp_rank(r->dst, r->rank) >= 0)
            rc = assemble(r, recv, got, displs, out);
        rc = agree(r, rc, "unpacking payloads");
    }
    if (rc) {
        df_batch_free(*out);
        *out = NULL;
    }
    free(recv);
    free(got);
    free(displs);
    free(counts);
    return rc;
}

int df_redistribute(df_comm *w, const df_payload_dev *dev, const char *key, const df_batch *in,
                    int local_rc, df_dp_layout src, df_dp_layout dst, const df_put_opts *opts,
                    df_batch **out, df_redist_stats *st)
{
    rd r = {.w = w,
            .dev = dev,
            .rank = df_comm_rank(w),
            .size = df_comm_size(w),
            .key = key,
            .src = src,
            .dst = dst,
            .o = opts,
            .in = in,
            .st = st};
    *out = NULL;
    uint8_t *msg = NULL;
    size_t len = 0;
    int rc = gather_message(&r, local_rc, &msg, &len);
    bool settled = false; /* the failure is already known to every rank */
    rc = gather_infos(&r, rc, msg, len, &settled);
    if (msg != r.hdr)
        free(msg);
    /* Every rank holds the same infos now, so the plan is the same everywhere;
       a local failure (memory) still reaches the others through exchange(). */
    if (!rc)
        rc = df_redistribution_plan(r.infos, r.n_infos, dst.dp_size, opts->keep_groups, &r.plan);
    if (!settled)
        rc = exchange(&r, rc, out);
    if (!rc)
        st->rows_out = *out ? df_batch_size(*out) : 0;
    df_redist_plan_free(r.plan);
    for (int s = 0; r.blocks && s < r.size; s++)
        free(r.blocks[s]);
    free(r.blocks);
    free(r.infos);
    free(r.schema);
    return rc;
}
