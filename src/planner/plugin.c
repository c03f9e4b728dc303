/* Plugin libraries: "path/to/libx.so:symbol" refs loaded with dlopen / dlsym
 * (include/distflow/dag.h, "Plugins"). One dlopen per file, cached by real
 * path; the cache is freed by df_exec_unload_plugins() or at exit. Before a
 * file is opened its ELF symbol table is read as data (plugin_elf.c), so a
 * library built for another ABI is refused before its constructors run. */
#include "planner/dag_internal.h"

#include "util/fn_registry.h"
#include "util/fsutil.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

typedef struct plugin {
    char *path;    /* real path: the cache key */
    void *handle;
    struct plugin_reg {
        df_fn_registry *reg; /* executables, rewards, estimators, losses, ... */
        char *name;
    } *regs;               /* what its df_plugin_init registered, removed on unload */
    int n_regs, cap_regs;
} plugin;

/* The plugin registry: loaded libraries (each allocated on its own so a
 * df_plugin_init that loads another plugin cannot move it), and the one whose
 * init is running. */
static plugin **g_plugins;
static int g_n_plugins, g_cap_plugins;
static plugin *g_initialising;
static int g_atexit_done;

int df_plugin_is_ref(const char *ref)
{
    const char *colon = strrchr(ref, ':');
    if (!colon)
        return 0;
    size_t n = (size_t)(colon - ref);
    return (n > 3 && !strncmp(colon - 3, ".so", 3)) || memchr(ref, '/', n) != NULL;
}

/* Remember a name registered by the plugin being initialised, so that unloading
 * it does not leave a registry entry pointing into unmapped code. */
/* df_fn_registry hook while a plugin's init runs: remember (registry, name). */
static void note_registration(df_fn_registry *reg, const char *name)
{
    plugin *p = g_initialising;
    if (!p)
        return;
    for (int i = 0; i < p->n_regs; i++)
        if (p->regs[i].reg == reg && !strcmp(p->regs[i].name, name))
            return;
    if (p->n_regs == p->cap_regs) {
        int cap = p->cap_regs ? 2 * p->cap_regs : 4;
        struct plugin_reg *nr = realloc(p->regs, (size_t)cap * sizeof *nr);
        if (!nr)
            return; /* worst case the name outlives the plugin, as with any registration */
        p->regs = nr;
        p->cap_regs = cap;
    }
    char *copy = strdup(name);
    if (copy)
        p->regs[p->n_regs++] = (struct plugin_reg){reg, copy};
}

/* From here to registrations_end(outer), what is registered belongs to p (note_registration);
   returns the plugin whose registrations were being recorded before (a plugin loading another). */
static plugin *registrations_of(plugin *p)
{
    plugin *outer = g_initialising;
    g_initialising = p;
    df_fn_registry_set_add_hook(note_registration);
    return outer;
}

static void registrations_end(plugin *outer)
{
    g_initialising = outer;
    if (!outer)
        df_fn_registry_set_add_hook(NULL);
}

static void plugin_release(plugin *p)
{
    for (int i = 0; i < p->n_regs; i++) {
        df_fn_registry_remove(p->regs[i].reg, p->regs[i].name);
        free(p->regs[i].name);
    }
    free(p->regs);
    if (p->handle)
        dlclose(p->handle);
    free(p->path);
}

void df_exec_unload_plugins(void)
{
    /* newest first: a later plugin may have shadowed an earlier one's names */
    for (int i = g_n_plugins - 1; i >= 0; i--) {
        plugin_release(g_plugins[i]);
        free(g_plugins[i]);
    }
    free(g_plugins);
    g_plugins = NULL;
    g_n_plugins = g_cap_plugins = 0;
}

int df_plugin_count(void) { return g_n_plugins; }

/* The ABI marker, then df_plugin_init; p->handle is open. */
static int plugin_check_and_init(plugin *p, const char *ref)
{
    dlerror();
    const int *abi = dlsym(p->handle, "df_plugin_abi_version");
    if (!abi)
        return df_error(DF_EINVAL,
                        "plugin '%s' (ref '%s'): does not export df_plugin_abi_version "
                        "(add DF_PLUGIN_DECLARE_ABI; from distflow/dag.h)",
                        p->path, ref);
    if (*abi != DF_PLUGIN_ABI_VERSION)
        return df_error(DF_EUNSUPPORTED,
                        "plugin '%s' (ref '%s'): built for plugin ABI %d, this distflow has "
                        "ABI %d; rebuild it against this distflow's headers",
                        p->path, ref, *abi, DF_PLUGIN_ABI_VERSION);
    void *init = dlsym(p->handle, "df_plugin_init");
    if (!init)
        return DF_OK;
    df_plugin_init_fn fn;
    memcpy(&fn, &init, sizeof fn); /* object -> function pointer, as POSIX dlsym allows */
    plugin *outer = registrations_of(p);
    df_clear_error();
    int rc = fn();
    registrations_end(outer);
    if (rc)
        return df_error_wrap(rc, "plugin '%s' (ref '%s'): df_plugin_init failed%s", p->path, ref,
                             df_last_error()[0] ? "" : " (no message)");
    return DF_OK;
}

/* The real path of `file` (as written in ref: "~/" expanded) into real[PATH_MAX]. */
static int plugin_real_path(const char *file, const char *ref, char *real)
{
    char *expanded = df_expand_user(file);
    if (!expanded)
        return df_error(DF_ENOMEM, "out of memory");
    int rc = DF_OK;
    if (!realpath(expanded, real)) {
        int e = errno;
        rc = df_error(e == ENOENT ? DF_ENOTFOUND : DF_EIO, "plugin '%s' (ref '%s'): %s", expanded, ref,
                      e == ENOENT ? "no such file" : strerror(e));
    }
    free(expanded);
    return rc;
}

/* The loaded plugin for `file` (as written in ref), loading it on first use. */
static int plugin_get(const char *file, const char *ref, plugin **out)
{
    char real[PATH_MAX];
    int rc = plugin_real_path(file, ref, real);
    if (rc)
        return rc;
    for (int i = 0; i < g_n_plugins; i++)
        if (!strcmp(g_plugins[i]->path, real)) {
            *out = g_plugins[i];
            return DF_OK;
        }
    /* the file as data first: dlopen runs the library's constructors, even for a wrong ABI */
    if ((rc = df_plugin_elf_check(real, NULL, 0, NULL)))
        return df_error_wrap(rc, "plugin '%s' (ref '%s')", real, ref);
    if (g_n_plugins == g_cap_plugins) {
        int cap = g_cap_plugins ? 2 * g_cap_plugins : 4;
        plugin **np = realloc(g_plugins, (size_t)cap * sizeof *np);
        if (!np)
            return df_error(DF_ENOMEM, "out of memory");
        g_plugins = np;
        g_cap_plugins = cap;
    }
    plugin *p = calloc(1, sizeof *p);
    if (p)
        p->path = strdup(real);
    if (!p || !p->path) {
        free(p);
        return df_error(DF_ENOMEM, "out of memory");
    }
    dlerror();
    p->handle = dlopen(real, RTLD_NOW | RTLD_LOCAL);
    if (!p->handle) {
        const char *why = dlerror();
        rc = df_error(DF_EINVAL, "plugin '%s' (ref '%s'): cannot load: %s", real, ref,
                      why ? why : "unknown dlopen error");
    }
    if (!rc)
        rc = plugin_check_and_init(p, ref);
    if (rc) { /* not cached: a fixed file can be loaded on the next try */
        plugin_release(p);
        free(p);
        return rc;
    }
    if (!g_atexit_done && atexit(df_exec_unload_plugins) == 0)
        g_atexit_done = 1;
    g_plugins[g_n_plugins++] = p;
    *out = p;
    return DF_OK;
}

/* "path:symbol" -> a malloc'd path and a pointer to the symbol inside ref. */
static int split_ref(const char *ref, char **file, const char **sym)
{
    if (!ref || !ref[0])
        return df_error(DF_EINVAL, "empty plugin ref");
    const char *colon = strrchr(ref, ':');
    if (!colon || colon == ref || !colon[1])
        return df_error(DF_EINVAL,
                        "plugin ref '%s': expected 'path/to/libname.so:symbol' (file and symbol "
                        "both non-empty)",
                        ref);
    size_t n = (size_t)(colon - ref);
    if (!(*file = malloc(n + 1)))
        return df_error(DF_ENOMEM, "out of memory");
    memcpy(*file, ref, n);
    (*file)[n] = '\0';
    *sym = colon + 1;
    return DF_OK;
}

static int plugin_address(const char *ref, void **addr, plugin **owner);

/* df_plugin_check, of a function (size 0) or of a data object of `size` bytes copied to obj. */
static int check_ref(const char *ref, size_t size, void *obj)
{
    char *file = NULL, real[PATH_MAX];
    const char *sym = NULL;
    int rc = split_ref(ref, &file, &sym);
    if (!rc)
        rc = plugin_real_path(file, ref, real);
    free(file);
    if (!rc && (rc = df_plugin_elf_check(real, sym, size, obj)))
        df_error_wrap(rc, "plugin '%s' (ref '%s')", real, ref);
    return rc;
}

int df_plugin_check(const char *ref)
{
    return check_ref(ref, 0, NULL);
}

int df_plugin_check_object(const char *ref, size_t size, void *bytes)
{
    if (!size || !bytes)
        return df_error(DF_EINVAL, "plugin ref '%s': no object size or buffer", ref ? ref : "(null)");
    return check_ref(ref, size, bytes);
}

/* The address of ref's exported data object of `size` bytes (checked in the file first), and the
   plugin that holds it, loading the library on first use. */
static int plugin_object(const char *ref, size_t size, const void **addr, plugin **owner)
{
    /* the symbol's kind and size from the file first: dlsym would return any symbol's address */
    void *bytes = size ? malloc(size) : NULL;
    int rc = bytes ? df_plugin_check_object(ref, size, bytes)
                   : df_error(DF_EINVAL, "plugin ref '%s': object of size 0", ref ? ref : "(null)");
    free(bytes);
    void *a = NULL;
    if (!rc)
        rc = plugin_address(ref, &a, owner);
    *addr = rc ? NULL : a;
    return rc;
}

int df_plugin_object_register(const char *ref, size_t size, int (*reg)(const void *obj, void *arg), void *arg)
{
    const void *obj = NULL;
    plugin *p = NULL;
    int rc = plugin_object(ref, size, &obj, &p);
    if (rc)
        return rc;
    plugin *outer = registrations_of(p);
    rc = reg(obj, arg);
    registrations_end(outer);
    return rc;
}

/* The address dlsym gives for ref's symbol, loading its library (*owner, may be NULL) on first use. */
static int plugin_address(const char *ref, void **addr, plugin **owner)
{
    char *file = NULL;
    const char *sym = NULL;
    int rc = split_ref(ref, &file, &sym);
    if (rc)
        return rc;
    plugin *p = NULL;
    rc = plugin_get(file, ref, &p);
    free(file);
    if (rc)
        return rc;
    if (owner)
        *owner = p;
    dlerror();
    *addr = dlsym(p->handle, sym);
    if (!*addr)
        return df_error(DF_ENOTFOUND, "plugin '%s' (ref '%s'): no exported symbol '%s'", p->path,
                        ref, sym);
    return DF_OK;
}

int df_plugin_symbol(const char *ref, void (**fn)(void))
{
    void *addr = NULL;
    int rc = plugin_address(ref, &addr, NULL);
    if (!rc)
        memcpy(fn, &addr, sizeof *fn); /* POSIX: dlsym's object pointer holds a function's address */
    return rc;
}

int df_pipeline_from_plugin(const char *ref, df_task_graph **out)
{
    *out = NULL;
    void (*any)(void) = NULL;
    int rc = df_plugin_symbol(ref, &any);
    if (rc)
        return rc;
    df_pipeline_fn make = (df_pipeline_fn)any;
    df_task_graph *g = NULL;
    df_clear_error();
    rc = make(&g);
    if (rc) {
        df_task_graph_free(g);
        return df_error_wrap(rc, "custom pipeline '%s'%s", ref,
                             df_last_error()[0] ? "" : ": failed (no message)");
    }
    if (!g)
        return df_error(DF_EINVAL, "custom pipeline '%s' returned 0 but no task graph", ref);
    rc = df_task_graph_validate(g);
    if (rc) {
        df_task_graph_free(g);
        return df_error_wrap(rc, "custom pipeline '%s'", ref);
    }
    *out = g;
    return DF_OK;
}
