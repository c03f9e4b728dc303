/*
 * Reward functions written in Python (include/distflow/reward.h, df_reward_python_*): verl's
 * custom_reward_function.path as a .py file. A `python3` child imports the file once and
 * serves one request per batch over a socketpair: a JSON line with the batch's columns out, a
 * JSON line with every row's [score, acc, pred] back. The socket (not stdin / stdout) carries
 * the protocol so that a reward function's print() reaches the console untouched, and send()
 * with MSG_NOSIGNAL turns a dead child into an error instead of a SIGPIPE. For verl's
 * PrimeRewardManager the child scores a batch's rows in a process pool of its own (the
 * function's calls run in parallel; a call past the batch's deadline or raising scores 0).
 */
#include "distflow/reward.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* The child's program (python3 -c): argv = fd, path, name, kwargs JSON, mode (naive | batch |
 * prime), prime's pool size and its deadline in seconds.
 * It ignores SIGINT / SIGTERM: distflow stops at a step boundary on them and closes the
 * socket, which ends the child; a stray signal must not kill it mid-step. */
static const char DRIVER[] =
    "import importlib.util, json, math, numbers, re, signal, socket, sys, traceback\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "fd, path, name, kwargs, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), "
    "sys.argv[5]\n"
    "processes, timeout = int(sys.argv[6]), float(sys.argv[7])\n"
    "conn = socket.socket(fileno=fd)\n"
    "rd = conn.makefile('r', encoding='utf-8', newline='\\n')\n"
    "wr = conn.makefile('w', encoding='utf-8', newline='\\n')\n"
    "def reply(obj):\n"
    "    wr.write(json.dumps(obj, allow_nan=False) + '\\n')\n"
    "    wr.flush()\n"
    "def failure(what, row=None):\n"
    "    return {'error': what + ':\\n' + traceback.format_exc().rstrip(), 'row': row}\n"
    "try:\n"
    "    spec = importlib.util.spec_from_file_location('custom_module', path)\n"
    "    module = importlib.util.module_from_spec(spec)\n"
    "    sys.modules['custom_module'] = module\n"
    "    spec.loader.exec_module(module)\n"
    "    fn = getattr(module, name, None)\n"
    "    if not callable(fn):\n"
    "        raise AttributeError('%s defines no function %r' % (path, name))\n"
    "except BaseException:\n"
    "    reply(failure('importing ' + path))\n"
    "    sys.exit(0)\n"
    "reply({'ready': True})\n"
    "def number(x, what):\n"
    "    if isinstance(x, (str, bytes)):\n"
    "        raise TypeError('%s is a string, %r' % (what, x))\n"
    "    v = float(x)\n"
    "    if not math.isfinite(v):\n"
    "        raise ValueError('%s is %r' % (what, v))\n"
    "    return v\n"
    "RESERVED = ('reward', 'overlong_reward', 'overlong', 'input', 'output', 'gts', 'step', 'index', "
    "'data_source')\n"
    "def result(r, extras, texts, row):\n"
    "    if not isinstance(r, dict):\n"
    "        return [number(r, 'the score'), None, None]\n"
    "    if 'score' not in r:\n"
    "        raise KeyError('the result is a dict without \"score\" (keys: %s)' % ', '.join(map(str, r)))\n"
    "    for k, v in r.items():\n"
    "        if k in ('score', 'acc', 'pred'):\n"
    "            continue\n"
    "        if k in RESERVED or not isinstance(k, str) or not re.fullmatch(r'[A-Za-z0-9_.-]{1,50}', k):\n"
    "            raise ValueError('the result key %r: an extra key must be 1-50 characters of '\n"
    "                             '[A-Za-z0-9_.-] and not one of %s' % (k, ', '.join(RESERVED)))\n"
    "        if isinstance(v, numbers.Number):\n"
    "            extras.setdefault(k, {})[row] = number(v, 'the value of %r' % k)\n"
    "        else:\n"
    "            texts.setdefault(k, {})[row] = json.dumps(v, allow_nan=False, default=str)\n"
    "    return [number(r['score'], 'the score'), bool(r['acc']) if 'acc' in r else None,\n"
    "            str(r['pred']) if 'pred' in r else None]\n"
    "def prime_result(r):\n"
    "    if isinstance(r, dict):\n"
    "        raise TypeError('the prime reward manager reads a number, or a sequence whose first item is the '\n"
    "                        'score (verl PrimeRewardManager); the function returned a dict: use '\n"
    "                        'reward_model.reward_manager naive or batch for dict results')\n"
    "    return [number(r if isinstance(r, numbers.Number) else r[0], 'the score'), None, None]\n"
    "def prime(src, sol, gt, extra):\n"
    "    import concurrent.futures as cf, functools, multiprocessing\n"
    "    call = functools.partial(fn, **kwargs)\n"
    "    ex = cf.ProcessPoolExecutor(max_workers=max(1, min(processes, len(sol))),\n"
    "                                mp_context=multiprocessing.get_context('fork'))\n"
    "    try:\n"
    "        futs = [ex.submit(call, src[i], sol[i], gt[i], extra[i]) for i in range(len(sol))]\n"
    "        late = cf.wait(futs, timeout=timeout).not_done\n"
    "        rs = []\n"
    "        for i, f in enumerate(futs):\n"
    "            if f in late:\n"
    "                print('[Timeout] Task timeout: %s' % sol[i], flush=True)\n"
    "            elif f.exception() is not None:\n"
    "                print('[Error] Task failed: %s, completion: %s' % (f.exception(), sol[i][:80]), flush=True)\n"
    "            rs.append(0.0 if f in late or f.exception() is not None else f.result())\n"
    "        return rs\n"
    "    finally:\n"
    "        for proc in list((getattr(ex, '_processes', None) or {}).values()):\n"
    "            proc.kill()\n"
    "        ex.shutdown(wait=True, cancel_futures=True)\n"
    "for line in rd:\n"
    "    q = json.loads(line)\n"
    "    src, sol, gt = q['data_source'], q['solution_str'], q['ground_truth']\n"
    "    extra = [None if e is None else json.loads(e) for e in q['extra_info']]\n"
    "    row = None\n"
    "    try:\n"
    "        if mode == 'prime':\n"
    "            rs = prime(src, sol, gt, extra)\n"
    "        elif mode == 'batch':\n"
    "            rs = list(fn(data_sources=src, solution_strs=sol, ground_truths=gt, extra_infos=extra, "
    "**kwargs))\n"
    "            if len(rs) != len(sol):\n"
    "                raise ValueError('%s returned %d results for %d responses' % (name, len(rs), len(sol)))\n"
    "        else:\n"
    "            rs = []\n"
    "            for row in range(len(sol)):\n"
    "                rs.append(fn(data_source=src[row], solution_str=sol[row], ground_truth=gt[row], "
    "extra_info=extra[row], **kwargs))\n"
    "        out, extras, texts = [], {}, {}\n"
    "        for row in range(len(rs)):\n"
    "            out.append(prime_result(rs[row]) if mode == 'prime' else result(rs[row], extras, texts, row))\n"
    "        for k in set(extras) & set(texts):\n"
    "            row = min(texts[k])\n"
    "            raise TypeError('%r is a number in other results of the batch, %s in this one' % (k, texts[k][row]))\n"
    "        for k, got in list(extras.items()) + list(texts.items()):\n"
    "            for row in range(len(rs)):\n"
    "                if row not in got:\n"
    "                    raise KeyError('%r is in other results of the batch but not in this one' % k)\n"
    "        row = None\n"
    "        reply({'results': out, 'extra': {k: [got[i] for i in range(len(rs))] for k, got in extras.items()},\n"
    "               'extra_json': {k: [got[i] for i in range(len(rs))] for k, got in texts.items()}})\n"
    "    except Exception:\n"
    "        reply(failure('calling ' + name, row))\n";

/* A batch's extra keys of one kind: names[n], and values[n][rows] as numbers or as JSON texts. */
typedef struct extra_keys {
    int n;
    char **names;
    double *nums;
    char **texts;
    int64_t rows;
} extra_keys;

struct df_reward_python {
    pid_t pid; /* 0 once reaped */
    int fd;    /* our end of the socketpair, -1 once the child is gone */
    df_reward_python_opts opts;
    char *where; /* "<path>:<name>" for messages */
    char *buf;   /* bytes read past the last line */
    size_t len, cap;
    extra_keys num;  /* the last batch's numeric extra keys */
    extra_keys text; /* its other extra keys, each value as JSON text */
};

static void clear_keys(extra_keys *e)
{
    for (int k = 0; k < e->n; k++)
        free(e->names[k]);
    for (int64_t i = 0; e->texts && i < (int64_t)e->n * e->rows; i++)
        free(e->texts[i]);
    free(e->names);
    free(e->nums);
    free(e->texts);
    *e = (extra_keys){0};
}

static void clear_extra(df_reward_python *p)
{
    clear_keys(&p->num);
    clear_keys(&p->text);
}

/* A reply's {key: [n values]} into e: numbers ("extra"), or JSON texts ("extra_json") when `text`. */
static int read_keys(const df_reward_python *p, const json_t *obj, int64_t n, bool text, extra_keys *e)
{
    size_t keys = json_object_size(obj);
    if (!keys)
        return DF_OK;
    e->rows = n;
    e->names = calloc(keys, sizeof *e->names);
    if (text)
        e->texts = calloc(keys * (size_t)n, sizeof *e->texts);
    else
        e->nums = malloc(keys * (size_t)n * sizeof *e->nums);
    if (!e->names || !(text ? (void *)e->texts : (void *)e->nums))
        return df_error(DF_ENOMEM, "Python reward function %s: out of memory", p->where);
    const char *key;
    const json_t *vals;
    json_object_foreach((json_t *)obj, key, vals) {
        if (json_array_size(vals) != (size_t)n)
            return df_error(DF_EIO, "Python reward function %s: malformed extra values of '%s'", p->where, key);
        if (!(e->names[e->n] = strdup(key)))
            return df_error(DF_ENOMEM, "Python reward function %s: out of memory", p->where);
        size_t at = (size_t)e->n++ * (size_t)n;
        for (int64_t i = 0; i < n; i++) {
            const json_t *v = json_array_get(vals, (size_t)i);
            if (!text) {
                e->nums[at + (size_t)i] = json_number_value(v);
                continue;
            }
            if (!json_is_string(v))
                return df_error(DF_EIO, "Python reward function %s: malformed extra value of '%s'", p->where, key);
            if (!(e->texts[at + (size_t)i] = strdup(json_string_value(v))))
                return df_error(DF_ENOMEM, "Python reward function %s: out of memory", p->where);
        }
    }
    return DF_OK;
}

/* Reap the child and describe how it ended into msg. */
static void reap(df_reward_python *p, char *msg, size_t cap)
{
    int st = 0;
    snprintf(msg, cap, "it is gone");
    if (p->pid > 0 && waitpid(p->pid, &st, 0) == p->pid) {
        if (WIFEXITED(st))
            snprintf(msg, cap, "it exited with status %d", WEXITSTATUS(st));
        else if (WIFSIGNALED(st))
            snprintf(msg, cap, "it was killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
        p->pid = 0;
    }
}

/* The child is gone (EOF or a failed send): every later call fails with DF_EIO. */
static int gone(df_reward_python *p, const char *doing)
{
    char how[128];
    if (p->fd >= 0)
        close(p->fd);
    p->fd = -1;
    reap(p, how, sizeof how);
    return df_error(DF_EIO, "Python reward function %s: the python process ended while %s: %s "
                            "(its own messages are on stderr above)", p->where, doing, how);
}

static int send_all(df_reward_python *p, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t k = send(p->fd, s, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return gone(p, "reading a request");
        s += k, n -= (size_t)k;
    }
    return DF_OK;
}

/* One line from the child (without its '\n'), parsed as JSON into *out. */
static int recv_json(df_reward_python *p, const char *doing, json_t **out)
{
    char *nl;
    while (!(nl = p->buf ? memchr(p->buf, '\n', p->len) : NULL)) {
        if (p->cap - p->len < 65536) {
            size_t cap = p->cap ? 2 * p->cap : 131072;
            char *b = realloc(p->buf, cap);
            if (!b)
                return df_error(DF_ENOMEM, "Python reward function %s: out of memory", p->where);
            p->buf = b, p->cap = cap;
        }
        ssize_t k = recv(p->fd, p->buf + p->len, p->cap - p->len, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return gone(p, doing);
        p->len += (size_t)k;
    }
    size_t line = (size_t)(nl - p->buf);
    json_error_t je;
    *out = json_loadb(p->buf, line, 0, &je);
    memmove(p->buf, nl + 1, p->len - line - 1);
    p->len -= line + 1;
    return *out ? DF_OK
                : df_error(DF_EIO, "Python reward function %s: unreadable reply (%s)", p->where, je.text);
}

/* A reply {"error": text, "row": i | null} as a DF_EINVAL naming the row; the last 2,000
 * characters of Python's traceback (its end names the exception). */
static int python_error(const df_reward_python *p, const json_t *reply)
{
    const char *text = json_string_value(json_object_get(reply, "error"));
    const json_t *row = json_object_get(reply, "row");
    size_t n = text ? strlen(text) : 0;
    char at[64] = "";
    if (json_is_integer(row))
        snprintf(at, sizeof at, " (response %lld of the batch)", (long long)json_integer_value(row));
    return df_error(DF_EINVAL, "Python reward function %s%s: %s%s", p->where, at, n > 2000 ? "..." : "",
                    text ? text + (n > 2000 ? n - 2000 : 0) : "(no message)");
}

static int spawn(df_reward_python *p, const char *path, const char *name, const char *kwargs)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
        return df_error(DF_EIO, "Python reward function %s: socketpair: %s", p->where, strerror(errno));
    fcntl(sv[0], F_SETFD, FD_CLOEXEC); /* ours: the child must not hold it, or it never sees EOF */
    char fd[16], procs[16], timeout[32];
    snprintf(fd, sizeof fd, "%d", sv[1]);
    snprintf(procs, sizeof procs, "%d", p->opts.processes);
    snprintf(timeout, sizeof timeout, "%.17g", p->opts.timeout_s);
    static const char *const MODES[] = {"naive", "batch", "prime"};
    const char *env = getenv("DF_PYTHON"), *py = env && env[0] ? env : "python3";
    char *argv[] = {(char *)py, "-c", (char *)DRIVER, fd, (char *)path, (char *)name, (char *)kwargs,
                    (char *)MODES[p->opts.mode], procs, timeout, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    int err = posix_spawnp(&p->pid, py, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(sv[1]);
    p->fd = sv[0];
    if (err) {
        p->pid = 0;
        return df_error(err == ENOENT ? DF_ENOTFOUND : DF_EIO,
                        "Python reward function %s: cannot start %s (%s): a custom_reward_function.path "
                        "ending in .py needs a Python 3 interpreter on PATH (or DF_PYTHON naming one)",
                        p->where, py, strerror(err));
    }
    return DF_OK;
}

int df_reward_python_open(const char *path, const char *name, const char *kwargs_json,
                          const df_reward_python_opts *opts, df_reward_python **out)
{
    *out = NULL;
    df_reward_python_opts o = opts ? *opts : (df_reward_python_opts){DF_REWARD_PY_NAIVE, 0, 0};
    if (!path || !name || !name[0])
        return df_error(DF_EINVAL, "Python reward function: no file or function name");
    if (o.mode < DF_REWARD_PY_NAIVE || o.mode > DF_REWARD_PY_PRIME ||
        (o.mode == DF_REWARD_PY_PRIME && (o.processes < 1 || !(o.timeout_s > 0))))
        return df_error(DF_EINVAL, "Python reward function %s:%s: mode %d with %d processes and a %g s timeout "
                                   "(prime needs >= 1 process and a timeout > 0)", path, name, (int)o.mode,
                        o.processes, o.timeout_s);
    if (access(path, R_OK))
        return df_error(DF_ENOTFOUND, "Python reward function: cannot read %s: %s", path, strerror(errno));
    json_error_t je;
    json_t *kw = kwargs_json ? json_loads(kwargs_json, JSON_REJECT_DUPLICATES, &je) : NULL;
    bool parsed = kw != NULL, object = json_is_object(kw);
    json_decref(kw);
    if (kwargs_json && !object)
        return df_error(DF_EINVAL, "Python reward function %s:%s: the keyword arguments must be a JSON object, "
                                   "got '%s'%s%s", path, name, kwargs_json, parsed ? "" : ": ", parsed ? "" : je.text);
    df_reward_python *p = calloc(1, sizeof *p);
    if (!p || asprintf(&p->where, "%s:%s", path, name) < 0) {
        free(p);
        return df_error(DF_ENOMEM, "Python reward function: out of memory");
    }
    p->fd = -1;
    p->opts = o;
    int rc = spawn(p, path, name, kwargs_json ? kwargs_json : "{}");
    json_t *hello = NULL;
    if (!rc && !(rc = recv_json(p, "importing the file", &hello)) && !json_is_true(json_object_get(hello, "ready")))
        rc = python_error(p, hello);
    json_decref(hello);
    if (rc) {
        df_reward_python_close(p);
        return rc;
    }
    *out = p;
    return DF_OK;
}

/* prime's pool settings from a JSON object: num_processes (an integer), timeout (seconds). */
static int prime_kwargs(const char *json, df_reward_python_opts *o)
{
    json_error_t je;
    json_t *kw = json ? json_loads(json, JSON_REJECT_DUPLICATES, &je) : json_object();
    int rc = json_is_object(kw) ? DF_OK : df_error(DF_EINVAL, "the prime reward manager's keyword arguments must "
                                                   "be a JSON object, got '%s'", json ? json : "");
    const char *key;
    json_t *v;
    json_object_foreach(rc ? NULL : kw, key, v) {
        if (!strcmp(key, "num_processes") && json_is_integer(v) && json_integer_value(v) >= 1 &&
            json_integer_value(v) <= 65536)
            o->processes = (int)json_integer_value(v);
        else if (!strcmp(key, "timeout") && json_is_number(v) && json_number_value(v) > 0)
            o->timeout_s = json_number_value(v);
        else if (!strcmp(key, "num_processes") || !strcmp(key, "timeout"))
            rc = df_error(DF_EINVAL, "the prime reward manager: %s must be %s", key,
                          key[0] == 'n' ? "an integer in [1, 65536]" : "a number of seconds > 0");
        else
            rc = df_error(DF_EINVAL, "the prime reward manager: unknown keyword argument '%s' (it reads "
                                     "num_processes and timeout)", key);
        if (rc)
            break;
    }
    json_decref(kw);
    return rc;
}

int df_reward_python_opts_for(const char *manager, const char *kwargs_json, df_reward_python_opts *o)
{
    const char *m = manager && manager[0] ? manager : "naive";
    *o = (df_reward_python_opts){.mode = !strcmp(m, "batch")   ? DF_REWARD_PY_BATCH
                                         : !strcmp(m, "prime") ? DF_REWARD_PY_PRIME
                                                               : DF_REWARD_PY_NAIVE,
                                 .processes = 64, .timeout_s = 300.0};
    return o->mode == DF_REWARD_PY_PRIME ? prime_kwargs(kwargs_json, o) : DF_OK;
}

bool df_reward_python_file(const char *path)
{
    size_t n = path ? strlen(path) : 0;
    return n > 3 && !strcmp(path + n - 3, ".py");
}

df_reward_py_mode df_reward_python_mode(const df_reward_python *p)
{
    return p ? p->opts.mode : DF_REWARD_PY_NAIVE;
}

/* The request line: {"data_source": [...], "solution_str": [...], "ground_truth": [...],
 * "extra_info": [text | null, ...]}. */
static char *request(int64_t n, const char *const *src, const char *const *sol, const char *const *gt,
                     const char *const *extra)
{
    static const char *const keys[4] = {"data_source", "solution_str", "ground_truth", "extra_info"};
    const char *const *cols[4] = {src, sol, gt, extra};
    json_t *q = json_object();
    bool ok = q != NULL;
    for (int k = 0; ok && k < 4; k++) {
        json_t *a = json_array();
        ok = a && !json_object_set_new(q, keys[k], a); /* q owns a, even on failure */
        for (int64_t i = 0; ok && i < n; i++) {
            const char *v = cols[k] ? cols[k][i] : NULL;
            ok = !json_array_append_new(a, v ? json_string(v) : k == 3 ? json_null() : json_string(""));
        }
    }
    char *s = ok ? json_dumps(q, JSON_COMPACT) : NULL;
    json_decref(q);
    return s;
}

/* Row i of a reply's results, [score, acc | null, pred | null], into *r. */
static int read_result(const df_reward_python *p, const json_t *item, int64_t i, df_reward_result *r)
{
    const json_t *s = json_array_get(item, 0), *acc = json_array_get(item, 1), *pred = json_array_get(item, 2);
    if (json_array_size(item) != 3 || !json_is_number(s) || !(json_is_null(acc) || json_is_boolean(acc)) ||
        !(json_is_null(pred) || json_is_string(pred)))
        return df_error(DF_EIO, "Python reward function %s: malformed result for response %lld", p->where,
                        (long long)i);
    memset(r, 0, sizeof *r);
    r->score = json_number_value(s);
    r->acc = json_is_null(acc) ? r->score == 1.0 : json_is_true(acc);
    r->extra_pred = json_is_string(pred);
    if (r->extra_pred)
        snprintf(r->pred, sizeof r->pred, "%s", json_string_value(pred));
    return DF_OK;
}

int df_reward_python_score(df_reward_python *p, int64_t n, const char *const *data_source,
                           const char *const *solution_str, const char *const *ground_truth,
                           const char *const *extra_info, df_reward_result *out)
{
    clear_extra(p);
    if (p->fd < 0)
        return df_error(DF_EIO, "Python reward function %s: its python process has ended", p->where);
    if (n == 0)
        return DF_OK;
    char *q = request(n, data_source, solution_str, ground_truth, extra_info);
    if (!q)
        return df_error(DF_ENOMEM, "Python reward function %s: out of memory (or a text that is not UTF-8) "
                                   "building a request of %lld responses", p->where, (long long)n);
    int rc = send_all(p, q, strlen(q));
    free(q);
    json_t *reply = NULL;
    if (rc || (rc = send_all(p, "\n", 1)) || (rc = recv_json(p, "scoring a batch", &reply)))
        return rc;
    const json_t *res = json_object_get(reply, "results");
    if (!res)
        rc = python_error(p, reply);
    else if (json_array_size(res) != (size_t)n)
        rc = df_error(DF_EIO, "Python reward function %s: %zu results for %lld responses", p->where,
                      json_array_size(res), (long long)n);
    for (int64_t i = 0; !rc && i < n; i++)
        rc = read_result(p, json_array_get(res, (size_t)i), i, &out[i]);
    if (!rc)
        rc = read_keys(p, json_object_get(reply, "extra"), n, false, &p->num);
    if (!rc)
        rc = read_keys(p, json_object_get(reply, "extra_json"), n, true, &p->text);
    if (rc)
        clear_extra(p);
    json_decref(reply);
    return rc;
}

void df_reward_python_extra(const df_reward_python *p, int *n_keys, const char *const **names,
                            const double **values)
{
    *n_keys = p->num.n;
    *names = (const char *const *)p->num.names;
    *values = p->num.nums;
}

void df_reward_python_extra_json(const df_reward_python *p, int *n_keys, const char *const **names,
                                 const char *const **texts)
{
    *n_keys = p->text.n;
    *names = (const char *const *)p->text.names;
    *texts = (const char *const *)p->text.texts;
}

void df_reward_python_close(df_reward_python *p)
{
    if (!p)
        return;
    if (p->fd >= 0)
        close(p->fd); /* EOF: the child's loop ends */
    for (int i = 0; p->pid > 0 && i < 200; i++) {
        if (waitpid(p->pid, NULL, WNOHANG) == p->pid)
            p->pid = 0;
        else
            nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    if (p->pid > 0) {
        kill(p->pid, SIGKILL);
        waitpid(p->pid, NULL, 0);
    }
    clear_extra(p);
    free(p->where);
    free(p->buf);
    free(p);
}
