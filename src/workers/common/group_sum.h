/*
 * group_sum.h (internal) — the one collective with which ranks that must stop together agree:
 * a few sums and every rank's status, shared by `distflow train`'s worker and `distflow sft`.
 */
#ifndef DF_WORKER_GROUP_SUM_H
#define DF_WORKER_GROUP_SUM_H

#include "distflow/comm.h"

/**
 * Element-wise sum over the ranks of `comm` of the k values of vals, added in
 * rank order (the same bits on every rank), into totals[k] (zeroed first),
 * with a failure flag (rc != 0) summed alongside, as the actor's
 * df_train_core_reduce. A collective every rank makes, failed or not; NULL
 * comm: this rank alone. Returns the merged status: rc when this rank failed,
 * else a comm error wrapped with `what`, else DF_EINTERNAL "<what>: N other
 * rank(s) of the <group> (S ranks) failed; their own errors say why" when
 * another rank failed, else DF_OK. Errors also: DF_ENOMEM.
 */
int df_worker_group_sum(df_comm *comm, int rc, const double *vals, int k, double *totals, const char *what,
                        const char *group);

/** df_worker_group_sum with no values: every rank's status agreed over `comm` (collective). */
int df_worker_agree(df_comm *comm, int rc, const char *what, const char *group);

#endif
