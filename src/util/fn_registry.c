/* Name -> function pointer tables (src/util/fn_registry.h). */
#include "util/fn_registry.h"

#include "distflow/common.h"

#include <stdlib.h>
#include <string.h>

static df_fn_entry *find_extra(const df_fn_registry *r, const char *name)
{
    for (size_t i = 0; i < r->n_extra; i++)
        if (!strcmp(r->extra[i].name, name))
            return &r->extra[i];
    return NULL;
}

/* A registered entry (no aliases). */
static const df_fn_entry *find_direct(const df_fn_registry *r, const char *name)
{
    const df_fn_entry *e = find_extra(r, name);
    if (e)
        return e;
    for (size_t i = 0; i < r->n_builtins; i++)
        if (!strcmp(r->builtins[i].name, name))
            return &r->builtins[i];
    return NULL;
}

const df_fn_entry *df_fn_registry_find_entry(const df_fn_registry *r, const char *name)
{
    if (!name)
        return NULL;
    const df_fn_entry *e = find_direct(r, name);
    const char *target = e ? NULL : df_fn_registry_alias_target(r, name);
    return e ? e : target ? find_direct(r, target) : NULL;
}

df_any_fn df_fn_registry_find(const df_fn_registry *r, const char *name)
{
    const df_fn_entry *e = df_fn_registry_find_entry(r, name);
    return e ? e->fn : NULL;
}

const char *df_fn_registry_alias_target(const df_fn_registry *r, const char *name)
{
    if (!name || find_direct(r, name))
        return NULL;
    for (size_t i = 0; i < r->n_aliases; i++)
        if (!strcmp(r->aliases[i].alias, name))
            return r->aliases[i].target;
    return NULL;
}

/* Levenshtein distance of a[0..na) and b[0..nb), capped at 64 characters each (hints only). */
static int edit_distance(const char *a, size_t na, const char *b, size_t nb)
{
    na = na > 64 ? 64 : na;
    nb = nb > 64 ? 64 : nb;
    int row[65];
    for (size_t j = 0; j <= nb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[nb];
}

/* The part of a name after its last '.' or ':' (a function's own name). */
static const char *last_part(const char *s)
{
    const char *p = s;
    for (const char *c = s; *c; c++)
        if (*c == '.' || *c == ':')
            p = c + 1;
    return p;
}

typedef struct {
    const char *name, *tail, *best;
    int d_tail, alias, d_full;
} closest_state;

/* (tail distance, alias, whole-name distance) compared in that order: the lowest wins. */
static void consider(closest_state *st, const char *cand, int alias)
{
    const char *t = last_part(cand);
    int dt = edit_distance(st->tail, strlen(st->tail), t, strlen(t));
    int df = edit_distance(st->name, strlen(st->name), cand, strlen(cand));
    if (!st->best || dt < st->d_tail || (dt == st->d_tail && (alias < st->alias ||
                                                             (alias == st->alias && df < st->d_full)))) {
        st->best = cand;
        st->d_tail = dt;
        st->alias = alias;
        st->d_full = df;
    }
}

const char *df_fn_registry_closest(const df_fn_registry *r, const char *name)
{
    closest_state st = {.name = name ? name : "", .tail = last_part(name ? name : "")};
    for (size_t i = 0; i < r->n_extra; i++)
        consider(&st, r->extra[i].name, 0);
    for (size_t i = 0; i < r->n_builtins; i++)
        consider(&st, r->builtins[i].name, 0);
    for (size_t i = 0; i < r->n_aliases; i++)
        if (find_direct(r, r->aliases[i].target)) /* only spellings of what is there */
            consider(&st, r->aliases[i].alias, 1);
    return st.best;
}

static df_fn_registry_hook g_add_hook;

void df_fn_registry_set_add_hook(df_fn_registry_hook hook)
{
    g_add_hook = hook;
}

static int added(df_fn_registry *r, const char *name)
{
    if (g_add_hook)
        g_add_hook(r, name);
    return DF_OK;
}

/* The data copy's leading name member points at the entry's own name, which lives as long. */
static void name_data(df_fn_entry *e)
{
    if (e->data)
        memcpy((void *)e->data, &e->name, sizeof e->name);
}

int df_fn_registry_add(df_fn_registry *r, const char *name, df_any_fn fn)
{
    return df_fn_registry_add_data(r, name, fn, NULL, 0);
}

int df_fn_registry_add_data(df_fn_registry *r, const char *name, df_any_fn fn, const void *data, size_t size)
{
    if (!name || !name[0])
        return df_error(DF_EINVAL, "%s registry: empty name", r->kind);
    if (!fn)
        return df_error(DF_EINVAL, "%s registry: NULL function for '%s'", r->kind, name);
    if (data && size < sizeof(const char *))
        return df_error(DF_EINVAL, "%s registry: data of '%s' too small to start with its name", r->kind, name);
    void *copy_data = NULL;
    if (data && !(copy_data = malloc(size)))
        return df_error(DF_ENOMEM, "%s registry: out of memory adding '%s'", r->kind, name);
    if (data)
        memcpy(copy_data, data, size);
    df_fn_entry *e = find_extra(r, name);
    if (e) {
        free((void *)e->data);
        e->fn = fn;
        e->data = copy_data;
        name_data(e);
        return added(r, name);
    }
    if (r->n_extra == r->cap_extra) {
        size_t cap = r->cap_extra ? 2 * r->cap_extra : 16;
        df_fn_entry *nv = realloc(r->extra, cap * sizeof *nv);
        if (!nv) {
            free(copy_data);
            return df_error(DF_ENOMEM, "%s registry: out of memory adding '%s'", r->kind, name);
        }
        r->extra = nv;
        r->cap_extra = cap;
    }
    char *copy = strdup(name);
    if (!copy) {
        free(copy_data);
        return df_error(DF_ENOMEM, "%s registry: out of memory adding '%s'", r->kind, name);
    }
    r->extra[r->n_extra] = (df_fn_entry){copy, fn, copy_data};
    name_data(&r->extra[r->n_extra++]);
    return added(r, name);
}

int df_fn_registry_remove(df_fn_registry *r, const char *name)
{
    df_fn_entry *e = find_extra(r, name);
    if (!e)
        return 0;
    free((char *)e->name);
    free((void *)e->data);
    size_t i = (size_t)(e - r->extra);
    memmove(e, e + 1, (r->n_extra - i - 1) * sizeof *e);
    r->n_extra--;
    return 1;
}

/* Append s at *len; output past cap is cut (the list is only for messages). */
static void append(char *buf, size_t cap, size_t *len, const char *s)
{
    if (*len + 1 >= cap)
        return;
    size_t n = strlen(s), room = cap - 1 - *len;
    if (n > room)
        n = room;
    memcpy(buf + *len, s, n);
    *len += n;
    buf[*len] = '\0';
}

void df_fn_registry_names(const df_fn_registry *r, char *buf, size_t cap)
{
    size_t len = 0;
    if (!cap)
        return;
    buf[0] = '\0';
    for (size_t i = 0; i < r->n_extra; i++) {
        if (len)
            append(buf, cap, &len, ", ");
        append(buf, cap, &len, r->extra[i].name);
    }
    for (size_t i = 0; i < r->n_builtins; i++) {
        if (find_extra(r, r->builtins[i].name))
            continue; /* shadowed: listed once */
        if (len)
            append(buf, cap, &len, ", ");
        append(buf, cap, &len, r->builtins[i].name);
    }
}

int df_fn_registry_lookup(const df_fn_registry *r, const char *name, int code, df_any_fn *out)
{
    df_any_fn f = df_fn_registry_find(r, name);
    if (f) {
        *out = f;
        return DF_OK;
    }
    char known[1024];
    df_fn_registry_names(r, known, sizeof known);
    return df_error(code, "unknown %s '%s' (known: %s)", r->kind, name ? name : "(null)",
                    known[0] ? known : "none");
}
