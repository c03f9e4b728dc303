/* File-system helpers (fsutil.h). */
#include "util/fsutil.h"

#include "distflow/common.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int df_mkdirs(const char *path)
{
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return df_error(DF_EINVAL, "bad directory path '%s'", path);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) && errno != EEXIST)
            return df_error(DF_EIO, "cannot create directory '%s': %s", buf, strerror(errno));
        buf[i] = c;
    }
    if (!df_is_dir(path))
        return df_error(DF_EIO, "'%s' exists and is not a directory", path);
    return DF_OK;
}

int df_read_file(const char *path, char **data, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return df_error(errno == ENOENT ? DF_ENOTFOUND : DF_EIO, "cannot open '%s': %s", path,
                        strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (cap - n < 65536) {
            cap = cap ? cap * 2 : 65536 * 2;
            char *nb = realloc(buf, cap + 1);
            if (!nb) {
                free(buf);
                fclose(f);
                return df_error(DF_ENOMEM, "out of memory reading '%s'", path);
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return df_error(DF_EIO, "error reading '%s'", path);
    }
    buf[n] = '\0';
    *data = buf;
    if (len)
        *len = n;
    return DF_OK;
}

int df_write_file_atomic(const char *path, const void *data, size_t len)
{
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path) >= (int)sizeof tmp)
        return df_error(DF_EINVAL, "path too long: '%s'", path);
    int fd = mkstemp(tmp);
    if (fd < 0)
        return df_error(DF_EIO, "cannot create a temporary file next to '%s': %s", path,
                        strerror(errno));
    const char *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            close(fd);
            unlink(tmp);
            return df_error(DF_EIO, "cannot write '%s': %s", path, strerror(e));
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) || fchmod(fd, 0644) || close(fd)) {
        unlink(tmp);
        return df_error(DF_EIO, "cannot finish writing '%s': %s", path, strerror(errno));
    }
    if (rename(tmp, path)) {
        int e = errno;
        unlink(tmp);
        return df_error(DF_EIO, "cannot rename into '%s': %s", path, strerror(e));
    }
    return DF_OK;
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

int df_is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int df_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int df_path_join(char *dst, size_t cap, const char *dir, const char *name)
{
    int n = snprintf(dst, cap, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= cap)
        return df_error(DF_EINVAL, "path too long: '%s/%s'", dir, name);
    return DF_OK;
}
