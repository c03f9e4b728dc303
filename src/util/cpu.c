/*
 * CPU feature detection (distflow/platform.h): CPUID for what the processor
 * implements, XGETBV(0) for the register state the operating system saves.
 * Bit positions: Intel SDM Vol. 2A, CPUID, Tables 3-8 (leaf 1), 3-8 (leaf 7),
 * and Vol. 1 §13.3 (XCR0).
 */
#include "distflow/platform.h"

#include <ctype.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define DF_X86 1
#endif

static const char *const feature_names[DF_CPU_N_FEATURES] = {
    [DF_CPU_SSE3] = "sse3",           [DF_CPU_SSSE3] = "ssse3",
    [DF_CPU_SSE41] = "sse4.1",        [DF_CPU_SSE42] = "sse4.2",
    [DF_CPU_POPCNT] = "popcnt",       [DF_CPU_AVX] = "avx",
    [DF_CPU_AVX2] = "avx2",           [DF_CPU_FMA] = "fma",
    [DF_CPU_F16C] = "f16c",           [DF_CPU_BMI1] = "bmi1",
    [DF_CPU_BMI2] = "bmi2",           [DF_CPU_LZCNT] = "lzcnt",
    [DF_CPU_MOVBE] = "movbe",         [DF_CPU_AVX512F] = "avx512f",
    [DF_CPU_AVX512CD] = "avx512cd",   [DF_CPU_AVX512BW] = "avx512bw",
    [DF_CPU_AVX512DQ] = "avx512dq",   [DF_CPU_AVX512VL] = "avx512vl",
    [DF_CPU_AVX512_VNNI] = "avx512_vnni", [DF_CPU_AVX512_BF16] = "avx512_bf16",
    [DF_CPU_AMX_TILE] = "amx_tile",   [DF_CPU_AMX_BF16] = "amx_bf16",
    [DF_CPU_OS_AVX] = "os_avx",       [DF_CPU_OS_AVX512] = "os_avx512",
    [DF_CPU_OS_AMX] = "os_amx",
};

const char *df_cpu_feature_name(df_cpu_feature f)
{
    return (unsigned)f < DF_CPU_N_FEATURES ? feature_names[f] : "?";
}

#ifdef DF_X86
/* One (register, bit) -> feature mapping of a CPUID leaf. */
typedef struct {
    unsigned leaf, sub;
    int reg; /* 0 eax, 1 ebx, 2 ecx, 3 edx */
    int bit;
    df_cpu_feature f;
} cpuid_bit;

static const cpuid_bit cpuid_bits[] = {
    {1, 0, 2, 0, DF_CPU_SSE3},          {1, 0, 2, 9, DF_CPU_SSSE3},
    {1, 0, 2, 12, DF_CPU_FMA},          {1, 0, 2, 19, DF_CPU_SSE41},
    {1, 0, 2, 20, DF_CPU_SSE42},        {1, 0, 2, 22, DF_CPU_MOVBE},
    {1, 0, 2, 23, DF_CPU_POPCNT},       {1, 0, 2, 28, DF_CPU_AVX},
    {1, 0, 2, 29, DF_CPU_F16C},         {7, 0, 1, 3, DF_CPU_BMI1},
    {7, 0, 1, 5, DF_CPU_AVX2},          {7, 0, 1, 8, DF_CPU_BMI2},
    {7, 0, 1, 16, DF_CPU_AVX512F},      {7, 0, 1, 17, DF_CPU_AVX512DQ},
    {7, 0, 1, 28, DF_CPU_AVX512CD},     {7, 0, 1, 30, DF_CPU_AVX512BW},
    {7, 0, 1, 31, DF_CPU_AVX512VL},     {7, 0, 2, 11, DF_CPU_AVX512_VNNI},
    {7, 0, 3, 22, DF_CPU_AMX_BF16},     {7, 0, 3, 24, DF_CPU_AMX_TILE},
    {7, 1, 0, 5, DF_CPU_AVX512_BF16},   {0x80000001u, 0, 2, 5, DF_CPU_LZCNT},
};

/* XGETBV(0) as raw bytes: the _xgetbv intrinsic would need -mxsave on this TU. */
static uint64_t read_xcr0(void)
{
    uint32_t lo, hi;
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* Registers of (leaf, sub), all zero when the leaf is beyond the CPU's maximum. */
static void cpuid(unsigned leaf, unsigned sub, unsigned r[4])
{
    r[0] = r[1] = r[2] = r[3] = 0;
    unsigned max = (unsigned)__get_cpuid_max(leaf & 0x80000000u, NULL);
    if (leaf <= max)
        __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
}

static void read_brand(df_cpu_info *out)
{
    unsigned r[12];
    if ((unsigned)__get_cpuid_max(0x80000000u, NULL) < 0x80000004u) /* int in clang, unsigned in gcc */
        return;
    for (unsigned i = 0; i < 3; i++)
        __cpuid(0x80000002u + i, r[4 * i], r[4 * i + 1], r[4 * i + 2], r[4 * i + 3]);
    memcpy(out->brand, r, 48);
    out->brand[48] = '\0';
    char *s = out->brand; /* trim the padding spaces some CPUs report */
    while (*s == ' ')
        s++;
    memmove(out->brand, s, strlen(s) + 1);
    for (size_t n = strlen(out->brand); n > 0 && isspace((unsigned char)out->brand[n - 1]); n--)
        out->brand[n - 1] = '\0';
}

static void detect_x86(df_cpu_info *out)
{
    unsigned r[4];
    cpuid(0, 0, r);
    memcpy(out->vendor, &r[1], 4); /* EBX, EDX, ECX spell the vendor */
    memcpy(out->vendor + 4, &r[3], 4);
    memcpy(out->vendor + 8, &r[2], 4);
    out->vendor[12] = '\0';
    cpuid(7, 0, r);
    const unsigned max_sub7 = r[0]; /* subleaves of leaf 7 beyond it are reserved */
    for (size_t i = 0; i < sizeof cpuid_bits / sizeof cpuid_bits[0]; i++) {
        const cpuid_bit *b = &cpuid_bits[i];
        if (b->leaf == 7 && b->sub > max_sub7)
            continue;
        cpuid(b->leaf, b->sub, r);
        out->has[b->f] = (r[b->reg] >> b->bit) & 1u;
    }
    cpuid(1, 0, r);
    if ((r[2] >> 27) & 1u) /* OSXSAVE: XGETBV is allowed */
        out->xcr0 = read_xcr0();
    const uint64_t ymm = 0x6, zmm = 0xe0, tile = 0x60000;
    out->has[DF_CPU_OS_AVX] = (out->xcr0 & ymm) == ymm;
    out->has[DF_CPU_OS_AVX512] = out->has[DF_CPU_OS_AVX] && (out->xcr0 & zmm) == zmm;
    out->has[DF_CPU_OS_AMX] = (out->xcr0 & tile) == tile;
    read_brand(out);
}
#endif

void df_cpu_detect(df_cpu_info *out)
{
    memset(out, 0, sizeof *out);
#ifdef DF_X86
    detect_x86(out);
#endif
}
