/*
 * Checkpoint retention (checkpoint.h): trainer.max_actor_ckpt_to_keep / max_critic_ckpt_to_keep,
 * and the deprecated remove_previous_ckpt_in_save (keep one of each), as verl applies them after
 * each save.
 */
#include "workers/dag/checkpoint.h"

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
            rc = remove_path(dir, steps[i], "critic");
    }
    free(steps);
    return rc;
}

int df_worker_checkpoint_prune(df_dag_worker *w)
{
    const struct df_train_trainer *t = &w->global.cfg.trainer;
    if (w->rank != 0)
        return DF_OK;
    int64_t ka = t->max_actor_ckpt_to_keep.set ? t->max_actor_ckpt_to_keep.v : 0;
    int64_t kc = t->max_critic_ckpt_to_keep.set ? t->max_critic_ckpt_to_keep.v : 0;
    if (t->remove_previous_ckpt_in_save) { /* verl: the deprecated switch keeps one of each */
        ka = ka > 0 ? ka : 1;
        kc = kc > 0 ? kc : 1;
    }
    /* an old checkpoint that cannot be removed costs disk, not the run (and rank 0 alone must
       not fail out of the next collective) */
    if (df_checkpoint_prune(w->out_dir, ka, kc))
        df_worker_warn(w, df_last_error());
    return DF_OK;
}
