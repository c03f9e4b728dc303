/*
 * siiRL's per-node agent_options (include/distflow/dag.h, df_agent_options):
 * ownership (free, copy), lookup and the one-line picture df_task_graph_print
 * shows. The workflow loader (workflow.c) fills them.
 */
#include "planner/dag_internal.h"

#include "util/sbuf.h"

#include <stdlib.h>
#include <string.h>

static void free_list(char **v, int n)
{
    for (int i = 0; v && i < n; i++)
        free(v[i]);
    free(v);
}

void df_agent_options_free(df_agent_options *o)
{
    if (!o)
        return;
    free(o->process_path);
    free_list(o->env_path, o->n_env_path);
    free_list(o->pre_kwargs, 2 * o->n_pre_kwargs);
    free_list(o->post_kwargs, 2 * o->n_post_kwargs);
    free(o);
}

/* A copy of the n strings of v (n may be 0); NULL when out of memory. */
static char **copy_list(char *const *v, int n, bool *ok)
{
    char **c = n ? calloc((size_t)n, sizeof *c) : NULL;
    *ok = !n || c;
    for (int i = 0; *ok && i < n; i++)
        *ok = (c[i] = strdup(v[i])) != NULL;
    if (!*ok) {
        free_list(c, n);
        c = NULL;
    }
    return c;
}

int df_agent_options_copy(const df_agent_options *o, df_agent_options **out)
{
    *out = NULL;
    if (!o)
        return DF_OK;
    df_agent_options *c = calloc(1, sizeof *c);
    bool ok = c != NULL;
    if (ok) {
        *c = *o;
        c->process_path = NULL, c->env_path = c->pre_kwargs = c->post_kwargs = NULL;
        c->n_env_path = c->n_pre_kwargs = c->n_post_kwargs = 0;
        ok = !o->process_path || (c->process_path = strdup(o->process_path));
    }
    if (ok && (c->env_path = copy_list(o->env_path, o->n_env_path, &ok), ok))
        c->n_env_path = o->n_env_path;
    if (ok && (c->pre_kwargs = copy_list(o->pre_kwargs, 2 * o->n_pre_kwargs, &ok), ok))
        c->n_pre_kwargs = o->n_pre_kwargs;
    if (ok && (c->post_kwargs = copy_list(o->post_kwargs, 2 * o->n_post_kwargs, &ok), ok))
        c->n_post_kwargs = o->n_post_kwargs;
    if (!ok) {
        df_agent_options_free(c);
        return df_error(DF_ENOMEM, "out of memory copying agent_options");
    }
    *out = c;
    return DF_OK;
}

const char *df_agent_options_kwarg(const df_agent_options *o, bool post, const char *key)
{
    if (!o || !key)
        return NULL;
    char *const *kv = post ? o->post_kwargs : o->pre_kwargs;
    int n = post ? o->n_post_kwargs : o->n_pre_kwargs;
    for (int i = 0; i < n; i++)
        if (!strcmp(kv[2 * i], key))
            return kv[2 * i + 1];
    return NULL;
}

static void kwarg_keys(df_sbuf *b, const char **sep, const char *name, char *const *kv, int n)
{
    if (!n)
        return;
    df_sbuf_printf(b, "%s%s {", *sep, name);
    for (int i = 0; i < n; i++)
        df_sbuf_printf(b, "%s%s", i ? ", " : "", kv[2 * i]);
    df_sbuf_printf(b, "}");
    *sep = ", ";
}

void df_agent_options_describe(const df_agent_options *o, df_sbuf *b)
{
    const char *sep = "";
#define ITEM(cond, ...)                             \
    if (cond) {                                     \
        df_sbuf_printf(b, "%s", sep);               \
        df_sbuf_printf(b, __VA_ARGS__);             \
        sep = ", ";                                 \
    }
    ITEM(o->train_cycle, "train_cycle %lld", (long long)o->train_cycle)
    ITEM(o->share_instance >= 0, "share_instance %d", o->share_instance)
    ITEM(o->obs_with_env, "obs_with_env")
    ITEM(o->rewards_with_env, "rewards_with_env")
    ITEM(o->process_path, "process_path %s", o->process_path)
#undef ITEM
    for (int i = 0; i < o->n_env_path; i++)
        df_sbuf_printf(b, "%s%s%s", i ? ", " : *sep ? ", env_path [" : "env_path [", o->env_path[i],
                       i == o->n_env_path - 1 ? "]" : "");
    if (o->n_env_path)
        sep = ", ";
    kwarg_keys(b, &sep, "pre_process_kwargs", o->pre_kwargs, o->n_pre_kwargs);
    kwarg_keys(b, &sep, "post_process_kwargs", o->post_kwargs, o->n_post_kwargs);
    if (!*sep)
        df_sbuf_printf(b, "(none set)");
}
