/*
 * test_cpu.c — CPU feature detection and kernel variant selection
 * (include/distflow/platform.h): the detected features are self-consistent and
 * the variant picked is the highest whose features are all present (checked
 * against this file's own statement of x86-64-v3 / -v4); DF_CPU_VARIANT forces
 * a variant and a bad value is refused with a message naming the variant and
 * what is missing; `distflow env` and `distflow --version` print what a bug
 * report needs. Under scripts/test-variants.sh DF_CPU_VARIANT is set for the
 * whole suite, and the first test checks that the library honours it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "distflow/platform.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* x86-64-v3 (with v2) and v4, as the variants are documented; OS_* = XCR0 state. */
static const df_cpu_feature V3[] = {DF_CPU_SSE3,  DF_CPU_SSSE3, DF_CPU_SSE41, DF_CPU_SSE42,
                                    DF_CPU_POPCNT, DF_CPU_AVX,  DF_CPU_AVX2,  DF_CPU_FMA,
                                    DF_CPU_F16C,  DF_CPU_BMI1,  DF_CPU_BMI2,  DF_CPU_LZCNT,
                                    DF_CPU_MOVBE, DF_CPU_OS_AVX};
static const df_cpu_feature V4[] = {DF_CPU_AVX512F,  DF_CPU_AVX512CD, DF_CPU_AVX512BW,
                                    DF_CPU_AVX512DQ, DF_CPU_AVX512VL, DF_CPU_OS_AVX512};
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static bool has_all(const df_cpu_info *c, const df_cpu_feature *f, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!c->has[f[i]])
            return false;
    return true;
}

static bool multi_variant(void) { return !strcmp(df_kernels_compiled(), "generic avx2 avx512"); }

static void assert_contains(const char *s, const char *part)
{
    if (!strstr(s, part))
        fail_msg("\"%s\" does not contain \"%s\"", s, part);
}

/* Runs first: nothing has selected a variant yet, so this is the lazy default. */
static void test_env_default_honoured(void **state)
{
    (void)state;
    const char *env = getenv("DF_CPU_VARIANT");
    const char *active = df_kernels_active();
    if (env && *env && strcmp(env, "auto")) {
        assert_string_equal(active, env); /* test-variants.sh names runnable variants */
        assert_contains(df_kernels_reason(), "forced by DF_CPU_VARIANT=");
    } else if (multi_variant()) {
        assert_contains(df_kernels_reason(), "best this CPU supports");
    }
}

static void test_features_consistent(void **state)
{
    (void)state;
    df_cpu_info c;
    df_cpu_detect(&c);
#if defined(__x86_64__)
    assert_true(c.vendor[0] != '\0');
    assert_true(c.has[DF_CPU_SSE3] || !c.has[DF_CPU_AVX]); /* every AVX CPU has SSE3 */
#endif
    if (c.has[DF_CPU_OS_AVX512])
        assert_true(c.has[DF_CPU_OS_AVX] && (c.xcr0 & 0xe6) == 0xe6);
    if (c.has[DF_CPU_OS_AVX])
        assert_true((c.xcr0 & 0x6) == 0x6);
    if (c.has[DF_CPU_OS_AMX])
        assert_true((c.xcr0 & 0x60000) == 0x60000);
    for (int f = 0; f < DF_CPU_N_FEATURES; f++)
        assert_string_not_equal(df_cpu_feature_name((df_cpu_feature)f), "?");
    if (!multi_variant())
        return;
    bool v3 = has_all(&c, V3, N_OF(V3)), v4 = v3 && has_all(&c, V4, N_OF(V4));
    assert_int_equal(df_kernels_check("generic", &c), DF_OK);
    assert_int_equal(df_kernels_check("avx2", &c) == DF_OK, v3);
    assert_int_equal(df_kernels_check("avx512", &c) == DF_OK, v4);
    assert_int_equal(df_kernels_select(NULL), DF_OK);
    assert_string_equal(df_kernels_active(), v4 ? "avx512" : v3 ? "avx2" : "generic");
    df_kernels_init();
}

/* Refusals on made-up CPUs: the message names the variant and the missing feature. */
static void test_check_messages(void **state)
{
    (void)state;
    df_cpu_info c;
    memset(&c, 0, sizeof c);
    assert_int_equal(df_kernels_check("bogus", &c), DF_EINVAL);
    assert_contains(df_last_error(), "unknown kernel variant \"bogus\"");
    assert_contains(df_last_error(), df_kernels_compiled());
    if (!multi_variant()) {
        assert_int_equal(df_kernels_check("avx2", &c), DF_EINVAL);
        return;
    }
    assert_int_equal(df_kernels_check("avx2", &c), DF_EUNSUPPORTED);
    assert_contains(df_last_error(), "kernel variant avx2 needs");
    assert_contains(df_last_error(), "which this CPU does not have");
    for (size_t i = 0; i < N_OF(V3); i++)
        c.has[V3[i]] = true;
    for (size_t i = 0; i < N_OF(V4); i++)
        c.has[V4[i]] = true;
    assert_int_equal(df_kernels_check("avx512", &c), DF_OK);
    c.has[DF_CPU_AVX512BW] = false;
    assert_int_equal(df_kernels_check("avx512", &c), DF_EUNSUPPORTED);
    assert_contains(df_last_error(), "kernel variant avx512 needs avx512bw");
    assert_int_equal(df_kernels_check("avx2", &c), DF_OK);
    c.has[DF_CPU_AVX512BW] = true;
    c.has[DF_CPU_OS_AVX512] = false; /* the CPU has it, the OS does not save ZMM state */
    assert_int_equal(df_kernels_check("avx512", &c), DF_EUNSUPPORTED);
    assert_contains(df_last_error(), "operating system has not enabled");
    assert_int_equal(df_kernels_check("auto", &c), DF_OK);
}

static void set_env(const char *v)
{
    if (v)
        setenv("DF_CPU_VARIANT", v, 1);
    else
        unsetenv("DF_CPU_VARIANT");
}

static void test_env_forces_and_refuses(void **state)
{
    (void)state;
    const char *old = getenv("DF_CPU_VARIANT");
    char *saved = old ? strdup(old) : NULL;
    const char *lowest = multi_variant() ? "generic" : df_kernels_compiled();
    set_env(lowest);
    assert_int_equal(df_kernels_init(), DF_OK);
    assert_string_equal(df_kernels_active(), lowest);
    if (multi_variant())
        assert_contains(df_kernels_reason(), "forced by DF_CPU_VARIANT=generic");
    set_env("avx1024");
    assert_int_equal(df_kernels_init(), DF_EINVAL);
    assert_contains(df_last_error(), "DF_CPU_VARIANT=avx1024: unknown kernel variant");
    assert_string_equal(df_kernels_active(), lowest); /* a refusal changes nothing */
    assert_int_equal(df_kernels_select("also-bogus"), DF_EINVAL);
    set_env(saved);
    assert_int_equal(df_kernels_init(), DF_OK);
    free(saved);
}

/* Every line is `key: value`. */
static void assert_key_value_lines(const char *s)
{
    for (const char *l = s; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
        size_t k = strspn(l, "abcdefghijklmnopqrstuvwxyz0123456789_");
        if (k == 0 || l[k] != ':' || l[k + 1] != ' ')
            fail_msg("not a `key: value` line: %.60s", l);
    }
}

static void test_cli_env(void **state)
{
    (void)state;
    static char out[16384];
    char cmd[1024], want[128];
    snprintf(cmd, sizeof cmd, "%s/distflow env 2>&1", DF_BINARY_DIR);
    assert_int_equal(df_test_command(cmd, out, sizeof out), 0);
    assert_key_value_lines(out);
    assert_contains(out, "\nonednn_version: ");
    assert_contains(out, "\nonednn_effective_isa: ");
    assert_contains(out, "\nonednn_bf16_matmul: ");
    assert_contains(out, "\nmpi: ");
    assert_contains(out, "\nkernel_variants_compiled: ");
    const char *f32 = strstr(out, "\nonednn_f32_matmul: ");
    assert_non_null(f32);
    assert_true(strncmp(f32 + 20, "unavailable", 11) != 0);
    snprintf(want, sizeof want, "\nkernel_variant: %s\n", df_kernels_active());
    assert_contains(out, want); /* the same environment selects the same variant */
    snprintf(cmd, sizeof cmd, "%s/distflow --version 2>&1", DF_BINARY_DIR);
    assert_int_equal(df_test_command(cmd, out, sizeof out), 0);
    assert_contains(out, "distflow ");
    assert_contains(out, "DF_NATIVE=");
    snprintf(cmd, sizeof cmd, "DF_CPU_VARIANT=avx1024 %s/distflow config help 2>&1", DF_BINARY_DIR);
    assert_int_equal(df_test_command(cmd, out, sizeof out), 2);
    assert_contains(out, "DF_CPU_VARIANT=avx1024: unknown kernel variant");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_env_default_honoured), /* first: before anything selects */
        cmocka_unit_test(test_features_consistent),
        cmocka_unit_test(test_check_messages),
        cmocka_unit_test(test_env_forces_and_refuses),
        cmocka_unit_test(test_cli_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
