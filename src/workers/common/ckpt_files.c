/* The checkpoint directory shared by train and sft: crash-safe saves, cleanup, resume_mode, metrics.jsonl
   (ckpt_files.h, docs/checkpoints.md). */
#include "workers/common/ckpt_files.h"

#include "util/finite.h"
#include "util/fsutil.h"
#include "util/killpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define METRICS "metrics.jsonl"

int df_ckpt_path(char *out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(out, DF_CKPT_PATH_MAX, fmt, ap);
    va_end(ap);
    return k < 0 || k >= DF_CKPT_PATH_MAX ? df_error(DF_EINVAL, "path too long: %s...", out) : DF_OK;
}

int df_ckpt_check_finite(const df_model *m, const char *role)
{
    int64_t bad = df_first_nonfinite(m->params, m->n_params);
    if (bad < 0)
        return DF_OK;
    const df_param_desc *d = &m->tensors[0];
    for (int i = 0; i < m->n_tensors; i++) /* the last tensor starting at or before `bad` */
        if (m->tensors[i].offset <= bad)
            d = &m->tensors[i];
    return df_error(DF_EINVAL, "the %s's weights are not finite (tensor \"%s\" element %lld is %g): no "
                    "checkpoint is written", role, d->name, (long long)(bad - d->offset), (double)m->params[bad]);
}

/* ---- saving ---- */

int df_ckpt_save_paths(df_ckpt_save *s, const char *out_dir, int64_t step)
{
    long long n = (long long)step;
    s->step = step;
    int rc = df_ckpt_path(s->out_dir, "%s", out_dir);
    if (!rc)
        rc = df_ckpt_path(s->tmp, "%s/.global_step_%lld.tmp", out_dir, n);
    if (!rc)
        rc = df_ckpt_path(s->old, "%s/.global_step_%lld.old.tmp", out_dir, n);
    if (!rc)
        rc = df_ckpt_path(s->final, "%s/global_step_%lld", out_dir, n);
    return rc;
}

int df_ckpt_save_begin(const df_ckpt_save *s)
{
    int rc = df_remove_tree(s->tmp);
    return rc ? rc : df_mkdir_p(s->tmp);
}

int df_ckpt_save_publish(const df_ckpt_save *s)
{
    int rc = df_fsync_dir(s->tmp);
    if (!rc && df_dir_exists(s->final)) /* a checkpoint of the same step (resume_mode=disable): aside first */
        rc = df_rename(s->final, s->old);
    if (!rc)
        rc = df_rename(s->tmp, s->final);
    if (!rc) /* the new directory is durable before `latest` can name it */
        rc = df_fsync_dir(s->out_dir);
    if (!rc)
        rc = df_remove_tree(s->old);
    char latest[DF_CKPT_PATH_MAX];
    if (!rc)
        rc = df_ckpt_path(latest, "%s/%s", s->out_dir, DF_CKPT_LATEST);
    if (!rc) {
        char txt[32];
        int n = snprintf(txt, sizeof txt, "%lld\n", (long long)s->step);
        rc = df_write_file_atomic(latest, txt, (size_t)n);
    }
    return rc;
}

void df_ckpt_save_end(const df_ckpt_save *s, int rc)
{
    if (rc)
        df_remove_tree(s->tmp); /* its own error would hide the save's */
}

/* ---- stale temporaries ---- */

/* ".global_step_<digits><suffix>" */
static bool is_step_tmp(const char *name, const char *suffix, long long *step)
{
    const char *pre = ".global_step_", *p = name + strlen(pre);
    if (strncmp(name, pre, strlen(pre)) || *p < '0' || *p > '9')
        return false;
    *step = strtoll(p, NULL, 10);
    while (*p >= '0' && *p <= '9')
        p++;
    return !strcmp(p, suffix);
}

/* A df_tmpfile temporary of out_dir/<base>: ".<base>.tmp.XXXXXX" */
static bool is_file_tmp(const char *name, const char *base)
{
    size_t b = strlen(base);
    return name[0] == '.' && !strncmp(name + 1, base, b) && !strncmp(name + 1 + b, ".tmp.", 5) &&
           strlen(name + 1 + b + 5) == 6;
}

/* One entry of out_dir: removed, put back or left alone. */
static int clean_entry(const char *out_dir, const char *name, bool console)
{
    long long step;
    bool aside = is_step_tmp(name, ".old.tmp", &step);
    if (!aside && !is_step_tmp(name, ".tmp", &step) && !is_file_tmp(name, DF_CKPT_LATEST) &&
        !is_file_tmp(name, METRICS))
        return DF_OK;
    char p[DF_CKPT_PATH_MAX], final[DF_CKPT_PATH_MAX];
    int rc = df_ckpt_path(p, "%s/%s", out_dir, name);
    if (!rc && aside && !(rc = df_ckpt_path(final, "%s/global_step_%lld", out_dir, step)) && !df_dir_exists(final)) {
        /* moved aside for a replacement that never arrived: it is still the complete checkpoint */
        if (!(rc = df_rename(p, final)) && !(rc = df_fsync_dir(out_dir)) && console)
            fprintf(stderr, "[distflow] restored %s, moved aside by an interrupted checkpoint save\n", final);
        return rc;
    }
    if (!rc)
        rc = df_remove_tree(p);
    if (!rc && console)
        fprintf(stderr, "[distflow] removed %s, left by an interrupted checkpoint save\n", p);
    return rc;
}

int df_ckpt_cleanup(const char *out_dir, bool console)
{
    DIR *d = opendir(out_dir);
    if (!d)
        return errno == ENOENT ? DF_OK : df_error(DF_EIO, "%s: cannot list: %s", out_dir, strerror(errno));
    int rc = DF_OK;
    for (struct dirent *e; !rc && (e = readdir(d));)
        rc = clean_entry(out_dir, e->d_name, console);
    closedir(d);
    return rc;
}

/* ---- resume_mode ---- */

static int find_latest(const char *out_dir, char *dir, bool *have)
{
    char latest[DF_CKPT_PATH_MAX];
    int rc = df_ckpt_path(latest, "%s/%s", out_dir, DF_CKPT_LATEST);
    if (rc || !df_file_exists(latest))
        return rc; /* auto without a checkpoint: a fresh start */
    char *text;
    if ((rc = df_read_file(latest, &text, NULL)))
        return rc;
    char *end;
    long long n = strtoll(text, &end, 10);
    bool ok = end != text && n >= 0 && strspn(end, " \t\r\n") == strlen(end);
    free(text);
    if (!ok)
        return df_error(DF_EINVAL, "%s: not a step number", latest);
    if ((rc = df_ckpt_path(dir, "%s/global_step_%lld", out_dir, n)))
        return rc;
    if (!df_dir_exists(dir))
        return df_error(DF_ENOTFOUND, "%s names step %lld, but %s does not exist (trainer.resume_mode=disable "
                                      "starts afresh)", latest, n, dir);
    *have = true;
    return DF_OK;
}

int df_ckpt_find(const df_config *cfg, const char *out_dir, const char *mode, const char *from_path, char *dir,
                 bool *have)
{
    *have = false;
    if (!strcmp(mode, "disable"))
        return DF_OK;
    if (strcmp(mode, "resume_path"))
        return find_latest(out_dir, dir, have);
    if (!from_path)
        return df_error(DF_EINVAL, "%s: trainer.resume_mode=resume_path needs trainer.resume_from_path",
                        df_config_where(cfg, "trainer.resume_mode"));
    char *p = df_expand_user(from_path);
    int rc = !p ? df_error(DF_ENOMEM, "out of memory") : df_ckpt_path(dir, "%s", p);
    free(p);
    if (rc)
        return rc;
    if (!df_dir_exists(dir))
        return df_error(DF_ENOTFOUND, "%s: trainer.resume_from_path=%s: no such checkpoint directory",
                        df_config_where(cfg, "trainer.resume_from_path"), dir);
    *have = true;
    return DF_OK;
}

/* ---- JSON files ---- */

int df_ckpt_write_json(json_t *o, const char *path)
{
    char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(o);
    if (!text)
        return df_error(DF_ENOMEM, "out of memory writing %s", path);
    size_t n = strlen(text);
    text[n] = '\n'; /* json_dumps' NUL becomes the final newline; the length says where it ends */
    int rc = df_write_file_atomic(path, text, n + 1);
    free(text);
    return rc;
}

int df_ckpt_load_json(const char *path, const char *format, json_t **out)
{
    char *text;
    int rc = df_read_file(path, &text, NULL);
    if (rc)
        return rc == DF_ENOTFOUND ? df_error(DF_ENOTFOUND, "%s: no such file (an incomplete checkpoint, or one "
                                                           "written before distflow kept training state; "
                                                           "trainer.resume_mode=disable starts afresh)", path)
                                  : rc;
    json_error_t e;
    *out = json_loads(text, 0, &e);
    free(text);
    if (!*out || !json_is_object(*out)) {
        json_decref(*out);
        return df_error(DF_EINVAL, "%s:%d: not a JSON object: %s", path, e.line, *out ? "" : e.text);
    }
    const char *fmt = json_string_value(json_object_get(*out, "format"));
    if (!fmt || strcmp(fmt, format)) {
        json_decref(*out);
        return df_error(DF_EINVAL, "%s: format \"%s\", expected \"%s\"", path, fmt ? fmt : "(none)", format);
    }
    return DF_OK;
}

int df_ckpt_json_int(const json_t *o, const char *key, const char *path, int64_t *v)
{
    const json_t *x = json_object_get(o, key);
    if (!json_is_integer(x) || json_integer_value(x) < 0)
        return df_error(DF_EINVAL, "%s: \"%s\" is missing or not a non-negative integer", path, key);
    *v = (int64_t)json_integer_value(x);
    return DF_OK;
}

void df_ckpt_legacy_order_note(char *buf, size_t cap, const char *path, int64_t ranks, int64_t epoch,
                               int64_t step)
{
    snprintf(buf, cap, "%s: written by an earlier distflow whose %lld ranks each shuffled their own shard; "
             "the run goes on at epoch %lld step %lld of today's order, in which the rest of that epoch may "
             "repeat or skip some rows", path, (long long)ranks, (long long)epoch, (long long)step);
}

/* ---- metrics.jsonl ---- */

/* The lines of `text` whose "step" is at most `last`, into a new buffer. */
static char *kept_lines(char *text, int64_t last, size_t *len)
{
    size_t cap = strlen(text) + 1, n = 0;
    char *out = malloc(cap);
    for (char *l = text, *next; out && l && *l; l = next) {
        char *nl = strchr(l, '\n');
        next = nl ? nl + 1 : NULL;
        if (!nl)
            break; /* a last line without its newline was cut by a crash */
        json_t *o = json_loadb(l, (size_t)(nl - l), 0, NULL);
        json_t *s = json_object_get(o, "step");
        if (json_is_integer(s) && json_integer_value(s) <= last) {
            memcpy(out + n, l, (size_t)(next - l));
            n += (size_t)(next - l);
        }
        json_decref(o);
    }
    *len = n;
    return out;
}

/* metrics.jsonl cut back to the lines of steps <= last, rewritten atomically. */
static int trim(const char *path, int64_t last)
{
    char *text = NULL, *kept = NULL;
    size_t n = 0, had = 0;
    int rc = df_read_file(path, &text, &had);
    if (!rc && !(kept = kept_lines(text, last, &n)))
        rc = df_error(DF_ENOMEM, "out of memory");
    if (!rc && n != had) /* nothing to cut: the file stays as it is */
        rc = df_write_file_atomic(path, kept, n);
    free(text);
    free(kept);
    return rc;
}

int df_metrics_log_open(df_metrics_log *l, const char *out_dir, int64_t resumed_step)
{
    memset(l, 0, sizeof *l);
    l->append = resumed_step > 0;
    l->path = df_path_join(out_dir, METRICS);
    if (!l->path)
        return df_error(DF_ENOMEM, "out of memory");
    int rc = l->append && df_file_exists(l->path) ? trim(l->path, resumed_step) : DF_OK;
    if (rc)
        df_metrics_log_close(l);
    return rc;
}

int df_metrics_log_append(df_metrics_log *l, const char *line, bool sync)
{
    if (!l->opened) { /* the first line: the file (and out_dir) made now, not when the run started */
        int rc = df_mkdir_parent(l->path);
        if (rc)
            return rc;
        l->fd = open(l->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (l->append ? 0 : O_TRUNC), 0644);
        if (l->fd < 0)
            return df_error(DF_EIO, "cannot open %s for writing: %s", l->path, strerror(errno));
        l->opened = true;
    }
    int rc = df_append_line(l->fd, l->path, line, strlen(line));
    if (!rc && sync && fdatasync(l->fd))
        rc = df_error(DF_EIO, "%s: cannot flush the file to disk: %s", l->path, strerror(errno));
    return rc;
}

void df_metrics_log_close(df_metrics_log *l)
{
    if (l->opened)
        close(l->fd);
    free(l->path);
    memset(l, 0, sizeof *l);
}
