/* The trainer side of the asynchronous runtime (async.h, docs/async.md): the graph's rollout
 * node takes its batch from the episodes the rollout ranks sent, and the actor's weights go to
 * the rollout side after every step. */
#include "workers/worker_internal.h"

#include "util/timeutil.h"
#include "workers/dag/async.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- receiving --------------------------------------------------------------------- */

/* Every row of an episode carries the rollout rank that made it (DF_ASYNC_SOURCE_COLUMN): the
 * hand-off may move it to another trainer rank, which then reports it there if a filter drops it. */
static int tag_source(df_batch *b, int r)
{
    int64_t n = df_batch_size(b);
    int64_t *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v)
        return df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++)
        v[i] = r;
    int rc = df_batch_set_i64(b, DF_ASYNC_SOURCE_COLUMN, v);
    free(v);
    return rc;
}

/* One message from rollout rank `src` (world rank) of nbytes. */
static int receive_one(df_async *a, int src, int64_t nbytes)
{
    uint8_t *buf = malloc((size_t)(nbytes ? nbytes : 1));
    if (!buf)
        return df_error(DF_ENOMEM, "out of memory for an episode of %lld bytes", (long long)nbytes);
    int rc = df_comm_recv(a->world, buf, nbytes, src, DF_ASYNC_TAG_EPISODE);
    df_async_episode h;
    if (!rc && (nbytes < (int64_t)sizeof h))
        rc = df_error(DF_EINTERNAL, "async: a message of %lld bytes from rank %d", (long long)nbytes, src);
    if (!rc)
        memcpy(&h, buf, sizeof h);
    if (!rc && (int64_t)sizeof h + h.bytes != nbytes)
        rc = df_error(DF_EINTERNAL, "async: an episode from rank %d says %lld bytes in a message of %lld", src,
                      (long long)h.bytes, (long long)nbytes);
    int r = src - a->n_trainers;
    if (!rc) {
        a->last_idle[r] = h.idle_s, a->last_busy[r] = h.busy_s;
        a->last_running[r] = h.running, a->last_accepted[r] = h.accepted;
    }
    df_batch *b = NULL;
    if (!rc && h.done)
        a->done_from++;
    else if (!rc && !(rc = df_batch_deserialize(buf + sizeof h, (size_t)h.bytes, &b)) && !(rc = tag_source(b, r)))
        rc = df_async_inbox_push(&a->inbox, b, h.order, h.min_version, r);
    free(buf);
    if (rc)
        df_batch_free(b);
    return rc;
}

/* Every message waiting now. */
static int drain(df_async *a)
{
    for (;;) {
        bool found = false;
        int src = -1;
        int64_t nbytes = 0;
        int rc = df_comm_probe(a->world, DF_COMM_ANY_SOURCE, DF_ASYNC_TAG_EPISODE, &found, &src, &nbytes);
        if (rc || !found)
            return rc;
        if ((rc = receive_one(a, src, nbytes)))
            return rc;
    }
}

/* ---- the rollout node's replacement ------------------------------------------------ */

/* Tell each rollout rank how many of its episodes were just dropped (a small send: eager). */
static int report_drops(df_async *a)
{
    for (int r = 0; r < a->n_rollouts; r++) {
        if (!a->dropped[r])
            continue;
        int rc = df_comm_send(a->world, &a->dropped[r], (int64_t)sizeof *a->dropped, a->n_trainers + r,
                              DF_ASYNC_TAG_DROPPED);
        if (rc)
            return df_error_wrap(rc, "async: reporting dropped episodes to rollout rank %d", r);
        a->dropped[r] = 0;
    }
    return DF_OK;
}

/* An episode's position in the prompt order and its rollout rank, as gathered from every trainer rank. */
typedef struct sent_by {
    int64_t src, order;
} sent_by;

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

static int cmp_sent(const void *x, const void *y)
{
    const sent_by *a = x, *b = y;
    return a->src != b->src ? (a->src > b->src) - (a->src < b->src) : (a->order > b->order) - (a->order < b->order);
}

/* The job's `need` oldest of the gathered (sender, order) pairs all[total] (sorted by sender, then order):
 * limit[r] the largest order of r's among them. Orders are unique across rollout ranks. */
static int oldest_limits(const sent_by *all, int64_t total, int64_t need, int64_t *limit)
{
    int64_t *orders = malloc((size_t)(total ? total : 1) * sizeof *orders);
    if (!orders)
        return df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; i < total; i++)
        orders[i] = all[i].order;
    qsort(orders, (size_t)total, sizeof *orders, cmp_i64);
    int64_t threshold = orders[(need < total ? need : total) - 1];
    free(orders);
    for (int64_t i = 0; i < total; i++)
        if (all[i].order <= threshold)
            limit[all[i].src] = all[i].order;
    return DF_OK;
}

/* The step's episodes: of each rollout rank r, its share of `need` (df_async_share, what its admission
 * counts on) oldest ones (smallest order) of those the trainer ranks hold, every rank's (order, sender)
 * gathered; limit[r]: the largest order taken of r's (INT64_MIN: none). Each rank's share rather than
 * the job's oldest: else a lagging rank's episodes are pushed to the next batch by the other ranks'
 * newer ones, land one version older than admitted for and are dropped. A refill (each false: DAPO's
 * replacements for rejected groups, reported to the ranks that sent them) takes the job's `need`
 * oldest, whichever rank sent them. Collective over the side. */
int df_async_take_limits(df_async *a, int64_t need, bool each, int64_t *limit)
{
    const df_async_inbox *in = &a->inbox;
    sent_by *mine = malloc((size_t)(in->n ? in->n : 1) * sizeof *mine), *all = NULL;
    int64_t *counts = NULL;
    if (!mine)
        return df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; i < in->n; i++)
        mine[i] = (sent_by){in->src[i], in->order[i]};
    int rc = df_comm_allgatherv(a->side, mine, in->n * (int64_t)sizeof *mine, (void **)&all, &counts, NULL);
    if (!rc) {
        int64_t total = 0;
        for (int r = 0; r < a->n_trainers; r++)
            total += counts[r] / (int64_t)sizeof *mine;
        qsort(all, (size_t)total, sizeof *all, cmp_sent);
        for (int r = 0; r < a->n_rollouts; r++)
            limit[r] = INT64_MIN;
        if (!each)
            rc = oldest_limits(all, total, need, limit);
        for (int64_t i = 0, first = 0; each && i < total; i++) {
            if (i > 0 && all[i].src != all[i - 1].src)
                first = i;
            int64_t want = df_async_share(need, a->n_rollouts, (int)all[i].src);
            if (i - first < want)
                limit[all[i].src] = all[i].order;
        }
    }
    free(mine), free(all), free(counts);
    return rc;
}

/* Whether the trainer ranks hold the episodes: v [3 + R] as gather_episodes sums it. A refill (each
 * false: DAPO's) takes any `need`: its rejected groups were reported to whichever ranks sent them. */
static bool enough(const df_async *a, int64_t need, bool each, const int64_t *v)
{
    if (!each)
        return v[1] >= need;
    if (v[2] > 0) /* a trainer rank without one (it needs the columns, for an empty share) */
        return false;
    for (int r = 0; r < a->n_rollouts; r++)
        if (v[3 + r] < df_async_share(need, a->n_rollouts, r))
            return false;
    return true;
}

/* The timeout's message: the first rollout rank short of its share (v as enough reads it). */
static int waited_too_long(const df_async *a, int64_t need, const int64_t *v, double timeout)
{
    int r = 0;
    while (r + 1 < a->n_rollouts && v[3 + r] >= df_async_share(need, a->n_rollouts, r))
        r++;
    return df_error(DF_EINTERNAL, "async: no episode from the rollout side for %.0f s (trainer.collective_timeout_s) "
                    "with %lld of the step's %lld: rollout rank %d sent %lld of its %lld", timeout, (long long)v[1],
                    (long long)need, r, (long long)v[3 + r], (long long)df_async_share(need, a->n_rollouts, r));
}

/* Wait until the trainer ranks hold the step's episodes (df_async_take_limits), one each at least
 * unless `each` is false (a refill: a rank without one uses the step's columns); limit[r]: the largest
 * order taken of rollout rank r's. The step's first hand-off then balances the ranks' shares
 * (handoff.c). Collective over the side. */
static int gather_episodes(df_dag_worker *w, int64_t need, bool each, int64_t version, int64_t *limit)
{
    df_async *a = w->async;
    double timeout = w->global.cfg.trainer.collective_timeout_s, t0 = df_now();
    int64_t seen = -1, *v = malloc((size_t)(3 + a->n_rollouts) * sizeof *v);
    if (!v)
        return df_error(DF_ENOMEM, "out of memory");
    for (;;) {
        int rc = drain(a);
        if (!rc)
            rc = df_async_inbox_drop_stale(&a->inbox, &a->st, version, a->dropped);
        if (!rc)
            rc = report_drops(a);
        /* [failed ranks, episodes, ranks without one, episodes of each rollout rank] */
        memset(v, 0, (size_t)(3 + a->n_rollouts) * sizeof *v);
        v[0] = rc != 0, v[1] = rc ? 0 : a->inbox.n, v[2] = !rc && a->inbox.n == 0;
        for (int64_t i = 0; !rc && i < a->inbox.n; i++)
            v[3 + a->inbox.src[i]]++;
        int crc = df_comm_allreduce(a->side, v, 3 + a->n_rollouts, DF_COMM_INT64, DF_COMM_SUM);
        if (!rc && !crc && v[0])
            rc = df_error(DF_EINTERNAL, "async: another trainer rank failed receiving episodes");
        if (!rc && !crc && enough(a, need, each, v))
            rc = df_async_take_limits(a, need, each, limit);
        else if (!rc && !crc && v[1] == seen && timeout > 0 && df_now() - t0 > timeout)
            rc = waited_too_long(a, need, v, timeout);
        else if (!rc && !crc) {
            if (v[1] != seen) /* progress: the clock starts again */
                seen = v[1], t0 = df_now();
            struct timespec ts = {0, 2000000};
            nanosleep(&ts, NULL);
            continue;
        }
        free(v);
        return rc ? rc : crc;
    }
}

/* fully_async/... of the step: staleness (df_staleness_record, with the rollout side's counters) and the
 * rollout side's idle share since the last step. */
static void record(df_async *a, df_metrics *m, double wait_s)
{
    double idle = 0, busy = 0;
    int64_t running = 0, accepted = 0;
    for (int r = 0; r < a->n_rollouts; r++) {
        idle += a->last_idle[r], busy += a->last_busy[r];
        running += a->last_running[r], accepted += a->last_accepted[r];
    }
    df_staleness s = a->st;
    s.running = running, s.accepted = accepted;
    df_staleness_record(&s, m);
    double di = idle - a->idle_s, db = busy - a->busy_s;
    if (di + db > 0)
        df_metrics_set(m, "fully_async/rollouter/idle_ratio", di / (di + db));
    a->idle_s = idle, a->busy_s = busy;
    df_metrics_set(m, "fully_async/trainer/idle_s", wait_s);
}

/* fully_async/multi_version_frac: the share of the batch's responses whose tokens come from more
 * than one policy version (a weight change while they were generated, partial_rollout true). */
static void record_versions(const df_batch *b, df_metrics *m)
{
    int64_t n = df_batch_size(b), mixed = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t len = 0;
        const int32_t *v = df_batch_tok_i32(b, "versions", i, &len);
        for (int64_t t = 1; v && t < len; t++)
            if (v[t] != v[0]) {
                mixed++;
                break;
            }
    }
    if (n > 0)
        df_metrics_set(m, "fully_async/multi_version_frac", (double)mixed / (double)n);
}

/* What a later pass of the step needs from the take (async.h): the episodes' columns without rows,
 * and one row per episode without its responses (groups are whole and consecutive: the inbox takes
 * whole episodes). */
static int keep_step_rows(df_async *a, const df_batch *b, int64_t n)
{
    int64_t rows = df_batch_size(b), k = rows / n;
    if (rows % n)
        return df_error(DF_EINTERNAL, "async: %lld rows taken, not whole episodes of %lld", (long long)rows,
                        (long long)n);
    int64_t *idx = malloc((size_t)(k ? k : 1) * sizeof *idx);
    if (!idx)
        return df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; i < k; i++)
        idx[i] = i * n;
    df_batch *p = NULL, *c = NULL;
    int rc = df_batch_select(b, idx, k, &p);
    free(idx);
    if (!rc)
        rc = df_batch_slice(b, 0, 0, &c);
    if (rc) {
        df_batch_free(p);
        return rc;
    }
    /* the columns the rollout side made of each response: a prompt row carries none (R3's routes
       cover the first sample's response too; the greedy pass records its own) */
    const char *made[] = {"response_ids", "rollout_log_probs", "versions", DF_ROUTES_COLUMN,
                          DF_ASYNC_SOURCE_COLUMN};
    for (size_t j = 0; j < sizeof made / sizeof *made; j++)
        df_batch_drop(p, made[j]);
    df_batch_free(a->prompts), df_batch_free(a->columns);
    a->prompts = p, a->columns = c;
    return DF_OK;
}

/* ReMax's greedy pass: the rollout node's own function decodes the prompts of the latest take with
 * the trainer's actor (the policy being trained; its greedy response does not depend on the
 * sampled ones, so the baseline stays a valid control variate). */
static int take_greedy(df_node_ctx *ctx, df_async *a, df_node_output *out)
{
    if (!a->prompts)
        return df_error(DF_EINTERNAL, "async: a greedy pass before the step's episodes were taken");
    df_batch *p = NULL;
    int rc = df_batch_copy(a->prompts, &p);
    if (!rc)
        rc = a->generate(ctx, p, out);
    if (out->batch != p) /* else handed downstream */
        df_batch_free(p);
    return rc;
}

/* The episodes of this pass: the step's batch on its first pass, DAPO's refill on a re-run. */
static int take(df_node_ctx *ctx, df_dag_worker *w, df_node_output *out)
{
    df_async *a = w->async;
    int64_t need = ctx->pass ? a->refill : w->global.cfg.data.train_batch_size;
    int64_t version = ctx->step - 1; /* optimizer steps before this one */
    a->refill = 0;
    if (need < 1)
        return df_error(DF_EUNSUPPORTED, "async: the rollout node re-run (pass %d) for something other than DAPO's "
                        "refill or ReMax's greedy pass: the rollout side generates the step's batches only",
                        ctx->pass);
    int rc = gather_episodes(w, need, ctx->pass == 0, version, a->take_limit);
    if (!rc && a->inbox.n == 0 && a->columns) /* a refill's empty share */
        rc = df_batch_slice(a->columns, 0, 0, &out->batch);
    else if (!rc)
        rc = df_async_inbox_take(&a->inbox, a->take_limit, &a->st, version, &out->batch);
    if (!rc)
        rc = keep_step_rows(a, out->batch, df_worker_n_samples(w));
    return rc;
}

/* The graph's rollout node on the trainer side: this step's episodes from the rollout side (or a
 * re-run's: DAPO's refill, ReMax's greedy pass). The dataloader's prompts it is given are not used
 * (the rollout side reads its own share of each batch). */
static int node_take(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    (void)batch;
    double t0 = df_now();
    df_dag_worker *w = df_node_worker(ctx);
    df_async *a = w->async;
    if (ctx->flags & DF_PASS_GREEDY)
        return take_greedy(ctx, a, out);
    int rc = take(ctx, w, out);
    double dt = df_now() - t0;
    if (!rc && ctx->metrics) {
        record(a, ctx->metrics, dt);
        record_versions(out->batch, ctx->metrics);
    }
    df_worker_timing(ctx, "gen", t0);
    return rc ? df_error_wrap(rc, "taking the step's episodes from the rollout side") : DF_OK;
}

void df_async_set_refill(df_dag_worker *w, int64_t episodes)
{
    w->async->refill = episodes;
}

int df_async_reject_groups(df_dag_worker *w, const df_batch *b, const int64_t *keep, int64_t n_keep)
{
    df_async *a = w->async;
    if (w->cur_layout.mp_rank != 0) /* a replica holds its leader's rows: the leader reports them */
        return DF_OK;
    int rc = df_async_count_rejected(b, keep, n_keep, a->n_rollouts, a->dropped);
    return rc ? rc : report_drops(a);
}

int df_async_trainer_setup(df_dag_worker *w)
{
    int found = 0;
    for (int i = 0; i < df_task_graph_num_nodes(w->graph); i++) {
        df_node *n = df_task_graph_node_at(w->graph, i);
        if (n->node_role != DF_ROLE_ROLLOUT)
            continue;
        if (i < w->n_node_set && w->node_set[i])
            return df_error(DF_EUNSUPPORTED, "node '%s': a rollout node with its own sampling settings; with "
                            "actor_rollout_ref.rollout.mode=async the rollout side samples with the global "
                            "actor_rollout_ref.rollout.* keys", n->node_id);
        w->async->generate = n->fn;
        n->fn = node_take;
        found++;
    }
    if (found != 1)
        return df_error(DF_EUNSUPPORTED, "actor_rollout_ref.rollout.mode=async needs a graph with exactly one "
                        "rollout node (this one has %d)", found);
    return DF_OK;
}

/* ---- weights and the end ----------------------------------------------------------- */

static int send_header(df_async *a, df_async_header *h)
{
    df_comm_request *req = NULL;
    int rc = df_comm_ibroadcast(a->weights, h, (int64_t)sizeof *h, 0, &req);
    return rc ? rc : df_comm_wait(&req);
}

int df_async_publish(df_dag_worker *w, int64_t version)
{
    df_async *a = w->async;
    if (!a->weights)
        return DF_OK; /* trainer ranks > 0 */
    double t0 = df_now();
    df_model *m = df_actor_model(w->actor.model);
    const df_weights16 *w16 = NULL; /* the actor's bf16 copy (mixed precision): sent as is */
    int rc = a->wx ? DF_OK : df_async_weights_create(m, df_async_wire_for(&w->global.cfg), &a->wx);
    if (!rc && df_actor_bf16(w->actor.model))
        rc = df_actor_weights16(w->actor.model, &w16);
    df_async_header h = {.version = version};
    df_dataloader_tell(w->dl, &h.data_epoch, &h.data_step);
    if (!rc)
        rc = df_async_weights_send(a->wx, a->weights, m, w16, &h);
    if (rc)
        return df_error_wrap(rc, "async: sending the weights of version %lld to the rollout side", (long long)version);
    if (w->metrics && version > w->resumed_step) /* the step's line (not the first weights') */
        df_metrics_set(w->metrics, "timing_s/sync_weights", df_now() - t0);
    return DF_OK;
}

int df_async_finish(df_dag_worker *w, int64_t stop)
{
    df_async *a = w->async;
    df_async_header h = {.stop = stop};
    int rc = a->weights ? send_header(a, &h) : DF_OK;
    /* the rollout ranks' last messages: each says done to every trainer rank */
    while (!rc && a->done_from < a->n_rollouts) {
        rc = drain(a);
        struct timespec ts = {0, 1000000};
        if (!rc && a->done_from < a->n_rollouts)
            nanosleep(&ts, NULL);
    }
    return rc ? df_error_wrap(rc, "async: ending the rollout side") : DF_OK;
}

/* report_drops on its own (tests/test_async_drops.c). */
int df_async_report_drops(df_async *a) { return report_drops(a); }
