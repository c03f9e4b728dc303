/*
 * bf16 matmuls (ops.h df_mm_*): both operands rounded to bfloat16 into the
 * context's scratch, multiplied by a oneDNN matmul primitive (AMX or
 * AVX512-BF16 brgemm kernels) with float32 accumulation and a float32 result —
 * the arithmetic of torch.autocast(dtype=torch.bfloat16) for Linear layers.
 * Primitives are cached per (transposes, M, N, K, alpha, beta) in the context: an LRU for the
 * calls of one thread, and a table that only grows for df_mm16_tile, which the LM head's tiles
 * call from every OpenMP thread at once.
 */
#include "distflow/common.h"
#include "model/ops.h"
#include "util/pages.h"

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MM_CACHE 128 /* shapes of df_mm_* / df_mm_w16 primitives kept (LRU): a training pass of a dense
                        * model uses ~20, a MoE layer up to 6 more per power-of-two row bucket (moe.c) */
#define MM_TILES 128  /* shapes of df_mm16_tile kept per context (never evicted) */
#define MM_THREADS 256 /* OpenMP threads with a stream of their own for df_mm16_tile */
#define MM_PACKS 16    /* weight shapes whose packed layout a context knows */

typedef struct {
    char ta, tb; /* tb 'P': B is a weight in the packed layout (df_mm_pack_w16) */
    int64_t M, N, K;
    float alpha, beta;
    uint64_t last_use;
    dnnl_primitive_t prim;
    dnnl_memory_t ma, mb, mc;
} mm_entry;

/* A primitive df_mm16_tile runs from any thread: its memory objects are made per call, and its
 * scratchpad is the caller's (oneDNN's own, the library mode, is a buffer of the thread that
 * created the primitive: another thread executing it would use its own, maybe smaller one). */
typedef struct {
    char ta, tb;
    int64_t M, N, K;
    float alpha, beta;
    dnnl_primitive_t prim;
    dnnl_memory_desc_t a, b, d, s;
    size_t s_bytes;
} mm_tile;

struct df_mm_ctx {
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    int64_t max_elems;
    uint16_t *a16, *b16; /* [max_elems] conversion scratch */
    mm_entry cache[MM_CACHE];
    int n_cache;
    uint64_t clock;
    int64_t fallbacks; /* calls served by float32 sgemm because a primitive failed */
    int64_t created;   /* primitives created (both caches), for measurements */
    mm_tile tiles[MM_TILES];
    int n_tiles;                        /* published with release stores (lock-free lookup) */
    pthread_mutex_t lock;               /* creation of tiles and streams */
    dnnl_stream_t streams[MM_THREADS];  /* per OpenMP thread number, made on first use */
    void *scratch[MM_THREADS];          /* per OpenMP thread: the tiles' scratchpads */
    size_t scratch_bytes[MM_THREADS];
    struct {
        int64_t N, K;
        dnnl_memory_desc_t md; /* the blocked layout oneDNN's kernels read W^T in */
    } packs[MM_PACKS];
    int n_packs;
};

void df_bf16_from_f32(uint16_t *dst, const float *src, int64_t n)
{
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], sizeof u);
        /* Round to nearest even; NaN stays a (quiet) NaN. */
        uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        dst[i] = (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 0x40u) : (uint16_t)r;
    }
}

void df_bf16_from_f32_serial(uint16_t *dst, const float *src, int64_t n)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], sizeof u);
        uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        dst[i] = (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 0x40u) : (uint16_t)r;
    }
}

static void entry_free(mm_entry *e)
{
    if (e->prim)
        dnnl_primitive_destroy(e->prim);
    if (e->ma)
        dnnl_memory_destroy(e->ma);
    if (e->mb)
        dnnl_memory_destroy(e->mb);
    if (e->mc)
        dnnl_memory_destroy(e->mc);
    memset(e, 0, sizeof *e);
}

static int pack_md(df_mm_ctx *c, int64_t N, int64_t K, dnnl_memory_desc_t *md);

/* C[M,N] = alpha op(A) op(B) + beta C, A as [M,K] ('N') or [K,M] ('T'), B as [K,N] ('N'),
 * [N,K] ('T') or packed ('P', pack_md): the primitive and its three memory descriptors. */
static int make_prim(df_mm_ctx *c, char ta, char tb, int64_t M, int64_t N, int64_t K,
                     float alpha, float beta, dnnl_primitive_t *prim, dnnl_memory_desc_t *a,
                     dnnl_memory_desc_t *b, dnnl_memory_desc_t *d, dnnl_memory_desc_t *user_s)
{
    dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N};
    dnnl_dims_t as = {ta == 'N' ? K : 1, ta == 'N' ? 1 : M};
    dnnl_dims_t bs = {tb == 'N' ? N : 1, tb == 'N' ? 1 : K};
    dnnl_dims_t cs = {N, 1};
    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    *prim = NULL;
    int ok = dnnl_memory_desc_init_by_strides(a, 2, ad, dnnl_bf16, as) == dnnl_success &&
             (tb == 'P' ? pack_md(c, N, K, b) == 0
                        : dnnl_memory_desc_init_by_strides(b, 2, bd, dnnl_bf16, bs) == dnnl_success) &&
             dnnl_memory_desc_init_by_strides(d, 2, cd, dnnl_f32, cs) == dnnl_success &&
             dnnl_matmul_desc_init(&md, a, b, NULL, d) == dnnl_success &&
             dnnl_primitive_attr_create(&attr) == dnnl_success;
    if (ok && user_s)
        ok = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) ==
             dnnl_success;
    if (ok && alpha != 1.0f)
        ok = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha) == dnnl_success;
    if (ok && beta != 0.0f)
        ok = dnnl_post_ops_create(&po) == dnnl_success &&
             dnnl_post_ops_append_sum(po, beta) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
    ok = ok && dnnl_primitive_desc_create(&pd, &md, attr, c->eng, NULL) == dnnl_success &&
         dnnl_primitive_create(prim, pd) == dnnl_success;
    if (ok && user_s) {
        const dnnl_memory_desc_t *q = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        ok = q != NULL;
        if (ok)
            *user_s = *q;
    }
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (po)
        dnnl_post_ops_destroy(po);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    if (!ok && *prim) {
        dnnl_primitive_destroy(*prim);
        *prim = NULL;
    }
    __atomic_add_fetch(&c->created, 1, __ATOMIC_RELAXED);
    return ok ? 0 : -1;
}

static int entry_init(df_mm_ctx *c, mm_entry *e, char ta, char tb, int64_t M, int64_t N,
                      int64_t K, float alpha, float beta)
{
    dnnl_memory_desc_t a, b, d;
    int ok = make_prim(c, ta, tb, M, N, K, alpha, beta, &e->prim, &a, &b, &d, NULL) == 0 &&
             dnnl_memory_create(&e->ma, &a, c->eng, DNNL_MEMORY_NONE) == dnnl_success &&
             dnnl_memory_create(&e->mb, &b, c->eng, DNNL_MEMORY_NONE) == dnnl_success &&
             dnnl_memory_create(&e->mc, &d, c->eng, DNNL_MEMORY_NONE) == dnnl_success;
    if (!ok) {
        entry_free(e);
        return -1;
    }
    e->ta = ta, e->tb = tb, e->M = M, e->N = N, e->K = K, e->alpha = alpha, e->beta = beta;
    return 0;
}

static mm_entry *lookup(df_mm_ctx *c, char ta, char tb, int64_t M, int64_t N, int64_t K,
                        float alpha, float beta)
{
    mm_entry *victim = NULL;
    for (int i = 0; i < c->n_cache; i++) {
        mm_entry *e = &c->cache[i];
        if (e->ta == ta && e->tb == tb && e->M == M && e->N == N && e->K == K &&
            e->alpha == alpha && e->beta == beta) {
            e->last_use = ++c->clock;
            return e;
        }
        if (!victim || e->last_use < victim->last_use)
            victim = e;
    }
    mm_entry *e = c->n_cache < MM_CACHE ? &c->cache[c->n_cache++] : victim;
    entry_free(e);
    if (entry_init(c, e, ta, tb, M, N, K, alpha, beta)) {
        if (e == &c->cache[c->n_cache - 1])
            c->n_cache--;
        return NULL;
    }
    e->last_use = ++c->clock;
    return e;
}

static void sgemm_f32(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
                      const float *A, const float *B, float beta, float *C)
{
    if (ta == 'N' && tb == 'T')
        df_gemm_nt(M, N, K, alpha, A, B, beta, C);
    else if (ta == 'N')
        df_gemm_nn(M, N, K, alpha, A, B, beta, C);
    else
        df_gemm_tn(M, N, K, alpha, A, B, beta, C);
}

static void mm(df_mm_ctx *c, char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha,
               const float *A, const float *B, float beta, float *C)
{
    if (!c || M <= 0 || N <= 0 || K <= 0 || M * K > c->max_elems || N * K > c->max_elems) {
        sgemm_f32(ta, tb, M, N, K, alpha, A, B, beta, C);
        return;
    }
    mm_entry *e = lookup(c, ta, tb, M, N, K, alpha, beta);
    if (!e) {
        c->fallbacks++;
        sgemm_f32(ta, tb, M, N, K, alpha, A, B, beta, C);
        return;
    }
    df_bf16_from_f32(c->a16, A, M * K);
    df_bf16_from_f32(c->b16, B, N * K);
    dnnl_memory_set_data_handle(e->ma, c->a16);
    dnnl_memory_set_data_handle(e->mb, c->b16);
    dnnl_memory_set_data_handle(e->mc, C);
    dnnl_exec_arg_t args[3] = {
        {DNNL_ARG_SRC, e->ma}, {DNNL_ARG_WEIGHTS, e->mb}, {DNNL_ARG_DST, e->mc}};
    if (dnnl_primitive_execute(e->prim, c->stream, 3, args) != dnnl_success ||
        dnnl_stream_wait(c->stream) != dnnl_success) {
        c->fallbacks++;
        sgemm_f32(ta, tb, M, N, K, alpha, A, B, beta, C);
    }
}

/* Rows [r, r + m) of A times W through the cached primitive of shape (m, N, K). */
static int w16_rows(df_mm_ctx *c, char tb, int64_t m, int64_t N, int64_t K, float alpha,
                    const float *A, const uint16_t *W, float beta, float *C)
{
    mm_entry *e = lookup(c, 'N', tb, m, N, K, alpha, beta);
    if (!e)
        return df_error(DF_EINTERNAL, "bf16 matmul: oneDNN has no primitive for [%lld, %lld] x "
                        "[%lld, %lld]", (long long)m, (long long)K, (long long)K, (long long)N);
    df_bf16_from_f32(c->a16, A, m * K);
    dnnl_memory_set_data_handle(e->ma, c->a16);
    dnnl_memory_set_data_handle(e->mb, (void *)W);
    dnnl_memory_set_data_handle(e->mc, C);
    dnnl_exec_arg_t args[3] = {
        {DNNL_ARG_SRC, e->ma}, {DNNL_ARG_WEIGHTS, e->mb}, {DNNL_ARG_DST, e->mc}};
    if (dnnl_primitive_execute(e->prim, c->stream, 3, args) != dnnl_success ||
        dnnl_stream_wait(c->stream) != dnnl_success)
        return df_error(DF_EINTERNAL, "bf16 matmul: oneDNN failed on [%lld, %lld] x [%lld, %lld]",
                        (long long)m, (long long)K, (long long)K, (long long)N);
    return DF_OK;
}

/* df_mm_w16 / df_mm_w16_packed: A in row blocks of the scratch, W read as `tb`. */
static int w16_blocks(df_mm_ctx *c, char tb, const char *who, int64_t M, int64_t N, int64_t K,
                      float alpha, const float *A, const uint16_t *W, float beta, float *C)
{
    if (!c)
        return df_error(DF_EINVAL, "%s: no bf16 matmul context", who);
    if (M <= 0 || N <= 0 || K <= 0)
        return M < 0 || N < 0 || K < 0 ? df_error(DF_EINVAL, "%s: negative size", who) : DF_OK;
    /* A beyond the scratch goes in row blocks: every row's sum is the same computation. */
    const int64_t rows = c->max_elems / K;
    if (rows <= 0)
        return df_error(DF_EINVAL, "%s: K = %lld exceeds the context's %lld elements", who,
                        (long long)K, (long long)c->max_elems);
    for (int64_t r = 0; r < M; r += rows) {
        const int64_t m = M - r < rows ? M - r : rows;
        int rc = w16_rows(c, tb, m, N, K, alpha, A + r * K, W, beta, C + r * N);
        if (rc)
            return rc;
    }
    return DF_OK;
}

int df_mm_w16(df_mm_ctx *c, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
              const float *A, const uint16_t *W, float beta, float *C)
{
    return w16_blocks(c, tb ? 'T' : 'N', "df_mm_w16", M, N, K, alpha, A, W, beta, C);
}

int df_mm_w16_packed(df_mm_ctx *c, int64_t M, int64_t N, int64_t K, float alpha,
                     const float *A, const uint16_t *Wp, float beta, float *C)
{
    return w16_blocks(c, 'P', "df_mm_w16_packed", M, N, K, alpha, A, Wp, beta, C);
}

/* The layout oneDNN's matmul chooses for a [N, K] weight read as W^T (weights format "any"):
 * blocked so its kernels stream it without the copy they make of a plain B at every call.
 * The choice depends on the CPU, not on M (checked on AVX512-BF16 for M = 1 .. 8192); every
 * primitive of df_mm_w16_packed is made with this layout, whatever its M. */
static int pack_md(df_mm_ctx *c, int64_t N, int64_t K, dnnl_memory_desc_t *md)
{
    for (int i = 0; i < c->n_packs; i++)
        if (c->packs[i].N == N && c->packs[i].K == K) {
            *md = c->packs[i].md;
            return 0;
        }
    if (c->n_packs == MM_PACKS)
        return -1;
    dnnl_dims_t ad = {64, K}, bd = {K, N}, cd = {64, N};
    dnnl_memory_desc_t a, b, d;
    dnnl_matmul_desc_t mdesc;
    dnnl_primitive_desc_t pd = NULL;
    int ok = dnnl_memory_desc_init_by_tag(&a, 2, ad, dnnl_bf16, dnnl_ab) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&b, 2, bd, dnnl_bf16, dnnl_format_tag_any) == dnnl_success &&
             dnnl_memory_desc_init_by_tag(&d, 2, cd, dnnl_f32, dnnl_ab) == dnnl_success &&
             dnnl_matmul_desc_init(&mdesc, &a, &b, NULL, &d) == dnnl_success &&
             dnnl_primitive_desc_create(&pd, &mdesc, NULL, c->eng, NULL) == dnnl_success;
    const dnnl_memory_desc_t *w = ok ? dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0) : NULL;
    if (w) {
        c->packs[c->n_packs].N = N;
        c->packs[c->n_packs].K = K;
        c->packs[c->n_packs++].md = *md = *w;
    }
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    return w ? 0 : -1;
}

bool df_mm_packed_native(df_mm_ctx *c, int64_t M, int64_t N, int64_t K)
{
    dnnl_primitive_t prim = NULL;
    dnnl_memory_desc_t a, b, d;
    const_dnnl_primitive_desc_t pd = NULL;
    const char *impl = "";
    bool ok = c && M > 0 && !make_prim(c, 'N', 'P', M, N, K, 1.0f, 0.0f, &prim, &a, &b, &d, NULL) &&
              dnnl_primitive_get_primitive_desc(prim, &pd) == dnnl_success &&
              dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
              (strstr(impl, "amx") || strstr(impl, "avx512_core_bf16"));
    if (prim)
        dnnl_primitive_destroy(prim);
    return ok;
}

int64_t df_mm_packed_bytes(df_mm_ctx *c, int64_t N, int64_t K)
{
    dnnl_memory_desc_t md;
    if (!c || N <= 0 || K <= 0 || pack_md(c, N, K, &md)) {
        df_error(DF_EINTERNAL, "bf16 matmul: oneDNN has no packed layout for a [%lld, %lld] weight",
                 (long long)N, (long long)K);
        return -1;
    }
    return (int64_t)dnnl_memory_desc_get_size(&md);
}

/* The column block of a blocked weight layout (product of its inner blocks over N) and the
 * padded K, or 0 when N blocks are not the outermost, contiguous dimension (the layout cannot
 * be cut into column slices). */
static int64_t col_block(const dnnl_memory_desc_t *md, int64_t *kp)
{
    if (md->format_kind != dnnl_blocked)
        return 0;
    const dnnl_blocking_desc_t *bl = &md->format_desc.blocking;
    int64_t nb = 1, inner = 1;
    for (int i = 0; i < bl->inner_nblks; i++) {
        inner *= bl->inner_blks[i];
        if (bl->inner_idxs[i] == 1)
            nb *= bl->inner_blks[i];
    }
    *kp = md->padded_dims[0];
    /* K blocks inside N blocks, and a block of nb columns over the whole padded K: kp nb
     * elements, one after the other */
    return bl->strides[0] == inner && bl->strides[1] == *kp * nb ? nb : 0;
}

int64_t df_mm_packed_col_stride(df_mm_ctx *c, int64_t N, int64_t K, int64_t step,
                                const int64_t *widths, int n_widths)
{
    dnnl_memory_desc_t whole, part;
    int64_t kp = 0, kq = 0;
    const int64_t nb = c && !pack_md(c, N, K, &whole) ? col_block(&whole, &kp) : 0;
    if (nb <= 0 || step % nb)
        return 0;
    for (int i = 0; i < n_widths; i++) {
        /* a slice [c0, c0 + w) must be laid out as a w-column weight of its own */
        if (pack_md(c, widths[i], K, &part) || col_block(&part, &kq) != nb || kq != kp ||
            part.format_desc.blocking.inner_nblks != whole.format_desc.blocking.inner_nblks ||
            memcmp(part.format_desc.blocking.inner_blks, whole.format_desc.blocking.inner_blks,
                   sizeof part.format_desc.blocking.inner_blks) ||
            memcmp(part.format_desc.blocking.inner_idxs, whole.format_desc.blocking.inner_idxs,
                   sizeof part.format_desc.blocking.inner_idxs))
            return 0;
    }
    return kp;
}

int df_mm_pack_w16(df_mm_ctx *c, int64_t N, int64_t K, const uint16_t *W, uint16_t *dst)
{
    dnnl_memory_desc_t plain, packed;
    dnnl_dims_t bd = {K, N}, bs = {1, K}; /* W [N, K] row-major read as W^T [K, N] */
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_t r = NULL;
    dnnl_memory_t from = NULL, to = NULL;
    int ok = c && N > 0 && K > 0 && pack_md(c, N, K, &packed) == 0 &&
             dnnl_memory_desc_init_by_strides(&plain, 2, bd, dnnl_bf16, bs) == dnnl_success &&
             dnnl_reorder_primitive_desc_create(&rpd, &plain, c->eng, &packed, c->eng, NULL) ==
                 dnnl_success &&
             dnnl_primitive_create(&r, rpd) == dnnl_success &&
             dnnl_memory_create(&from, &plain, c->eng, (void *)W) == dnnl_success &&
             dnnl_memory_create(&to, &packed, c->eng, dst) == dnnl_success;
    if (ok) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
        ok = dnnl_primitive_execute(r, c->stream, 2, args) == dnnl_success &&
             dnnl_stream_wait(c->stream) == dnnl_success;
    }
    if (to)
        dnnl_memory_destroy(to);
    if (from)
        dnnl_memory_destroy(from);
    if (r)
        dnnl_primitive_destroy(r);
    if (rpd)
        dnnl_primitive_desc_destroy(rpd);
    return ok ? DF_OK : df_error(DF_EINTERNAL, "bf16 matmul: oneDNN failed packing a [%lld, %lld] "
                                 "weight", (long long)N, (long long)K);
}

void df_mm_nt(df_mm_ctx *c, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
              const float *B, float beta, float *C)
{
    mm(c, 'N', 'T', M, N, K, alpha, A, B, beta, C);
}

void df_mm_nn(df_mm_ctx *c, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
              const float *B, float beta, float *C)
{
    mm(c, 'N', 'N', M, N, K, alpha, A, B, beta, C);
}

void df_mm_tn(df_mm_ctx *c, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
              const float *B, float beta, float *C)
{
    mm(c, 'T', 'N', M, N, K, alpha, A, B, beta, C);
}

/* The tile primitive of this shape: found without a lock in the published entries, made
 * under the lock. NULL when the table is full (the caller makes a one-off primitive). */
static const mm_tile *tile_lookup(df_mm_ctx *c, char ta, char tb, int64_t M, int64_t N,
                                  int64_t K, float alpha, float beta)
{
    int n = __atomic_load_n(&c->n_tiles, __ATOMIC_ACQUIRE);
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < n; i++) {
            const mm_tile *e = &c->tiles[i];
            if (e->ta == ta && e->tb == tb && e->M == M && e->N == N && e->K == K &&
                e->alpha == alpha && e->beta == beta)
                return e;
        }
        if (pass)
            break;
        pthread_mutex_lock(&c->lock);
        int m = c->n_tiles;
        if (m == n) { /* nobody added it meanwhile: make it */
            const mm_tile *made = NULL;
            mm_tile *e = &c->tiles[m];
            if (m < MM_TILES &&
                !make_prim(c, ta, tb, M, N, K, alpha, beta, &e->prim, &e->a, &e->b, &e->d,
                           &e->s)) {
                e->s_bytes = dnnl_memory_desc_get_size(&e->s);
                e->ta = ta, e->tb = tb, e->M = M, e->N = N, e->K = K;
                e->alpha = alpha, e->beta = beta;
                __atomic_store_n(&c->n_tiles, m + 1, __ATOMIC_RELEASE);
                made = e;
            }
            pthread_mutex_unlock(&c->lock);
            return made;
        }
        pthread_mutex_unlock(&c->lock);
        n = m; /* search again, the new entries included */
    }
    return NULL;
}

/* The calling OpenMP thread's stream (streams are not shared between threads). */
static dnnl_stream_t tile_stream(df_mm_ctx *c)
{
    const int t = omp_get_thread_num();
    if (t >= MM_THREADS)
        return NULL;
    dnnl_stream_t s = __atomic_load_n(&c->streams[t], __ATOMIC_ACQUIRE);
    if (s)
        return s;
    pthread_mutex_lock(&c->lock);
    if (!c->streams[t] && dnnl_stream_create(&s, c->eng, dnnl_stream_default_flags) == dnnl_success)
        __atomic_store_n(&c->streams[t], s, __ATOMIC_RELEASE);
    s = c->streams[t];
    pthread_mutex_unlock(&c->lock);
    return s;
}

/* The calling thread's scratchpad of at least `bytes` (only thread t touches slot t); beyond
 * MM_THREADS threads a buffer for this call (*own, freed by the caller). */
static void *tile_scratch(df_mm_ctx *c, size_t bytes, void **own)
{
    const int t = omp_get_thread_num();
    *own = NULL;
    if (bytes == 0)
        return NULL;
    bytes = (bytes + 63) / 64 * 64;
    if (t >= MM_THREADS)
        return *own = aligned_alloc(64, bytes);
    if (c->scratch_bytes[t] < bytes) {
        free(c->scratch[t]);
        c->scratch[t] = aligned_alloc(64, bytes);
        c->scratch_bytes[t] = c->scratch[t] ? bytes : 0;
    }
    return c->scratch[t];
}

static int tile_exec(df_mm_ctx *c, const mm_tile *e, const uint16_t *A, const uint16_t *B,
                     float *C)
{
    dnnl_stream_t s = tile_stream(c), own = NULL;
    if (!s && dnnl_stream_create(&own, c->eng, dnnl_stream_default_flags) == dnnl_success)
        s = own;
    void *own_sp = NULL, *sp = tile_scratch(c, e->s_bytes, &own_sp);
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL, ms = NULL;
    int ok = s && (sp || !e->s_bytes) &&
             dnnl_memory_create(&ma, &e->a, c->eng, (void *)A) == dnnl_success &&
             dnnl_memory_create(&mb, &e->b, c->eng, (void *)B) == dnnl_success &&
             dnnl_memory_create(&mc, &e->d, c->eng, C) == dnnl_success &&
             (!e->s_bytes || dnnl_memory_create(&ms, &e->s, c->eng, sp) == dnnl_success);
    if (ok) {
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc},
                                   {DNNL_ARG_SCRATCHPAD, ms}};
        ok = dnnl_primitive_execute(e->prim, s, ms ? 4 : 3, args) == dnnl_success &&
             dnnl_stream_wait(s) == dnnl_success;
    }
    dnnl_memory_t mems[4] = {ma, mb, mc, ms};
    for (int i = 0; i < 4; i++)
        if (mems[i])
            dnnl_memory_destroy(mems[i]);
    free(own_sp);
    if (own)
        dnnl_stream_destroy(own);
    return ok ? DF_OK : DF_EINTERNAL;
}

int df_mm16_tile(df_mm_ctx *c, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                 const uint16_t *A, const uint16_t *B, float beta, float *C)
{
    if (!c || M <= 0 || N <= 0 || K <= 0)
        return c ? DF_OK : DF_EINVAL;
    const char a = ta ? 'T' : 'N', b = tb ? 'T' : 'N';
    const mm_tile *e = tile_lookup(c, a, b, M, N, K, alpha, beta);
    if (e)
        return tile_exec(c, e, A, B, C);
    mm_tile once = {0}; /* the table is full: a primitive for this call only */
    if (make_prim(c, a, b, M, N, K, alpha, beta, &once.prim, &once.a, &once.b, &once.d, &once.s))
        return DF_EINTERNAL;
    once.s_bytes = dnnl_memory_desc_get_size(&once.s);
    int rc = tile_exec(c, &once, A, B, C);
    dnnl_primitive_destroy(once.prim);
    return rc;
}

int df_mm16_tile_packed(df_mm_ctx *c, int64_t M, int64_t N, int64_t K, float alpha,
                        const uint16_t *A, const uint16_t *Bp, float *C)
{
    if (!c || M <= 0 || N <= 0 || K <= 0)
        return c ? DF_OK : DF_EINVAL;
    const mm_tile *e = tile_lookup(c, 'N', 'P', M, N, K, alpha, 0.0f);
    return e ? tile_exec(c, e, A, Bp, C) : DF_EINTERNAL;
}

int64_t df_mm_ctx_created(const df_mm_ctx *c)
{
    return c ? __atomic_load_n(&c->created, __ATOMIC_RELAXED) : 0;
}

int64_t df_mm_ctx_release_pages(df_mm_ctx *c)
{
    if (!c)
        return 0;
    const size_t bytes = (size_t)c->max_elems * sizeof(uint16_t);
    int64_t n = df_pages_release(c->a16, bytes) + df_pages_release(c->b16, bytes);
    for (int t = 0; t < MM_THREADS; t++)
        n += df_pages_release(c->scratch[t], c->scratch_bytes[t]);
    return n;
}

int64_t df_mm_ctx_bytes(int64_t max_elems) { return 2 * max_elems * (int64_t)sizeof(uint16_t); }

int64_t df_mm_ctx_fallbacks(const df_mm_ctx *c) { return c ? c->fallbacks : 0; }

void df_mm_ctx_free(df_mm_ctx *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n_cache; i++)
        entry_free(&c->cache[i]);
    for (int i = 0; i < c->n_tiles; i++)
        dnnl_primitive_destroy(c->tiles[i].prim);
    for (int i = 0; i < MM_THREADS; i++) {
        if (c->streams[i])
            dnnl_stream_destroy(c->streams[i]);
        free(c->scratch[i]);
    }
    pthread_mutex_destroy(&c->lock);
    if (c->stream)
        dnnl_stream_destroy(c->stream);
    if (c->eng)
        dnnl_engine_destroy(c->eng);
    free(c->a16);
    free(c->b16);
    free(c);
}

/* oneDNN serves bf16 everywhere, but only AMX / AVX512-BF16 kernels are fast. */
static int native_bf16(df_mm_ctx *c)
{
    mm_entry probe = {0};
    if (entry_init(c, &probe, 'N', 'T', 64, 64, 64, 1.0f, 0.0f))
        return 0;
    const_dnnl_primitive_desc_t pd = NULL;
    const char *impl = "";
    if (dnnl_primitive_get_primitive_desc(probe.prim, &pd) != dnnl_success ||
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success)
        impl = "";
    int ok = strstr(impl, "amx") || strstr(impl, "avx512_core_bf16");
    entry_free(&probe);
    return ok;
}

int df_mm_ctx_create(int64_t max_elems, df_mm_ctx **out)
{
    if (max_elems <= 0)
        return df_error(DF_EINVAL, "bf16 matmul: max_elems must be > 0");
    df_mm_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return df_error(DF_ENOMEM, "bf16 matmul: out of memory");
    pthread_mutex_init(&c->lock, NULL);
    size_t bytes = ((size_t)max_elems * sizeof(uint16_t) + 63) / 64 * 64;
    c->max_elems = max_elems;
    c->a16 = aligned_alloc(64, bytes);
    c->b16 = aligned_alloc(64, bytes);
    if (!c->a16 || !c->b16) {
        df_mm_ctx_free(c);
        return df_error(DF_ENOMEM, "bf16 matmul: out of memory for %lld-element operands",
                        (long long)max_elems);
    }
    if (dnnl_engine_create(&c->eng, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&c->stream, c->eng, dnnl_stream_default_flags) != dnnl_success) {
        df_mm_ctx_free(c);
        return df_error(DF_EINTERNAL, "bf16 matmul: oneDNN CPU engine unavailable");
    }
    if (!native_bf16(c)) {
        df_mm_ctx_free(c);
        return df_error(DF_EUNSUPPORTED,
                        "bf16 matmul: this CPU has no AMX-BF16 / AVX512-BF16 kernels in oneDNN");
    }
    *out = c;
    return DF_OK;
}

int df_model_bf16_available(void)
{
    /* Probed once: the answer is the machine's (and oneDNN's), not the call's. */
    static int probed = -1;
    static char why[256];
    if (probed < 0) {
        df_mm_ctx *c = NULL;
        int rc = df_mm_ctx_create(64 * 64, &c);
        if (rc)
            snprintf(why, sizeof why, "%s", df_last_error());
        df_mm_ctx_free(c);
        probed = rc;
    }
    return probed ? df_error(probed, "%s", why) : DF_OK;
}
