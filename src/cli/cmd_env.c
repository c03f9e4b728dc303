/* distflow env — the build and this machine as `key: value` lines, for bug reports. */
#include "cli/cli.h"
#include "distflow/backend.h"
#ifdef DF_HAVE_CUDA
#include "cli/cuda_module.h"
#endif

#include "distflow/comm.h"
#include "distflow/platform.h"
#include "model/dnnl_info.h"
#include "model/ops.h"

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *USAGE =
    "\n\nPrint the build options and what this machine offers, one `key: value` per line (paste\n"
    "it into a bug report): distflow version, build type, compiler, DF_NATIVE, the kernel variants\n"
    "compiled in and the one in use (and why), the CPU features, MPI, OpenMP, the oneDNN version,\n"
    "its effective ISA and the implementations it picks for an f32 and a bf16 matmul.\n"
    "DF_CPU_VARIANT=generic|avx2|avx512 forces a kernel variant; ONEDNN_MAX_CPU_ISA caps oneDNN's.";

/* The shape of the matmul probes: 512 tokens through a Qwen2-0.5B-sized projection. */
enum { PROBE_M = 512, PROBE_N = 896, PROBE_K = 896 };

static const char *env_or_unset(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : "(unset)";
}

static void print_build(void)
{
    printf("distflow_version: %s\n", df_version());
    printf("build_type: %s\n", df_build_type());
    printf("compiler: %s\n", df_build_compiler());
    printf("df_native: %s\n", df_build_native() ? "ON" : "OFF");
}

static void print_cpu(const df_cpu_info *c)
{
    printf("cpu: %s (%s)\n", *c->brand ? c->brand : "unknown", *c->vendor ? c->vendor : "?");
    printf("cpu_features:");
    for (int f = 0; f < DF_CPU_N_FEATURES; f++)
        if (c->has[f] && strncmp(df_cpu_feature_name((df_cpu_feature)f), "os_", 3))
            printf(" %s", df_cpu_feature_name((df_cpu_feature)f));
    printf("\n");
    printf("cpu_os_state: avx %s, avx512 %s, amx %s (xcr0 0x%llx)\n",
           c->has[DF_CPU_OS_AVX] ? "yes" : "no", c->has[DF_CPU_OS_AVX512] ? "yes" : "no",
           c->has[DF_CPU_OS_AMX] ? "yes" : "no", (unsigned long long)c->xcr0);
    printf("cpu_avx512_bf16: %s\n", c->has[DF_CPU_AVX512_BF16] ? "yes" : "no");
    printf("cpu_amx: tile %s, bf16 %s\n", c->has[DF_CPU_AMX_TILE] ? "yes" : "no",
           c->has[DF_CPU_AMX_BF16] ? "yes" : "no");
}

static void print_kernels(void)
{
    printf("kernel_variants_compiled: %s\n", df_kernels_compiled());
    printf("kernel_variant: %s\n", df_kernels_active());
    printf("kernel_variant_reason: %s\n", df_kernels_reason());
    printf("df_cpu_variant: %s\n", env_or_unset("DF_CPU_VARIANT"));
}

static void print_runtime(void)
{
    char v[512];
    if (df_comm_mpi_library_version(v, sizeof v) == DF_OK)
        printf("mpi: yes\nmpi_library: %s\n", v);
    else
        printf("mpi: no\n");
    printf("openmp: %d, max threads %d (OMP_NUM_THREADS %s)\n", _OPENMP, omp_get_max_threads(),
           env_or_unset("OMP_NUM_THREADS"));
}

static const char *runtime_name(unsigned r)
{
    return r == DNNL_RUNTIME_OMP          ? "OpenMP"
           : r == DNNL_RUNTIME_TBB        ? "TBB"
           : r == DNNL_RUNTIME_SEQ        ? "sequential"
           : r == DNNL_RUNTIME_THREADPOOL ? "threadpool"
                                          : "other";
}

static void print_matmul(const char *key, bool bf16)
{
    char impl[256];
    if (df_dnnl_matmul_impl(bf16, PROBE_M, PROBE_N, PROBE_K, impl, sizeof impl) == DF_OK)
        printf("%s: %s (M %d, N %d, K %d)\n", key, impl, PROBE_M, PROBE_N, PROBE_K);
    else
        printf("%s: unavailable (%s)\n", key, df_last_error());
}

static void print_onednn(void)
{
    const dnnl_version_t *v = dnnl_version();
    char isa[32];
    printf("onednn_version: %d.%d.%d (hash %s, cpu runtime %s)\n", v->major, v->minor, v->patch,
           v->hash ? v->hash : "?", runtime_name(v->cpu_runtime));
    printf("onednn_max_cpu_isa: %s\n", env_or_unset("ONEDNN_MAX_CPU_ISA"));
    printf("onednn_effective_isa: %s\n", df_dnnl_effective_isa(isa, sizeof isa));
    print_matmul("onednn_f32_matmul", false);
    print_matmul("onednn_bf16_matmul", true);
    /* What the model's bf16 option would do here (ops.h df_mm_ctx_create). */
    df_mm_ctx *mm = NULL;
    if (df_mm_ctx_create(PROBE_K * PROBE_K, &mm) == DF_OK)
        printf("bf16_matmuls: available (AMX / AVX512-BF16 kernels)\n");
    else
        printf("bf16_matmuls: unavailable, float32 is used (%s)\n", df_last_error());
    df_mm_ctx_free(mm);
}

/* The backends trainer.device may name, and this machine's GPUs where the build has CUDA. */
static void print_devices(void)
{
    printf("backends: %s\n", df_backend_names());
#ifdef DF_HAVE_CUDA
    const df_cuda_module *m = NULL;
    if (df_cli_cuda_module(&m)) {
        printf("cuda_module: unavailable (%s)\n", df_last_error());
        return;
    }
    int n = 0;
    m->device_count(&n);
    printf("cuda_devices: %d\n", n);
    const int nv = m->nccl_version();
    if (nv)
        printf("cuda_nccl: %d.%d.%d (the gradient all-reduce and the data coordinator's payloads "
               "between GPUs)\n", nv / 10000, nv / 100 % 100, nv % 100);
    else
        printf("cuda_nccl: not in this build (gradients all-reduced through the host over MPI; "
               "the data coordinator's payloads over MPI)\n");
    df_cuda *c = NULL;
    if (n > 0 && m->create(-1, &c) == DF_OK) {
        df_cuda_info in;
        m->get_info(c, &in);
        printf("cuda_device: %d %s (compute capability %d.%d, %d SMs, %.1f GiB; runtime %d, "
               "driver %d)\n", in.device, in.name, in.cc_major, in.cc_minor, in.n_sm,
               (double)in.mem_bytes / (1 << 30), in.runtime_version, in.driver_version);
        m->free(c);
    } else if (n > 0) {
        printf("cuda_device: unavailable (%s)\n", df_last_error());
    }
#endif
}

int df_cmd_env(int argc, char **argv)
{
    df_opt opts[] = {{0}};
    int n_pos, code;
    if (df_cli_parse("env", USAGE, opts, argc, argv, NULL, 0, &n_pos, &code))
        return code;
    df_cpu_info cpu;
    df_cpu_detect(&cpu);
    print_build();
    print_kernels();
    print_cpu(&cpu);
    print_runtime();
    print_onednn();
    print_devices();
    return 0;
}
