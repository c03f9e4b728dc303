/* Child processes and their inputs for the benchmarks that run `distflow` (bench_proc.h). */
#include "bench_proc.h"

#include "bench_util.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

char *bench_join(char *buf, unsigned long n, const char *a, const char *b)
{
    if ((unsigned long)snprintf(buf, n, "%s%s", a, b) >= n) {
        fprintf(stderr, "bench: path too long: %s%s\n", a, b);
        exit(1);
    }
    return buf;
}

int bench_spawn(const char *who, char *const argv[], char *const env[], const char *log,
                bench_proc_result *r)
{
    double t0 = bench_now_s();
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0); /* mpiexec and its ranks in one group, apart from the bench's terminal */
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
            _exit(126);
        for (int i = 0; env && env[i]; i++)
            putenv(env[i]);
        execv(argv[0], argv);
        _exit(127);
    }
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0)
        return 1;
    if (r) {
        r->wall_s = bench_now_s() - t0;
        r->rss_mib = (double)ru.ru_maxrss / 1024.0;
        r->cpu_s = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
                   (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status)) {
        fprintf(stderr, "%s: %s failed (%s %d); its output: %s\n", who, argv[0],
                WIFEXITED(status) ? "status" : "signal",
                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), log);
        return 1;
    }
    return 0;
}

int bench_make_inputs(const char *who, const char *distflow, const char *shape, const char *dir)
{
    char stamp[1100], data[1100], log[1100], cfg[1100], tok[1100], model[1100], name[80];
    snprintf(name, sizeof name, "/model/.bench_shape_%s", shape);
    if (access(bench_join(stamp, sizeof stamp, dir, name), F_OK) == 0)
        return 0;
    bench_join(log, sizeof log, dir, "/setup.log");
    bench_join(data, sizeof data, dir, "/data/train.jsonl");
    bench_join(tok, sizeof tok, dir, "/tokenizer");
    bench_join(model, sizeof model, dir, "/model");
    bench_join(cfg, sizeof cfg, dir, "/model_config.json");
    df_model_config c; /* the shape without token ids of its own: the tokenizer's are used */
    if (bench_shape(shape, &c) || df_model_config_save(&c, NULL, cfg)) {
        fprintf(stderr, "%s: shape %s: %s\n", who, shape, df_last_error());
        return 1;
    }
    char *df = (char *)distflow;
    char *synth[] = {df, "data", "synth", "--out", data, "--split", "train", "--seed", "1",
                     "--min-steps", "2", "--max-steps", "3", "--max-operand", "9",
                     "--max-value", "30", "--n", "256", NULL};
    char *tk[] = {df, "data", "tokenizer", "--in", data, "--vocab-size", "512", "--out", tok, NULL};
    char *init[] = {df, "init-model", "--config", cfg, "--tokenizer", tok, "--out", model,
                    "--seed", "1", NULL};
    printf("%s_setup: %s (data, tokenizer, random %s model)\n", who, dir, shape);
    fflush(stdout);
    unlink(log);
    if (bench_spawn(who, synth, NULL, log, NULL) || bench_spawn(who, tk, NULL, log, NULL) ||
        bench_spawn(who, init, NULL, log, NULL))
        return 1;
    FILE *f = fopen(stamp, "w");
    return f ? fclose(f) != 0 : 1;
}
