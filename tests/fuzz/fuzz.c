/* Helpers of the fuzz targets (fuzz.h): text copies and a per-process scratch directory. */
#include "fuzz.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#define MAX_NAMES 8

static char g_dir[256];
static const char *g_names[MAX_NAMES]; /* file names written, removed at exit */
static int g_n_names;
static char g_path[512];

char *df_fuzz_cstr(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s) {
        fprintf(stderr, "fuzz: out of memory copying %zu bytes\n", size);
        abort();
    }
    if (size)
        memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

static void remove_dir(void)
{
    char p[512];
    for (int i = 0; i < g_n_names; i++) {
        snprintf(p, sizeof p, "%s/%s", g_dir, g_names[i]);
        unlink(p);
    }
    rmdir(g_dir);
}

const char *df_fuzz_dir(void)
{
    if (g_dir[0])
        return g_dir;
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/df_fuzz_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) {
        fprintf(stderr, "fuzz: cannot create %s: %s\n", g_dir, strerror(errno));
        g_dir[0] = '\0';
        return NULL;
    }
    atexit(remove_dir);
    return g_dir;
}

static void remember(const char *name)
{
    for (int i = 0; i < g_n_names; i++)
        if (!strcmp(g_names[i], name))
            return;
    if (g_n_names < MAX_NAMES)
        g_names[g_n_names++] = name; /* callers pass string literals */
}

const char *df_fuzz_file(const char *name, const uint8_t *data, size_t size)
{
    if (!df_fuzz_dir())
        abort();
    snprintf(g_path, sizeof g_path, "%s/%s", g_dir, name);
    remember(name);
    int fd = open(g_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "fuzz: cannot write %s: %s\n", g_path, strerror(errno));
        abort();
    }
    size_t off = 0;
    while (off < size) {
        ssize_t k = write(fd, data + off, size - off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            fprintf(stderr, "fuzz: cannot write %s: %s\n", g_path, strerror(errno));
            abort();
        }
        off += (size_t)k;
    }
    close(fd);
    return g_path;
}

void df_fuzz_unlink(const char *name)
{
    if (!df_fuzz_dir())
        abort();
    snprintf(g_path, sizeof g_path, "%s/%s", g_dir, name);
    unlink(g_path);
}
