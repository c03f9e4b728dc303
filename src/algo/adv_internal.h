/*
 * adv_internal.h (internal) — pieces shared by the advantage estimators of
 * adv_token.c and adv_group.c: input checks, per-group score statistics,
 * broadcasting a per-sample advantage to its tokens, and whitening (adv_whiten.c).
 */
#ifndef DF_ALGO_ADV_INTERNAL_H
#define DF_ALGO_ADV_INTERNAL_H

#include "distflow/algo.h"

/* What an estimator reads besides offsets and rewards. */
enum {
    DF_ADV_NEED_GROUP = 1,     /* group ids */
    DF_ADV_NEED_VALUES = 2,    /* critic values */
    DF_ADV_NEED_BASELINES = 4, /* reward_baselines */
    DF_ADV_NEED_GAMMA = 8,     /* gamma in [0, 1] */
    DF_ADV_NEED_LAM = 16       /* lam in [0, 1] */
};

/*
 * Check `in` and the outputs for estimator `who`: layout, the arrays named by
 * `needs`, group ids in [0, n), finite rewards / values / baselines, gamma and
 * lam in range. DF_EINVAL with a message naming `who` and the place.
 */
int df_adv_check(const char *who, const df_adv_input *in, unsigned needs, const float *advantages,
                 const float *returns);

/* Per-sample scores and per-group statistics, indexed by sample / group id ([n] each, n = in->n). */
typedef struct df_adv_groups {
    double *score;          /* [n] sum of each sample's token rewards */
    int64_t *count;         /* [n] samples per group id */
    double *sum;            /* [n] sum of scores per group */
    double *mean;           /* [n] group mean; 0 for a group of one (verl) */
    double *std;            /* [n] unbiased std; 1 for a group of one (verl) */
    bool *flat;             /* [n] count >= 2 and all scores equal */
    int64_t n_groups;       /* group ids in use */
    int64_t n_flat_groups;  /* of which flat */
    int64_t n_flat_samples; /* samples in flat groups */
} df_adv_groups;

/* Fill *g from a checked input (needs group ids). DF_ENOMEM on allocation failure. */
int df_adv_groups_compute(const char *who, const df_adv_input *in, df_adv_groups *g);
void df_adv_groups_free(df_adv_groups *g);

/* A group estimator's start: check the input (group ids needed), compute *g and a per-sample
   buffer *a[n] (both released by df_adv_group_finish). DF_EINVAL / DF_ENOMEM. */
int df_adv_group_begin(const char *who, const df_adv_input *in, const float *adv, const float *ret,
                       df_adv_groups *g, double **a);
/* Broadcast a[i] to sample i's tokens (df_adv_broadcast), free g and a; DF_OK. */
int df_adv_group_finish(const df_adv_input *in, df_adv_groups *g, double *a, float *adv, float *ret);
/* Free g and a (a group estimator done, or stopped with error rc); returns rc. */
int df_adv_group_release(df_adv_groups *g, double *a, int rc);
/* DF_EINVAL naming `who` unless in's epsilon (the std guard) is >= 0; DF_OK for a NULL in (the
   estimator's input check names that). */
int df_adv_check_epsilon(const char *who, const df_adv_input *in);

/* Every token of sample i gets a[i], in advantages and (if not NULL) returns. */
void df_adv_broadcast(const df_adv_input *in, const double *a, float *advantages, float *returns);

/* Whiten n_tokens doubles into out (verl masked_whiten, all tokens valid). */
void df_adv_whiten_d(int64_t n_tokens, const double *x, float *out);
/* The last step of a whitening estimator: df_adv_whiten_d, or with in->defer_whiten
   x rounded to float as it is (the caller whitens over the whole batch). */
void df_adv_finish_whiten(const df_adv_input *in, int64_t n_tokens, const double *x, float *out);

#endif /* DF_ALGO_ADV_INTERNAL_H */
