/*
 * Checkpoint retention (src/workers/dag/checkpoint_keep.c): max_actor_ckpt_to_keep removes whole
 * older global_step_<N> directories (a step without its actor cannot be resumed),
 * max_critic_ckpt_to_keep only their critic/ (and a multi-agent job's critic_agent_<g>/); the
 * newest survive whatever the order of the directory listing, and other files are left alone.
 */
/* rounding-free (scripts/test-variants.sh skips it): directory retention only */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "util/fsutil.h"
#include "workers/dag/checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char root[256];

static bool exists(const char *rel)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    struct stat st;
    return stat(p, &st) == 0;
}

static void mk(const char *rel)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    assert_int_equal(df_mkdir_p(p), DF_OK);
}

/* global_step_{1,2,3,10,11} with actor/ and critic/, made out of order, plus unrelated entries. */
static void make_tree(void)
{
    snprintf(root, sizeof root, "/tmp/df_ckpt_keep_XXXXXX");
    assert_non_null(mkdtemp(root));
    const int steps[] = {10, 2, 11, 1, 3};
    for (int i = 0; i < 5; i++) {
        char d[64];
        snprintf(d, sizeof d, "global_step_%d/actor", steps[i]);
        mk(d);
        snprintf(d, sizeof d, "global_step_%d/critic", steps[i]);
        mk(d);
    }
    mk("global_step_x"), mk(".global_step_4.tmp"), mk("tensorboard");
}

static void test_keep_actor_and_critic(void **state)
{
    (void)state;
    make_tree();
    assert_int_equal(df_checkpoint_prune(root, 3, 1), DF_OK);
    /* newest three steps by number (11, 10, 3), not by name (3 > 2 > 11 > 10 > 1) */
    assert_true(exists("global_step_11/actor") && exists("global_step_11/critic"));
    assert_true(exists("global_step_10/actor") && !exists("global_step_10/critic"));
    assert_true(exists("global_step_3/actor") && !exists("global_step_3/critic"));
    assert_false(exists("global_step_2"));
    assert_false(exists("global_step_1"));
    assert_true(exists("global_step_x") && exists(".global_step_4.tmp") && exists("tensorboard"));
    /* keeping all (null) changes nothing */
    assert_int_equal(df_checkpoint_prune(root, 0, 0), DF_OK);
    assert_true(exists("global_step_3/actor"));
    assert_int_equal(df_remove_tree(root), DF_OK);
}

static void test_keep_critic_only(void **state)
{
    (void)state;
    make_tree();
    assert_int_equal(df_checkpoint_prune(root, 0, 2), DF_OK);
    const int steps[] = {1, 2, 3, 10, 11};
    for (int i = 0; i < 5; i++) {
        char d[64];
        snprintf(d, sizeof d, "global_step_%d/actor", steps[i]);
        assert_true(exists(d)); /* every actor kept */
        snprintf(d, sizeof d, "global_step_%d/critic", steps[i]);
        assert_true(exists(d) == (steps[i] >= 10));
    }
    assert_int_equal(df_remove_tree(root), DF_OK);
}

/* A multi-agent job's later groups' critics go with critic/; their actors stay. */
static void test_keep_agent_critics(void **state)
{
    (void)state;
    make_tree();
    mk("global_step_2/critic_agent_1"), mk("global_step_2/critic_agent_3"), mk("global_step_2/actor_agent_1");
    mk("global_step_11/critic_agent_1");
    assert_int_equal(df_checkpoint_prune(root, 0, 1), DF_OK);
    assert_false(exists("global_step_2/critic_agent_1"));
    assert_false(exists("global_step_2/critic_agent_3"));
    assert_true(exists("global_step_2/actor_agent_1") && exists("global_step_2/actor"));
    assert_true(exists("global_step_11/critic_agent_1") && exists("global_step_11/critic"));
    assert_int_equal(df_remove_tree(root), DF_OK);
}

static void test_missing_dir(void **state)
{
    (void)state;
    assert_int_equal(df_checkpoint_prune("/nonexistent/df_ckpt_keep", 1, 1), DF_EIO);
    assert_non_null(strstr(df_last_error(), "/nonexistent/df_ckpt_keep: cannot list checkpoints"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keep_actor_and_critic),
        cmocka_unit_test(test_keep_critic_only),
        cmocka_unit_test(test_keep_agent_critics),
        cmocka_unit_test(test_missing_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
