/* Reward functions keyed by data_source (include/distflow/reward.h). */
#include "distflow/reward.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char name[DF_REWARD_NAME_MAX];
    df_reward_fn fn;
} entry;

/* The registry: the one global this module keeps (DESIGN.md §7). */
static struct {
    pthread_mutex_t mu;
    pthread_once_t once;
    entry *v;
    int n, cap;
} g_reg = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_ONCE_INIT, NULL, 0, 0};

/* Caller holds the lock. */
static int put(const char *name, df_reward_fn fn)
{
    for (int i = 0; i < g_reg.n; i++)
        if (!strcmp(g_reg.v[i].name, name)) {
            g_reg.v[i].fn = fn;
            return DF_OK;
        }
    if (g_reg.n == g_reg.cap) {
        int cap = g_reg.cap ? 2 * g_reg.cap : 16;
        entry *nv = realloc(g_reg.v, (size_t)cap * sizeof *nv);
        if (!nv)
            return df_error(DF_ENOMEM, "reward registry: out of memory adding %s", name);
        g_reg.v = nv;
        g_reg.cap = cap;
    }
    snprintf(g_reg.v[g_reg.n].name, DF_REWARD_NAME_MAX, "%s", name);
    g_reg.v[g_reg.n].fn = fn;
    g_reg.n++;
    return DF_OK;
}

static void add_builtins(void)
{
    pthread_mutex_lock(&g_reg.mu);
    put("openai/gsm8k", df_reward_gsm8k);
    put("synthetic/arithmetic", df_reward_synthetic);
    pthread_mutex_unlock(&g_reg.mu);
}

int df_reward_register(const char *name, df_reward_fn fn)
{
    if (!name || !name[0] || strlen(name) >= DF_REWARD_NAME_MAX)
        return df_error(DF_EINVAL, "reward registry: name must be 1 to %d bytes",
                        DF_REWARD_NAME_MAX - 1);
    if (!fn)
        return df_error(DF_EINVAL, "reward registry: NULL function for %s", name);
    pthread_once(&g_reg.once, add_builtins);
    pthread_mutex_lock(&g_reg.mu);
    int rc = put(name, fn);
    pthread_mutex_unlock(&g_reg.mu);
    return rc;
}

int df_reward_lookup(const char *name, df_reward_fn *out)
{
    pthread_once(&g_reg.once, add_builtins);
    pthread_mutex_lock(&g_reg.mu);
    df_reward_fn fn = NULL;
    for (int i = 0; name && i < g_reg.n; i++)
        if (!strcmp(g_reg.v[i].name, name))
            fn = g_reg.v[i].fn;
    if (fn) {
        pthread_mutex_unlock(&g_reg.mu);
        *out = fn;
        return DF_OK;
    }
    char known[1024];
    size_t at = 0;
    known[0] = '\0';
    for (int i = 0; i < g_reg.n && at < sizeof known; i++) {
        int w = snprintf(known + at, sizeof known - at, "%s%s", i ? ", " : "", g_reg.v[i].name);
        at += w > 0 ? (size_t)w : 0;
    }
    pthread_mutex_unlock(&g_reg.mu);
    return df_error(DF_ENOTFOUND, "no reward function for data_source \"%s\" (registered: %s)",
                    name ? name : "(null)", known);
}
