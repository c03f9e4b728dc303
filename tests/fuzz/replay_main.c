/*
 * Replay driver of a fuzz target (fuzz.h), built in the normal build as
 * test_fuzz_replay_<target>: runs LLVMFuzzerTestOneInput on every file of the
 * directories given on the command line (the target's seed corpus, then its
 * regression cases), in name order, so `make test` replays them on any compiler.
 *
 *   test_fuzz_replay_<target> CORPUS_DIR [MORE_DIRS...]
 *
 * The first directory must hold at least one file (an empty or missing corpus is
 * a broken setup, not a pass); later ones may be absent. A file whose name
 * starts with "ok-" must be accepted by the parser (df_fuzz_status 0) and one
 * starting with "bad-" refused; other names (crash-*, leak-*, fuzzer finds) only
 * have to run through. A crash or a failed property aborts the program.
 * Exit status: 0 when every expectation held, 1 otherwise.
 */
#include "fuzz.h"

#include "distflow/common.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>

typedef struct {
    int files, accepted, failures;
} tally;

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static uint8_t *read_all(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0, got;
    do {
        if (len + 4096 > cap) {
            cap = (len + 4096) * 2;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = nb;
        }
        got = fread(buf + len, 1, cap - len, f);
        len += got;
    } while (got > 0);
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    *size = len;
    return buf;
}

static void replay_file(const char *dir, const char *name, tally *t)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    size_t size = 0;
    uint8_t *data = read_all(path, &size);
    if (!data) {
        fprintf(stderr, "FAIL %s: cannot read: %s\n", path, strerror(errno));
        t->failures++;
        return;
    }
    df_fuzz_status = -1;
    LLVMFuzzerTestOneInput(data, size);
    free(data);
    t->files++;
    t->accepted += df_fuzz_status == 0;
    bool want_ok = !strncmp(name, "ok-", 3), want_bad = !strncmp(name, "bad-", 4);
    if ((want_ok && df_fuzz_status != 0) || (want_bad && df_fuzz_status == 0)) {
        fprintf(stderr, "FAIL %s: status %d, expected %s (%s)\n", path, df_fuzz_status,
                want_ok ? "acceptance" : "a refusal", df_last_error());
        t->failures++;
    } else if (df_fuzz_status) {
        printf("ok   %s (status %d: %s)\n", path, df_fuzz_status, df_last_error());
    } else {
        printf("ok   %s (status 0)\n", path);
    }
}

/* Replay every regular file of dir; returns how many it found, -1 when dir cannot be read. */
static int replay_dir(const char *dir, tally *t)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    char **names = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (e->d_name[0] == '.' || stat(path, &st) || !S_ISREG(st.st_mode))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nn = realloc(names, (size_t)cap * sizeof *nn);
            if (!nn)
                abort();
            names = nn;
        }
        if (!(names[n++] = strdup(e->d_name)))
            abort();
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 0; i < n; i++) {
        replay_file(dir, names[i], t);
        free(names[i]);
    }
    free(names);
    return n;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR [MORE_DIRS...]\n", argv[0]);
        return 2;
    }
    tally t = {0};
    for (int i = 1; i < argc; i++) {
        int n = replay_dir(argv[i], &t);
        if (i == 1 && n <= 0) {
            fprintf(stderr, "FAIL %s: %s\n", argv[i], n < 0 ? "cannot open the corpus" : "empty corpus");
            t.failures++;
        }
    }
    printf("%d files replayed, %d accepted, %d failed expectations\n", t.files, t.accepted,
           t.failures);
    return t.failures ? 1 : 0;
}
