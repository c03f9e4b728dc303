/* Atomic files, paths and whole-file reads (fsutil.h). */
#include "util/fsutil.h"

#include "distflow/common.h"
#include "util/killpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- atomic files ------------------------------------------------------- */

int df_tmpfile_open(df_tmpfile *t, const char *path)
{
    memset(t, 0, sizeof *t);
    t->fd = -1;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t dlen = slash ? (size_t)(slash - path) + 1 : 0;
    size_t cap = dlen + strlen(base) + 32;
    t->path = strdup(path);
    t->tmp = malloc(cap);
    if (!t->path || !t->tmp) {
        df_tmpfile_discard(t);
        return df_error(DF_ENOMEM, "out of memory creating a temporary for %s", path);
    }
    snprintf(t->tmp, cap, "%.*s.%s.tmp.XXXXXX", (int)dlen, path, base);
    df_kill_point_fs();
    t->fd = mkstemp(t->tmp);
    if (t->fd >= 0 && fchmod(t->fd, 0644) != 0) { /* mkstemp makes 0600; outputs are shared */
        close(t->fd);
        unlink(t->tmp);
        t->fd = -1;
    }
    if (t->fd < 0) {
        int e = errno;
        free(t->tmp); /* nothing was created: do not unlink the template */
        t->tmp = NULL;
        df_tmpfile_discard(t);
        return df_error(DF_EIO, "%s: cannot create a temporary file next to it: %s", path,
                        strerror(e));
    }
    return DF_OK;
}

int df_tmpfile_write(df_tmpfile *t, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        df_kill_point_fs();
        ssize_t w = write(t->fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return df_error(DF_EIO, "%s: write failed: %s", t->path,
                            w < 0 ? strerror(errno) : "no progress");
        p += w;
        n -= (size_t)w;
    }
    return DF_OK;
}

int df_tmpfile_close(df_tmpfile *t)
{
    if (t->fd < 0)
        return DF_OK;
    df_kill_point_fs();
    int rc = fsync(t->fd);
    int e = errno;
    if (close(t->fd) && !rc) {
        rc = -1;
        e = errno;
    }
    t->fd = -1;
    if (rc)
        return df_error(DF_EIO, "%s: cannot flush the file to disk: %s", t->path, strerror(e));
    return DF_OK;
}

int df_tmpfile_commit(df_tmpfile *t)
{
    int rc = df_tmpfile_close(t);
    if (rc)
        return rc;
    /* Keep the mode of a file we replace; a new file gets 0644 (mkstemp gives 0600). */
    struct stat st;
    mode_t mode = stat(t->path, &st) == 0 ? (st.st_mode & 07777) : 0644;
    if (chmod(t->tmp, mode))
        return df_error(DF_EIO, "%s: chmod of the temporary failed: %s", t->path, strerror(errno));
    df_kill_point_fs();
    if (rename(t->tmp, t->path))
        return df_error(DF_EIO, "%s: cannot rename the temporary into place: %s", t->path,
                        strerror(errno));
    free(t->tmp);
    t->tmp = NULL;
    return DF_OK;
}

void df_tmpfile_discard(df_tmpfile *t)
{
    if (t->fd >= 0)
        close(t->fd);
    t->fd = -1;
    if (t->tmp)
        unlink(t->tmp);
    free(t->tmp);
    free(t->path);
    t->tmp = t->path = NULL;
}

int df_write_file_atomic(const char *path, const void *buf, size_t n)
{
    df_tmpfile t;
    int rc = df_tmpfile_open(&t, path);
    if (!rc)
        rc = df_tmpfile_write(&t, buf, n);
    if (!rc)
        rc = df_tmpfile_commit(&t);
    df_tmpfile_discard(&t);
    return rc ? rc : df_fsync_parent(path);
}

/* ---- paths and whole files ------------------------------------------------ */

char *df_path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (a && dir[a - 1] != '/')
        p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

bool df_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

bool df_same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int df_check_output_path(const char *path)
{
    if (!*path)
        return df_error(DF_EINVAL, "an empty path");
    if (df_dir_exists(path))
        return df_error(DF_EINVAL, "%s: is a directory", path);
    const char *slash = strrchr(path, '/');
    char *dir = !slash ? strdup(".") : slash == path ? strdup("/") : strndup(path, (size_t)(slash - path));
    if (!dir)
        return df_error(DF_ENOMEM, "out of memory");
    struct stat st;
    int rc = DF_OK;
    if (stat(dir, &st) != 0 && errno == ENOENT)
        rc = df_error(DF_ENOTFOUND, "%s: no such directory %s", path, dir);
    else if (stat(dir, &st) != 0)
        rc = df_error(DF_EIO, "%s: directory %s: %s", path, dir, strerror(errno));
    else if (!S_ISDIR(st.st_mode))
        rc = df_error(DF_EINVAL, "%s: %s is not a directory", path, dir);
    else if (access(dir, W_OK) != 0)
        rc = df_error(DF_EIO, "%s: cannot write in directory %s: %s", path, dir, strerror(errno));
    free(dir);
    return rc;
}

int df_read_file(const char *path, char **text, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return df_error(errno == ENOENT ? DF_ENOTFOUND : DF_EIO, "%s: cannot open: %s", path,
                        strerror(errno));
    struct stat st; /* fopen opens a directory; its first read would fail with EISDIR */
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        return df_error(DF_EIO, "%s: is a directory, not a file", path);
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    errno = 0; /* what a failed read sets, for the message */
    while (buf) {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0)
            break;
    }
    int err = ferror(f) ? (errno ? errno : EIO) : 0;
    fclose(f);
    if (!buf)
        return df_error(DF_ENOMEM, "%s: out of memory reading the file", path);
    if (err) {
        free(buf);
        return df_error(DF_EIO, "%s: read error: %s", path, strerror(err));
    }
    buf[n] = '\0';
    *text = buf;
    if (len)
        *len = n;
    return DF_OK;
}

/* nftw callback of df_mkdir_settle: empty directories go, anything else stays. */
static int rmdir_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (flag == FTW_DP)
        rmdir(p);
    return 0;
}

/* mkdir -p; *created (when not NULL) = the first directory made (malloc'd), NULL when none was. */
static int mkdir_p(const char *dir, char **created)
{
    char *p = strdup(dir);
    if (!p)
        return df_error(DF_ENOMEM, "out of memory creating %s", dir);
    size_t n = strlen(p);
    int rc = DF_OK;
    for (size_t i = 1; i <= n && !rc; i++) {
        if (p[i] != '/' && p[i] != '\0')
            continue;
        char c = p[i];
        p[i] = '\0';
        struct stat st;
        if (stat(p, &st) != 0) {
            df_kill_point_fs();
            if (mkdir(p, 0755) != 0 && errno != EEXIST)
                rc = df_error(DF_EIO, "cannot create directory %s: %s", p, strerror(errno));
            else if (created && !*created && !(*created = strdup(p)))
                rc = df_error(DF_ENOMEM, "out of memory");
        } else if (!S_ISDIR(st.st_mode)) {
            rc = df_error(DF_EIO, "cannot create directory %s: a file of that name exists", p);
        }
        p[i] = c;
    }
    free(p);
    return rc;
}

int df_mkdir_p(const char *dir)
{
    return mkdir_p(dir, NULL);
}

void df_mkdir_settle(char *created, bool undo)
{
    if (created && undo)
        nftw(created, rmdir_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(created);
}

int df_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return df_error(DF_EIO, "%s: cannot open directory: %s", dir, strerror(errno));
    df_kill_point_fs();
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    /* Some file systems refuse fsync on directories; that is not a write failure. */
    if (rc && e != EINVAL && e != EROFS)
        return df_error(DF_EIO, "%s: cannot sync directory: %s", dir, strerror(e));
    return DF_OK;
}

int df_fsync_parent(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = !slash ? strdup(".") : slash == path ? strdup("/")
                                                     : strndup(path, (size_t)(slash - path));
    if (!dir)
        return df_error(DF_ENOMEM, "out of memory");
    int rc = df_fsync_dir(dir);
    free(dir);
    return rc;
}

int df_copy_file(const char *src, const char *dst)
{
    char *data;
    size_t len;
    int rc = df_read_file(src, &data, &len);
    if (rc)
        return rc;
    rc = df_write_file_atomic(dst, data, len);
    free(data);
    return rc;
}

bool df_dir_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

char *df_expand_user(const char *path)
{
    const char *home = getenv("HOME");
    if (path[0] != '~' || path[1] != '/' || !home)
        return strdup(path);
    return df_path_join(home, path + 2);
}

/* mkdir -p of the directory holding `path` (nothing when it has none); *created as mkdir_p's. */
static int mkdir_parent(const char *path, char **created)
{
    const char *slash = strrchr(path, '/');
    if (!slash || slash == path)
        return DF_OK;
    char *dir = strndup(path, (size_t)(slash - path));
    if (!dir)
        return df_error(DF_ENOMEM, "out of memory");
    int rc = mkdir_p(dir, created);
    free(dir);
    return rc;
}

int df_mkdir_parent(const char *path)
{
    return mkdir_parent(path, NULL);
}

/* nftw callback of df_remove_tree: children come first (FTW_DEPTH). */
static int remove_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    df_kill_point_fs();
    return remove(p) ? errno : 0;
}

int df_remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? DF_OK : df_error(DF_EIO, "%s: cannot stat: %s", path, strerror(errno));
    int e = S_ISDIR(st.st_mode) ? nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS)
                                 : remove_entry(path, &st, 0, NULL);
    return e ? df_error(DF_EIO, "%s: cannot remove: %s", path, strerror(e > 0 ? e : errno)) : DF_OK;
}

int df_rename(const char *from, const char *to)
{
    df_kill_point_fs();
    if (rename(from, to))
        return df_error(DF_EIO, "cannot rename %s to %s: %s", from, to, strerror(errno));
    return DF_OK;
}

int df_append_line(int fd, const char *path, const char *line, size_t n)
{
    off_t before = lseek(fd, 0, SEEK_END);
    if (before < 0)
        return df_error(DF_EIO, "%s: cannot append: %s", path, strerror(errno));
    size_t done = 0;
    int e = 0;
    while (done < n) { /* one write() for the whole line; more only after a short one */
        ssize_t w = write(fd, line + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            e = w < 0 ? errno : EIO;
            break;
        }
        done += (size_t)w;
    }
    if (done == n)
        return DF_OK;
    /* a cut line would stay at the end of the file: take its head off again */
    bool undone = done == 0 || ftruncate(fd, before) == 0;
    return df_error(DF_EIO, "%s: cannot append a line (%zu of %zu bytes written%s): %s", path, done, n,
                    undone ? ", the file left as it was" : ", and the cut line could not be removed", strerror(e));
}

int df_mkdir_parent_undoable(const char *path, char **created)
{
    *created = NULL;
    int rc = mkdir_parent(path, created);
    if (rc) { /* what was made before the failure goes again */
        df_mkdir_settle(*created, true);
        *created = NULL;
    }
    return rc;
}
