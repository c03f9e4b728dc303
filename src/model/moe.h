/*
 * moe.h (internal) — the sparse Mixture-of-Experts MLP of qwen3_moe's, qwen2_moe's and mixtral's
 * sparse layers (transformers' Qwen3MoeSparseMoeBlock, Qwen2MoeSparseMoeBlock,
 * MixtralSparseMoeBlock), forward and backward, run by the decoder layer (decoder_layer.c) in
 * place of the dense MLP on df_model_layer_moe layers:
 *
 *   z = x W_r^T [n, E];  p = softmax(z) (float32);  (w, e) = top-k of p per row;
 *   w /= sum(w) when norm_topk_prob;  out[t] += sum_j w[t, j] expert_{e[t, j]}(x[t]),
 *   expert(x) = down(silu(gate(x)) * up(x)) of width moe_intermediate_size;
 *   qwen2_moe also out[t] += sigmoid(x[t] . g) shared(x[t]), shared the same SwiGLU of width
 *   shared_expert_intermediate_size and g the shared_expert_gate [1, H].
 *
 * The experts run one after another on the rows routed to each (gathered, projected, scattered
 * back), so each costs GEMMs of its own rows only; on the CPU backend a forward of few rows (a
 * decode step) runs them side by side over the OpenMP threads instead, each single-threaded, with
 * the same results bit for bit (moe.c, PAR_ROWS). Routing (softmax, top-k, the row lists) and
 * the routing weights' products run on the host: the block needs a host-memory backend
 * (df_model_check_backend_ex refuses others for a model with experts). The backward recomputes
 * the routing and every expert's activations from x (nothing is saved between the passes); the
 * top-k choice is a constant of the pass (as torch.topk's indices), its weights are
 * differentiated through the renormalisation and the softmax into the router.
 */
#ifndef DF_MODEL_MOE_H
#define DF_MODEL_MOE_H

#include "distflow/backend.h"
#include "distflow/model.h"

/**
 * Router replay of one call (df_seq_batch.routes_in / routes_out): `in` / `out` point at the
 * layer's k columns of row 0 of a [rows, stride] route array (NULL: none); the route of the
 * call's row t is row map[t] (map NULL: row t). A replayed row (its in[0] >= 0) takes those k
 * experts, weighted by the live softmax (renormalised with norm_topk_prob); `out` receives each
 * row's experts, replayed or chosen.
 */
typedef struct df_moe_routes {
    const int32_t *in;
    int32_t *out;
    int64_t stride;
    const int64_t *map;
} df_moe_routes;

/** Host scratch of the block over at most `rows` rows of one call (df_moe_ws_create). */
typedef struct df_moe_ws df_moe_ws;

/** Scratch for calls of at most `rows` rows of model c (num_experts > 0). Errors: DF_ENOMEM
 *  naming the size. */
int df_moe_ws_create(const df_model_config *c, int64_t rows, df_moe_ws **out);
void df_moe_ws_free(df_moe_ws *ws);
/** Bytes df_moe_ws_create(c, rows) allocates (a dry run's count); 0 for a model without experts. */
int64_t df_moe_ws_bytes(const df_model_config *c, int64_t rows);

/**
 * out[n, H] += MoE(x[n, H]) of the sparse layer w (its router / experts; c's sizes), n <= the
 * workspace's rows. w16: the layer's bf16 copy (mixed precision: the matmuls through gemm_w16,
 * each expert's rows padded to a power of two) or NULL (float32). gate, up, act: scratch of the
 * workspace's rows times moe_intermediate_size floats each (the layer call's gate / up / act
 * buffers). rt: router replay (NULL: none). Each row's expert outputs are added onto out in
 * ascending expert order. Failures land in *err (nothing runs once it is set); a replayed index
 * outside [0, num_experts) or repeated in a row is DF_EINVAL.
 */
void df_moe_fwd(const df_backend *be, const df_model_config *c, const df_layer_view *w, const df_layer16 *w16,
                const df_moe_routes *rt, int64_t n, const float *x, float *out, float *gate, float *up, float *act,
                df_moe_ws *ws, int *err);

/**
 * The block's backward over the same n rows: din[n, H] = beta din + (dMoE/dx)^T dy (beta 0 or
 * 1), the router's and the experts' gradients ACCUMULATED into g (a gradient blob's view of the
 * layer). x is the forward's input, bit for bit, and rt its replay (the routing is recomputed from
 * them; rt->out is not written). Scratch as df_moe_fwd. Failures land in *err.
 */
void df_moe_bwd(const df_backend *be, const df_model_config *c, const df_layer_view *w, const df_layer16 *w16,
                const df_moe_routes *rt, const df_layer_view *g, int64_t n, const float *x, const float *dy, float *din,
                float beta, float *gate, float *up, float *act, df_moe_ws *ws, int *err);

#endif /* DF_MODEL_MOE_H */
