/*
 * testcli.h — the crash tests' tools: `distflow train | sft` run as a child process (directly, or
 * under mpiexec), with test-only kill points (DF_TEST_KILL_AT, src/util/killpoint.h) and event
 * counts (DF_TEST_KILL_COUNTS), and comparisons of two runs' outputs: files byte for byte,
 * metrics.jsonl without wall-clock metrics, no temporaries left. Include after cmocka.h.
 */
#ifndef DF_TESTS_TESTCLI_H
#define DF_TESTS_TESTCLI_H

#include "testutil.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/** How a child run ended. */
enum { DF_CLI_OK = 0, DF_CLI_KILLED = -9 };

/** What a run of the CLI gets beside its arguments. */
typedef struct df_cli_run {
    int np;                /**< > 1: under mpiexec with that many ranks */
    const char *kill_at;   /**< DF_TEST_KILL_AT, or NULL */
    const char *counts;    /**< DF_TEST_KILL_COUNTS, or NULL */
    const char *log;       /**< stdout + stderr go here (overwritten) */
    long long fsize;       /**< > 0: RLIMIT_FSIZE in bytes (SIGXFSZ ignored: writes past it fail with EFBIG) */
} df_cli_run;

/**
 * Start `distflow <argv...>` (argv NULL-terminated, without the binary) as o says, in a process group
 * of its own (mpiexec and its ranks with it), SIGINT / SIGTERM at their default actions. Returns its pid.
 */
static inline pid_t df_cli_spawn(const df_cli_run *o, const char *const *argv)
{
    char bin[512], np[16];
    snprintf(bin, sizeof bin, "%s/distflow", DF_BINARY_DIR);
    snprintf(np, sizeof np, "%d", o->np);
    const char *args[64];
    int n = 0;
    if (o->np > 1) {
        args[n++] = DF_MPIEXEC;
        args[n++] = "--oversubscribe";
        args[n++] = "-np";
        args[n++] = np;
    }
    args[n++] = bin;
    for (int i = 0; argv[i] && n < 63; i++)
        args[n++] = argv[i];
    args[n] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0); /* a timeout kills the whole group (mpiexec and its ranks) */
        int fd = open(o->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
            _exit(126);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        setenv("OMP_NUM_THREADS", "1", 1);
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
        setenv("OMPI_MCA_mpi_yield_when_idle", "1", 1);
        unsetenv("DF_TEST_KILL_AT");
        unsetenv("DF_TEST_KILL_COUNTS");
        if (o->kill_at)
            setenv("DF_TEST_KILL_AT", o->kill_at, 1);
        if (o->counts)
            setenv("DF_TEST_KILL_COUNTS", o->counts, 1);
        if (o->fsize > 0) {
            struct rlimit rl = {(rlim_t)o->fsize, (rlim_t)o->fsize};
            signal(SIGXFSZ, SIG_IGN); /* stays ignored across exec */
            if (setrlimit(RLIMIT_FSIZE, &rl))
                _exit(125);
        }
        execv(args[0], (char **)args);
        _exit(127);
    }
    assert_true(pid > 0);
    return pid;
}

/**
 * Wait at most 300 s for a df_cli_spawn'd run (`what` names it in the failure). Returns DF_CLI_OK,
 * DF_CLI_KILLED (SIGKILL: the process itself, or under mpiexec a rank that "exited on signal 9"),
 * or the exit status (128 + signal for another signal).
 */
static inline int df_cli_wait(const df_cli_run *o, pid_t pid, const char *what)
{
    int st = 0;
    for (int i = 0; i < 30000; i++) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            break;
        if (i == 29999) {
            kill(-pid, SIGKILL);
            waitpid(pid, &st, 0);
            fail_msg("distflow %s did not end within 300 s (log: %s)", what, o->log);
        }
        usleep(10000);
    }
    if (WIFSIGNALED(st))
        return WTERMSIG(st) == SIGKILL ? DF_CLI_KILLED : 128 + WTERMSIG(st);
    int code = WEXITSTATUS(st);
    if (code && o->np > 1) { /* mpiexec reports a rank killed by a signal in its output */
        char *log = NULL;
        bool nine = !df_read_file(o->log, &log, NULL) && strstr(log, "signal 9");
        free(log);
        if (nine)
            return DF_CLI_KILLED;
    }
    return code;
}

/** Run `distflow <argv...>` to its end (df_cli_spawn, then df_cli_wait). */
static inline int df_cli_exec(const df_cli_run *o, const char *const *argv)
{
    return df_cli_wait(o, df_cli_spawn(o, argv), argv[0]);
}

/**
 * Wait until the file at `path` holds a whole line (e.g. a run's first metrics.jsonl line: its
 * step 1 is done) while the df_cli_spawn'd `pid` runs; fails when it ends first or after 120 s.
 */
static inline void df_cli_wait_line(const char *path, pid_t pid)
{
    for (int i = 0; i < 2400; i++) {
        char *text = NULL;
        bool done = !df_read_file(path, &text, NULL) && strchr(text, '\n');
        free(text);
        if (done)
            return;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid)
            fail_msg("the run ended (status %d) before a line of %s", st, path);
        usleep(50000);
    }
    kill(-pid, SIGKILL);
    fail_msg("no line in %s after 120 s", path);
}

/** The log's text (malloc'd; "" when unreadable). */
static inline char *df_cli_log(const char *path)
{
    char *text = NULL;
    return df_read_file(path, &text, NULL) ? strdup("") : text;
}

/** Each kill point event's count, as DF_TEST_KILL_COUNTS wrote it. */
typedef struct df_cli_counts {
    long long gen, update, save, metrics;
} df_cli_counts;

static inline df_cli_counts df_cli_read_counts(const char *path)
{
    df_cli_counts c = {0, 0, 0, 0};
    char *text = NULL;
    if (df_read_file(path, &text, NULL))
        fail_msg("no kill point counts: %s", df_last_error());
    char name[16];
    long long v;
    int off = 0, k;
    while (sscanf(text + off, "%15s %lld%n", name, &v, &k) == 2) {
        off += k;
        if (!strcmp(name, "gen"))
            c.gen = v;
        else if (!strcmp(name, "update"))
            c.update = v;
        else if (!strcmp(name, "save"))
            c.save = v;
        else if (!strcmp(name, "metrics"))
            c.metrics = v;
    }
    free(text);
    return c;
}

/** The step in <out>/latest_checkpointed_iteration.txt, -1 without one. */
static inline int df_cli_latest(const char *out)
{
    char *p = df_path_join(out, "latest_checkpointed_iteration.txt"), *text = NULL;
    assert_non_null(p);
    int n = df_read_file(p, &text, NULL) ? -1 : atoi(text);
    free(text);
    free(p);
    return n;
}

/**
 * <out>/metrics.jsonl as canonical lines of steps first..last (each line must parse; a line
 * without its newline fails the test), wall-clock metrics (timing_s/..., perf/..., "timestamp",
 * train/tokens_per_second) left out. Malloc'd.
 */
static inline char *df_cli_metrics(const char *out, int first, int last)
{
    char *p = df_path_join(out, "metrics.jsonl"), *text = NULL;
    size_t len = 0;
    if (!p || df_read_file(p, &text, &len))
        fail_msg("%s", df_last_error());
    if (len && text[len - 1] != '\n')
        fail_msg("%s ends with a cut line", p);
    char *all = calloc(1, 1);
    for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n")) {
        json_t *o = json_loads(l, 0, NULL);
        if (!o)
            fail_msg("%s: a line does not parse: %s", p, l);
        json_int_t step = json_integer_value(json_object_get(o, "step"));
        const char *key;
        json_t *v;
        void *tmp;
        json_object_foreach_safe(o, tmp, key, v) {
            if (df_test_clock_metric(key) || !strcmp(key, "train/tokens_per_second"))
                json_object_del(o, key);
        }
        if (step >= first && step <= last) {
            char *line = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
            all = realloc(all, strlen(all) + strlen(line) + 2);
            strcat(strcat(all, line), "\n");
            free(line);
        }
        json_decref(o);
    }
    free(text);
    free(p);
    return all;
}

/** The metrics of steps first..last of two runs are the same, wall clock aside. */
static inline void df_cli_same_metrics(const char *a, const char *b, int first, int last)
{
    char *x = df_cli_metrics(a, first, last), *y = df_cli_metrics(b, first, last);
    int lines = 0;
    for (const char *c = x; *c; c++)
        lines += *c == '\n';
    if (strcmp(x, y) || lines != last - first + 1)
        fail_msg("metrics of steps %d-%d differ (%d lines)\n%s:\n%s\n%s:\n%s", first, last, lines, a, x, b, y);
    free(x);
    free(y);
}

/** The names of top-level temporaries in out ('.' + "...tmp..."), appended to buf[cap] one per line. */
static inline void df_cli_temporaries(const char *out, char *buf, size_t cap)
{
    buf[0] = '\0';
    DIR *d = opendir(out);
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] == '.' && strstr(e->d_name, ".tmp") && strlen(buf) + strlen(e->d_name) + 2 < cap)
            strcat(strcat(buf, e->d_name), "\n");
    if (d)
        closedir(d);
}

static inline int df_cli_tmp_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag;
    return strstr(p + ftw->base, ".tmp") ? 1 : 0;
}

/** Nothing anywhere under out has ".tmp" in its name. */
static inline void df_cli_no_temporaries(const char *out)
{
    if (nftw(out, df_cli_tmp_entry, 16, FTW_PHYS) == 1) {
        char cmd[1200], list[4096];
        snprintf(cmd, sizeof cmd, "find '%s' -name '*.tmp*'", out);
        df_test_command(cmd, list, sizeof list);
        fail_msg("temporaries left in %s:\n%s", out, list);
    }
}

#endif
