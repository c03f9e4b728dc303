/* Live bytes by address (memtrack.h): linear probing, backward-shift deletion (no tombstones). */
#include "util/memtrack.h"

#include "distflow/common.h"

#include <stdlib.h>

static int64_t slot_of(const df_memtrack *t, const void *p)
{
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull; /* Fibonacci hashing */
    return (int64_t)(h >> 20) & (t->cap - 1);
}

static int64_t find(const df_memtrack *t, const void *p)
{
    if (!t->cap)
        return -1;
    for (int64_t i = slot_of(t, p);; i = (i + 1) & (t->cap - 1)) {
        if (t->keys[i] == p)
            return i;
        if (!t->keys[i])
            return -1;
    }
}

static void put(df_memtrack *t, const void *p, int64_t bytes)
{
    int64_t i = slot_of(t, p);
    while (t->keys[i])
        i = (i + 1) & (t->cap - 1);
    t->keys[i] = p;
    t->sizes[i] = bytes;
}

/* Keep the load at most a half. */
static int grow(df_memtrack *t)
{
    int64_t cap = t->cap ? 2 * t->cap : 64;
    df_memtrack g = {.keys = calloc((size_t)cap, sizeof *g.keys), .sizes = malloc((size_t)cap * sizeof *g.sizes),
                     .cap = cap};
    if (!g.keys || !g.sizes) {
        free(g.keys), free(g.sizes);
        return df_error(DF_ENOMEM, "out of memory tracking device allocations");
    }
    for (int64_t i = 0; i < t->cap; i++)
        if (t->keys[i])
            put(&g, t->keys[i], t->sizes[i]);
    free(t->keys), free(t->sizes);
    t->keys = g.keys, t->sizes = g.sizes, t->cap = cap;
    return DF_OK;
}

int df_memtrack_add(df_memtrack *t, const void *p, int64_t bytes)
{
    if (2 * (t->n + 1) > t->cap && grow(t))
        return DF_ENOMEM;
    put(t, p, bytes);
    t->n++;
    t->live += bytes;
    if (t->live > t->peak)
        t->peak = t->live;
    return DF_OK;
}

void df_memtrack_remove(df_memtrack *t, const void *p)
{
    int64_t i = p ? find(t, p) : -1;
    if (i < 0)
        return;
    t->live -= t->sizes[i];
    t->n--;
    t->keys[i] = NULL;
    /* pull later entries of the cluster back over the hole when their home slot allows it */
    for (int64_t j = (i + 1) & (t->cap - 1); t->keys[j]; j = (j + 1) & (t->cap - 1)) {
        int64_t home = slot_of(t, t->keys[j]);
        if (((j - home) & (t->cap - 1)) >= ((j - i) & (t->cap - 1))) {
            t->keys[i] = t->keys[j], t->sizes[i] = t->sizes[j];
            t->keys[j] = NULL;
            i = j;
        }
    }
}

void df_memtrack_free(df_memtrack *t)
{
    free(t->keys), free(t->sizes);
    t->keys = NULL, t->sizes = NULL;
    t->cap = t->n = 0;
}
