/* Checkpoint retention shared by train and sft (ckpt_files.h: df_checkpoint_prune). */
#include "workers/common/ckpt_files.h"

#include "util/fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int cmp_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

/* Steps of the global_step_<N> directories in dir, newest first, into *steps (malloc'd). */
static int list_steps(const char *dir, int64_t **steps, int64_t *n)
{
    *steps = NULL, *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return df_error(DF_EIO, "%s: cannot list checkpoints: %s", dir, strerror(errno));
    int64_t cap = 0;
    int rc = DF_OK;
    for (struct dirent *e; !rc && (e = readdir(d));) {
        char *end;
        if (strncmp(e->d_name, "global_step_", 12) || !e->d_name[12])
            continue;
        long long k = strtoll(e->d_name + 12, &end, 10);
        if (*end || k <= 0)
            continue;
        if (*n == cap) {
            int64_t *g = realloc(*steps, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *g);
            if (!g) {
                rc = df_error(DF_ENOMEM, "out of memory");
                break;
            }
            *steps = g;
        }
        (*steps)[(*n)++] = k;
    }
    closedir(d);
    if (!rc)
        qsort(*steps, (size_t)*n, sizeof **steps, cmp_desc);
    return rc;
}

static int remove_path(const char *dir, int64_t step, const char *sub)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/global_step_%lld%s%s", dir, (long long)step, sub ? "/" : "",
             sub ? sub : "");
    struct stat st;
    if (stat(path, &st))
        return DF_OK;
    int rc = df_remove_tree(path);
    return rc ? df_error_wrap(rc, "removing the old checkpoint %s", path) : DF_OK;
}

/* A step's critics: critic/ and a multi-agent job's critic_agent_<g>/ (docs/checkpoints.md). */
static int remove_critics(const char *dir, int64_t step)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/global_step_%lld", dir, (long long)step);
    int rc = remove_path(dir, step, "critic");
    DIR *d = rc ? NULL : opendir(path);
    for (struct dirent *e; d && !rc && (e = readdir(d));)
        if (!strncmp(e->d_name, "critic_agent_", 13))
            rc = remove_path(dir, step, e->d_name);
    if (d)
        closedir(d);
    return rc;
}

int df_checkpoint_prune(const char *dir, int64_t keep_actor, int64_t keep_critic)
{
    if (keep_actor <= 0 && keep_critic <= 0)
        return DF_OK;
    int64_t *steps, n;
    int rc = list_steps(dir, &steps, &n);
    /* an actor-less step cannot be resumed: it goes whole; a critic-less one keeps its actor */
    for (int64_t i = 0; !rc && i < n; i++) {
        if (keep_actor > 0 && i >= keep_actor)
            rc = remove_path(dir, steps[i], NULL);
        else if (keep_critic > 0 && i >= keep_critic)
            rc = remove_critics(dir, steps[i]);
    }
    free(steps);
    return rc;
}
