/* A stop on request at a step boundary (stop.h). */
#include "workers/common/stop.h"

#include <stdio.h>

int df_worker_poll_stop(df_comm *comm, const volatile sig_atomic_t *flag, int *stop)
{
    double v = flag ? (double)*flag : 0;
    int rc = comm ? df_comm_allreduce(comm, &v, 1, DF_COMM_FLOAT64, DF_COMM_MAX) : DF_OK;
    *stop = rc ? 0 : (int)v;
    return rc ? df_error_wrap(rc, "all-reduce of the stop request") : DF_OK;
}

int df_worker_stopped(bool say, int64_t done, int64_t total, bool saved, int64_t save_freq)
{
    if (say && saved)
        fprintf(stderr, "[distflow] stopped on request after step %lld of %lld; checkpoint global_step_%lld "
                        "saved: the same command resumes from it\n",
                (long long)done, (long long)total, (long long)done);
    else if (say)
        fprintf(stderr, "[distflow] stopped on request after step %lld of %lld; no checkpoint of it "
                        "(trainer.save_freq=%lld)\n",
                (long long)done, (long long)total, (long long)save_freq);
    return df_error(DF_ESTOPPED, "stopped on request after step %lld of %lld", (long long)done, (long long)total);
}
