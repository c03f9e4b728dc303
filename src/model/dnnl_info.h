/*
 * dnnl_info.h (internal) — what oneDNN does on this machine, for `distflow env`
 * and bug reports: its effective ISA and the implementation it picks for a
 * matmul.
 */
#ifndef DF_MODEL_DNNL_INFO_H
#define DF_MODEL_DNNL_INFO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Name of oneDNN's effective CPU ISA (dnnl_get_effective_cpu_isa), e.g.
 *  "avx512_core_vnni"; "0x<hex>" for a value this build does not know. buf: >= 32 bytes. */
const char *df_dnnl_effective_isa(char *buf, size_t n);

/**
 * The implementation name (dnnl_query_impl_info_str, e.g. "brg:avx512_core")
 * oneDNN chooses for C[M,N] = A[M,K] . B[N,K]^T, row-major, C float32, A and B
 * float32 (bf16 = false) or bfloat16 (bf16 = true: the operands of ops.h's
 * df_mm_nt), copied into buf. DF_EUNSUPPORTED when oneDNN creates no such
 * primitive here; DF_EINTERNAL when it has no CPU engine.
 */
int df_dnnl_matmul_impl(bool bf16, int64_t M, int64_t N, int64_t K, char *buf, size_t n);

#endif /* DF_MODEL_DNNL_INFO_H */
