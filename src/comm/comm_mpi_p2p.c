/*
 * comm_mpi_p2p.c — point-to-point messages and non-blocking requests on MPI.
 *
 * Wire format (include/distflow/comm.h): a header message of two int64 {nbytes, chunk}, then
 * ceil(nbytes / chunk) data messages, all from one sender on one tag. MPI's non-overtaking rule
 * (messages between a pair on one communicator and tag match in send order) is what makes the
 * next message a receiver sees on (src, tag) always a header, and a header's data messages the
 * ones after it. A probe has to report the whole size, which only the header's contents hold, so
 * it receives the header (MPI_Improbe + MPI_Mrecv) and keeps it in the communicator until a recv
 * asks for that message.
 */
#include "comm/comm_internal.h"

#ifdef DF_HAVE_MPI
#include "comm/comm_mpi.h"

#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* A pending isend or ibroadcast. */
typedef struct mpi_req {
    int is_bcast;
    int n;             /* reqs[n]; a send's reqs[0] is its header */
    int64_t header[2]; /* a send's {nbytes, chunk}: MPI reads it until reqs[0] completes */
    MPI_Request reqs[];
} mpi_req;

static mpi_req *new_req(int64_t n)
{
    if (n > INT_MAX - 1)
        return NULL;
    mpi_req *m = calloc(1, sizeof *m + (size_t)(n > 0 ? n : 1) * sizeof(MPI_Request));
    if (m) {
        m->n = (int)n;
        for (int i = 0; i < m->n; i++)
            m->reqs[i] = MPI_REQUEST_NULL;
    }
    return m;
}

/* Number of chunks of at most `chunk` bytes in nbytes. */
static int64_t n_chunks(int64_t nbytes, int64_t chunk)
{
    return (nbytes + chunk - 1) / chunk;
}

int df_comm_mpi_isend(df_comm *c, const void *buf, int64_t nbytes, int dest, int tag, df_comm_request *req)
{
    int64_t chunk = c->max_chunk, nch = n_chunks(nbytes, chunk);
    mpi_req *m = new_req(1 + nch);
    if (!m)
        return df_comm_fail(c, DF_ENOMEM, req->what, "out of memory for %lld requests", (long long)(1 + nch));
    m->header[0] = nbytes;
    m->header[1] = chunk;
    req->impl = m;
    int err = MPI_Isend(m->header, 2, MPI_INT64_T, dest, tag, MCOMM(c), &m->reqs[0]);
    for (int64_t k = 0; k < nch && err == MPI_SUCCESS; k++) {
        int64_t off = k * chunk, len = nbytes - off < chunk ? nbytes - off : chunk;
        err = MPI_Isend((const char *)buf + off, (int)len, MPI_BYTE, dest, tag, MCOMM(c), &m->reqs[1 + k]);
    }
    if (err == MPI_SUCCESS)
        return 0;
    df_comm_mpi_req_drop(req); /* the messages already started go out; the error names the send */
    return df_comm_mpi_fail(c, req->what, "MPI_Isend", err);
}

int df_comm_mpi_ibcast(df_comm *c, void *buf, int64_t nbytes, int root, df_comm_request *req)
{
    int64_t chunk = c->max_chunk, nch = n_chunks(nbytes, chunk);
    if (nch == 0)
        return 0; /* as df_comm_broadcast: nothing to move, no MPI call on any rank */
    mpi_req *m = new_req(nch);
    if (!m)
        return df_comm_fail(c, DF_ENOMEM, req->what, "out of memory for %lld requests", (long long)nch);
    m->is_bcast = 1;
    req->impl = m;
    int err = MPI_SUCCESS;
    for (int64_t k = 0; k < nch && err == MPI_SUCCESS; k++) {
        int64_t off = k * chunk, len = nbytes - off < chunk ? nbytes - off : chunk;
        err = MPI_Ibcast((char *)buf + off, (int)len, MPI_BYTE, root, MCOMM(c), &m->reqs[k]);
    }
    if (err == MPI_SUCCESS)
        return 0;
    df_comm_mpi_req_drop(req); /* started chunks cannot be cancelled: the group waits for them */
    return df_comm_mpi_fail(c, req->what, "MPI_Ibcast", err);
}

int df_comm_mpi_req_test(df_comm_request *req, bool *done)
{
    mpi_req *m = req->impl;
    int flag = 0;
    MPI_TRY(req->c, req->what, MPI_Testall(m->n, m->reqs, &flag, MPI_STATUSES_IGNORE));
    *done = flag != 0;
    if (flag) {
        free(m);
        req->impl = NULL;
    }
    return 0;
}

/* A pending ibroadcast joins the communicator's dropped requests, and its collectives stop until
 * df_comm_settle: MPI can neither cancel nor free a non-blocking collective, and the next one
 * would queue behind it anyway. */
static void drop_bcast(df_comm *c, mpi_req *m)
{
    mpi_impl *h = c->impl;
    MPI_Request *grown = realloc(h->dropped, (size_t)(h->n_dropped + m->n) * sizeof *grown);
    c->timed_out = 1;
    if (!grown)
        return; /* out of memory: the requests are lost, and the group stays refused */
    h->dropped = grown;
    for (int i = 0; i < m->n; i++)
        if (m->reqs[i] != MPI_REQUEST_NULL)
            h->dropped[h->n_dropped++] = m->reqs[i];
}

void df_comm_mpi_req_drop(df_comm_request *req)
{
    mpi_req *m = req->impl;
    req->impl = NULL;
    int done = 0;
    if (m->n == 0 || (MPI_Testall(m->n, m->reqs, &done, MPI_STATUSES_IGNORE) == MPI_SUCCESS && done)) {
        free(m);
        return;
    }
    if (m->is_bcast) {
        drop_bcast(req->c, m);
        free(m);
        return;
    }
    /* Sends: MPI_Request_free lets each finish in the background (a cancelled send could leave
     * the receiver a header without its data). The header lives in m, so m outlives a header
     * still in flight: a 16-byte leak, only ever for a send abandoned mid-way. */
    int header_done = 0;
    MPI_Test(&m->reqs[0], &header_done, MPI_STATUS_IGNORE);
    for (int i = 0; i < m->n; i++)
        if (m->reqs[i] != MPI_REQUEST_NULL)
            MPI_Request_free(&m->reqs[i]);
    if (header_done)
        free(m);
}

int df_comm_mpi_settle_dropped(df_comm *c)
{
    mpi_impl *h = c->impl;
    if (h->n_dropped > 0)
        MPI_TRY(c, "settle", MPI_Waitall(h->n_dropped, h->dropped, MPI_STATUSES_IGNORE));
    free(h->dropped);
    h->dropped = NULL;
    h->n_dropped = 0;
    return 0;
}

void df_comm_mpi_p2p_free(mpi_impl *h)
{
    free(h->dropped);
    free(h->probed);
    h->dropped = NULL;
    h->probed = NULL;
    h->n_dropped = h->n_probed = h->cap_probed = 0;
}

/* ---- probed headers ---- */

/* Index of the probed header from source (or any) on tag, -1 when none. */
static int find_probed(const mpi_impl *h, int source, int tag)
{
    for (int i = 0; i < h->n_probed; i++)
        if (h->probed[i].tag == tag && (source == DF_COMM_ANY_SOURCE || h->probed[i].src == source))
            return i;
    return -1;
}

static int keep_probed(df_comm *c, const char *what, mpi_probed p)
{
    mpi_impl *h = c->impl;
    if (h->n_probed == h->cap_probed) {
        int cap = h->cap_probed ? 2 * h->cap_probed : 8;
        mpi_probed *grown = realloc(h->probed, (size_t)cap * sizeof *grown);
        if (!grown)
            return df_comm_fail(c, DF_ENOMEM, what,
                                "out of memory for a probed message header (the "
                                "message from rank %d on tag %d is lost)",
                                p.src, p.tag);
        h->probed = grown;
        h->cap_probed = cap;
    }
    h->probed[h->n_probed++] = p;
    return 0;
}

/* A received header's checks: 16 bytes, a size >= 0, a chunk in 1..INT_MAX. Anything else means
 * the stream from src on tag is out of step (a recv timed out mid-message) or a foreign sender. */
static int check_header(df_comm *c, const char *what, const MPI_Status *st, const int64_t hdr[2])
{
    int count = 0;
    MPI_Get_count(st, MPI_BYTE, &count);
    if (count == (int)(2 * sizeof(int64_t)) && hdr[0] >= 0 && hdr[1] > 0 && hdr[1] <= INT_MAX)
        return 0;
    return df_comm_fail(c, DF_EINTERNAL, what,
                        "the message from rank %d on tag %d is not a df_comm_send "
                        "header (%d bytes): that sender's stream on this tag is out of step, e.g. after "
                        "a recv that timed out mid-message",
                        st->MPI_SOURCE, st->MPI_TAG, count);
}

int df_comm_mpi_probe(df_comm *c, int source, int tag, bool *found, int *src, int64_t *nbytes)
{
    mpi_impl *h = c->impl;
    int i = find_probed(h, source, tag);
    if (i < 0) {
        int flag = 0;
        MPI_Message msg = MPI_MESSAGE_NULL;
        MPI_Status st;
        MPI_TRY(c, "probe",
                MPI_Improbe(source == DF_COMM_ANY_SOURCE ? MPI_ANY_SOURCE : source, tag, h->comm, &flag, &msg,
                            &st));
        if (!flag)
            return 0;
        int count = 0;
        MPI_Get_count(&st, MPI_BYTE, &count);
        /* a matched message must be received; one too long for a header is read whole, then refused */
        int64_t hdr[2] = {-1, 0}, *into = hdr;
        if (count > (int)sizeof hdr && !(into = malloc((size_t)count)))
            return df_comm_fail(c, DF_ENOMEM, "probe", "out of memory for %d bytes", count);
        int err = MPI_Mrecv(into, count, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
        if (into != hdr)
            free(into);
        if (err != MPI_SUCCESS)
            return df_comm_mpi_fail(c, "probe", "MPI_Mrecv", err);
        int rc = check_header(c, "probe", &st, hdr);
        if (!rc)
            rc = keep_probed(c, "probe", (mpi_probed){st.MPI_SOURCE, tag, hdr[0], hdr[1]});
        if (rc)
            return rc;
        i = h->n_probed - 1;
    }
    *found = true;
    *src = h->probed[i].src;
    *nbytes = h->probed[i].nbytes;
    return 0;
}

/* ---- blocking receive ---- */

enum { TIMED_OUT = -1 };

/* Test reqs[0..n-1] until all complete (0), c's timeout passes (TIMED_OUT, the requests still
 * pending) or MPI fails (DF_EINTERNAL). Polls as comm_mpi.c's wait_req. */
static int poll_all(df_comm *c, const char *what, MPI_Request *reqs, int n, MPI_Status *st)
{
    const double t0 = MPI_Wtime();
    for (;;) {
        int done = 0;
        MPI_TRY(c, what, MPI_Testall(n, reqs, &done, st ? st : MPI_STATUSES_IGNORE));
        if (done)
            return 0;
        double waited = MPI_Wtime() - t0;
        if (c->timeout_s > 0 && waited > c->timeout_s)
            return TIMED_OUT;
        if (waited > 1e-3)
            sched_yield();
    }
}

/* Cancel pending receives; how many of them completed anyway (their data landed). */
static int cancel_recvs(MPI_Request *reqs, int n, MPI_Status *st)
{
    int landed = 0;
    for (int i = 0; i < n; i++) {
        int cancelled = 0;
        MPI_Cancel(&reqs[i]);
        MPI_Wait(&reqs[i], &st[i]);
        MPI_Test_cancelled(&st[i], &cancelled);
        landed += !cancelled;
    }
    return landed;
}

static int timeout_fail(df_comm *c, int source, int tag, const char *fate)
{
    return df_comm_fail(c, DF_EINTERNAL, "recv",
                        "no message from rank %d on tag %d after %.1f s (timeout, "
                        "trainer.collective_timeout_s): the sender stopped, hangs or is far behind; %s",
                        source, tag, c->timeout_s, fate);
}

/* The next header from source on tag, off the wire. */
static int recv_header(df_comm *c, int source, int tag, mpi_probed *p)
{
    int64_t hdr[2];
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_Status st;
    MPI_TRY(c, "recv", MPI_Irecv(hdr, 2, MPI_INT64_T, source, tag, MCOMM(c), &r));
    int rc = poll_all(c, "recv", &r, 1, &st);
    if (rc == TIMED_OUT) {
        if (cancel_recvs(&r, 1, &st) == 0)
            return timeout_fail(c, source, tag, "nothing came, and a later recv can still take the message");
        rc = 0; /* the header came as we gave up: take its message */
    }
    if (rc || (rc = check_header(c, "recv", &st, hdr)) != 0)
        return rc;
    *p = (mpi_probed){source, tag, hdr[0], hdr[1]};
    return 0;
}

/* The data messages of the message p announced, into buf. */
static int recv_chunks(df_comm *c, void *buf, const mpi_probed *p)
{
    int64_t nch = n_chunks(p->nbytes, p->chunk);
    if (nch == 0)
        return 0;
    if (nch > INT_MAX)
        return df_comm_fail(c, DF_EINVAL, "recv", "%lld chunks", (long long)nch);
    MPI_Request *reqs = malloc((size_t)nch * (sizeof *reqs + sizeof(MPI_Status)));
    if (!reqs)
        return df_comm_fail(c, DF_ENOMEM, "recv", "out of memory for %lld requests", (long long)nch);
    MPI_Status *st = (MPI_Status *)(reqs + nch);
    int rc = 0;
    int64_t posted = 0;
    for (; posted < nch && !rc; posted++) {
        int64_t off = posted * p->chunk, len = p->nbytes - off < p->chunk ? p->nbytes - off : p->chunk;
        int err = MPI_Irecv((char *)buf + off, (int)len, MPI_BYTE, p->src, p->tag, MCOMM(c), &reqs[posted]);
        if (err != MPI_SUCCESS) {
            rc = df_comm_mpi_fail(c, "recv", "MPI_Irecv", err);
            break;
        }
    }
    if (!rc)
        rc = poll_all(c, "recv", reqs, (int)nch, NULL);
    if (rc) {
        int landed = cancel_recvs(reqs, (int)posted, st);
        int kept = 0;
        if (rc == TIMED_OUT && landed == nch)
            rc = 0; /* everything came as we gave up */
        else if (rc == TIMED_OUT && landed == 0)
            rc = (kept = keep_probed(c, "recv", *p))
                     ? kept
                     : timeout_fail(c, p->src, p->tag,
                                    "its data did not come, and a later recv can still take the message");
        else if (rc == TIMED_OUT)
            rc = timeout_fail(c, p->src, p->tag,
                              "part of a chunked message came and is lost: that "
                              "sender's stream on this tag is out of step");
    }
    free(reqs);
    return rc;
}

int df_comm_mpi_recv(df_comm *c, void *buf, int64_t nbytes, int source, int tag)
{
    mpi_impl *h = c->impl;
    mpi_probed p;
    int i = find_probed(h, source, tag);
    if (i >= 0) {
        p = h->probed[i];
        memmove(&h->probed[i], &h->probed[i + 1], (size_t)(h->n_probed - i - 1) * sizeof p);
        h->n_probed--;
    } else {
        int rc = recv_header(c, source, tag, &p);
        if (rc)
            return rc;
    }
    if (p.nbytes != nbytes) {
        int rc = keep_probed(c, "recv", p);
        return rc ? rc
                  : df_comm_fail(c, DF_EINVAL, "recv",
                                 "the message from rank %d on tag %d has %lld "
                                 "bytes, not %lld (it stays queued)",
                                 source, tag, (long long)p.nbytes, (long long)nbytes);
    }
    return recv_chunks(c, buf, &p);
}

#else
/* Built without MPI: the single backend is the only one. */
typedef int df_comm_mpi_p2p_unused;
#endif
