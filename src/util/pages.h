/* pages.h (internal) — give a buffer's memory back to the OS while keeping the buffer. */
#ifndef DF_UTIL_PAGES_H
#define DF_UTIL_PAGES_H

#include <stddef.h>
#include <stdint.h>

/**
 * Return the whole pages inside [p, p + bytes) to the OS (madvise MADV_DONTNEED on private
 * anonymous memory: any malloc'd or mmap'd buffer of this process). The buffer stays valid:
 * a later read of a released page sees zeros, a later write faults a fresh page in. The partial
 * pages at either end (which may hold malloc's bookkeeping or a neighbour's data) are kept.
 * For scratch whose contents are dead between uses. Returns the bytes released (0 when the
 * range holds no whole page or the kernel refuses).
 */
int64_t df_pages_release(void *p, size_t bytes);

/**
 * Move the whole pages inside [p, p + bytes) to a file: their contents are written to an
 * unlinked temporary file in directory `dir` (gone with the process, crash included), and that
 * file is mapped shared over the same addresses (MAP_FIXED), so pointers into the buffer stay
 * valid and read the same bytes. From then on df_pages_release gives the pages back without
 * losing them: the next read faults them in from the page cache, or from disk once the kernel
 * has reclaimed them. The partial pages at either end stay in memory. On error the buffer is
 * left as it was. *moved (may be NULL): the bytes now file-backed. Errors (df_error, naming the
 * directory and strerror): DF_EIO (create, write, full disk, map).
 */
int df_pages_to_file(void *p, size_t bytes, const char *dir, int64_t *moved);

/** Bytes of the pages overlapping [p, p + bytes) that are resident in memory now (mincore),
 *  counted in whole pages; 0 for an empty range, -1 when the kernel does not say. */
int64_t df_pages_resident(const void *p, size_t bytes);

#endif
