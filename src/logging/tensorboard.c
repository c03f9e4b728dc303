/* The TensorBoard sink: an event file of TFRecord-framed Event messages (logging/loggers.h). */
#include "logging/loggers.h"

#include "logging/tfrecord.h"
#include "util/fsutil.h"
#include "util/timeutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char *df_tensorboard_dir(const char *dir, const char *project, const char *experiment)
{
    if (dir && *dir)
        return df_expand_user(dir);
    const char *env = getenv("TENSORBOARD_DIR");
    if (env && *env)
        return strdup(env);
    size_t n = strlen("tensorboard_log///") + strlen(project) + strlen(experiment) + 1;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "tensorboard_log/%s/%s", project, experiment);
    return p;
}

#ifdef DF_HAVE_PROTOBUF_C

#include "tb_event.pb-c.h" /* generated from logging/tb_event.proto at build time */

bool df_tensorboard_available(void) { return true; }

typedef struct {
    int fd;
    char *path;
} tb_sink;

/* Pack `ev`, frame it as one record and write it. */
static int write_event(tb_sink *t, const Distflow__Tb__Event *ev)
{
    size_t n = distflow__tb__event__get_packed_size(ev);
    uint8_t *payload = malloc(n ? n : 1), *rec = malloc(n + DF_TFRECORD_OVERHEAD);
    int rc = payload && rec ? DF_OK : df_error(DF_ENOMEM, "out of memory writing %s", t->path);
    if (!rc) {
        distflow__tb__event__pack(ev, payload);
        df_tfrecord_frame(payload, n, rec);
        rc = df_append_line(t->fd, t->path, (const char *)rec, n + DF_TFRECORD_OVERHEAD); /* never a cut record */
    }
    free(payload);
    free(rec);
    return rc;
}

static int tb_log(void *self, int64_t step, const df_metrics *m)
{
    tb_sink *t = self;
    int n = df_metrics_count(m);
    Distflow__Tb__Summary__Value *vals = calloc((size_t)(n ? n : 1), sizeof *vals);
    Distflow__Tb__Summary__Value **ptrs = calloc((size_t)(n ? n : 1), sizeof *ptrs);
    int rc = vals && ptrs ? DF_OK : df_error(DF_ENOMEM, "out of memory writing %s", t->path);
    for (int i = 0; !rc && i < n; i++) {
        double v;
        const char *name = df_metrics_at(m, i, &v);
        distflow__tb__summary__value__init(&vals[i]);
        vals[i].tag = (char *)name; /* only read by pack */
        vals[i].has_simple_value = 1;
        vals[i].simple_value = (float)v; /* TensorBoard's scalar is float32; NaN / Inf kept as such */
        ptrs[i] = &vals[i];
    }
    Distflow__Tb__Summary sum = DISTFLOW__TB__SUMMARY__INIT;
    sum.n_value = (size_t)n;
    sum.value = ptrs;
    Distflow__Tb__Event ev = DISTFLOW__TB__EVENT__INIT;
    ev.has_wall_time = 1, ev.wall_time = df_unix_time();
    ev.has_step = 1, ev.step = step;
    ev.what_case = DISTFLOW__TB__EVENT__WHAT_SUMMARY, ev.summary = &sum;
    if (!rc)
        rc = write_event(t, &ev);
    free(vals);
    free(ptrs);
    return rc;
}

static int tb_close(void *self)
{
    tb_sink *t = self;
    int rc = DF_OK, err = 0;
    if (t->fd >= 0 && fsync(t->fd))
        err = errno;
    if (t->fd >= 0 && close(t->fd) && !err)
        err = errno;
    if (err)
        rc = df_error(DF_EIO, "cannot close %s: %s", t->path, strerror(err));
    free(t->path);
    free(t);
    return rc;
}

/* A new file in `dir`: TensorBoard's name, then `.<pid>.<k>` while it is taken (two runs started in the
   same second on the same host). Sets t->fd and t->path. */
static int create_file(tb_sink *t, const char *dir)
{
    char host[256] = "localhost", name[512];
    if (gethostname(host, sizeof host - 1))
        snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    long long now = (long long)df_unix_time();
    for (int k = 0; k < 100; k++) {
        if (k == 0)
            snprintf(name, sizeof name, "events.out.tfevents.%lld.%s", now, host);
        else
            snprintf(name, sizeof name, "events.out.tfevents.%lld.%s.%d.%d", now, host, (int)getpid(), k);
        free(t->path);
        if (!(t->path = df_path_join(dir, name)))
            return df_error(DF_ENOMEM, "out of memory");
        t->fd = open(t->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
        if (t->fd >= 0)
            return DF_OK;
        if (errno != EEXIST)
            return df_error(DF_EIO, "cannot create the TensorBoard event file %s: %s", t->path, strerror(errno));
    }
    return df_error(DF_EIO, "cannot create a TensorBoard event file in %s: every name tried exists", dir);
}

/* The file's first record, and the restart marker of a resumed run. */
static int write_header(tb_sink *t, int64_t resume_step)
{
    Distflow__Tb__Event ev = DISTFLOW__TB__EVENT__INIT;
    ev.has_wall_time = 1, ev.wall_time = df_unix_time();
    ev.what_case = DISTFLOW__TB__EVENT__WHAT_FILE_VERSION, ev.file_version = (char *)"brain.Event:2";
    int rc = write_event(t, &ev);
    if (rc || resume_step <= 0)
        return rc;
    Distflow__Tb__SessionLog sl = DISTFLOW__TB__SESSION_LOG__INIT;
    sl.has_status = 1, sl.status = DISTFLOW__TB__SESSION_LOG__SESSION_STATUS__START;
    ev.has_step = 1, ev.step = resume_step + 1;
    ev.what_case = DISTFLOW__TB__EVENT__WHAT_SESSION_LOG, ev.session_log = &sl;
    return write_event(t, &ev);
}

int df_sink_tensorboard_open(const char *dir, int64_t resume_step, df_metrics_sink *out)
{
    tb_sink *t = calloc(1, sizeof *t);
    if (!t)
        return df_error(DF_ENOMEM, "out of memory");
    t->fd = -1;
    int rc = df_mkdir_p(dir);
    if (!rc)
        rc = create_file(t, dir);
    if (!rc)
        rc = write_header(t, resume_step);
    if (rc) {
        if (t->fd >= 0) /* a file without its header would confuse TensorBoard: remove it */
            unlink(t->path);
        tb_close(t);
        return rc;
    }
    *out = (df_metrics_sink){.name = "tensorboard", .file = t->path, .self = t, .log = tb_log, .close = tb_close};
    return DF_OK;
}

#else /* built without protobuf-c: the name is refused by df_loggers_check_names */

bool df_tensorboard_available(void) { return false; }

int df_sink_tensorboard_open(const char *dir, int64_t resume_step, df_metrics_sink *out)
{
    (void)dir, (void)resume_step, (void)out;
    return df_error(DF_EUNSUPPORTED, "this build of distflow has no TensorBoard writer (protobuf-c not found)");
}

#endif
