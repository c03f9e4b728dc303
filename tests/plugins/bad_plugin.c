/* Test-only broken plugins for tests/test_plugin.c, one per compile definition:
 * BAD_PLUGIN_BAD_ABI (wrong df_plugin_abi_version), BAD_PLUGIN_NO_ABI (no
 * marker), BAD_PLUGIN_INIT_FAILS (df_plugin_init returns an error),
 * BAD_PLUGIN_UNDEFINED_REF (needs a symbol no host defines: dlopen fails),
 * BAD_PLUGIN_CTOR_ABORTS (a valid plugin whose ELF constructor aborts the
 * process: checking it must not run its code). */
#include <distflow/dag.h>
#include <distflow/reward.h>

#if defined(BAD_PLUGIN_CTOR_ABORTS)
#include <stdlib.h>

__attribute__((constructor)) static void abort_on_load(void) { abort(); }

DF_API const int not_a_function = 3;
#endif

#if defined(BAD_PLUGIN_BAD_ABI)
DF_API const int df_plugin_abi_version = DF_PLUGIN_ABI_VERSION + 98;
#elif !defined(BAD_PLUGIN_NO_ABI)
DF_PLUGIN_DECLARE_ABI;
#endif

#if defined(BAD_PLUGIN_UNDEFINED_REF)
int df_no_such_function_anywhere(void);
#endif

DF_API int bad_node(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    (void)ctx;
    (void)batch;
    (void)out;
#if defined(BAD_PLUGIN_UNDEFINED_REF)
    return df_no_such_function_anywhere();
#else
    return 0;
#endif
}

#if defined(BAD_PLUGIN_INIT_FAILS)
static int bad_reward(const char *data_source, const char *solution, const char *ground_truth,
                      const char *extra_info, double *score)
{
    (void)data_source, (void)solution, (void)ground_truth, (void)extra_info;
    *score = 0;
    return 0;
}

DF_API int df_plugin_init(void)
{
    df_exec_register("bad_plugin.registered_then_failed", bad_node);
    df_reward_register("bad_plugin/reward", bad_reward); /* any registry, not only executables */
    return df_error(DF_EINVAL, "bad_plugin: refusing to start (test)");
}
#endif
