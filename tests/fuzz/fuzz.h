/*
 * fuzz.h — shared by the fuzz targets (tests/fuzz/fuzz_<target>.c) and their
 * replay driver (replay_main.c).
 *
 * A target is one LLVMFuzzerTestOneInput that hands the bytes to a parser's
 * real entry point, walks what it returns, and frees everything. It is built
 * twice: with clang's libFuzzer (`make fuzz`, DF_FUZZ=ON) and, in the normal
 * build, linked with replay_main.c, which feeds it every file of the target's
 * seed corpus and regression cases (ctest test_fuzz_replay_<target>).
 *
 * A target stores the parser's status in df_fuzz_status, so the replay can
 * check the seeds' expected outcome (docs/testing.md, "Fuzzing"): an `ok-*`
 * seed must parse, a `bad-*` seed must be refused. A property that a parsed
 * result must have (a round trip, a bound) is checked with DF_FUZZ_CHECK,
 * which aborts: a crash for libFuzzer, a failure for the replay.
 */
#ifndef DF_TESTS_FUZZ_H
#define DF_TESTS_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/**
 * Status (0 ok) of the parser on the last input; each target defines it. A target
 * clears the error message when an input starts (so a refusal's message is its
 * own, checked non-empty) and leaves it after, for the replay to print.
 */
extern int df_fuzz_status;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/** Abort with a message when a property of a parsed result does not hold. */
#define DF_FUZZ_CHECK(cond)                                                                      \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "%s:%d: fuzz property failed: %s\n", __FILE__, __LINE__, #cond);    \
            abort();                                                                             \
        }                                                                                        \
    } while (0)

/**
 * malloc'd NUL-terminated copy of data[size], for text entry points. The bytes
 * after an embedded NUL are what a file reader would also cut (the loaders take
 * C strings).
 */
char *df_fuzz_cstr(const uint8_t *data, size_t size);

/**
 * Path of a file named `name` in this process's own scratch directory (created
 * on first use under $TMPDIR or /tmp, removed at exit with what is in it), after
 * writing data[size] to it; the path stays valid until the next call. Aborts
 * (saying why) when it cannot write: the machine's fault, but never a silent pass.
 */
const char *df_fuzz_file(const char *name, const uint8_t *data, size_t size);

/** Remove file `name` of the scratch directory, if there. */
void df_fuzz_unlink(const char *name);

/** The scratch directory of df_fuzz_file (created on first use), or NULL. */
const char *df_fuzz_dir(void);

#endif /* DF_TESTS_FUZZ_H */
