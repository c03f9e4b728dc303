/*
 * test_disk_full.c — `distflow train` on a full disk (docs/checkpoints.md, "A full disk").
 *
 * trainer.default_local_dir lies on a small tmpfs mounted in a private mount namespace of this
 * test (unshare, as root or through a user namespace). A GRPO run of 2 steps leaves checkpoint 2
 * there; then, the same 4-step command:
 *   - with the file system filled to the last byte, a metrics line finds no room (those that fit
 *     in the file's last page are written): the run exits 1 naming metrics.jsonl, how much of the
 *     line was written and "No space left on device", and metrics.jsonl ends with a whole line
 *     (the part of the line that fitted is cut off again);
 *   - with less room than a checkpoint, the save of step 4 fails: the message names the file and
 *     the reason, `latest` still names step 2, global_step_2 is intact, no temporary is left, and
 *     metrics.jsonl ends with a whole line;
 *   - with the space freed, the same command resumes and ends byte-identical to a run that never
 *     met a full disk.
 * Where no mount namespace can be made, the same scenario runs with RLIMIT_FSIZE instead (EFBIG,
 * "File too large"), and the test says so; it never passes without running.
 */
/* rounding-free (scripts/test-variants.sh skips it): exit codes, files, two runs of one build compared */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testcli.h"

#include <errno.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/statvfs.h>

static char dir[256], mnt[300], why[256];
static bool have_ns;

/* A private mount namespace for this process (before any thread exists). */
static bool enter_mount_ns(void)
{
    uid_t uid = getuid();
    gid_t gid = getgid();
    if (unshare(CLONE_NEWNS) != 0) { /* not root: a user namespace maps us to root in it */
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
            snprintf(why, sizeof why, "unshare: %s", strerror(errno));
            return false;
        }
        char map[64];
        snprintf(map, sizeof map, "0 %u 1", (unsigned)uid);
        FILE *f = fopen("/proc/self/setgroups", "w"); /* absent on old kernels */
        if (f) {
            fputs("deny", f);
            fclose(f);
        }
        f = fopen("/proc/self/uid_map", "w");
        bool ok;
        ok = f && fputs(map, f) >= 0 && !fclose(f);
        snprintf(map, sizeof map, "0 %u 1", (unsigned)gid);
        f = ok ? fopen("/proc/self/gid_map", "w") : NULL;
        ok = f && fputs(map, f) >= 0 && !fclose(f);
        if (!ok) {
            snprintf(why, sizeof why, "user namespace id maps: %s", strerror(errno));
            return false;
        }
    }
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        snprintf(why, sizeof why, "making / private: %s", strerror(errno));
        return false;
    }
    return true;
}

/* `distflow train dir/job.yaml` into mnt/out; fsize > 0: the RLIMIT_FSIZE fallback. */
static int train(const char *log, int steps, long long fsize)
{
    char yaml[512], out[600], logp[600], st[64];
    snprintf(yaml, sizeof yaml, "%s/job.yaml", dir);
    snprintf(out, sizeof out, "trainer.default_local_dir=%s/out", mnt);
    snprintf(logp, sizeof logp, "%s/%s", dir, log);
    snprintf(st, sizeof st, "trainer.total_training_steps=%d", steps);
    const char *argv[] = {"train", yaml, out, st, NULL};
    df_cli_run o = {.np = 1, .log = logp, .fsize = fsize};
    return df_cli_exec(&o, argv);
}

/* The straight reference run, outside the small file system. */
static void reference_run(void)
{
    char yaml[512], out[600], log[600];
    snprintf(yaml, sizeof yaml, "%s/job.yaml", dir);
    snprintf(out, sizeof out, "trainer.default_local_dir=%s/full", dir);
    snprintf(log, sizeof log, "%s/full.log", dir);
    const char *argv[] = {"train", yaml, out, NULL};
    df_cli_run o = {.np = 1, .log = log};
    assert_int_equal(df_cli_exec(&o, argv), DF_CLI_OK);
}

/* Fill mnt until `leave` bytes are free (0: to the last block) with mnt/filler. */
static void fill(long long leave)
{
    char p[400];
    snprintf(p, sizeof p, "%s/filler", mnt);
    int fd = open(p, O_WRONLY | O_CREAT | O_APPEND, 0644);
    assert_true(fd >= 0);
    static char chunk[4096];
    for (;;) {
        struct statvfs vs;
        assert_int_equal(fstatvfs(fd, &vs), 0);
        long long avail = (long long)vs.f_bavail * (long long)vs.f_frsize;
        if (avail <= leave)
            break;
        long long n = avail - leave < (long long)sizeof chunk ? avail - leave : (long long)sizeof chunk;
        if (write(fd, chunk, (size_t)n) <= 0)
            break; /* full */
    }
    close(fd);
}

static void unfill(void)
{
    char p[400];
    snprintf(p, sizeof p, "%s/filler", mnt);
    unlink(p);
}

static char *file_of(const char *rel, size_t *len)
{
    char p[1024], *text = NULL;
    snprintf(p, sizeof p, "%s/out/%s", mnt, rel);
    if (df_read_file(p, &text, len))
        fail_msg("%s", df_last_error());
    return text;
}

/* The run that was logged in dir/<log> failed with a message holding `a` and `b`. */
static void assert_log(const char *log, const char *a, const char *b)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, log);
    char *text = df_cli_log(p);
    if (!strstr(text, a) || !strstr(text, b))
        fail_msg("the message does not name \"%s\" and \"%s\":\n%s", a, b, text);
    print_message("%s: %s", log, text);
    free(text);
}

static void test_disk_full(void **state)
{
    (void)state;
    const char *reason = have_ns ? "No space left on device" : "File too large";
    if (!have_ns)
        print_message("no mount namespace (%s): RLIMIT_FSIZE instead of a full tmpfs\n", why);
    reference_run();
    assert_int_equal(train("two.log", 2, 0), DF_CLI_OK);
    size_t n2, n;
    char *before = file_of("metrics.jsonl", &n2);

    /* (b) metrics.jsonl: no room for step 3's line */
    if (have_ns)
        fill(0);
    assert_int_equal(train("metrics.log", 4, have_ns ? 0 : (long long)n2 + 600), 1);
    /* the lines that fitted (in the last page of the file) stay whole; the one that did not is gone */
    char *after = file_of("metrics.jsonl", &n);
    if (n < n2 || memcmp(before, after, n2) || after[n - 1] != '\n')
        fail_msg("metrics.jsonl (%zu bytes, was %zu) does not end with a whole line:\n%s", n, n2, after);
    free(after);
    char p[600];
    snprintf(p, sizeof p, "%s/out", mnt);
    free(df_cli_metrics(p, 1, 4)); /* every line parses */
    assert_log("metrics.log", "metrics.jsonl", reason);
    assert_log("metrics.log", "bytes written, the file left as it was", reason);

    /* (a) the save of step 4: room for the lines of steps 3 and 4, not for a checkpoint */
    unfill();
    if (have_ns)
        fill(64 * 1024);
    assert_int_equal(train("save.log", 4, have_ns ? 0 : (long long)n2 * 3), 1);
    assert_log("save.log", "global_step_4", reason);
    assert_int_equal(df_cli_latest(p), 2);
    after = file_of("metrics.jsonl", &n);
    assert_true(n > n2 && after[n - 1] == '\n');
    free(after);
    df_cli_no_temporaries(p);
    char a[1024], b[1024];
    const char *same[] = {"actor/model.safetensors", "actor/train_state.safetensors", "data.json"};
    for (int i = 0; i < 3; i++) { /* checkpoint 2 as the reference run wrote it */
        snprintf(a, sizeof a, "%s/full/global_step_2/%s", dir, same[i]);
        snprintf(b, sizeof b, "%s/out/global_step_2/%s", mnt, same[i]);
        df_test_same_file(a, b);
    }

    /* space again: the same command resumes from 2 and ends as the reference */
    unfill();
    assert_int_equal(train("resume.log", 4, 0), DF_CLI_OK);
    const char *final[] = {"actor/model.safetensors", "actor/train_state.safetensors", "trainer_state.json",
                           "data.json"};
    for (int i = 0; i < 4; i++) {
        snprintf(a, sizeof a, "%s/full/global_step_4/%s", dir, final[i]);
        snprintf(b, sizeof b, "%s/out/global_step_4/%s", mnt, final[i]);
        df_test_same_file(a, b);
    }
    snprintf(a, sizeof a, "%s/full", dir);
    df_cli_same_metrics(a, p, 1, 4);
    free(before);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/df_diskfull_XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(mnt, sizeof mnt, "%s/fs", dir);
    if (mkdir(mnt, 0755))
        return -1;
    /* 4 MiB: the data and two checkpoints of the tiny model (600 KB each) */
    if (have_ns && mount("tmpfs", mnt, "tmpfs", 0, "size=4m") != 0) {
        snprintf(why, sizeof why, "mount -t tmpfs: %s", strerror(errno));
        have_ns = false;
    }
    df_test_digits_inputs(dir, "train.jsonl", 24, "openai/gsm8k", true);
    char yaml[2048], p[512];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 8, shuffle: true,\n"
             "       max_prompt_length: 128, max_response_length: 8}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {optim: {lr: 0.01, lr_warmup_steps: 2, warmup_style: cosine, total_training_steps: 4},\n"
             "          ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 4}\n"
             "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 8}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "trainer: {total_training_steps: 4, save_freq: 2, logger: []}\n",
             dir, dir);
    snprintf(p, sizeof p, "%s/job.yaml", dir);
    return df_write_file_atomic(p, yaml, strlen(yaml)) ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    if (have_ns)
        umount2(mnt, MNT_DETACH);
    return df_test_remove_tree(dir);
}

int main(void)
{
    /* first: unshare needs a process with one thread; DF_TEST_DISK_FULL_RLIMIT=1 tries the fallback */
    const char *force = getenv("DF_TEST_DISK_FULL_RLIMIT");
    have_ns = force && *force == '1' ? (snprintf(why, sizeof why, "DF_TEST_DISK_FULL_RLIMIT=1"), false)
                                     : enter_mount_ns();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_disk_full),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
