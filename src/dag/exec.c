/* Executable registry, ref resolution and the node / graph executor
 * (include/distflow/dag.h). */
#include "dag/dag_internal.h"

#include "util/fn_registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static df_fn_registry g_exec = {.kind = "node executable"};

int df_exec_register(const char *name, df_node_fn fn)
{
    return df_fn_registry_add(&g_exec, name, (df_any_fn)fn);
}

void df_exec_unregister(const char *name) { df_fn_registry_remove(&g_exec, name); }

/* siiRL module prefixes whose remainder is our built-in name. */
static const char *const k_siirl_prefixes[] = {
    "siirl.dag_worker.dagworker:",           /* DAGWorker methods */
    "siirl.user_interface.filter_interface.", /* dapo / embodied sampling filters */
};

int df_exec_resolve(const char *ref, df_node_fn *fn)
{
    if (!ref || !ref[0])
        return df_error(DF_EINVAL, "empty executable ref");
    df_any_fn f = df_fn_registry_find(&g_exec, ref);
    for (size_t i = 0; !f && i < sizeof k_siirl_prefixes / sizeof k_siirl_prefixes[0]; i++) {
        size_t n = strlen(k_siirl_prefixes[i]);
        if (!strncmp(ref, k_siirl_prefixes[i], n))
            f = df_fn_registry_find(&g_exec, ref + n);
    }
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
    char known[1024];
    df_fn_registry_names(&g_exec, known, sizeof known);
    return df_error(DF_ENOTFOUND, "no executable registered for '%s' (registered: %s)", ref,
                    known[0] ? known : "none");
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

int df_task_graph_run(df_task_graph *g, const df_node_ctx *tmpl, df_batch **batch,
                      const df_run_opts *opts)
{
    df_node **order;
    int n, rc = df_task_graph_topo_order(g, &order, &n);
    if (rc)
        return rc;
    df_task_graph_reset(g);
    for (int i = 0; i < n; i++) {
        if (rc) {
            order[i]->status = DF_STATUS_SKIPPED;
            continue;
        }
        order[i]->status = DF_STATUS_READY;
        if (opts && opts->before_node && (rc = opts->before_node(opts->hook_user, order[i], batch))) {
            order[i]->status = DF_STATUS_FAILED;
            df_error_wrap(rc, "node '%s'", order[i]->node_id);
        } else {
            rc = df_node_run(order[i], tmpl, batch, opts);
        }
        if (rc)
            df_error_wrap(rc, "task graph '%s'", df_task_graph_id(g));
    }
    free(order);
    return rc;
}
