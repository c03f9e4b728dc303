/* Giving scratch memory back to the OS between uses (pages.h). */
#include "util/pages.h"

#include <stdlib.h>
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
