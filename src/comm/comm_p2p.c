/*
 * comm_p2p.c — the backend-independent half of point-to-point and non-blocking communication:
 * argument checks, request lifetime, and the timed wait that polls a request.
 * The backends (comm_single.c, comm_mpi_p2p.c) move the bytes.
 */
#include "comm/comm_internal.h"

#include <sched.h>
#include <stdlib.h>
#include <time.h>

static int check_tag(const df_comm *c, const char *what, int tag)
{
    if (tag < 0 || tag > DF_COMM_TAG_MAX)
        return df_comm_fail(c, DF_EINVAL, what, "tag %d: must be in 0..%d", tag, DF_COMM_TAG_MAX);
    return 0;
}

static int check_peer(const df_comm *c, const char *what, const char *role, int peer, int any_ok)
{
    if ((peer >= 0 && peer < c->size) || (any_ok && peer == DF_COMM_ANY_SOURCE))
        return 0;
    return df_comm_fail(c, DF_EINVAL, what, "%s %d is not a rank (size %d)%s", role, peer, c->size,
                        peer == DF_COMM_ANY_SOURCE ? ": probe first to learn the sender" : "");
}

static int check_buf(const df_comm *c, const char *what, const void *buf, int64_t nbytes)
{
    if (nbytes < 0 || (!buf && nbytes > 0))
        return df_comm_fail(c, DF_EINVAL, what, "bad buffer (%lld bytes, buf %s)", (long long)nbytes,
                            buf ? "set" : "NULL");
    return 0;
}

static int new_request(df_comm *c, const char *what, df_comm_request **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return df_comm_fail(c, DF_ENOMEM, what, "out of memory");
    (*out)->c = c;
    (*out)->what = what;
    return 0;
}

int df_comm_isend(df_comm *c, const void *buf, int64_t nbytes, int dest, int tag, df_comm_request **req)
{
    const char *what = "isend";
    if (!c || !req)
        return df_comm_fail(c, DF_EINVAL, what, "%s is NULL", c ? "req" : "communicator");
    *req = NULL;
    int rc = check_peer(c, what, "dest", dest, 0);
    if (!rc)
        rc = check_tag(c, what, tag);
    if (!rc)
        rc = check_buf(c, what, buf, nbytes);
    if (!rc)
        rc = new_request(c, what, req);
    if (!rc)
        rc = c->ops->isend(c, buf, nbytes, dest, tag, *req);
    if (rc && *req) {
        free(*req);
        *req = NULL;
    }
    return rc;
}

int df_comm_send(df_comm *c, const void *buf, int64_t nbytes, int dest, int tag)
{
    df_comm_request *req = NULL;
    int rc = df_comm_isend(c, buf, nbytes, dest, tag, &req);
    if (rc)
        return rc;
    req->what = "send";
    rc = df_comm_wait(&req);
    df_comm_request_free(&req); /* a send past the timeout: finishes in the background */
    return rc;
}

int df_comm_probe(df_comm *c, int source, int tag, bool *found, int *src, int64_t *nbytes)
{
    const char *what = "probe";
    if (!c || !found)
        return df_comm_fail(c, DF_EINVAL, what, "%s is NULL", c ? "found" : "communicator");
    *found = false;
    int rc = check_peer(c, what, "source", source, 1);
    if (!rc)
        rc = check_tag(c, what, tag);
    if (rc)
        return rc;
    int s = -1;
    int64_t n = 0;
    rc = c->ops->probe(c, source, tag, found, &s, &n);
    if (!rc && *found) {
        if (src)
            *src = s;
        if (nbytes)
            *nbytes = n;
    }
    return rc;
}

int df_comm_recv(df_comm *c, void *buf, int64_t nbytes, int source, int tag)
{
    const char *what = "recv";
    if (!c)
        return df_comm_fail(NULL, DF_EINVAL, what, "communicator is NULL");
    int rc = check_peer(c, what, "source", source, 0);
    if (!rc)
        rc = check_tag(c, what, tag);
    if (!rc)
        rc = check_buf(c, what, buf, nbytes);
    return rc ? rc : c->ops->recv(c, buf, nbytes, source, tag);
}

int df_comm_ibroadcast(df_comm *c, void *buf, int64_t nbytes, int root, df_comm_request **req)
{
    const char *what = "ibroadcast";
    if (!c || !req)
        return df_comm_fail(c, DF_EINVAL, what, "%s is NULL", c ? "req" : "communicator");
    *req = NULL;
    if (root < 0 || root >= c->size)
        return df_comm_fail(c, DF_EINVAL, what, "root %d is not a rank (size %d)", root, c->size);
    int rc = check_buf(c, what, buf, nbytes);
    if (!rc && c->timed_out)
        rc = df_comm_fail(c, DF_EINTERNAL, what,
                          "an earlier collective of this group timed out and was "
                          "abandoned");
    if (!rc)
        rc = new_request(c, what, req);
    if (!rc)
        rc = c->ops->ibcast(c, buf, nbytes, root, *req);
    if (rc && *req) {
        free(*req);
        *req = NULL;
    }
    return rc;
}

int df_comm_test(df_comm_request **req, bool *done)
{
    if (!req || !done)
        return df_comm_fail(NULL, DF_EINVAL, "test", "%s is NULL", req ? "done" : "req");
    *done = true;
    if (!*req)
        return 0;
    df_comm_request *r = *req;
    if (r->impl) {
        bool fin = false;
        int rc = r->c->ops->req_test(r, &fin);
        if (rc || !fin) {
            *done = false;
            return rc;
        }
    }
    free(r);
    *req = NULL;
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Poll like the timed collectives (comm_mpi.c wait_req): testing is what progresses MPI's
 * transfer; past the first millisecond the loop yields the core to the ranks it waits for. */
int df_comm_wait(df_comm_request **req)
{
    if (!req)
        return df_comm_fail(NULL, DF_EINVAL, "wait", "req is NULL");
    if (!*req)
        return 0;
    df_comm *c = (*req)->c;
    const char *what = (*req)->what;
    const double t0 = now_s();
    for (;;) {
        bool done = false;
        int rc = df_comm_test(req, &done);
        if (rc || done)
            return rc;
        double waited = now_s() - t0;
        if (c->timeout_s > 0 && waited > c->timeout_s)
            return df_comm_fail(c, DF_EINTERNAL, what,
                                "not complete after %.1f s (timeout %.1f s, trainer.collective_timeout_s): "
                                "the peer stopped, hangs or is far behind; the request is still pending",
                                waited, c->timeout_s);
        if (waited > 1e-3)
            sched_yield();
    }
}

void df_comm_request_free(df_comm_request **req)
{
    if (!req || !*req)
        return;
    if ((*req)->impl)
        (*req)->c->ops->req_drop(*req);
    free(*req);
    *req = NULL;
}
