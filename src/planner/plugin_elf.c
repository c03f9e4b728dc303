/*
 * A plugin's ELF file read as data (include/distflow/dag.h, df_plugin_check):
 * what `distflow plan` / `config check` / `train` need to know about a
 * "path/libx.so:symbol" ref — the file is a shared object this process could
 * load, its df_plugin_abi_version, the symbol a function, the distflow
 * functions it calls present here — found without dlopen, which would run the
 * library's ELF constructors (and the loader would run df_plugin_init).
 *
 * Read with libelf (Debian libelf-dev, elfutils): the ELF header, the section
 * of type SHT_DYNSYM (the symbols the dynamic loader sees, with their string
 * table) and, for the ABI marker, the bytes of the section holding it. libelf
 * checks every offset and size against the file, so a truncated or hostile
 * file is an error, never a read out of bounds.
 */
#include "planner/dag_internal.h"

#include <dlfcn.h> /* dladdr, RTLD_DEFAULT: _GNU_SOURCE, set by the build */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The host's ELF class, byte order and machine: those of the object holding this code. */
typedef struct {
    bool known;
    unsigned char cls, data;
    GElf_Half machine;
} host_kind;

static int elf_ready(void)
{
    static int state; /* 0 not tried, 1 ready, -1 failed */
    if (!state)
        state = elf_version(EV_CURRENT) == EV_NONE ? -1 : 1;
    return state > 0 ? DF_OK : df_error(DF_EINTERNAL, "libelf: %s", elf_errmsg(-1));
}

/* An open ELF file: *fd and *e, or an error naming what is wrong with it. */
static int open_elf(const char *path, int *fd, Elf **e)
{
    *e = NULL;
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0)
        return df_error(DF_EIO, "cannot load: cannot open: %s", strerror(errno));
    *e = elf_begin(*fd, ELF_C_READ, NULL);
    if (!*e || elf_kind(*e) != ELF_K_ELF)
        return df_error(DF_EINVAL, "cannot load: not an ELF file");
    return DF_OK;
}

static void close_elf(int fd, Elf *e)
{
    if (e)
        elf_end(e);
    if (fd >= 0)
        close(fd);
}

static const host_kind *host(void)
{
    static host_kind h;
    static bool tried;
    if (tried)
        return &h;
    tried = true;
    Dl_info info;
    void *self;
    int (*fn)(const char *) = df_plugin_check;
    memcpy(&self, &fn, sizeof self); /* function -> object pointer, as POSIX dladdr takes it */
    int fd = -1;
    Elf *e = NULL;
    GElf_Ehdr eh;
    if (dladdr(self, &info) && info.dli_fname && !open_elf(info.dli_fname, &fd, &e) && gelf_getehdr(e, &eh)) {
        h = (host_kind){true, eh.e_ident[EI_CLASS], eh.e_ident[EI_DATA], eh.e_machine};
    }
    df_clear_error(); /* unknown host: the class / machine checks are left to dlopen */
    close_elf(fd, e);
    return &h;
}

/* The ELF header: a shared object of the host's class, byte order and machine. */
static int check_header(Elf *e)
{
    GElf_Ehdr eh;
    if (!gelf_getehdr(e, &eh))
        return df_error(DF_EINVAL, "cannot load: unreadable ELF header: %s", elf_errmsg(-1));
    if (eh.e_type != ET_DYN)
        return df_error(DF_EINVAL, "cannot load: not a shared object (ELF type %u; build it with -shared -fPIC)",
                        (unsigned)eh.e_type);
    const host_kind *h = host();
    if (h->known && (eh.e_ident[EI_CLASS] != h->cls || eh.e_ident[EI_DATA] != h->data))
        return df_error(DF_EINVAL, "cannot load: built for another word size or byte order (ELF class %u, data %u; this "
                                   "program: %u, %u)",
                        eh.e_ident[EI_CLASS], eh.e_ident[EI_DATA], h->cls, h->data);
    if (h->known && eh.e_machine != h->machine)
        return df_error(DF_EINVAL, "cannot load: built for another machine (ELF machine %u; this program: %u)",
                        (unsigned)eh.e_machine, (unsigned)h->machine);
    return DF_OK;
}

/* The dynamic symbol table's section and data. */
static int dynsym(Elf *e, GElf_Shdr *sh, Elf_Data **d)
{
    for (Elf_Scn *s = elf_nextscn(e, NULL); s; s = elf_nextscn(e, s)) {
        if (!gelf_getshdr(s, sh) || sh->sh_type != SHT_DYNSYM)
            continue;
        *d = elf_getdata(s, NULL);
        if (!*d || !sh->sh_entsize)
            return df_error(DF_EINVAL, "unreadable dynamic symbol table: %s", elf_errmsg(-1));
        return DF_OK;
    }
    return df_error(DF_EINVAL, "no dynamic symbol table (section headers stripped?)");
}

/* The `size` bytes a defined object symbol holds in the file, as stored: constants are there,
   pointers wait for relocations the loader would apply (a zero-initialised object reads as zeros). */
static int object_bytes(Elf *e, const GElf_Sym *sym, const char *name, size_t size, void *out)
{
    if (sym->st_size != size || sym->st_shndx == SHN_UNDEF || sym->st_shndx >= SHN_LORESERVE)
        return df_error(DF_EINVAL, "'%s' is not an object of %zu bytes defined in the library (size %llu)", name,
                        size, (unsigned long long)sym->st_size);
    Elf_Scn *s = elf_getscn(e, sym->st_shndx);
    GElf_Shdr sh;
    if (!s || !gelf_getshdr(s, &sh))
        return df_error(DF_EINVAL, "'%s': unreadable section: %s", name, elf_errmsg(-1));
    if (sh.sh_type == SHT_NOBITS) {
        memset(out, 0, size);
        return DF_OK;
    }
    Elf_Data *d = elf_getdata(s, NULL);
    if (!d || sym->st_value < sh.sh_addr || sym->st_value - sh.sh_addr > d->d_size ||
        size > d->d_size - (sym->st_value - sh.sh_addr))
        return df_error(DF_EINVAL, "'%s' lies outside its section", name);
    memcpy(out, (const char *)d->d_buf + (sym->st_value - sh.sh_addr), size); /* host byte order */
    return DF_OK;
}

/* What the symbol table says: the marker, the symbol, the distflow functions the library needs. */
static int check_symbols(Elf *e, const char *symbol, size_t obj_size, void *obj)
{
    GElf_Shdr sh;
    Elf_Data *d = NULL;
    int rc = dynsym(e, &sh, &d);
    if (rc)
        return rc;
    size_t n = sh.sh_size / sh.sh_entsize;
    bool have_abi = false, have_sym = !symbol;
    int abi = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        GElf_Sym s;
        const char *name = gelf_getsym(d, (int)i, &s) ? elf_strptr(e, sh.sh_link, s.st_name) : NULL;
        if (!name || !name[0])
            continue;
        bool defined = s.st_shndx != SHN_UNDEF;
        int type = GELF_ST_TYPE(s.st_info), bind = GELF_ST_BIND(s.st_info);
        bool exported = defined && (bind == STB_GLOBAL || bind == STB_WEAK) &&
                        GELF_ST_VISIBILITY(s.st_other) != STV_HIDDEN;
        if (exported && !strcmp(name, "df_plugin_abi_version")) {
            have_abi = true;
            rc = object_bytes(e, &s, name, sizeof abi, &abi);
        } else if (exported && symbol && !strcmp(name, symbol)) {
            if (obj_size && type != STT_OBJECT)
                return df_error(DF_EINVAL, "'%s' is not a data object (ELF symbol type %d)", symbol, type);
            if (!obj_size && type != STT_FUNC && type != STT_GNU_IFUNC)
                return df_error(DF_EINVAL, "'%s' is not a function (ELF symbol type %d)", symbol, type);
            if (obj_size)
                rc = object_bytes(e, &s, name, obj_size, obj);
            have_sym = true;
        } else if (!defined && bind == STB_GLOBAL && !strncmp(name, "df_", 3) &&
                   !dlsym(RTLD_DEFAULT, name)) {
            /* distflow's API comes from the host; dlopen would fail on it with "undefined symbol" */
            return df_error(DF_EINVAL, "cannot load: undefined symbol: %s (the library calls a distflow function this "
                                       "program does not export: built against another distflow?)",
                            name);
        }
    }
    if (rc)
        return rc;
    if (!have_abi)
        return df_error(DF_EINVAL, "does not export df_plugin_abi_version (add DF_PLUGIN_DECLARE_ABI; "
                                   "from distflow/dag.h)");
    if (abi != DF_PLUGIN_ABI_VERSION)
        return df_error(DF_EUNSUPPORTED, "built for plugin ABI %d, this distflow has ABI %d; rebuild it "
                                         "against this distflow's headers",
                        abi, DF_PLUGIN_ABI_VERSION);
    if (!have_sym)
        return df_error(DF_ENOTFOUND, "no exported symbol '%s'", symbol);
    return DF_OK;
}

int df_plugin_elf_check(const char *path, const char *symbol, size_t obj_size, void *obj)
{
    int rc = elf_ready();
    int fd = -1;
    Elf *e = NULL;
    if (!rc)
        rc = open_elf(path, &fd, &e);
    if (!rc)
        rc = check_header(e);
    if (!rc)
        rc = check_symbols(e, symbol, obj_size, obj);
    close_elf(fd, e);
    return rc;
}
