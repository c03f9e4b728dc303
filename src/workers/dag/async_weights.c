/* The asynchronous runtime's weights on the wire (async.h, df_async_wire): what trainer rank 0
 * broadcasts after every update and how a rollout rank installs it. A bf16 rollout gets the
 * bf16 copy its engine reads, converted once on the trainer (or the actor's own mixed-precision
 * copy, sent as is), instead of float32 weights that every rollout rank would convert again:
 * half the bytes, and no conversion on the rollout side. */
#include "workers/dag/async.h"

#include "distflow/rollout.h"
#include "distflow/train_config.h"
#include "model/ops.h"
#include "util/pages.h"

#include <stdlib.h>
#include <string.h>

/* The bf16 copy's flags: those of the rollout engine's own copy (src/engine/rollout.c OWN16) and
 * of the actor's mixed-precision copy, so either can be sent and shared as is. */
#define WIRE16 (DF_W16_LM_HEAD | DF_W16_EMBED)

struct df_async_weights {
    df_async_wire wire;
    int64_t n16, n32;        /* bf16 / float32 elements per update */
    int n_spans;             /* BF16: the model's tensors read in float32 (norms, biases) */
    int64_t *span_off, *span_len; /* [n_spans] element offset into df_model.params, numel */
    float *rest;             /* BF16 [n32]: those tensors packed (sent, or received) */
    df_weights16 *w16;       /* BF16: the trainer's own conversion; a rollout rank's received copy */
    /* a rollout rank's second copy (partial_rollout false) */
    df_weights16 *staged16;  /* BF16 */
    float *staged;           /* BF16: [n32] packed float32 tensors; F32: [n_params] */
    bool released;           /* the model's float32 pages of the bf16 tensors given back */
};

df_async_wire df_async_wire_for(const df_train_config *t)
{
    if (strcmp(t->actor_rollout_ref.rollout.dtype, "bfloat16"))
        return DF_ASYNC_WIRE_F32;
    bool native = df_model_bf16_available() == DF_OK;
    df_clear_error();
    return native ? DF_ASYNC_WIRE_BF16 : DF_ASYNC_WIRE_F32;
}

static const char *wire_name(int64_t wire)
{
    return wire == DF_ASYNC_WIRE_F32 ? "float32" : wire == DF_ASYNC_WIRE_BF16 ? "bf16 (bf16 matmul weights, "
                                                                                 "float32 norms and biases)"
                                                                               : "an unknown format";
}

/* BF16: the float32 tensors (those the copy does not hold) as spans of m->params. */
static int find_spans(df_async_weights *x, const df_model *m)
{
    x->span_off = malloc((size_t)m->n_tensors * sizeof *x->span_off);
    x->span_len = malloc((size_t)m->n_tensors * sizeof *x->span_len);
    if (!x->span_off || !x->span_len)
        return df_error(DF_ENOMEM, "out of memory");
    for (int i = 0; i < m->n_tensors; i++) {
        const df_param_desc *d = &m->tensors[i];
        if (df_weights16_holds(m, m->params + d->offset, WIRE16))
            continue;
        x->span_off[x->n_spans] = d->offset, x->span_len[x->n_spans] = d->numel;
        x->n_spans++;
        x->n32 += d->numel;
    }
    x->rest = malloc((size_t)(x->n32 ? x->n32 : 1) * sizeof *x->rest);
    return x->rest ? DF_OK : df_error(DF_ENOMEM, "out of memory");
}

int df_async_weights_create(const df_model *m, df_async_wire wire, df_async_weights **out)
{
    *out = NULL;
    if (wire != DF_ASYNC_WIRE_F32 && wire != DF_ASYNC_WIRE_BF16)
        return df_error(DF_EINVAL, "async weights: unknown wire format %d", (int)wire);
    df_async_weights *x = calloc(1, sizeof *x);
    if (!x)
        return df_error(DF_ENOMEM, "out of memory");
    x->wire = wire;
    int rc = DF_OK;
    if (wire == DF_ASYNC_WIRE_F32)
        x->n32 = m->n_params;
    else if (!(rc = find_spans(x, m)))
        x->n16 = df_weights16_bytes_for(&m->cfg, WIRE16) / (int64_t)sizeof(uint16_t);
    if (rc) {
        df_async_weights_free(x);
        return rc;
    }
    *out = x;
    return DF_OK;
}

void df_async_weights_free(df_async_weights *x)
{
    if (!x)
        return;
    df_weights16_free(x->w16);
    df_weights16_free(x->staged16);
    free(x->span_off), free(x->span_len), free(x->rest), free(x->staged);
    free(x);
}

int64_t df_async_weights_bytes(const df_async_weights *x)
{
    return x->n16 * (int64_t)sizeof(uint16_t) + x->n32 * (int64_t)sizeof(float);
}

/* The float32 tensors of m packed into dst ([n32]), or unpacked from src. */
static void pack(const df_async_weights *x, const df_model *m, float *dst)
{
    for (int i = 0, k = 0; i < x->n_spans; k += (int)x->span_len[i], i++)
        memcpy(dst + k, m->params + x->span_off[i], (size_t)x->span_len[i] * sizeof *dst);
}

static void unpack(const df_async_weights *x, df_model *m, const float *src)
{
    for (int64_t i = 0, k = 0; i < x->n_spans; k += x->span_len[i], i++)
        memcpy(m->params + x->span_off[i], src + k, (size_t)x->span_len[i] * sizeof *src);
}

/* ---- trainer ------------------------------------------------------------------------ */

/* The bf16 copy to send: w16 when it is m's current one with the wire's layout, else m converted
 * into x's own copy. */
static int copy_to_send(df_async_weights *x, const df_model *m, const df_weights16 *w16, const uint16_t **blob)
{
    int64_t n = 0;
    /* a copy in a device's memory is not readable here: the host converts its own */
    if (w16 && !df_weights16_on_device(w16) && df_weights16_is_current(w16, m) &&
        df_weights16_bytes(w16) == x->n16 * (int64_t)sizeof(uint16_t)) {
        *blob = df_weights16_blob(w16, &n);
        return DF_OK;
    }
    int rc = x->w16 ? DF_OK : df_weights16_create_ex(&m->cfg, WIRE16, &x->w16);
    if (!rc)
        rc = df_weights16_refresh_model(x->w16, m);
    if (rc)
        return df_error_wrap(rc, "async: the bf16 copy of the weights to send");
    *blob = df_weights16_blob(x->w16, &n);
    return DF_OK;
}

int df_async_weights_send(df_async_weights *x, df_comm *comm, const df_model *m, const df_weights16 *w16,
                          df_async_header *h)
{
    const uint16_t *blob = NULL;
    int rc = x->wire == DF_ASYNC_WIRE_BF16 ? copy_to_send(x, m, w16, &blob) : DF_OK;
    if (rc)
        return rc;
    if (blob)
        pack(x, m, x->rest);
    h->wire = x->wire, h->n_bf16 = x->n16, h->n_params = x->n32;
    df_comm_request *req = NULL;
    rc = df_comm_ibroadcast(comm, h, (int64_t)sizeof *h, 0, &req);
    if (!rc)
        rc = df_comm_wait(&req);
    /* the root's buffers are only read */
    if (!rc && blob)
        rc = df_comm_broadcast(comm, (void *)blob, x->n16 * (int64_t)sizeof *blob, 0);
    if (!rc)
        rc = df_comm_broadcast(comm, blob ? x->rest : m->params, x->n32 * (int64_t)sizeof(float), 0);
    return rc;
}

/* ---- rollout ------------------------------------------------------------------------ */

static int check(const df_async_weights *x, const df_async_header *h)
{
    if (h->wire != x->wire)
        return df_error(DF_EINVAL, "async rollout: the trainer sends the weights in %s, this rank's engine "
                        "reads %s (actor_rollout_ref.rollout.dtype resolves differently on the two "
                        "machines: a bf16 engine needs native bf16 matmuls; set rollout.dtype=float32 "
                        "on a mixed cluster)", wire_name(h->wire), wire_name(x->wire));
    if (h->n_bf16 != x->n16 || h->n_params != x->n32)
        return df_error(DF_EINVAL, "async rollout: the trainer sends %lld bf16 and %lld float32 elements, this "
                        "rank's model takes %lld and %lld (another model on the two sides?)",
                        (long long)h->n_bf16, (long long)h->n_params, (long long)x->n16, (long long)x->n32);
    return DF_OK;
}

/* BF16: *w (the copy the engine reads, or the second one) made when it is not yet. */
static int copy16(const df_model *m, df_weights16 **w)
{
    int rc = *w ? DF_OK : df_weights16_create_ex(&m->cfg, WIRE16, w);
    return rc ? df_error_wrap(rc, "async rollout: the bf16 copy of the weights") : DF_OK;
}

int df_async_weights_receive(df_async_weights *x, df_comm *comm, df_model *m, const df_async_header *h,
                             bool staged)
{
    int rc = check(x, h);
    if (rc)
        return rc;
    if (x->wire == DF_ASYNC_WIRE_F32) {
        if (staged && !x->staged && !(x->staged = malloc((size_t)x->n32 * sizeof *x->staged)))
            return df_error(DF_ENOMEM, "async rollout: out of memory for a second copy of the weights (%lld "
                            "floats; async_training.partial_rollout=false)", (long long)x->n32);
        return df_comm_broadcast(comm, staged ? x->staged : m->params, x->n32 * (int64_t)sizeof(float), 0);
    }
    df_weights16 **w = staged ? &x->staged16 : &x->w16;
    if (staged && !x->staged && !(x->staged = malloc((size_t)(x->n32 ? x->n32 : 1) * sizeof *x->staged)))
        return df_error(DF_ENOMEM, "out of memory");
    if ((rc = copy16(m, w)))
        return rc;
    int64_t n = 0;
    uint16_t *blob = df_weights16_write_begin(*w, &n);
    rc = df_comm_broadcast(comm, blob, n * (int64_t)sizeof *blob, 0);
    if (!rc)
        rc = df_comm_broadcast(comm, staged ? x->staged : x->rest, x->n32 * (int64_t)sizeof(float), 0);
    return rc;
}

/* The model's float32 pages of the tensors the engine reads in bf16, back to the OS (once). */
static void release_held16(df_async_weights *x, df_model *m)
{
    for (int i = 0; i < m->n_tensors && !x->released; i++) {
        const df_param_desc *d = &m->tensors[i];
        if (df_weights16_holds(m, m->params + d->offset, WIRE16))
            df_pages_release(m->params + d->offset, (size_t)d->numel * sizeof(float));
    }
    x->released = true;
}

int df_async_weights_install(df_async_weights *x, df_model *m, df_rollout_engine *e, bool staged)
{
    if (x->wire == DF_ASYNC_WIRE_F32) {
        if (staged)
            memcpy(m->params, x->staged, (size_t)x->n32 * sizeof *m->params);
        df_model_weights_changed(m);
        return DF_OK;
    }
    if (staged) { /* the second copy becomes the one read; the first waits for the next update */
        df_weights16 *t16 = x->w16;
        float *t = x->rest;
        x->w16 = x->staged16, x->rest = x->staged;
        x->staged16 = t16, x->staged = t;
    }
    unpack(x, m, x->rest);
    df_model_weights_changed(m);
    df_weights16_write_end(x->w16, m);
    int rc = df_rollout_engine_share_weights16(e, x->w16);
    if (!rc)
        release_held16(x, m);
    return rc ? df_error_wrap(rc, "async rollout: installing the received bf16 weights") : DF_OK;
}
