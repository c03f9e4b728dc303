/* fsutil.h (internal) — small file-system helpers shared by every layer. */
#ifndef DF_UTIL_FSUTIL_H
#define DF_UTIL_FSUTIL_H

#include <stddef.h>
#include <stdint.h>

/** mkdir -p. Errors (DF_EIO) name the path. */
int df_mkdirs(const char *path);
/** Read a whole file into a NUL-terminated malloc'd buffer; *len (may be NULL) gets its size. */
int df_read_file(const char *path, char **data, size_t *len);
/**
 * Write `len` bytes to `path` atomically: a temporary file in the same
 * directory, fsync, then rename, so readers see the old file or the new one,
 * never a half-written one.
 */
int df_write_file_atomic(const char *path, const void *data, size_t len);
/** Copy a file (atomically at the destination). */
int df_copy_file(const char *src, const char *dst);
/** true when `path` exists and is a regular file / a directory. */
int df_is_file(const char *path);
int df_is_dir(const char *path);
/** snprintf(dst, cap, "%s/%s") that reports truncation as DF_EINVAL. */
int df_path_join(char *dst, size_t cap, const char *dir, const char *name);

#endif
