/*
 * distflow/srpo.h — the pieces of SRPO (Self-Referential Policy Optimization, siiRL's
 * `embodied_srpo` workload) that are algorithms over a batch's columns, each matching a siiRL
 * function named below (docs/embodied.md has the formulas and the sources):
 *
 *   df_embodied_filter          the embodied sampling filter (DAGWorker's embodied_local_rank_sampling:
 *                               siirl/user_interface/filter_interface/embodied.py, _filter_batch);
 *   df_standard_scale, df_dbscan  sklearn's StandardScaler and DBSCAN as SRPO uses them;
 *   df_srpo_progress_reward     the reward (siirl/utils/reward_score/embodied.py,
 *                               compute_embodied_reward): success 1.0, a failure
 *                               0.6 * sigmoid(10 * (0.5 - d)) by its distance to the successes;
 *   df_embodied_response_mask   the response mask from finish_step (siirl/dag_worker/core_algos.py,
 *                               compute_advantage's embodied branch; embodied_actor.py update_policy);
 *   df_embodied_reward_position where the episode's reward sits in its tokens
 *                               (siirl/engine/reward_manager/embodied.py, EmbodiedRewardManager).
 *
 * Rows of a batch are samples; a prompt group is `n` consecutive rows (rollout.n samples of one
 * prompt, as siiRL's reshape(num_prompts, n_samples) assumes).
 */
#ifndef DISTFLOW_SRPO_H
#define DISTFLOW_SRPO_H

#include "distflow/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/** algorithm.embodied_sampling.* (siiRL EmbodiedSamplingConfig) and what the filter needs beside. */
typedef struct df_embodied_filter_opts {
    bool filter_accuracy;        /**< keep a group only if lower <= its mean acc <= upper */
    double accuracy_lower_bound; /**< siiRL default 0.0 */
    double accuracy_upper_bound; /**< siiRL default 1.0 */
    bool filter_truncated;       /**< drop a group if any of its samples has finish_step >= max_steps */
    int64_t max_steps;           /**< actor_rollout_ref.embodied.env.max_steps */
    /** Keep at most this many groups (the first that pass, in row order); 0: no limit. With
        oversample_factor k the rollout draws k times the groups a step trains on and passes that
        step's count here. siiRL declares oversample_factor but reads it nowhere (docs/embodied.md). */
    int64_t max_groups;
} df_embodied_filter_opts;

/** What the filter saw, for metrics. */
typedef struct df_embodied_filter_stats {
    int64_t groups;            /**< prompt groups in */
    int64_t kept;              /**< groups kept */
    int64_t out_of_bounds;     /**< groups whose mean acc left [lower, upper] (with filter_accuracy) */
    int64_t truncated;         /**< groups with a sample at finish_step >= max_steps (with filter_truncated) */
    int64_t over_max_groups;   /**< groups that passed but were past max_groups */
} df_embodied_filter_stats;

/**
 * siiRL's _filter_batch over rows = n_groups * n: acc[rows] is each sample's success (siiRL's verify:
 * acc = complete as a float), finish_step[rows] (read only with filter_truncated; may then not be
 * NULL). A group is kept iff (not filter_accuracy or lower <= mean(acc of its n rows) <= upper) and
 * (not filter_truncated or every finish_step < max_steps), and it is among the first max_groups
 * such. With both filters off every group passes (siiRL then skips _filter_batch). keep[rows] gets
 * 1 for every row of a kept group (siiRL's combined_mask.repeat_interleave(n)), *n_kept_rows (may
 * be NULL) their number, stats (may be NULL) the counts. Errors: DF_EINVAL (NULL acc / keep, n < 1,
 * n_groups < 0, bounds not finite, filter_truncated with NULL finish_step or max_steps < 1,
 * max_groups < 0).
 */
DF_API int df_embodied_filter(const df_embodied_filter_opts *o, const float *acc, const int64_t *finish_step,
                              int64_t n_groups, int n, uint8_t *keep, int64_t *n_kept_rows,
                              df_embodied_filter_stats *stats);

/**
 * sklearn's StandardScaler().fit_transform on x[n, dim] (row-major), in place: each column minus its
 * mean, over its population standard deviation (ddof 0). A constant column (variance within
 * sklearn's rounding bound n*eps*var + (n*mean*eps)^2, eps = 2^-52) is divided by 1 instead.
 * mean[dim] and scale[dim] (each may be NULL) get the fitted values. Errors: DF_EINVAL (NULL x,
 * n < 1, dim < 1), DF_ENOMEM.
 */
DF_API int df_standard_scale(double *x, int64_t n, int dim, double *mean, double *scale);

/**
 * DBSCAN (Ester et al., KDD 1996) as sklearn.cluster.DBSCAN(eps, min_samples, metric="euclidean")
 * labels x[n, dim]: a point's neighbourhood is every point (itself included) at Euclidean distance
 * <= eps; a core point has >= min_samples of them. Clusters grow from the core points in index order:
 * the first unlabelled core point starts cluster 0, every point reachable from it through core
 * points joins it (a border point joins the first cluster that reaches it), and so on; what no
 * cluster reaches is noise, label -1. labels[n] get the cluster ids, *n_clusters (may be NULL) their
 * number. O(n^2 dim) time, O(n) memory. Errors: DF_EINVAL (NULL x / labels, n < 0, dim < 1, eps not
 * finite or < 0, min_samples < 1), DF_ENOMEM.
 */
DF_API int df_dbscan(const double *x, int64_t n, int dim, double eps, int min_samples, int32_t *labels,
                     int *n_clusters);

/** SRPO's reward settings; siiRL's values are df_srpo_defaults(). */
typedef struct df_srpo_opts {
    double eps;           /**< DBSCAN eps (0.5) */
    int min_samples;      /**< DBSCAN min_samples (2) */
    double fail_scale;    /**< the largest failure reward (0.6) */
    double steepness;     /**< sigmoid steepness (10) */
    double offset;        /**< sigmoid offset (0.5) */
} df_srpo_opts;

/** siiRL's constants: eps 0.5, min_samples 2, 0.6, 10, 0.5. */
DF_API df_srpo_opts df_srpo_defaults(void);

/** Per-row detail of the progress reward (NaN where it does not apply). */
typedef struct df_srpo_detail {
    double distance;   /**< a shaped failure's Euclidean distance to the nearest success centre */
    double normalized; /**< that distance min-max normalised over its task's shaped failures */
} df_srpo_detail;

/**
 * SRPO's progress reward, siiRL's compute_embodied_reward, into reward[n]:
 *  - a row whose embedding emb[i, 0..dim) is all zeros is invalid: reward 0, even a success;
 *  - the valid rows are grouped by task[i] (siiRL: the task name, the LIBERO file name without its
 *    trial); in each task a success gets 1.0 and a failure 0.0, and when the task has both:
 *  - the successes' embeddings are standardised (df_standard_scale) and clustered by
 *    df_dbscan(eps, min_samples); each cluster's centre is the mean of its members' raw embeddings
 *    (siiRL: inverse_transform of the scaled mean); with no cluster (all noise) the one centre is
 *    the mean of all the successes;
 *  - a failure's distance D is the Euclidean distance of its raw embedding to the nearest centre;
 *    over the task's failures d = (D - min D) / (max D - min D), or 0.5 for all when max - min < 1e-6;
 *  - its reward is fail_scale * sigmoid(steepness * (offset - d)).
 * Computed in double from the float32 embeddings. detail[n] (may be NULL) gets D and d of the shaped
 * failures. Errors: DF_EINVAL (NULL emb / complete / task / reward / o, n < 0, dim < 1), DF_ENOMEM.
 */
DF_API int df_srpo_progress_reward(const float *emb, const bool *complete, const int64_t *task, int64_t n, int dim,
                                   const df_srpo_opts *o, float *reward, df_srpo_detail *detail);

/**
 * The embodied response mask (siiRL compute_advantage and RobDataParallelPPOActor.update_policy):
 * row i's response has response_len tokens (traj_len * action_chunks_len * action_token_len), and
 * mask[i, t] = 1 iff t < finish_step[i] * action_token_len — the tokens of the actions executed.
 * mask is [n, response_len] row-major. Errors: DF_EINVAL (NULL pointers, n < 0, response_len < 0,
 * action_token_len < 1, a negative finish_step).
 */
DF_API int df_embodied_response_mask(const int64_t *finish_step, int64_t n, int64_t response_len, int action_token_len,
                                     uint8_t *mask);

/**
 * The token index of the episode's reward (EmbodiedRewardManager: the last executed action's last
 * token): finish_step * action_token_len - 1, or -1 when finish_step is 0 (no reward placed).
 */
DF_API int64_t df_embodied_reward_position(int64_t finish_step, int action_token_len);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_SRPO_H */
