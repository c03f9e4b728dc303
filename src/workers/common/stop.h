/*
 * stop.h (internal) — a stop on request (SIGINT / SIGTERM, docs/checkpoints.md "Stopping") at a
 * step boundary, shared by `distflow train`'s fit loop and `distflow sft`.
 */
#ifndef DF_WORKER_STOP_H
#define DF_WORKER_STOP_H

#include "distflow/comm.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

/** *stop = the flag's largest value over comm's ranks (0 for a NULL flag; NULL comm: this rank
 *  alone), so every rank stops at the same boundary whichever one the signal reached. Collective.
 *  Errors: the all-reduce's, wrapped. */
int df_worker_poll_stop(df_comm *comm, const volatile sig_atomic_t *flag, int *stop);

/** The stop after step `done` of `total`: rank 0 (`say`) prints what was kept (a checkpoint of that
 *  step when `saved`, else that trainer.save_freq kept none); returns DF_ESTOPPED with df_error. */
int df_worker_stopped(bool say, int64_t done, int64_t total, bool saved, int64_t save_freq);

#endif
