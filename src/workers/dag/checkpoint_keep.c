/*
 * Checkpoint retention (checkpoint.h): trainer.max_actor_ckpt_to_keep / max_critic_ckpt_to_keep,
 * and the deprecated remove_previous_ckpt_in_save (keep one of each), as verl applies them after
 * each save (the pruning itself: df_checkpoint_prune, workers/common/ckpt_keep.c).
 */
#include "workers/dag/checkpoint.h"

#include "workers/common/ckpt_files.h"

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
