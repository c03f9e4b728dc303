/* Executable registry, ref resolution and the node / graph executor
 * (include/distflow/dag.h). */
#include "planner/dag_internal.h"

#include "util/fn_registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/*
 * Other spellings of the functions distflow has, as siiRL's workflow files
 * write them (siiRL resolves a ref with importlib, so a function is reachable
 * by each module path that exports it).
 */
static const df_fn_alias k_aliases[] = {
    /* siiRL's filter_interface.dapo once the prefix below is stripped (its builtin dapo pipeline) */
    {"dapo.dynamic_sampling", "DAGWorker.dynamic_sampling"},
    /* siiRL 2025-08..10 (siirl/algorithm/dapo/dapo.py, exported by the package): its
       workflow_dapo.yaml files name it so */
    {"siirl.algorithm.dapo.dynamic_sampling", "DAGWorker.dynamic_sampling"},
    {"siirl.algorithm.dapo.dapo.dynamic_sampling", "DAGWorker.dynamic_sampling"},
};

static df_fn_registry g_exec = {.kind = "node executable", .aliases = k_aliases,
                                .n_aliases = sizeof k_aliases / sizeof k_aliases[0]};

int df_exec_register(const char *name, df_node_fn fn)
{
    return df_fn_registry_add(&g_exec, name, (df_any_fn)fn);
}

/* A registration's declared keys, kept by the registry beside the function (its data must
 * start with a name pointer, which the registry points at its own copy). */
typedef struct exec_keys {
    const char *name;
    df_node_keys keys;
} exec_keys;

int df_exec_register_keys(const char *name, df_node_fn fn, const df_node_keys *keys)
{
    if (!keys)
        return df_exec_register(name, fn);
    exec_keys k = {.name = name, .keys = *keys};
    return df_fn_registry_add_data(&g_exec, name, (df_any_fn)fn, &k, sizeof k);
}

void df_exec_unregister(const char *name) { df_fn_registry_remove(&g_exec, name); }

/* siiRL module prefixes whose remainder is our built-in name. */
static const char *const k_siirl_prefixes[] = {
    "siirl.dag_worker.dagworker:",            /* DAGWorker methods (siiRL from 2025-09) */
    "siirl.workers.dag_worker.dagworker:",    /* the same module before siiRL moved it */
    "siirl.user_interface.filter_interface.", /* dapo / embodied sampling filters */
};

/* ref with a siiRL module prefix removed (ref itself when it has none). */
static const char *strip_prefix(const char *ref)
{
    for (size_t i = 0; i < sizeof k_siirl_prefixes / sizeof k_siirl_prefixes[0]; i++) {
        size_t n = strlen(k_siirl_prefixes[i]);
        if (!strncmp(ref, k_siirl_prefixes[i], n))
            return ref + n;
    }
    return ref;
}

/* A registered name, an alias, or either after a siiRL prefix; NULL when none. */
static df_any_fn lookup(const char *ref)
{
    df_any_fn f = df_fn_registry_find(&g_exec, ref);
    return f ? f : df_fn_registry_find(&g_exec, strip_prefix(ref));
}

/* The error for a ref that names nothing, with what is closest. */
static int not_found(const char *ref)
{
    const char *closest = df_fn_registry_closest(&g_exec, strip_prefix(ref));
    const char *target = closest ? df_fn_registry_alias_target(&g_exec, closest) : NULL;
    char hint[400] = "";
    if (closest)
        snprintf(hint, sizeof hint, "closest distflow function: '%s'%s%s%s", closest, target ? " (= '" : "",
                 target ? target : "", target ? "')" : "");
    char known[1024];
    df_fn_registry_names(&g_exec, known, sizeof known);
    return df_error(DF_ENOTFOUND,
                    "no executable registered for '%s' (%s%sregistered: %s; a plugin's function is "
                    "named 'path/to/libname.so:symbol')",
                    ref, hint, hint[0] ? "; " : "", known[0] ? known : "none");
}

int df_exec_resolve(const char *ref, df_node_fn *fn)
{
    if (!ref || !ref[0])
        return df_error(DF_EINVAL, "empty executable ref");
    df_any_fn f = lookup(ref);
    if (f) {
        *fn = (df_node_fn)f;
        return DF_OK;
    }
    if (df_plugin_is_ref(ref)) {
        df_any_fn pf = NULL;
        int rc = df_plugin_symbol(ref, &pf);
        if (!rc)
            *fn = (df_node_fn)pf;
        return rc;
    }
    return not_found(ref);
}

int df_exec_find(const char *ref, df_node_fn *fn)
{
    df_any_fn f = ref ? lookup(ref) : NULL;
    if (f)
        *fn = (df_node_fn)f;
    return f ? DF_OK : df_error(DF_ENOTFOUND, "'%s' is not a registered executable", ref ? ref : "(null)");
}

int df_exec_node_keys(const char *ref, df_node_keys *out)
{
    memset(out, 0, sizeof *out);
    if (!ref || !ref[0])
        return df_error(DF_EINVAL, "empty executable ref");
    const df_fn_entry *e = df_fn_registry_find_entry(&g_exec, ref);
    if (!e)
        e = df_fn_registry_find_entry(&g_exec, strip_prefix(ref));
    if (e) {
        if (e->data)
            *out = ((const exec_keys *)e->data)->keys;
        return DF_OK;
    }
    if (!df_plugin_is_ref(ref))
        return not_found(ref);
    size_t n = strlen(ref) + sizeof DF_NODE_KEYS_SUFFIX;
    char *kref = malloc(n);
    if (!kref)
        return df_error(DF_ENOMEM, "out of memory");
    snprintf(kref, n, "%s%s", ref, DF_NODE_KEYS_SUFFIX);
    int rc = df_plugin_check_object(kref, sizeof *out, out);
    free(kref);
    if (rc == DF_ENOTFOUND) { /* no declaration: the function honours no keys */
        memset(out, 0, sizeof *out);
        df_clear_error();
        rc = DF_OK;
    }
    for (int i = 0; !rc && i < DF_NODE_KEYS_MAX; i++) /* the file's bytes: every key must end */
        if (!memchr(out->own[i], 0, DF_NODE_KEY_LEN) || !memchr(out->global[i], 0, DF_NODE_KEY_LEN))
            rc = df_error(DF_EINVAL, "plugin ref '%s': %s%s holds an unterminated key", ref, ref,
                          DF_NODE_KEYS_SUFFIX);
    return rc;
}

int df_exec_check(const char *ref)
{
    if (!ref || !ref[0])
        return df_error(DF_EINVAL, "empty executable ref");
    if (lookup(ref))
        return DF_OK;
    return df_plugin_is_ref(ref) ? df_plugin_check(ref) : not_found(ref);
}

int df_task_graph_resolve(df_task_graph *g)
{
    for (int i = 0; i < df_task_graph_num_nodes(g); i++) {
        df_node *nd = df_task_graph_node_at(g, i);
        if (nd->fn || !nd->executable_ref)
            continue;
        int rc = df_exec_resolve(nd->executable_ref, &nd->fn);
        if (rc)
            return df_error_wrap(rc, "task graph '%s': node '%s'", df_task_graph_id(g),
                                 nd->node_id);
    }
    return DF_OK;
}

/* ---- executor ------------------------------------------------------------------ */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Adopt (or, after a failure, drop) a batch the node returned. */
static void take_output(df_batch **batch, df_batch *produced, int ok, const df_run_opts *opts)
{
    df_batch_release_fn release = opts ? opts->release_batch : NULL;
    if (!produced || produced == *batch)
        return;
    if (!ok) {
        if (release)
            release(produced);
        return;
    }
    if (release && *batch)
        release(*batch);
    *batch = produced;
}

int df_node_run(df_node *node, const df_node_ctx *tmpl, df_batch **batch,
                const df_run_opts *opts)
{
    const char *ref = node->executable_ref ? node->executable_ref : "no ref";
    node->retries_done = 0;
    if (!node->fn && node->executable_ref) {
        int rc = df_exec_resolve(node->executable_ref, &node->fn);
        if (rc) {
            node->status = DF_STATUS_FAILED;
            return df_error_wrap(rc, "node '%s'", node->node_id);
        }
    }
    if (!node->fn) { /* structural node (e.g. BARRIER_SYNC handled by the worker) */
        node->status = DF_STATUS_SKIPPED;
        return DF_OK;
    }
    df_node_ctx ctx = {0};
    if (tmpl)
        ctx = *tmpl;
    ctx.node = node;
    node->status = DF_STATUS_RUNNING;
    double t0 = now_s();
    int rc;
    for (;;) {
        df_node_output out = {NULL};
        df_clear_error();
        rc = node->fn(&ctx, *batch, &out);
        take_output(batch, out.batch, rc == DF_OK, opts);
        if (rc != DF_ERETRY || node->retries_done >= node->retry_limit)
            break;
        node->retries_done++;
    }
    if (opts && opts->record_timing && ctx.metrics) {
        char name[300];
        snprintf(name, sizeof name, "timing_s/%s", node->node_id);
        df_metrics_set(ctx.metrics, name, now_s() - t0);
    }
    if (rc == DF_OK) {
        node->status = DF_STATUS_COMPLETED;
        return DF_OK;
    }
    node->status = DF_STATUS_FAILED;
    const char *msg = df_last_error()[0] ? "" : ": (no message)";
    if (node->retries_done)
        return df_error_wrap(rc, "node '%s' (%s) failed after %d attempts%s", node->node_id,
                             ref, node->retries_done + 1, msg);
    return df_error_wrap(rc, "node '%s' (%s) failed%s", node->node_id, ref, msg);
}

/* A pass's input for ctx->input, when the run copies batches. */
static int copy_input(const df_run_opts *opts, const df_batch *b, df_batch **out)
{
    *out = NULL;
    return b && opts && opts->copy_batch ? opts->copy_batch(b, out) : DF_OK;
}

static void release_input(const df_run_opts *opts, df_batch *b)
{
    if (b && opts->release_batch)
        opts->release_batch(b);
}

int df_task_graph_run(df_task_graph *g, const df_node_ctx *tmpl, df_batch **batch,
                      const df_run_opts *opts)
{
    df_node **order;
    int n, rc = df_task_graph_topo_order(g, &order, &n);
    if (rc)
        return rc;
    df_task_graph_reset(g);
    df_node_ctx ctx = {0};
    if (tmpl)
        ctx = *tmpl;
    df_batch *input = NULL; /* the nodes' ctx->input: *batch is replaced as they run */
    if ((rc = copy_input(opts, *batch, &input))) {
        free(order);
        return rc;
    }
    ctx.graph = g, ctx.opts = opts, ctx.pass = 0, ctx.flags = 0, ctx.input = input;
    if (opts && opts->begin_pass)
        opts->begin_pass(opts->hook_user);
    for (int i = 0; i < n; i++) {
        if (rc) {
            order[i]->status = DF_STATUS_SKIPPED;
            continue;
        }
        if (opts && opts->skip_node && opts->skip_node(opts->hook_user, order[i])) {
            order[i]->status = DF_STATUS_SKIPPED;
            continue;
        }
        order[i]->status = DF_STATUS_READY;
        if (opts && opts->before_node && (rc = opts->before_node(opts->hook_user, order[i], batch))) {
            order[i]->status = DF_STATUS_FAILED;
            df_error_wrap(rc, "node '%s'", order[i]->node_id);
        } else {
            rc = df_node_run(order[i], &ctx, batch, opts);
        }
        if (rc)
            df_error_wrap(rc, "task graph '%s'", df_task_graph_id(g));
    }
    release_input(opts, input);
    free(order);
    return rc;
}

int df_node_rerun_upstream(const df_node_ctx *ctx, int pass, unsigned flags, df_batch **batch)
{
    if (!ctx || !ctx->graph || !ctx->node)
        return df_error(DF_EINVAL, "df_node_rerun_upstream: the node context has no graph (it was not "
                                   "made by df_task_graph_run)");
    const df_run_opts *opts = ctx->opts;
    df_task_graph *g = ctx->graph;
    df_node **order = NULL;
    int n = df_task_graph_num_nodes(g);
    bool *up = malloc((size_t)(n ? n : 1) * sizeof *up);
    int rc = up ? df_task_graph_ancestors(g, ctx->node, up) : df_error(DF_ENOMEM, "out of memory");
    if (!rc)
        rc = df_task_graph_topo_order(g, &order, &n);
    df_batch *input = NULL;
    if (!rc)
        rc = copy_input(opts, *batch, &input);
    if (!rc && opts && opts->begin_pass)
        opts->begin_pass(opts->hook_user);
    df_node_ctx sub = *ctx;
    sub.metrics = NULL, sub.pass = pass, sub.flags = flags, sub.input = input;
    /* the ancestors in the graph's order, then the hand-off to the node itself */
    for (int i = 0; !rc && i < n; i++) {
        const bool me = order[i] == ctx->node;
        if (!me && !up[df_task_graph_index_of(g, order[i]->node_id)])
            continue;
        df_node_status keep = order[i]->status;
        if (opts && opts->before_node && (rc = opts->before_node(opts->hook_user, order[i], batch)))
            df_error_wrap(rc, "node '%s'", order[i]->node_id);
        else if (!me && (rc = df_node_run(order[i], &sub, batch, opts)))
            df_error_wrap(rc, "re-running the nodes before '%s'", ctx->node->node_id);
        order[i]->status = keep;
        if (me)
            break;
    }
    if (rc && *batch && opts && opts->release_batch) {
        opts->release_batch(*batch);
        *batch = NULL;
    }
    release_input(opts, input);
    free(up);
    free(order);
    return rc;
}
