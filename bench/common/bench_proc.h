/*
 * bench/common/bench_proc.h — what the benchmarks that run `distflow` as a child process share
 * (bench/async.c): spawning it (directly or under mpiexec) with its output in a log, and making
 * its inputs once per work directory (synthetic prompts, a BPE tokenizer, a random model).
 */
#ifndef DF_BENCH_PROC_H
#define DF_BENCH_PROC_H

/** How a child ended and what it cost: wall seconds, user + system CPU seconds (of the child
 *  and, under mpiexec, of its ranks: wait4 counts waited-for descendants), peak RSS (MiB, the
 *  largest single process). */
typedef struct {
    double wall_s, cpu_s, rss_mib;
} bench_proc_result;

/**
 * Run argv (NULL-terminated, argv[0] a path) with stdout and stderr appended to `log`, in its
 * own process group, and wait for it. env: NULL-terminated "KEY=VALUE" strings set in the
 * child on top of this process's environment (NULL: none). r may be NULL. 0 when it exited
 * with status 0; else 1 with a message on stderr naming `who` and the log.
 */
int bench_spawn(const char *who, char *const argv[], char *const env[], const char *log,
                bench_proc_result *r);

/**
 * The inputs of a `distflow train` benchmark in dir, unless an earlier run left them for this
 * shape (a stamp file dir/model/.bench_shape_<shape>): dir/data/train.jsonl (256 synthetic
 * arithmetic prompts, `distflow data synth`), dir/tokenizer (a byte-level BPE of 512 tokens
 * trained on them) and dir/model (a random model of bench_shape(shape), `distflow init-model`,
 * seed 1). distflow: the CLI's path. 0 ok; 1 with a message on stderr (the tools' output is in
 * dir/setup.log).
 */
int bench_make_inputs(const char *who, const char *distflow, const char *shape, const char *dir);

/** buf = a + b; exits the program on a path too long for the buffer (a bench's own work
 *  directory: not worth an error path per call). */
char *bench_join(char *buf, unsigned long n, const char *a, const char *b);

#endif /* DF_BENCH_PROC_H */
