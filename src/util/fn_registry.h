/*
 * fn_registry.h (internal) — a name -> function pointer table, the shared
 * machinery behind distflow's registries (advantage estimators, policy losses,
 * node executables; docs/conventions.md §2). Built-in entries live in a static const
 * table owned by the caller; runtime registrations go to a growable list that
 * is consulted first, so a plugin can add names or shadow a built-in. An
 * optional static alias table maps other spellings of a name (siiRL's module
 * paths, e.g. "siirl.algorithm.dapo.dynamic_sampling") to a registered name.
 *
 * Registration is not thread-safe: register during start-up, before threads.
 */
#ifndef DF_UTIL_FN_REGISTRY_H
#define DF_UTIL_FN_REGISTRY_H

#include <stddef.h>

/* Any function pointer type converts to this and back without loss (C11 6.3.2.3p8). */
typedef void (*df_any_fn)(void);

typedef struct df_fn_entry {
    const char *name;
    df_any_fn fn;
    const void *data; /* what the registry's owner keeps beside the function (an algorithm's
                         descriptor), or NULL; runtime entries own a copy */
} df_fn_entry;

/* Another spelling of a registered name: looking up `alias` finds `target`. */
typedef struct df_fn_alias {
    const char *alias, *target;
} df_fn_alias;

typedef struct df_fn_registry {
    const char *kind;             /* for messages: "advantage estimator", ... */
    const df_fn_entry *builtins;  /* static table, may be NULL */
    size_t n_builtins;
    df_fn_entry *extra;           /* runtime registrations (names owned) */
    size_t n_extra, cap_extra;
    const df_fn_alias *aliases;   /* static table, may be NULL; last so positional initialisers hold */
    size_t n_aliases;
} df_fn_registry;

/* The function registered under `name` (runtime entries first, then built-ins,
 * then an alias's target, looked up the same way but one level deep), or NULL. */
df_any_fn df_fn_registry_find(const df_fn_registry *r, const char *name);
/* The entry registered under `name` (runtime entries first, then built-ins, then an alias's target), or NULL. */
const df_fn_entry *df_fn_registry_find_entry(const df_fn_registry *r, const char *name);

/* The target name when `name` is an alias (and not itself registered), else NULL. */
const char *df_fn_registry_alias_target(const df_fn_registry *r, const char *name);

/* The known name (registered or alias) nearest to `name`, for "closest we have"
 * hints: the smallest Levenshtein distance between the last components (after
 * the last '.' or ':'), ties broken by a registered name before an alias, then
 * by the distance between the whole names, then by order (runtime, built-in,
 * alias). NULL when the registry is empty. */
const char *df_fn_registry_closest(const df_fn_registry *r, const char *name);

/* Add or replace a runtime entry. DF_EINVAL for an empty name or NULL fn. */
int df_fn_registry_add(df_fn_registry *r, const char *name, df_any_fn fn);
/* The same with `size` bytes of `data` copied beside it (data NULL: none): a descriptor whose
 * first member is a `const char *` name, which in the copy points at the registry's own copy of
 * `name`. The copy is freed when the entry is replaced or removed. Errors as
 * df_fn_registry_add, DF_EINVAL for data smaller than a pointer, DF_ENOMEM. */
int df_fn_registry_add_data(df_fn_registry *r, const char *name, df_any_fn fn, const void *data, size_t size);

/* Called after every successful df_fn_registry_add (any registry): the plugin
 * loader records what a plugin's df_plugin_init registers, to remove it again
 * before dlclose. */
typedef void (*df_fn_registry_hook)(df_fn_registry *r, const char *name);
/* Set (or clear, NULL) the hook; returns nothing. Not thread-safe (start-up). */
void df_fn_registry_set_add_hook(df_fn_registry_hook hook);

/* Remove a runtime entry; returns 1 if one was removed, 0 otherwise. */
int df_fn_registry_remove(df_fn_registry *r, const char *name);

/* Look `name` up into *out; when absent, return `code` with the message
 * "unknown <kind> 'name' (known: a, b, ...)". */
int df_fn_registry_lookup(const df_fn_registry *r, const char *name, int code, df_any_fn *out);
/* Comma-separated list of every known name (runtime first) for error messages,
 * written into buf (always NUL-terminated, cut at cap). */
void df_fn_registry_names(const df_fn_registry *r, char *buf, size_t cap);

#endif /* DF_UTIL_FN_REGISTRY_H */
