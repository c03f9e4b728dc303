/* The rollout side of the asynchronous runtime (async.h, docs/async.md): AReaL's workflow
 * executor on one rank. The engine streams: before every forward pass it asks for new weights
 * (installed between decode steps, the sequences in flight go on) and for new episodes, which it
 * admits while the staleness manager allows; every finished episode goes to a trainer rank. */
#include "workers/worker_internal.h"

#include "util/timeutil.h"
#include "workers/dag/async.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One episode in flight: its prompt row and the responses finished so far. */
typedef struct episode {
    bool used;
    df_batch *prompt; /* 1 row (multi-turn: as the agent loop rendered it) */
    int64_t order, got;
    int64_t *len;     /* [n] */
    int32_t **tok, **ver;
    float **logp;
    int8_t **mask;    /* [n] multi-turn: each response's response_mask, else NULL */
    int32_t *turns;   /* [n] assistant turns */
    int32_t **routes; /* [n] R3: each sample's routes, [prompt + response tokens, route_w], else NULL */
} episode;

/* A message on its way to a trainer rank. */
typedef struct pending_send {
    uint8_t *buf;
    df_comm_request *req;
} pending_send;

typedef struct executor {
    df_dag_worker *w;
    df_async *a;
    int64_t n;            /* responses per prompt */
    int64_t route_w;      /* R3 (the engine records routes): df_model_route_width, else 0 */
    int64_t version;      /* of the weights the engine samples from */
    df_async_header hdr;  /* the next header, posted ahead */
    df_comm_request *hdr_req;
    int64_t stop;         /* the stop header's value once it came */
    bool partial;         /* async_training.partial_rollout */
    bool recompute;       /* async_training.recompute_kv */
    bool swap_pending;    /* partial_rollout false: the second copy (async_weights.c) holds the header's
                             version, installed once the sequences in flight have ended */
    episode *eps;         /* [cap] */
    int64_t cap;
    df_batch *cur;        /* the dataloader's batch being fed */
    int64_t cur_pos, batches;
    uint64_t *seeds;      /* [cap] per-episode seed of the step its prompt belongs to */
    df_async_turns *turns; /* multi-turn: an agent loop per episode (async_turns.c), else NULL */
    int next_dest;
    pending_send *sends;
    int64_t n_sends, sends_cap;
    double t_last, idle_s, busy_s;
    double t_progress;    /* the last poll with work or new weights */
    /* feed arrays for one poll */
    int64_t *f_off, *f_ids;
    uint64_t *f_keys, *f_seeds;
    int32_t *f_tok;
    int64_t f_tok_cap;
} executor;

/* ---- weights ------------------------------------------------------------------------ */

static int post_header(executor *x)
{
    return df_comm_ibroadcast(x->a->weights, &x->hdr, (int64_t)sizeof x->hdr, 0, &x->hdr_req);
}

/* The parameters that follow a header (its wire format: async_weights.c), into the weights the
 * engine reads or (staged) into the second copy. */
static int receive(executor *x, bool staged)
{
    df_async *a = x->a;
    int rc = df_async_weights_receive(a->wx, a->weights, a->model, &x->hdr, staged);
    return rc ? df_error_wrap(rc, "async rollout: receiving the weights of version %lld", (long long)x->hdr.version)
              : DF_OK;
}

/* The weights received last become the model's and the engine's, at the header's version. */
static int install(executor *x, bool staged)
{
    int rc = df_async_weights_install(x->a->wx, x->a->model, x->w->rollout.engine, staged);
    if (!rc)
        x->version = x->hdr.version;
    return rc;
}

/* The parameters that follow a header, into the model. */
static int receive_params(executor *x)
{
    int rc = receive(x, false);
    return rc ? rc : install(x, false);
}

/* partial_rollout false: the weights into the second copy now (the trainer does not wait), installed
 * once the sequences in flight have ended (install_staged). */
static int stage_params(executor *x)
{
    int rc = receive(x, true);
    x->swap_pending = rc == DF_OK;
    return rc;
}

static int install_staged(executor *x)
{
    int rc = install(x, true);
    x->swap_pending = false;
    return rc ? rc : post_header(x);
}

/* Between steps: a header that arrived installs the weights (or says stop); with partial_rollout
 * false they wait until nothing is in flight (`drained`). *changed: new weights installed. */
static int check_weights(executor *x, bool drained, bool *changed)
{
    *changed = false;
    if (x->swap_pending) {
        *changed = drained;
        return drained ? install_staged(x) : DF_OK;
    }
    bool done = false;
    int rc = df_comm_test(&x->hdr_req, &done);
    if (rc || !done)
        return rc;
    if (x->hdr.stop) {
        x->stop = x->hdr.stop;
        return DF_OK;
    }
    if (!x->partial) {
        rc = stage_params(x);
        *changed = !rc && drained;
        return rc || !drained ? rc : install_staged(x);
    }
    rc = receive_params(x);
    if (!rc)
        rc = post_header(x);
    *changed = rc == DF_OK;
    return rc;
}

/* Episodes a trainer rank dropped as too stale or rejected by its DAPO filter: no longer accepted, so
 * admission makes up for them. */
static int take_drops(executor *x)
{
    for (;;) {
        bool found = false;
        int src = -1;
        int64_t nbytes = 0, d = 0;
        int rc = df_comm_probe(x->a->world, DF_COMM_ANY_SOURCE, DF_ASYNC_TAG_DROPPED, &found, &src, &nbytes);
        if (!rc && found)
            rc = df_comm_recv(x->a->world, &d, (int64_t)sizeof d, src, DF_ASYNC_TAG_DROPPED);
        if (rc || !found)
            return rc;
        df_async_unaccept(&x->a->st, d);
    }
}

/* ---- sending episodes -------------------------------------------------------------- */

static int progress_sends(executor *x, bool wait)
{
    int64_t k = 0;
    int rc = DF_OK;
    for (int64_t i = 0; i < x->n_sends; i++) {
        bool done = false;
        if (!rc)
            rc = wait ? df_comm_wait(&x->sends[i].req) : df_comm_test(&x->sends[i].req, &done);
        if (!rc && (wait || done))
            free(x->sends[i].buf);
        else
            x->sends[k++] = x->sends[i];
    }
    x->n_sends = k;
    return rc;
}

/* Send hdr (+ bytes) to trainer rank `dest` without waiting. */
static int send_message(executor *x, int dest, df_async_episode *hdr, const uint8_t *rows)
{
    if (x->n_sends == x->sends_cap) {
        int64_t cap = x->sends_cap ? 2 * x->sends_cap : 16;
        pending_send *s = realloc(x->sends, (size_t)cap * sizeof *s);
        if (!s)
            return df_error(DF_ENOMEM, "out of memory");
        x->sends = s, x->sends_cap = cap;
    }
    hdr->idle_s = x->idle_s, hdr->busy_s = x->busy_s;
    hdr->running = x->a->st.running, hdr->accepted = x->a->st.accepted;
    size_t len = sizeof *hdr + (size_t)hdr->bytes;
    uint8_t *buf = malloc(len);
    if (!buf)
        return df_error(DF_ENOMEM, "out of memory for an episode of %lld bytes", (long long)len);
    memcpy(buf, hdr, sizeof *hdr);
    if (hdr->bytes)
        memcpy(buf + sizeof *hdr, rows, (size_t)hdr->bytes);
    pending_send *s = &x->sends[x->n_sends];
    s->buf = buf;
    int rc = df_comm_isend(x->a->world, buf, (int64_t)len, dest, DF_ASYNC_TAG_EPISODE, &s->req);
    if (rc) {
        free(buf);
        return df_error_wrap(rc, "async rollout: sending an episode to trainer rank %d", dest);
    }
    x->n_sends++;
    return DF_OK;
}

/* Multi-turn: the responses' masks and turns onto the episode's rows b (`total` response tokens),
 * with its agent loop's columns: the synchronous rollout node's. */
static int turn_columns(executor *x, episode *e, df_batch *b, int64_t total)
{
    int8_t *mask = malloc((size_t)(total ? total : 1));
    if (!mask)
        return df_error(DF_ENOMEM, "out of memory");
    int rc = DF_OK;
    for (int64_t j = 0, at = 0; !rc && j < x->n; at += e->len[j], j++)
        if (e->mask[j])
            memcpy(mask + at, e->mask[j], (size_t)e->len[j]);
        else /* the stream ran without the episodes' turn handler */
            rc = df_error(DF_EINTERNAL, "async rollout: a multi-turn response without its response_mask");
    if (!rc)
        rc = df_async_turns_finish(x->turns, e - x->eps, b, mask, e->turns);
    free(mask);
    return rc;
}

/* Tokens of the episode's prompt row (what the engine was fed: its routes' first rows). */
static int64_t prompt_tokens(const episode *e)
{
    const int64_t *off = df_batch_offsets(e->prompt, "prompt_ids");
    return off ? off[1] - off[0] : 0;
}

/* R3: the samples' routes as the batch field routed_experts onto the episode's rows b, each row
 * its prompt ++ response tokens of route_w experts: the synchronous rollout's column
 * (rollout_batch.c), which the old-log-prob pass and the updates replay (engine/routes.h). */
static int route_column(executor *x, episode *e, df_batch *b)
{
    const int64_t n = x->n, P = prompt_tokens(e);
    int64_t *off = malloc((size_t)(n + 1) * sizeof *off);
    if (!off)
        return df_error(DF_ENOMEM, "out of memory for an episode's routes");
    off[0] = 0;
    for (int64_t j = 0; j < n; j++)
        off[j + 1] = off[j] + (P + e->len[j]) * x->route_w;
    int32_t *all = malloc((size_t)(off[n] ? off[n] : 1) * sizeof *all);
    int rc = all ? DF_OK : df_error(DF_ENOMEM, "out of memory for an episode's routes (%lld entries)",
                                    (long long)off[n]);
    for (int64_t j = 0; !rc && j < n; j++)
        memcpy(all + off[j], e->routes[j], (size_t)(off[j + 1] - off[j]) * sizeof *all);
    if (!rc)
        rc = df_batch_set_tok_i32(b, DF_ROUTES_COLUMN, off, all);
    free(off), free(all);
    return rc;
}

/* A finished episode as the generate node's rows (prompt repeated n times, response_ids,
 * rollout_log_probs, versions; multi-turn: the agent loop's columns; R3: routed_experts). */
static int episode_batch(executor *x, episode *e, df_batch **out)
{
    int64_t n = x->n, total = 0;
    int64_t *off = malloc((size_t)(n + 1) * sizeof *off);
    int rc = off ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    for (int64_t j = 0; !rc && j < n; j++)
        off[j] = total, total += e->len[j];
    int32_t *tok = rc ? NULL : malloc((size_t)(total ? total : 1) * sizeof *tok);
    int32_t *ver = rc ? NULL : malloc((size_t)(total ? total : 1) * sizeof *ver);
    float *lp = rc ? NULL : malloc((size_t)(total ? total : 1) * sizeof *lp);
    if (!rc && (!tok || !ver || !lp))
        rc = df_error(DF_ENOMEM, "out of memory");
    for (int64_t j = 0; !rc && j < n; j++) {
        memcpy(tok + off[j], e->tok[j], (size_t)e->len[j] * sizeof *tok);
        memcpy(ver + off[j], e->ver[j], (size_t)e->len[j] * sizeof *ver);
        memcpy(lp + off[j], e->logp[j], (size_t)e->len[j] * sizeof *lp);
    }
    if (!rc)
        off[n] = total;
    df_batch *b = NULL;
    if (!rc)
        rc = df_batch_repeat_interleave(e->prompt, n, &b);
    if (!rc)
        rc = df_batch_set_tok_i32(b, "response_ids", off, tok);
    if (!rc)
        rc = df_batch_set_tok_f32(b, "rollout_log_probs", off, lp);
    if (!rc)
        rc = df_batch_set_tok_i32(b, "versions", off, ver);
    if (!rc && x->turns)
        rc = turn_columns(x, e, b, total);
    if (!rc && x->route_w)
        rc = route_column(x, e, b);
    free(off), free(tok), free(ver), free(lp);
    if (rc)
        df_batch_free(b);
    else
        *out = b;
    return rc;
}

/* The episode's slot free again (multi-turn: its agent loop ended). */
static void episode_clear(executor *x, episode *e)
{
    for (int64_t j = 0; e->tok && j < x->n; j++) {
        free(e->tok[j]), free(e->ver[j]), free(e->logp[j]), free(e->mask[j]), free(e->routes[j]);
        e->tok[j] = e->ver[j] = e->routes[j] = NULL, e->logp[j] = NULL, e->mask[j] = NULL;
    }
    df_async_turns_end(x->turns, e - x->eps);
    df_batch_free(e->prompt);
    e->prompt = NULL;
    e->used = false;
    e->got = 0;
}

static int ship_episode(executor *x, episode *e)
{
    df_batch *b = NULL;
    uint8_t *rows = NULL;
    size_t len = 0;
    int rc = episode_batch(x, e, &b);
    if (!rc)
        rc = df_batch_serialize(b, &rows, &len);
    df_async_episode h = {.order = e->order, .bytes = (int64_t)len, .min_version = INT64_MAX, .max_version = -1};
    for (int64_t j = 0; !rc && j < x->n; j++)
        for (int64_t t = 0; t < e->len[j]; t++) {
            h.min_version = e->ver[j][t] < h.min_version ? e->ver[j][t] : h.min_version;
            h.max_version = e->ver[j][t] > h.max_version ? e->ver[j][t] : h.max_version;
        }
    if (!rc && h.max_version < 0) /* only empty responses: the version that admitted it */
        h.min_version = h.max_version = x->version;
    if (!rc)
        rc = df_staleness_accept(&x->a->st);
    if (!rc)
        rc = send_message(x, x->next_dest, &h, rows);
    x->next_dest = (x->next_dest + 1) % x->a->n_trainers;
    free(rows);
    df_batch_free(b);
    episode_clear(x, e);
    return rc;
}

/* R3: sample j's routes (the engine's buffer lives for the on_seq call only), kept until the
 * episode ships. The engine was fed the episode's prompt row, so its routes start with that. */
static int keep_routes(executor *x, episode *e, int64_t j, const df_rollout_seq *s)
{
    if (!s->routes || s->prompt_len != prompt_tokens(e))
        return df_error(DF_EINTERNAL, "async rollout: a sequence of episode slot %lld %s",
                        (long long)s->prompt_id,
                        s->routes ? "whose prompt length is not its episode's" : "without its routes (R3)");
    const int64_t count = (s->prompt_len + s->n_tokens) * x->route_w;
    if (!(e->routes[j] = malloc((size_t)(count ? count : 1) * sizeof(int32_t))))
        return df_error(DF_ENOMEM, "out of memory for the routes of a sequence of %lld tokens",
                        (long long)(s->prompt_len + s->n_tokens));
    memcpy(e->routes[j], s->routes, (size_t)count * sizeof(int32_t));
    return DF_OK;
}

static int on_seq(void *user, const df_rollout_seq *s)
{
    executor *x = user;
    episode *e = &x->eps[s->prompt_id];
    int64_t j = s->sample, k = s->n_tokens;
    e->tok[j] = malloc((size_t)(k ? k : 1) * sizeof(int32_t));
    e->ver[j] = malloc((size_t)(k ? k : 1) * sizeof(int32_t));
    e->logp[j] = malloc((size_t)(k ? k : 1) * sizeof(float));
    if (!e->tok[j] || !e->ver[j] || !e->logp[j])
        return df_error(DF_ENOMEM, "out of memory for a response of %lld tokens", (long long)k);
    memcpy(e->tok[j], s->tokens, (size_t)k * sizeof(int32_t));
    memcpy(e->ver[j], s->versions, (size_t)k * sizeof(int32_t));
    memcpy(e->logp[j], s->log_probs, (size_t)k * sizeof(float));
    if (s->response_mask) { /* multi-turn */
        if (!(e->mask[j] = malloc((size_t)(k ? k : 1))))
            return df_error(DF_ENOMEM, "out of memory for a response of %lld tokens", (long long)k);
        memcpy(e->mask[j], s->response_mask, (size_t)k);
    }
    if (x->route_w) {
        int rc = keep_routes(x, e, j, s);
        if (rc)
            return rc;
    }
    e->turns[j] = s->assistant_turns;
    e->len[j] = k;
    return ++e->got == x->n ? ship_episode(x, e) : DF_OK;
}

/* ---- admission -------------------------------------------------------------------- */

/* The next prompt row (a new dataloader batch when the current one is used up) into slot i. */
static int next_prompt(executor *x, int64_t i)
{
    df_dag_worker *w = x->w;
    if (!x->cur || x->cur_pos == df_batch_size(x->cur)) {
        df_batch_free(x->cur);
        x->cur = NULL;
        x->cur_pos = 0;
        w->step = ++x->batches; /* the uids and seeds of the synchronous run's step */
        int rc = df_worker_next_prompts(w, 0, &x->cur);
        if (rc)
            return rc;
    }
    episode *e = &x->eps[i];
    int rc = df_batch_slice(x->cur, x->cur_pos, x->cur_pos + 1, &e->prompt);
    /* multi-turn: the episode's own agent loop, its environment seeded as the synchronous step's */
    if (!rc && x->turns)
        rc = df_async_turns_begin(x->turns, i, df_rng_key(df_worker_seed(w), 0xe57, (uint64_t)x->batches, 0),
                                  &e->prompt);
    if (rc)
        return rc;
    e->used = true;
    e->got = 0;
    /* the synchronous run's order: the global batch is the ranks' shares one after the other */
    int64_t per = df_batch_size(x->cur);
    e->order = ((x->batches - 1) * x->a->n_rollouts + x->a->index) * per + x->cur_pos;
    x->seeds[i] = df_rng_key(df_worker_seed(w), 0x6e6, (uint64_t)x->batches, 0);
    x->cur_pos++;
    return DF_OK;
}

static int grow_tokens(executor *x, int64_t need)
{
    if (need <= x->f_tok_cap)
        return DF_OK;
    int32_t *t = realloc(x->f_tok, (size_t)need * sizeof *t);
    if (!t)
        return df_error(DF_ENOMEM, "out of memory");
    x->f_tok = t, x->f_tok_cap = need;
    return DF_OK;
}

/* Up to k new episodes into the poll's feed arrays. */
static int feed(executor *x, int64_t k, df_rollout_poll *p)
{
    int64_t n = 0, ntok = 0;
    x->f_off[0] = 0;
    for (int64_t i = 0; i < x->cap && n < k; i++) {
        if (x->eps[i].used)
            continue;
        int rc = next_prompt(x, i);
        if (!rc)
            rc = df_staleness_submit(&x->a->st, x->version);
        int64_t len = 0;
        const int32_t *tok = rc ? NULL : df_batch_tok_i32(x->eps[i].prompt, "prompt_ids", 0, &len);
        if (!rc)
            rc = grow_tokens(x, ntok + len);
        if (rc)
            return rc;
        memcpy(x->f_tok + ntok, tok, (size_t)len * sizeof *tok);
        ntok += len;
        const int64_t *idx = df_batch_i64(x->eps[i].prompt, "index");
        x->f_keys[n] = idx ? (uint64_t)idx[0] : (uint64_t)x->eps[i].order;
        x->f_seeds[n] = x->seeds[i];
        x->f_ids[n] = i;
        x->f_off[++n] = ntok;
    }
    p->n_prompts = n;
    p->prompt_offsets = x->f_off;
    p->prompt_tokens = x->f_tok;
    p->prompt_keys = x->f_keys;
    p->prompt_seeds = x->f_seeds;
    p->prompt_ids = x->f_ids;
    return DF_OK;
}

static int poll(void *user, df_rollout_poll *p)
{
    executor *x = user;
    double now = df_now();
    bool changed = false;
    int rc = check_weights(x, p->active == 0 && p->queued == 0, &changed);
    if (!rc)
        rc = progress_sends(x, false);
    if (!rc)
        rc = take_drops(x);
    if (rc)
        return rc;
    if (x->stop) {
        p->abort = true;
        return DF_OK;
    }
    if (changed)
        p->weights_changed = true, p->new_version = x->version, p->recompute_kv = x->recompute;
    /* as many as the free slots hold once the prompts still queued in the engine are in */
    int64_t cap = df_staleness_capacity(&x->a->st, x->version), room = p->free_slots / x->n - p->queued;
    int64_t k = cap < room ? cap : room;
    if (x->swap_pending) /* partial_rollout false: the sequences in flight end first */
        k = 0;
    if (k > 0 && (rc = feed(x, k, p)))
        return rc;
    /* nothing in flight and nothing admitted: waiting for the trainer's next weights */
    bool idle = p->active == 0 && p->queued == 0 && p->n_prompts == 0;
    double limit = x->w->global.cfg.trainer.collective_timeout_s;
    if (!idle || changed)
        x->t_progress = now;
    else if (limit > 0 && now - x->t_progress > limit)
        return df_error(DF_EINTERNAL, "async rollout: no new weights from the trainer side for %.0f s "
                        "(trainer.collective_timeout_s) with nothing left to generate at version %lld",
                        limit, (long long)x->version);
    if (idle) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    double t = df_now();
    if (idle)
        x->idle_s += t - x->t_last;
    else
        x->busy_s += now - x->t_last;
    x->t_last = idle ? t : now;
    return DF_OK;
}

/* ---- the run ---------------------------------------------------------------------- */

static int executor_init(executor *x, df_dag_worker *w)
{
    x->w = w;
    x->a = w->async;
    x->n = df_worker_n_samples(w);
    x->partial = w->global.cfg.async_training.partial_rollout;
    x->recompute = w->global.cfg.async_training.recompute_kv;
    x->cap = x->a->st.p.max_concurrent_rollouts;
    x->eps = calloc((size_t)x->cap, sizeof *x->eps);
    x->seeds = calloc((size_t)x->cap, sizeof *x->seeds);
    x->f_off = malloc((size_t)(x->cap + 1) * sizeof *x->f_off);
    x->f_ids = malloc((size_t)x->cap * sizeof *x->f_ids);
    x->f_keys = malloc((size_t)x->cap * sizeof *x->f_keys);
    x->f_seeds = malloc((size_t)x->cap * sizeof *x->f_seeds);
    if (!x->eps || !x->seeds || !x->f_off || !x->f_ids || !x->f_keys || !x->f_seeds)
        return df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; i < x->cap; i++) {
        episode *e = &x->eps[i];
        e->len = calloc((size_t)x->n, sizeof *e->len);
        e->tok = calloc((size_t)x->n, sizeof *e->tok);
        e->ver = calloc((size_t)x->n, sizeof *e->ver);
        e->logp = calloc((size_t)x->n, sizeof *e->logp);
        e->mask = calloc((size_t)x->n, sizeof *e->mask);
        e->turns = calloc((size_t)x->n, sizeof *e->turns);
        e->routes = calloc((size_t)x->n, sizeof *e->routes);
        if (!e->len || !e->tok || !e->ver || !e->logp || !e->mask || !e->turns || !e->routes)
            return df_error(DF_ENOMEM, "out of memory");
    }
    /* R3 (rollout.enable_rollout_routing_replay): the engine was made recording routes
       (df_worker_create_rollout); each sample's travel in its episode's rows */
    df_rollout_options o;
    df_rollout_engine_options(w->rollout.engine, &o);
    x->route_w = o.record_routes ? df_model_route_width(&x->a->model->cfg) : 0;
    /* multi_turn.enable / dag.env_enable: the rollout node's agent loop, one per episode */
    return w->rollout.agent ? df_async_turns_create(w->rollout.agent, w->tok, x->cap, x->n, &x->turns) : DF_OK;
}

static void executor_free(executor *x)
{
    for (int64_t i = 0; x->eps && i < x->cap; i++) {
        episode *e = &x->eps[i];
        if (e->mask && e->routes) /* a slot whose arrays were all made */
            episode_clear(x, e);
        free(e->len), free(e->tok), free(e->ver), free(e->logp), free(e->mask), free(e->turns);
        free(e->routes);
    }
    df_async_turns_free(x->turns);
    for (int64_t i = 0; i < x->n_sends; i++) {
        df_comm_request_free(&x->sends[i].req);
        free(x->sends[i].buf);
    }
    df_comm_request_free(&x->hdr_req);
    free(x->eps), free(x->seeds), free(x->sends), free(x->f_off), free(x->f_ids), free(x->f_keys);
    free(x->f_seeds), free(x->f_tok);
    df_batch_free(x->cur);
}

/* The first weights (the trainer's, at the version it starts from): blocking. */
static int first_weights(executor *x)
{
    int rc = post_header(x);
    if (!rc)
        rc = df_comm_wait(&x->hdr_req);
    if (rc || x->hdr.stop) {
        x->stop = x->hdr.stop;
        return rc;
    }
    /* the wire format of this rank's engine: the trainer's must be the same (checked per header) */
    df_rollout_options o;
    df_rollout_engine_options(x->w->rollout.engine, &o);
    if (!x->a->wx)
        rc = df_async_weights_create(x->a->model, o.dtype == DF_ROLLOUT_BF16 ? DF_ASYNC_WIRE_BF16 : DF_ASYNC_WIRE_F32,
                                     &x->a->wx);
    if (!rc) /* later versions are installed by the stream (weights_changed) */
        rc = receive_params(x);
    /* a resumed run: the prompts from the trainer's data position on, as the steps it has not taken */
    if (!rc)
        rc = df_dataloader_seek(x->w->dl, x->hdr.data_epoch, x->hdr.data_step);
    x->batches = x->hdr.version;
    if (!rc && x->version > 0)
        rc = df_staleness_recover(&x->a->st, x->version);
    return rc ? rc : post_header(x);
}

/* After the stop header: every message sent, then the last one to each trainer rank. */
static int say_done(executor *x)
{
    int rc = DF_OK;
    for (int d = 0; d < x->a->n_trainers && !rc; d++) {
        df_async_episode h = {.done = 1};
        rc = send_message(x, d, &h, NULL);
    }
    int wrc = progress_sends(x, true);
    return rc ? rc : wrc;
}

int df_async_rollout_run(df_dag_worker *w)
{
    executor x = {0};
    int rc = executor_init(&x, w);
    if (!rc)
        rc = first_weights(&x);
    const df_sampling_params sp = w->global.sampling;
    df_rollout_stream_hooks hooks = {.user = &x, .poll = poll, .on_seq = on_seq,
                                     .turns = x.turns ? df_async_turns_handler(x.turns) : NULL};
    x.t_last = x.t_progress = df_now();
    if (!rc && !x.stop)
        rc = df_rollout_stream(w->rollout.engine, w->async->model, x.n, 0, &sp, x.version, &hooks);
    if (!rc)
        rc = say_done(&x);
    executor_free(&x);
    if (rc)
        return df_error_wrap(rc, "async rollout rank %d of %d", w->async->index, w->async->n_rollouts);
    if (x.stop > 0) {
        w->stopped = (int)x.stop;
        return df_error(DF_ESTOPPED, "stopped on request");
    }
    return DF_OK;
}

/* take_drops on its own (tests/test_async_drops.c): it reads only the executor's df_async. */
int df_async_take_drops(df_async *a)
{
    executor x = {.a = a};
    return take_drops(&x);
}
