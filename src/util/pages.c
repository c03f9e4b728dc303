/* Giving scratch memory back to the OS between uses (pages.h). */
#include "util/pages.h"

#include "distflow/common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static uintptr_t page_size(void)
{
    const long ps = sysconf(_SC_PAGESIZE);
    return ps > 0 ? (uintptr_t)ps : 4096;
}

int64_t df_pages_release(void *p, size_t bytes)
{
    if (!p)
        return 0;
    const uintptr_t ps = page_size();
    const uintptr_t b = ((uintptr_t)p + ps - 1) / ps * ps, e = ((uintptr_t)p + bytes) / ps * ps;
    if (e <= b || madvise((void *)b, e - b, MADV_DONTNEED))
        return 0;
    return (int64_t)(e - b);
}

int64_t df_pages_resident(const void *p, size_t bytes)
{
    if (!p || !bytes)
        return 0;
    const uintptr_t ps = page_size(), b = (uintptr_t)p / ps * ps;
    const size_t n = ((uintptr_t)p + bytes - b + ps - 1) / ps;
    unsigned char *vec = malloc(n);
    if (!vec || mincore((void *)b, n * ps, vec)) {
        free(vec);
        return -1;
    }
    int64_t pages = 0;
    for (size_t i = 0; i < n; i++)
        pages += vec[i] & 1;
    free(vec);
    return pages * (int64_t)ps;
}

/* Write all of [b, b + n) to fd; 0 or an errno. */
static int write_all(int fd, const char *b, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? errno : ENOSPC;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

int df_pages_to_file(void *p, size_t bytes, const char *dir, int64_t *moved)
{
    if (moved)
        *moved = 0;
    const uintptr_t ps = page_size();
    const uintptr_t b = ((uintptr_t)p + ps - 1) / ps * ps, e = ((uintptr_t)p + bytes) / ps * ps;
    if (!p || e <= b)
        return DF_OK;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/.distflow-offload-XXXXXX", dir) >= (int)sizeof path)
        return df_error(DF_EIO, "offload: directory path too long: %.60s...", dir);
    int fd = mkstemp(path);
    if (fd < 0)
        return df_error(DF_EIO, "offload: cannot create a file in %s: %s", dir, strerror(errno));
    unlink(path); /* the mapping keeps the data; nothing is left behind at exit */
    int err = write_all(fd, (const char *)b, e - b);
    if (err) {
        close(fd);
        return df_error(DF_EIO, "offload: writing %.1f MiB to %s: %s", (double)(e - b) / 1048576.0,
                        dir, strerror(err));
    }
    void *m = mmap((void *)b, e - b, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    err = m == MAP_FAILED ? errno : 0;
    close(fd);
    if (err)
        return df_error(DF_EIO, "offload: mapping the file in %s: %s", dir, strerror(err));
    if (moved)
        *moved = (int64_t)(e - b);
    return DF_OK;
}
