/* oneDNN's choices on this machine (model/dnnl_info.h). */
#include "model/dnnl_info.h"

#include "distflow/common.h"

#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>

const char *df_dnnl_effective_isa(char *buf, size_t n)
{
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    switch (isa) {
    case dnnl_cpu_isa_all: return "all";
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    default: snprintf(buf, n, "0x%x", (unsigned)isa); return buf;
    }
}

/* The primitive descriptor of C = A B^T as ops_mm_bf16.c builds it, or NULL. */
static dnnl_primitive_desc_t matmul_pd(dnnl_engine_t eng, bool bf16, int64_t M, int64_t N,
                                       int64_t K)
{
    dnnl_data_type_t in = bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N};
    dnnl_dims_t as = {K, 1}, bs = {1, K}, cs = {N, 1}; /* B^T: B [N,K] read as [K,N] */
    dnnl_memory_desc_t a, b, d;
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd = NULL;
    if (dnnl_memory_desc_init_by_strides(&a, 2, ad, in, as) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&b, 2, bd, in, bs) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&d, 2, cd, dnnl_f32, cs) != dnnl_success ||
        dnnl_matmul_desc_init(&md, &a, &b, NULL, &d) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL) != dnnl_success)
        return NULL;
    return pd;
}

int df_dnnl_matmul_impl(bool bf16, int64_t M, int64_t N, int64_t K, char *buf, size_t n)
{
    dnnl_engine_t eng = NULL;
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success)
        return df_error(DF_EINTERNAL, "oneDNN: no CPU engine");
    dnnl_primitive_desc_t pd = matmul_pd(eng, bf16, M, N, K);
    const char *impl = NULL;
    int rc = DF_OK;
    if (!pd || dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success ||
        !impl)
        rc = df_error(DF_EUNSUPPORTED, "oneDNN: no %s matmul implementation on this machine",
                      bf16 ? "bf16" : "f32");
    else
        snprintf(buf, n, "%s", impl);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    dnnl_engine_destroy(eng);
    return rc;
}
