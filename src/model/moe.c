/* The sparse MoE block of qwen3_moe, qwen2_moe and mixtral (moe.h): routing on the host, experts
   through the backend. */
#include "model/moe.h"
#include "model/ops.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

struct df_moe_ws {
    int64_t rows;
    char *block;    /* every array below, one allocation */
    float *p;       /* [rows, E] routing probabilities; the backward turns them into dL/dz */
    int32_t *sel;   /* [rows, k] the chosen experts, most probable first */
    float *wsel;    /* [rows, k] their weights (renormalised with norm_topk_prob) */
    float *dw;      /* [rows, k] backward: dL/dw */
    int64_t *start; /* [E + 1] each expert's entries in `row` / `slot` */
    int64_t *cur;   /* [E] filling cursors */
    int64_t *row;   /* [rows k] the rows routed to each expert, ascending within it */
    int32_t *slot;  /* [rows k] which of the row's k choices the entry is */
    float *xe, *ye; /* [rows, H] an expert's gathered inputs and its outputs (or gradients) */
    float *sg;      /* [rows] the shared expert's gate sigmoid(x g) per row; the backward: dL/d(x g) */
    int64_t *ent;   /* [rows k] entry t k + j's place in `row` (route) */
    int64_t *poff;  /* [E + 1] the parallel forward: each expert's first row in its scratch slices */
};

/* The arrays' offsets in the block, in struct order, each 64-byte aligned; off[WS_N]: its bytes
   (one layout for create and bytes). */
enum { WS_P, WS_SEL, WS_WSEL, WS_DW, WS_START, WS_CUR, WS_ROW, WS_SLOT, WS_XE, WS_YE, WS_SG, WS_ENT, WS_POFF, WS_N };

static void ws_layout(const df_model_config *c, int64_t rows, int64_t off[WS_N + 1])
{
    const int64_t E = c->num_experts, k = c->num_experts_per_tok, H = c->hidden_size;
    const int64_t n[WS_N] = {rows * E * 4, rows * k * 4, rows * k * 4, rows * k * 4, (E + 1) * 8, E * 8,
                             rows * k * 8, rows * k * 4, rows * H * 4, rows * H * 4, rows * 4, rows * k * 8,
                             (E + 1) * 8};
    off[0] = 0;
    for (int i = 0; i < WS_N; i++)
        off[i + 1] = off[i] + (n[i] + 63) / 64 * 64;
}

int df_moe_ws_create(const df_model_config *c, int64_t rows, df_moe_ws **out)
{
    int64_t off[WS_N + 1];
    ws_layout(c, rows, off);
    df_moe_ws *ws = calloc(1, sizeof *ws);
    char *blk = ws ? aligned_alloc(64, (size_t)(off[WS_N] > 0 ? off[WS_N] : 64)) : NULL;
    if (!blk) {
        free(ws);
        return df_error(DF_ENOMEM, "out of memory for the MoE block's scratch (%lld rows, %lld experts, hidden %lld)",
                        (long long)rows, (long long)c->num_experts, (long long)c->hidden_size);
    }
    *ws = (df_moe_ws){.rows = rows, .block = blk, .p = (float *)(blk + off[WS_P]), .sel = (int32_t *)(blk + off[WS_SEL]),
                      .wsel = (float *)(blk + off[WS_WSEL]), .dw = (float *)(blk + off[WS_DW]),
                      .start = (int64_t *)(blk + off[WS_START]), .cur = (int64_t *)(blk + off[WS_CUR]),
                      .row = (int64_t *)(blk + off[WS_ROW]), .slot = (int32_t *)(blk + off[WS_SLOT]),
                      .xe = (float *)(blk + off[WS_XE]), .ye = (float *)(blk + off[WS_YE]),
                      .sg = (float *)(blk + off[WS_SG]), .ent = (int64_t *)(blk + off[WS_ENT]),
                      .poff = (int64_t *)(blk + off[WS_POFF])};
    *out = ws;
    return DF_OK;
}

int64_t df_moe_ws_bytes(const df_model_config *c, int64_t rows)
{
    if (c->num_experts <= 0)
        return 0;
    int64_t off[WS_N + 1];
    ws_layout(c, rows, off);
    return off[WS_N];
}

void df_moe_ws_free(df_moe_ws *ws)
{
    if (ws)
        free(ws->block);
    free(ws);
}

/* Run backend operator `op` unless an earlier one failed. */
#define MB(op, ...) (*err ? (void)0 : (void)(*err = be->ops->op(be->ctx, __VA_ARGS__)))

/* One expert's three tensors: float32 (a view of the weights or of the gradients) and, under
   mixed precision, their bf16 copies (else NULL). */
typedef struct {
    float *gate, *up, *down;
    const uint16_t *gate16, *up16, *down16;
} expert_w;

static expert_w expert_of(const df_model_config *c, const df_layer_view *v, const df_layer16 *w16, int64_t e)
{
    const int64_t fs = df_model_expert_floats(c), bs = w16 ? df_weights16_expert_elems(c) : 0;
    float *g = v->experts + e * fs;
    const uint16_t *g16 = w16 ? w16->experts + e * bs : NULL;
    return (expert_w){g, g + fs / 3, g + 2 * fs / 3, g16, g16 ? g16 + bs / 3 : NULL, g16 ? g16 + 2 * bs / 3 : NULL};
}

/* The shared expert's three tensors (qwen2_moe), as expert_of's. */
static expert_w shared_of(const df_model_config *c, const df_layer_view *v, const df_layer16 *w16)
{
    const int64_t fs = df_model_shared_floats(c), bs = w16 ? df_weights16_shared_elems(c) : 0;
    const uint16_t *g16 = w16 ? w16->shared : NULL;
    return (expert_w){v->shared, v->shared + fs / 3, v->shared + 2 * fs / 3, g16, g16 ? g16 + bs / 3 : NULL,
                      g16 ? g16 + 2 * bs / 3 : NULL};
}

/* C = A op(W) + beta C for a [N, K] weight (tb) or its transpose: from its bf16 copy W16 when
   there is one (mixed precision), else the float32 GEMM (which a bf16 context rounds). */
static void wmm(const df_backend *be, bool tb, int64_t M, int64_t N, int64_t K, const float *A, const float *W,
                const uint16_t *W16, float beta, float *C, int *err)
{
    if (W16)
        MB(gemm_w16, tb, M, N, K, 1.0f, A, W16, beta, C);
    else
        MB(gemm, false, tb, M, N, K, 1.0f, A, W, beta, C);
}

/* The rows an expert's GEMMs run over for its ne routed rows: ne in float32; in bf16 the next
   power of two from 16 (at most the scratch's rows), zero rows padding the gathered input, so
   the bf16 context's primitives (cached by shape, ops_mm_bf16.c) are a few shapes and not one
   per expert and call. The zero rows give zero activations, outputs and gradient terms. */
static int64_t rows_of(const df_moe_ws *ws, int64_t ne, bool bf16)
{
    if (!bf16)
        return ne;
    int64_t m = 16;
    while (m < ne)
        m *= 2;
    return m < ws->rows ? m : ws->rows;
}

/* Row t of p: softmax of the logits in place (float32, as F.softmax(..., dtype=torch.float)), then
   its top k into sel / wsel, largest first (ties: the lower index), or the k experts of `replay`
   (NULL: none) with their probabilities. False when a replayed index is out of range or repeated. */
static bool route_row(float *p, int64_t E, int64_t k, bool renorm, const int32_t *replay, int32_t *sel, float *wsel)
{
    float m = p[0];
    for (int64_t e = 1; e < E; e++)
        m = p[e] > m ? p[e] : m;
    double s = 0;
    for (int64_t e = 0; e < E; e++)
        s += p[e] = expf(p[e] - m);
    const float inv = (float)(1.0 / s);
    for (int64_t e = 0; e < E; e++)
        p[e] *= inv;
    float sum = 0;
    for (int64_t j = 0; replay && j < k; j++) {
        bool ok = replay[j] >= 0 && replay[j] < E;
        for (int64_t i = 0; ok && i < j; i++)
            ok = replay[i] != replay[j];
        if (!ok)
            return false;
        sel[j] = replay[j];
        wsel[j] = p[replay[j]];
        sum += p[replay[j]];
    }
    for (int64_t j = 0; !replay && j < k; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            bool taken = false;
            for (int64_t i = 0; i < j && !taken; i++)
                taken = sel[i] == e;
            if (!taken && (best < 0 || p[e] > p[best]))
                best = e;
        }
        sel[j] = (int32_t)best;
        wsel[j] = p[best];
        sum += p[best];
    }
    for (int64_t j = 0; renorm && j < k; j++)
        wsel[j] /= sum;
    return true;
}

/* Routing of n rows of x: the router's logits (a backend GEMM), each row's softmax and top k, and
   the rows grouped by expert (ws->start / row / slot). */
static void route(const df_backend *be, const df_model_config *c, const df_layer_view *w, const df_layer16 *w16,
                  const df_moe_routes *rt, int64_t n, const float *x, df_moe_ws *ws, int *err)
{
    const int64_t E = c->num_experts, k = c->num_experts_per_tok, H = c->hidden_size;
    wmm(be, true, n, E, H, x, w->router, w16 ? w16->router : NULL, 0.0f, ws->p, err);
    if (*err)
        return;
    int64_t bad = -1;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < n; t++) {
        const int64_t r = rt && rt->map ? rt->map[t] : t; /* the row's route */
        const int32_t *in = rt && rt->in && rt->in[r * rt->stride] >= 0 ? rt->in + r * rt->stride : NULL;
        if (!route_row(ws->p + t * E, E, k, c->norm_topk_prob, in, ws->sel + t * k, ws->wsel + t * k)) {
#pragma omp critical(df_moe_bad)
            bad = bad < 0 || r < bad ? r : bad;
        }
        if (rt && rt->out)
            memcpy(rt->out + r * rt->stride, ws->sel + t * k, (size_t)k * sizeof(int32_t));
    }
    if (bad >= 0) {
        *err = df_error(DF_EINVAL, "router replay: route row %lld names an expert outside [0, %lld) or one "
                        "twice", (long long)bad, (long long)E);
        return;
    }
    memset(ws->start, 0, (size_t)(E + 1) * sizeof(int64_t));
    for (int64_t i = 0; i < n * k; i++)
        ws->start[ws->sel[i] + 1]++;
    for (int64_t e = 0; e < E; e++)
        ws->start[e + 1] += ws->start[e];
    memcpy(ws->cur, ws->start, (size_t)E * sizeof(int64_t));
    for (int64_t i = 0; i < n * k; i++) { /* in row order: each expert's rows ascend */
        const int64_t at = ws->cur[ws->sel[i]]++;
        ws->row[at] = i / k;
        ws->slot[at] = (int32_t)(i % k);
        ws->ent[i] = at;
    }
}

/* A SwiGLU of width I on m rows of xin [m, H]: gate, up, act = silu(gate) up ([m, I]) and its
   output y = act W_down^T [m, H]. */
static void swiglu_mlp(const df_backend *be, const df_model_config *c, const expert_w *x_w, int64_t I, int64_t m,
                       const float *xin, float *gate, float *up, float *act, float *y, int *err)
{
    const int64_t H = c->hidden_size;
    wmm(be, true, m, I, H, xin, x_w->gate, x_w->gate16, 0.0f, gate, err);
    wmm(be, true, m, I, H, xin, x_w->up, x_w->up16, 0.0f, up, err);
    MB(swiglu_fwd, act, gate, up, m * I);
    wmm(be, true, m, H, I, act, x_w->down, x_w->down16, 0.0f, y, err);
}

/* Expert x's forward on its rows a.. (ne of them, m with the padding): xe gathered from x, then
   its SwiGLU into ws->ye [m, H] (gate / up / act [m, moe_I]). */
static void expert_fwd(const df_backend *be, const df_model_config *c, const expert_w *x_w, const float *x,
                       int64_t a, int64_t ne, int64_t m, float *gate, float *up, float *act, df_moe_ws *ws, int *err)
{
    const int64_t H = c->hidden_size;
    MB(gather_rows, ws->xe, x, ws->row + a, ne, H);
    if (m > ne)
        MB(zero, ws->xe + ne * H, (m - ne) * H);
    swiglu_mlp(be, c, x_w, c->moe_intermediate_size, m, ws->xe, gate, up, act, ws->ye, err);
}

/* qwen2_moe's shared expert on all n rows (Qwen2MoeSparseMoeBlock): its SwiGLU of width
   shared_expert_intermediate_size into ws->ye, and ws->sg[t] = sigmoid(x[t] . g), g the
   shared_expert_gate [1, H]. */
static void shared_fwd(const df_backend *be, const df_model_config *c, const df_layer_view *w, const df_layer16 *w16,
                       int64_t n, const float *x, float *gate, float *up, float *act, df_moe_ws *ws, int *err)
{
    const expert_w sw = shared_of(c, w, w16);
    swiglu_mlp(be, c, &sw, c->shared_expert_intermediate_size, n, x, gate, up, act, ws->ye, err);
    wmm(be, true, n, 1, c->hidden_size, x, w->shared_gate, w16 ? w16->shared_gate : NULL, 0.0f, ws->sg, err);
    if (*err)
        return;
    for (int64_t t = 0; t < n; t++)
        ws->sg[t] = 1.0f / (1.0f + expf(-ws->sg[t]));
}

/* ---- The experts in parallel (a decode step's few rows) ---------------------------------------
 * A decode step gives each expert a few rows, and each of its backend calls would open a parallel
 * region of its own (oneDNN's too): 600-1500 fork / joins a step. Up to PAR_ROWS rows a call runs
 * the experts that got rows over the threads instead (dynamic: their row counts differ), each on
 * one thread (nested regions are inactive; oneDNN runs a call made inside a parallel region on the
 * calling thread), in slices of the scratch at its padded row offset poff[e], then adds the rows'
 * outputs onto out per row in ascending expert order: the sums and their order of the loop in
 * df_moe_fwd, so the same bits. The backend's matmul calls are not thread-safe (the bf16 context
 * converts into one buffer and caches primitives in an LRU), so this path is the CPU backend's
 * only and calls its kernels (ops.h) itself: float32 the context-free sgemm (df_gemm_nt, what
 * gemm runs without a bf16 context), bf16 df_mm16_tile (thread-safe; the primitive of gemm_w16's
 * shape, which takes an expert's m <= rows rows in one block as the context holds rows x max(H, I)
 * elements, df_mm_elems_for) on operands rounded here, each into a dead part of the expert's own
 * slices. Checked: the rollout's tokens, log-probs and routes bit for bit at 1-4 threads, f32 and
 * bf16, with the path on and off. The backward keeps the loop (its calls are training's big ones). */
#define PAR_ROWS 1024 /* rows of a call at most: on 2 threads (qwen3-moe-e64 decode, docs/performance.md's
                        * MoE part) the parallel path ran 1.4-1.6x faster at 256 rows and 1.1-1.2x at
                        * 1,024, the largest measured; above, the threaded GEMMs of the loop below */

/* Whether the call takes the parallel path; then ws->poff holds the slices' offsets, ws->cur the
 * experts with rows (*na of them) and *mm the bf16 context (NULL: float32). */
static bool par_plan(const df_backend *be, const df_model_config *c, const df_layer16 *w16, int64_t n,
                     df_moe_ws *ws, df_mm_ctx **mm, int64_t *na)
{
    if (n > PAR_ROWS || !df_backend_is_cpu(be) || omp_in_parallel() || omp_get_max_threads() < 2)
        return false;
    *mm = be->ctx ? *(df_mm_ctx **)be->ctx : NULL; /* backend_cpu.c: NULL or a context's address */
    if (!w16 != !*mm) /* float32 weights under a bf16 context: gemm rounds through the context */
        return false;
    int64_t at = 0;
    *na = 0;
    for (int64_t e = 0; e < c->num_experts; e++) {
        const int64_t ne = ws->start[e + 1] - ws->start[e];
        ws->poff[e] = at;
        if (ne) {
            at += rows_of(ws, ne, w16 != NULL);
            ws->cur[(*na)++] = e;
        }
    }
    ws->poff[c->num_experts] = at;
    return at <= ws->rows && *na > 1;
}

/* Expert e's forward on the calling thread into its slices (expert_fwd's arithmetic): DF_OK or
 * df_mm16_tile's code (which reports nothing: the caller does, on its own thread). */
static int expert_fwd_1t(const df_model_config *c, const df_layer_view *w, const df_layer16 *w16, df_mm_ctx *mm,
                         int64_t e, const float *x, float *gate, float *up, float *act, df_moe_ws *ws)
{
    const int64_t H = c->hidden_size, I = c->moe_intermediate_size, a = ws->start[e], ne = ws->start[e + 1] - a;
    const int64_t p = ws->poff[e], m = rows_of(ws, ne, w16 != NULL);
    const expert_w xw = expert_of(c, w, w16, e);
    float *xe = ws->xe + p * H, *ye = ws->ye + p * H, *g = gate + p * I, *u = up + p * I, *ac = act + p * I;
    for (int64_t i = 0; i < ne; i++)
        memcpy(xe + i * H, x + ws->row[a + i] * H, (size_t)H * sizeof(float));
    if (m > ne)
        memset(xe + ne * H, 0, (size_t)((m - ne) * H) * sizeof(float));
    if (!w16) {
        df_gemm_nt(m, I, H, 1.0f, xe, xw.gate, 0.0f, g);
        df_gemm_nt(m, I, H, 1.0f, xe, xw.up, 0.0f, u);
        df_swiglu_fwd(ac, g, u, m * I);
        df_gemm_nt(m, H, I, 1.0f, ac, xw.down, 0.0f, ye);
        return DF_OK;
    }
    uint16_t *x16 = (uint16_t *)ye, *a16 = (uint16_t *)g; /* ye is free until down's output, gate after act */
    df_bf16_from_f32_serial(x16, xe, m * H);
    int rc = df_mm16_tile(mm, false, true, m, I, H, 1.0f, x16, xw.gate16, 0.0f, g);
    rc = rc ? rc : df_mm16_tile(mm, false, true, m, I, H, 1.0f, x16, xw.up16, 0.0f, u);
    if (rc)
        return rc;
    df_swiglu_fwd(ac, g, u, m * I);
    df_bf16_from_f32_serial(a16, ac, m * I);
    return df_mm16_tile(mm, false, true, m, H, I, 1.0f, a16, xw.down16, 0.0f, ye);
}

/* The routed experts' part of df_moe_fwd on the parallel path (par_plan true). */
static void experts_fwd_par(const df_model_config *c, const df_layer_view *w, const df_layer16 *w16, df_mm_ctx *mm,
                            int64_t na, int64_t n, const float *x, float *out, float *gate, float *up, float *act,
                            df_moe_ws *ws, int *err)
{
    const int64_t k = c->num_experts_per_tok, H = c->hidden_size;
    int64_t bad = -1; /* the lowest expert that failed */
    int bad_rc = DF_OK;
#pragma omp parallel
    {
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < na; i++) {
            const int64_t e = ws->cur[i];
            const int rc = expert_fwd_1t(c, w, w16, mm, e, x, gate, up, act, ws);
            if (rc) {
#pragma omp critical(df_moe_par)
                if (bad < 0 || e < bad)
                    bad = e, bad_rc = rc;
            }
        }
        /* the loop's barrier: every slice written, `bad` settled */
        if (bad < 0) {
#pragma omp for schedule(static)
            for (int64_t t = 0; t < n; t++) {
                float *o = out + t * H;
                for (int64_t prev = -1;;) { /* the row's k experts in ascending order */
                    int64_t j = -1;
                    for (int64_t q = 0; q < k; q++)
                        if (ws->sel[t * k + q] > prev && (j < 0 || ws->sel[t * k + q] < ws->sel[t * k + j]))
                            j = q;
                    if (j < 0)
                        break;
                    const int64_t e = prev = ws->sel[t * k + j];
                    const float wt = ws->wsel[t * k + j];
                    const float *y = ws->ye + (ws->poff[e] + ws->ent[t * k + j] - ws->start[e]) * H;
                    for (int64_t h = 0; h < H; h++)
                        o[h] += wt * y[h];
                }
            }
        }
    }
    if (bad >= 0)
        *err = df_error(bad_rc, "MoE: expert %lld's bf16 matmul failed in oneDNN (%lld rows)", (long long)bad,
                        (long long)(ws->start[bad + 1] - ws->start[bad]));
}

void df_moe_fwd(const df_backend *be, const df_model_config *c, const df_layer_view *w, const df_layer16 *w16,
                const df_moe_routes *rt, int64_t n, const float *x, float *out, float *gate, float *up, float *act,
                df_moe_ws *ws, int *err)
{
    const int64_t E = c->num_experts, k = c->num_experts_per_tok, H = c->hidden_size;
    route(be, c, w, w16, rt, n, x, ws, err);
    df_mm_ctx *mm = NULL;
    int64_t na = 0;
    const bool par = !*err && par_plan(be, c, w16, n, ws, &mm, &na);
    if (par)
        experts_fwd_par(c, w, w16, mm, na, n, x, out, gate, up, act, ws, err);
    for (int64_t e = 0; e < E && !*err && !par; e++) {
        const int64_t a = ws->start[e], ne = ws->start[e + 1] - a;
        if (!ne)
            continue;
        const expert_w xw = expert_of(c, w, w16, e);
        expert_fwd(be, c, &xw, x, a, ne, rows_of(ws, ne, w16 != NULL), gate, up, act, ws, err);
        if (*err)
            return;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < ne; i++) { /* rows distinct within an expert */
            const int64_t t = ws->row[a + i];
            const float wt = ws->wsel[t * k + ws->slot[a + i]];
            float *o = out + t * H;
            const float *y = ws->ye + i * H;
            for (int64_t h = 0; h < H; h++)
                o[h] += wt * y[h];
        }
    }
    if (!w->shared || *err)
        return;
    shared_fwd(be, c, w, w16, n, x, gate, up, act, ws, err);
    if (*err)
        return;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < H; h++)
            out[t * H + h] += ws->sg[t] * ws->ye[t * H + h];
}

/* A SwiGLU's backward (swiglu_mlp's, width I, m rows of xin, its gate / up / act recomputed): its
   weights' gradients accumulated into gw, dx = beta dx + dMLP/dxin^T dy (dx may be dy: dy is read
   first). gate / up / act are spent. */
static void swiglu_mlp_bwd(const df_backend *be, const df_model_config *c, const expert_w *xw, const expert_w *gw,
                           int64_t I, int64_t m, const float *xin, float *gate, float *up, float *act, const float *dy,
                           float *dx, float beta, int *err)
{
    const int64_t H = c->hidden_size;
    MB(gemm, true, false, H, I, m, 1.0f, dy, act, 1.0f, gw->down); /* dW_down += dY^T act */
    wmm(be, false, m, I, H, dy, xw->down, xw->down16, 0.0f, act, err); /* d act = dY W_down */
    MB(swiglu_bwd, gate, up, act, gate, up, m * I);
    MB(gemm, true, false, I, H, m, 1.0f, gate, xin, 1.0f, gw->gate);
    MB(gemm, true, false, I, H, m, 1.0f, up, xin, 1.0f, gw->up);
    wmm(be, false, m, H, I, gate, xw->gate, xw->gate16, beta, dx, err); /* dx = dgate W_gate + dup W_up */
    wmm(be, false, m, H, I, up, xw->up, xw->up16, 1.0f, dx, err);
}

/* Expert e's backward on its ne rows (entries a.. of ws->row): dL/dw of each entry into ws->dw,
   its weights' gradients into g, its inputs' onto din. */
static void expert_bwd(const df_backend *be, const df_model_config *c, const df_layer_view *w,
                       const df_layer16 *w16, const df_layer_view *g, int64_t e, const float *x, const float *dy,
                       float *din, float *gate, float *up, float *act, df_moe_ws *ws, int *err)
{
    const int64_t k = c->num_experts_per_tok, H = c->hidden_size, Im = c->moe_intermediate_size;
    const int64_t a = ws->start[e], ne = ws->start[e + 1] - a, m = rows_of(ws, ne, w16 != NULL);
    const expert_w xw = expert_of(c, w, w16, e), gw = expert_of(c, g, NULL, e);
    expert_fwd(be, c, &xw, x, a, ne, m, gate, up, act, ws, err);
    if (*err)
        return;
    /* dL/dw = dy . y; the expert's output gradient w dy replaces y */
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < ne; i++) {
        const int64_t t = ws->row[a + i], j = t * k + ws->slot[a + i];
        const float *d = dy + t * H;
        float *y = ws->ye + i * H;
        double dot = 0;
        for (int64_t h = 0; h < H; h++)
            dot += (double)d[h] * y[h];
        ws->dw[j] = (float)dot;
        for (int64_t h = 0; h < H; h++)
            y[h] = ws->wsel[j] * d[h];
    }
    /* the padding rows of ye (zero inputs' outputs) stay 0: they add nothing to the sums over rows */
    swiglu_mlp_bwd(be, c, &xw, &gw, Im, m, ws->xe, gate, up, act, ws->ye, ws->ye, 0.0f, err);
    MB(scatter_add_rows, din, ws->ye, ws->row + a, ne, H);
}

/* The shared expert's backward on all n rows: dL/d(x g) = (dy . y) s (1 - s) per row into
   ws->sg (s = ws->sg's sigmoid), the SwiGLU's backward on s dy, the gate's gradient g_gate += dz^T
   x and the inputs' din += dz g + dMLP. */
static void shared_bwd(const df_backend *be, const df_model_config *c, const df_layer_view *w,
                       const df_layer16 *w16, const df_layer_view *g, int64_t n, const float *x, const float *dy,
                       float *din, float *gate, float *up, float *act, df_moe_ws *ws, int *err)
{
    const int64_t H = c->hidden_size;
    shared_fwd(be, c, w, w16, n, x, gate, up, act, ws, err);
    if (*err)
        return;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < n; t++) {
        const float s = ws->sg[t], *d = dy + t * H;
        float *y = ws->ye + t * H;
        double dot = 0;
        for (int64_t h = 0; h < H; h++)
            dot += (double)d[h] * y[h];
        ws->sg[t] = (float)(dot * s * (1.0 - s));
        for (int64_t h = 0; h < H; h++)
            y[h] = s * d[h];
    }
    const expert_w sw = shared_of(c, w, w16), gw = shared_of(c, g, NULL);
    swiglu_mlp_bwd(be, c, &sw, &gw, c->shared_expert_intermediate_size, n, x, gate, up, act, ws->ye, din, 1.0f, err);
    MB(gemm, true, false, 1, H, n, 1.0f, ws->sg, x, 1.0f, g->shared_gate);                   /* dg += dz^T x */
    wmm(be, false, n, H, 1, ws->sg, w->shared_gate, w16 ? w16->shared_gate : NULL, 1.0f, din, err); /* dx += dz g */
}

/* Row t's dL/dz in place of its probabilities p [E] from dL/dw of its k choices: through the
   renormalisation w_j = p_j / S (dp_j = (dw_j - sum_i dw_i w_i) / S) and the softmax
   (dz = p (dp - sum_e dp_e p_e)). dw becomes dp and wsel the chosen p (both spent). */
static void router_row_bwd(float *p, int64_t E, int64_t k, bool renorm, const int32_t *sel, float *wsel, float *dw)
{
    double S = 0, dww = 0, pdp = 0;
    for (int64_t j = 0; j < k; j++) {
        S += p[sel[j]];
        dww += (double)dw[j] * wsel[j];
    }
    for (int64_t j = 0; j < k; j++) {
        dw[j] = renorm ? (float)((dw[j] - dww) / S) : dw[j];
        wsel[j] = p[sel[j]];
        pdp += (double)dw[j] * wsel[j];
    }
    for (int64_t e = 0; e < E; e++)
        p[e] = (float)(-pdp * p[e]);
    for (int64_t j = 0; j < k; j++)
        p[sel[j]] += wsel[j] * dw[j];
}

void df_moe_bwd(const df_backend *be, const df_model_config *c, const df_layer_view *w, const df_layer16 *w16,
                const df_moe_routes *rt, const df_layer_view *g, int64_t n, const float *x, const float *dy, float *din,
                float beta, float *gate, float *up, float *act, df_moe_ws *ws, int *err)
{
    const int64_t E = c->num_experts, k = c->num_experts_per_tok, H = c->hidden_size;
    if (beta == 0.0f)
        MB(zero, din, n * H);
    const df_moe_routes in = rt ? (df_moe_routes){rt->in, NULL, rt->stride, rt->map} : (df_moe_routes){0};
    route(be, c, w, w16, &in, n, x, ws, err);
    for (int64_t e = 0; e < E && !*err; e++)
        if (ws->start[e + 1] > ws->start[e])
            expert_bwd(be, c, w, w16, g, e, x, dy, din, gate, up, act, ws, err);
    if (w->shared && !*err)
        shared_bwd(be, c, w, w16, g, n, x, dy, din, gate, up, act, ws, err);
    if (*err)
        return;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < n; t++)
        router_row_bwd(ws->p + t * E, E, k, c->norm_topk_prob, ws->sel + t * k, ws->wsel + t * k, ws->dw + t * k);
    MB(gemm, true, false, E, H, n, 1.0f, ws->p, x, 1.0f, g->router); /* dW_r += dz^T x */
    wmm(be, false, n, H, E, ws->p, w->router, w16 ? w16->router : NULL, 1.0f, din, err); /* dx += dz W_r */
}
