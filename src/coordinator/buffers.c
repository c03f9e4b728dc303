/*
 * df_data_buffers (include/distflow/coordinator.h): one rank's key -> batch
 * store, and put's choice between a local hand-off and the collective
 * redistribution of redistribute.c.
 */
#include "coordinator/buffers_internal.h"
#include "util/timeutil.h"

#include <stdlib.h>
#include <string.h>

typedef struct entry {
    char *key;
    df_batch *batch;
    int dp_size, dp_rank; /* how the put stored it, checked by get */
} entry;

struct df_data_buffers {
    df_comm *world;
    df_payload_dev dev;
    bool on_device; /* dev holds an open handle */
    entry *e;
    int n, cap;
};

int df_data_buffers_create(df_comm *world, df_data_buffers **out)
{
    if (!world || !out)
        return df_error(DF_EINVAL, "data buffers: need a communicator and an output");
    df_data_buffers *db = calloc(1, sizeof *db);
    if (!db)
        return df_error(DF_ENOMEM, "data buffers: out of memory");
    db->world = world;
    *out = db;
    return DF_OK;
}

void df_data_buffers_free(df_data_buffers *db)
{
    if (!db)
        return;
    if (db->on_device)
        db->dev.be.ops->group_close(db->dev.be.ctx, db->dev.h);
    for (int i = 0; i < db->n; i++) {
        free(db->e[i].key);
        df_batch_free(db->e[i].batch);
    }
    free(db->e);
    free(db);
}

int df_data_buffers_use_backend(df_data_buffers *db, const df_backend *be)
{
    if (!db || !be || !be->ops)
        return df_error(DF_EINVAL, "data buffers: need a store and a backend");
    const df_backend_ops *o = be->ops;
    if (db->on_device || o->host_memory || !o->alltoallv || df_comm_size(db->world) < 2)
        return DF_OK; /* already, or nothing to gain: MPI moves host memory */
    if (!o->group_open || !o->group_close)
        return df_error(DF_EINVAL, "backend '%s' has alltoallv but no group_open / group_close", o->name);
    int rc = o->group_open(be->ctx, db->world, &db->dev.h);
    if (rc)
        return df_error_wrap(rc, "the data coordinator's communicator on backend '%s'", o->name);
    db->dev.be = *be;
    db->on_device = true;
    return DF_OK;
}

bool df_data_buffers_on_device(const df_data_buffers *db)
{
    return db && db->on_device;
}

static int find(const df_data_buffers *db, const char *key)
{
    for (int i = 0; i < db->n; i++)
        if (strcmp(db->e[i].key, key) == 0)
            return i;
    return -1;
}

static void drop(df_data_buffers *db, int i)
{
    free(db->e[i].key);
    df_batch_free(db->e[i].batch);
    db->e[i] = db->e[--db->n];
}

/* A slot for key (a fresh one holds a copy of the key and no batch), made
 * before any communication so that storing after the exchange cannot fail. */
static int reserve(df_data_buffers *db, const char *key, int *slot)
{
    int i = find(db, key);
    if (i >= 0) {
        *slot = i;
        return DF_OK;
    }
    if (db->n == db->cap) {
        int cap = db->cap ? 2 * db->cap : 8;
        entry *e = realloc(db->e, (size_t)cap * sizeof *e);
        if (!e)
            return df_error(DF_ENOMEM, "data buffers: out of memory for %d keys", cap);
        db->e = e;
        db->cap = cap;
    }
    entry *e = &db->e[db->n];
    memset(e, 0, sizeof *e);
    if (!(e->key = strdup(key)))
        return df_error(DF_ENOMEM, "data buffers: out of memory for key '%s'", key);
    *slot = db->n++;
    return DF_OK;
}

/* Put b (NULL: nothing) in slot i, freeing what was there; an empty slot is removed. */
static void store(df_data_buffers *db, int i, df_batch *b, int dp_size, int dp_rank)
{
    if (!b) {
        drop(db, i);
        return;
    }
    df_batch_free(db->e[i].batch);
    db->e[i].batch = b;
    db->e[i].dp_size = dp_size;
    db->e[i].dp_rank = dp_rank;
}

/* A fresh slot made by reserve() for a put that then failed. */
static void unreserve(df_data_buffers *db, int i)
{
    if (i >= 0 && !db->e[i].batch)
        drop(db, i);
}

static int layout_check(df_dp_layout l, int world, const char *which, const char *key)
{
    if (l.dp_size < 1 || l.mp < 1 || df_dp_layout_ranks(l) > world)
        return df_error(DF_EINVAL,
                        "put '%s': %s layout dp_size %d x mp %d does not fit a world of %d ranks "
                        "(need dp_size >= 1, mp >= 1, dp_size * mp <= world)",
                        key, which, l.dp_size, l.mp, world);
    return DF_OK;
}

int df_data_buffers_put(df_data_buffers *db, const char *key, df_batch *batch, df_dp_layout src,
                        df_dp_layout dst, const df_put_opts *opts, df_redist_stats *st)
{
    double t0 = df_now();
    df_redist_stats s = {0};
    df_put_opts none = {0};
    const df_put_opts *o = opts ? opts : &none;
    if (!db || !key || !key[0]) {
        df_batch_free(batch);
        return df_error(DF_EINVAL, "data buffers put: need a store and a non-empty key");
    }
    int rank = df_comm_rank(db->world), world = df_comm_size(db->world);
    int rc = layout_check(src, world, "source", key);
    if (!rc)
        rc = layout_check(dst, world, "destination", key);
    if (rc) {
        df_batch_free(batch);
        return rc;
    }
    bool in_src = df_dp_layout_dp_rank(src, rank) >= 0;
    int dest = df_dp_layout_dp_rank(dst, rank), slot = -1;
    int local_rc = in_src && !batch
                       ? df_error(DF_EINVAL,
                                  "put '%s': rank %d is in the source layout (dp_size %d x mp %d) "
                                  "but passed no batch",
                                  key, rank, src.dp_size, src.mp)
                       : DF_OK;
    if (!local_rc)
        local_rc = reserve(db, key, &slot);
    bool local = src.dp_size == dst.dp_size && src.mp == dst.mp && !o->force && !o->filter;
    df_batch *out = NULL;
    if (local) { /* siiRL's internal_data_cache: no communication */
        rc = local_rc;
        s.local = true;
        s.rows_in = s.rows_out = batch && in_src ? df_batch_size(batch) : 0;
        if (!rc && in_src) {
            out = batch;
            batch = NULL;
        }
    } else {
        rc = df_redistribute(db->world, db->on_device ? &db->dev : NULL, key, in_src ? batch : NULL, local_rc,
                             src, dst, o, &out, &s);
    }
    df_batch_free(batch);
    if (rc) {
        unreserve(db, slot);
        return rc;
    }
    store(db, slot, out, dst.dp_size, dest);
    s.seconds = df_now() - t0;
    if (st)
        *st = s;
    return DF_OK;
}

int df_data_buffers_get(df_data_buffers *db, const char *key, int dp_size, int dp_rank, df_batch **out)
{
    if (!db || !key || !out)
        return df_error(DF_EINVAL, "data buffers get: NULL argument");
    int i = find(db, key);
    if (i < 0)
        return df_error(DF_ENOTFOUND, "data buffers get: nothing stored under '%s' on rank %d", key,
                        df_comm_rank(db->world));
    const entry *e = &db->e[i];
    if (e->dp_size != dp_size || e->dp_rank != dp_rank)
        return df_error(
            DF_EINVAL,
            "data buffers get '%s': asked for dp_rank %d of %d, but rank %d holds dp_rank %d of %d", key,
            dp_rank, dp_size, df_comm_rank(db->world), e->dp_rank, e->dp_size);
    *out = e->batch;
    db->e[i].batch = NULL;
    drop(db, i);
    return DF_OK;
}

bool df_data_buffers_has(const df_data_buffers *db, const char *key)
{
    return db && key && find(db, key) >= 0;
}

int df_data_buffers_count(const df_data_buffers *db)
{
    return db ? db->n : 0;
}
