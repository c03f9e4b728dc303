/*
 * tmpdir.h — a fresh temporary directory per test, for tests that write files.
 * Use as cmocka fixtures: cmocka_unit_test_setup_teardown(t, df_test_mkdtemp,
 * df_test_rmtree); the test receives the directory path in *state.
 */
#ifndef DF_TESTS_TMPDIR_H
#define DF_TESTS_TMPDIR_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline int df_test_rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

/** Remove `dir` and everything below it; 0 on success. */
static inline int df_test_remove_tree(const char *dir)
{
    return nftw(dir, df_test_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/** Fixture: *state = a new malloc'd directory /tmp/df_test_XXXXXX. */
static inline int df_test_mkdtemp(void **state)
{
    char *d = strdup("/tmp/df_test_XXXXXX");
    if (!d || !mkdtemp(d)) {
        free(d);
        return -1;
    }
    *state = d;
    return 0;
}

/** Fixture: remove the directory of df_test_mkdtemp and free its path. */
static inline int df_test_rmtree(void **state)
{
    df_test_remove_tree(*state);
    free(*state);
    return 0;
}

#endif
