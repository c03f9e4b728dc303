/*
 * fsutil.h (internal) — file-system plumbing shared by every layer: atomic
 * files (a temporary in the same directory, fsync, rename), whole-file reads,
 * directory creation, path joining.
 */
#ifndef DF_UTIL_FSUTIL_H
#define DF_UTIL_FSUTIL_H

#include <stdbool.h>
#include <stddef.h>

/* ---- atomic files ------------------------------------------------------- */

/**
 * A file being written under a temporary name next to its final path, so the
 * final rename is atomic (same file system). Zero-initialise before use;
 * df_tmpfile_discard is safe on a zeroed, committed or discarded struct.
 */
typedef struct df_tmpfile {
    char *path; /**< final path */
    char *tmp;  /**< temporary path ("<dir>/.<name>.tmp.XXXXXX") */
    int fd;     /**< -1 once closed */
} df_tmpfile;

/** Create the temporary for `path`. DF_EIO (naming the directory) on failure. */
int df_tmpfile_open(df_tmpfile *t, const char *path);
/** Write all n bytes (retrying short writes). DF_EIO naming the final path. */
int df_tmpfile_write(df_tmpfile *t, const void *buf, size_t n);
/** fsync and close the temporary; it keeps its temporary name. */
int df_tmpfile_close(df_tmpfile *t);
/** Close if still open, then rename onto the final path. */
int df_tmpfile_commit(df_tmpfile *t);
/** Close and unlink the temporary (if any) and free the names. */
void df_tmpfile_discard(df_tmpfile *t);
/** Write `path` atomically in one call (temporary, fsync, rename, fsync of the directory). */
int df_write_file_atomic(const char *path, const void *buf, size_t n);

/* ---- paths and whole files ------------------------------------------------ */

/** malloc'd "dir/name" (NULL when out of memory). */
char *df_path_join(const char *dir, const char *name);
/** True if `path` names an existing regular file. */
bool df_file_exists(const char *path);
/**
 * True if `a` and `b` both exist and are the same file (device and inode: another spelling of the
 * path, a hard or symbolic link included). A command that writes `b` after reading `a` refuses this,
 * for the write would replace its input.
 */
bool df_same_file(const char *a, const char *b);
/**
 * Whether a file can be written at `path` later (a command's output, written at the end of a long
 * run): the path is not empty and not a directory, and the directory that holds it exists and is
 * writable. Nothing is created. DF_EINVAL (empty, a directory, a parent that is not a directory),
 * DF_ENOTFOUND (no such directory), DF_EIO (not writable), naming the path and the reason.
 */
int df_check_output_path(const char *path);
/**
 * Read a whole file into a malloc'd NUL-terminated buffer (*len bytes without
 * the NUL; len may be NULL). DF_ENOTFOUND if it does not exist, DF_EIO otherwise
 * (the message names the path and the reason: "is a directory", strerror).
 */
int df_read_file(const char *path, char **text, size_t *len);
/** mkdir -p (mode 0755). DF_EIO naming the component that failed. */
int df_mkdir_p(const char *dir);
/**
 * mkdir -p of the directory that holds `path`, to be taken back: *created = the first directory it
 * made (malloc'd; NULL when all existed), for df_mkdir_settle once the command that needed it is done
 * (a failed one leaves no empty output directory behind). On failure it undoes itself, *created NULL.
 */
int df_mkdir_parent_undoable(const char *path, char **created);
/** The end of df_mkdir_parent_undoable's directories: with `undo`, the empty directories at and below
 *  `created` removed (anything holding a file stays); `created` freed either way (NULL: nothing). */
void df_mkdir_settle(char *created, bool undo);
/** mkdir -p of the directory that holds `path` (nothing when it has none). */
int df_mkdir_parent(const char *path);
/** fsync a directory so renames inside it are durable. */
int df_fsync_dir(const char *dir);
/** df_fsync_dir on the directory that holds `path`. */
int df_fsync_parent(const char *path);

/**
 * Expand a leading "~/" to $HOME (config files hold paths as the user wrote
 * them, verl-style). The result is malloc'd; NULL when out of memory.
 */
char *df_expand_user(const char *path);
/** Copy a file; the destination is written atomically. */
int df_copy_file(const char *src, const char *dst);
/** True if `path` names an existing directory. */
bool df_dir_exists(const char *path);
/** rm -rf `path` (a file or a directory tree; symbolic links are removed, not followed); nothing to do
 *  when it does not exist. DF_EIO naming the path and the reason. */
int df_remove_tree(const char *path);

/** rename(2), a kill point of a checkpoint save (util/killpoint.h). DF_EIO naming both paths and the
 *  reason. */
int df_rename(const char *from, const char *to);
/**
 * Append one record (n bytes: a line with its newline, a TFRecord) to the file open as fd (O_APPEND)
 * with one write(); when it cannot all be written (ENOSPC, EFBIG, ...) the file is truncated back to
 * its size before, so it never ends with a cut record. DF_EIO naming `path`, how much was written and strerror.
 */
int df_append_line(int fd, const char *path, const char *line, size_t n);

#endif
