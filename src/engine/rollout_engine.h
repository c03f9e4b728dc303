/*
 * rollout_engine.h (internal) — the rollout engine's state shared by its files:
 * rollout.c (the engine's lifetime, weight sync, validation), rollout_gen.c (the scheduler
 * of df_rollout_generate and df_rollout_stream: admission, prefill, decode, result),
 * rollout_stream.c (a stream's feed, weight changes, KV recomputation and delivery),
 * rollout_sample.c (drawing tokens, retiring finished sequences), rollout_turns.c
 * (multi-turn: turn ends, continuation prefill into a sequence's own KV cache) and
 * rollout_routes.c (record_routes: each token's experts, R3).
 */
#ifndef DF_ENGINE_ROLLOUT_ENGINE_H
#define DF_ENGINE_ROLLOUT_ENGINE_H

#include "distflow/rng.h"
#include "distflow/rollout.h"
#include "engine/rollout_internal.h"
#include "model/ops.h"
#include "model/weights_dev.h"

/* Most columns per tile (and per statistics group) of fused sampling: a draw
 * recomputes one group of one row. */
#define DF_SAMPLE_COLS 512

/* Stream tag separating rollout draws from other users of the same seed. */
#define ROLLOUT_RNG_TAG 0x726f6c6cULL

typedef struct {
    bool active;
    bool reserved;      /* taken by a prompt still being prefilled in chunks */
    int64_t seq;        /* i * n_samples + j (df_rollout_generate's result row) */
    int64_t prompt_id;  /* the prompt's id (its request index in df_rollout_generate) */
    int64_t sample;     /* j */
    int64_t prompt_len;
    int64_t n_gen;
    int64_t limit;      /* min(max_new_tokens, max_seq_len - prompt_len) */
    df_rng rng;
    /* multi-turn (rollout_turns.c) */
    bool cont;          /* tokens [cont_at, n_gen) wait for their prefill: no decode until then */
    int64_t cont_at;
    int64_t turn_start; /* index of the current turn's first model token */
    int64_t turns;      /* assistant turns ended so far */
} slot_state;

struct df_rollout_engine {
    df_model_config cfg;
    df_rollout_options opt;   /* max_num_batched_tokens resolved */
    int64_t max_num_seqs, max_seq_len, max_batched_tokens, logit_rows;
    df_backend be;            /* where the decoder runs: the CPU, bf16 matmuls through mm */
    df_mm_ctx *mm;            /* bf16: the matmul context gemm_w16 uses */
    const df_weights16 *w16;  /* bf16: the copy of the matmul weights the forwards read: own16 or
                                 a shared one (df_rollout_engine_share_weights16); NULL until then */
    df_weights16 *own16;      /* bf16: the engine's own copy, made at the first weight sync
                                 without a shared one */
    df_packed16 *p16;         /* bf16 without opt.plain_weights: w16's layers packed at each
                                 weight version (made at the first generate) */
    uint16_t *h16;            /* bf16: final hidden rows rounded for the LM head [rows16, H] */
    df_backend_kv kv;
    df_infer_scratch s;
    df_weights_dev wdev;      /* a device backend: the model's weights there (uploaded at each
                                 new version); unused on the host */
    const df_weights_dev *wsrc; /* a device backend: weights it reads when current (a colocated
                                   actor's master copy), or NULL */
    float *d_logits;          /* a device backend: [logit_rows, vocab] there, then downloaded */
    /* a device backend with a sampler (ops->sample): tokens drawn there; NULL otherwise */
    float *d_sscratch;        /* sample_scratch_floats(max_num_seqs) */
    float *d_h;               /* [max_num_seqs, H] the sampled rows gathered */
    int64_t *d_rows;          /* [max_num_seqs] */
    int32_t *d_tok;           /* [max_num_seqs] */
    float *d_logp;            /* [max_num_seqs] */
    double *h_u;              /* [max_num_seqs] host: one uniform per sampled slot */
    int32_t *h_tok;           /* [max_num_seqs] host */
    float *h_logp;            /* [max_num_seqs] host */
    float *logits;            /* [logit_rows, vocab] */
    slot_state *slots;        /* [max_num_seqs] */
    int32_t *out_tok;         /* [max_num_seqs, max_seq_len] tokens generated so far */
    float *out_logp;          /* [max_num_seqs, max_seq_len] */
    int32_t *b_tok, *b_slot, *b_pos; /* [rows_cap] rows of the next forward */
    int64_t *b_out;           /* [rows_cap] */
    /* record_routes (rollout_routes.c); NULL / 0 otherwise */
    int64_t route_w;          /* df_model_route_width: entries of one token's route */
    int64_t route_elem;       /* bytes of a stored entry: 2 (int16), 4 past 32767 experts */
    void *routes;             /* [max_num_seqs, max_seq_len, route_w] each slot's routes by
                                 position: what the last forward writing that position's K / V
                                 routed (an anonymous mapping, pages given back as the KV cache's) */
    int32_t *b_routes;        /* [rows_cap, route_w] the routes of the rows of one forward */
    int64_t bytes;            /* everything allocated (df_rollout_engine_memory) */
    df_rollout_stats stats;
};

/* A prompt group admitted but not yet wholly prefilled (longer than the token budget). */
typedef struct {
    bool on;
    int64_t prompt, j0, cnt, done; /* done: prompt tokens prefilled so far */
    int32_t *slots;                /* [max_num_seqs] its cnt slots */
} pending;

/* Everything one df_rollout_generate or df_rollout_stream call needs besides the engine. */
typedef struct {
    df_rollout_engine *e;
    const df_model *m;
    /* The prompts to admit: df_rollout_generate's request, or a stream's queue (`feed`, whose
     * arrays are the f_* below). req->prompt_keys NULL: key i; ids NULL: id i. */
    const df_rollout_request *req;
    const int64_t *ids;
    const df_sampling_params *sp;
    df_infer_weights w;       /* what the forwards read (m's, and the bf16 copy) */
    uint8_t *is_stop;         /* [vocab] */
    char *work;               /* [n_threads, work_bytes] sampler scratch (filtered sampling) */
    int64_t work_bytes;
    int n_threads;
    /* Sampling straight from hidden states (no top-k / top-p): per-group softmax
     * statistics of the rows of one forward, and per-thread draw buffers. */
    bool fused;
    df_vocab_tiling tiling;
    int64_t n_groups;
    df_vstat *vstat;          /* [max_num_seqs, n_groups] */
    float *draw_buf;          /* [n_threads, 2 * tiling.group] */
    /* finished responses, appended in completion order */
    int32_t *a_tok;
    float *a_logp;
    int64_t a_len, a_cap;
    int64_t *seq_start, *seq_len; /* [n_seqs] into the arena */
    int8_t *finish;               /* [n_seqs] */
    int64_t n_seqs, done, tokens;
    int64_t next_prompt, next_j;  /* admission cursor */
    pending pend;                 /* a prompt in chunked prefill */
    /* multi-turn (rollout_turns.c); all NULL / 0 without a handler */
    const df_turn_handler *turns;
    int8_t *out_mask;             /* [max_num_seqs, max_seq_len] response_mask per slot */
    int8_t *a_mask;               /* [a_mask_cap] the arena's response_mask */
    int64_t a_mask_cap;
    int32_t *n_turns;             /* [n_seqs] assistant turns of each finished sequence */
    int64_t n_cont;               /* slots with a continuation waiting for its prefill */
    int32_t *cont_slots;          /* [max_num_seqs] continuations the planned batch completes */
    int64_t n_cont_out;           /* their count: output rows [0, n_cont_out) of the batch */
    int64_t carried;              /* rows of the planned batch that carry a turn's stop token */
    /* stop strings (rollout_stop.c); NULL / 0 without them */
    char *stop_tail;              /* [max_num_seqs, stop_keep + 1] each slot's last text bytes */
    int64_t *stop_len;            /* [max_num_seqs] bytes held */
    int64_t stop_keep;            /* the longest stop string's length - 1 */
    char *stop_buf;               /* a tail and one token's bytes */
    int64_t stop_buf_cap;
    /* record_routes (rollout_routes.c); NULL / 0 otherwise */
    int32_t *a_route;             /* finished sequences' routes, appended as they retire */
    int64_t a_route_len, a_route_cap; /* in tokens (rows of route_w) */
    int64_t *route_start;         /* [n_seqs] each sequence's first row in a_route */
    int32_t *route_buf;           /* a stream: [max_seq_len, route_w] the delivered sequence's */
    df_rollout_progress_fn progress;
    void *user;
    /* stream (rollout_stream.c); NULL / 0 for df_rollout_generate */
    const df_rollout_stream_hooks *hooks;
    bool finishing;               /* admit nothing more fed (df_rollout_generate: from the start) */
    bool aborted;
    int64_t version;              /* tags the tokens sampled now */
    int64_t m_version;            /* m->version the forwards read (changed only by a swap) */
    int32_t *out_ver;             /* [max_num_seqs, max_seq_len] version of each slot's tokens */
    int32_t *in_tok;              /* [max_num_seqs, max_seq_len] each slot's prompt: the queue
                                     drops admitted prompts, a recomputation reads them */
    bool recompute;               /* K / V in flight wait for the new weights (recompute_kv) */
    int64_t rc_slot, rc_at;       /* recomputation cursor: next slot, next position in it */
    df_rollout_request feed;      /* the queue: prompts [next_prompt, n_prompts) wait */
    int64_t *f_off, *f_id;        /* [f_cap + 1], [f_cap] */
    uint64_t *f_key, *f_seed;     /* [f_cap] */
    int32_t *f_tok;               /* [f_tok_cap] */
    int64_t f_cap, f_tok_cap;
} gen_ctx;

/* One admission in a prefill batch: prompt i, samples [j0, j0 + cnt) into slots. */
typedef struct {
    int64_t prompt, j0, cnt;
    int32_t slots_at;         /* index into the admission slot list */
} admission;

static inline int64_t df_rollout_rows_cap(int64_t max_num_seqs, int64_t max_batched)
{
    return max_num_seqs > max_batched ? max_num_seqs : max_batched;
}

/* Rows of the bf16 LM head's operand for R hidden rows: whole tiles (df_vocab16_rows: clamped
 * tilings have at most DF_LMHEAD_ROWS rows). */
static inline int64_t df_rollout_h16_rows(int64_t R)
{
    return (R + DF_LMHEAD_ROWS - 1) / DF_LMHEAD_ROWS * DF_LMHEAD_ROWS;
}

/* rollout.c: m against the engine's config; the weights a forward reads. */
int df_rollout_check_model(const df_rollout_engine *e, const df_model *m);
/* free_cache_engine: the activation scratch's pages back to the OS (dead between calls; as
 * large as a quarter of the weights at 8192 rows per forward). */
void df_rollout_drop_scratch(df_rollout_engine *e);
/* rollout_gen.c: the vocabulary tiling of fused sampling (df_vocab_stats16 / draw16). */
df_vocab_tiling df_rollout_head_tiling(const df_model_config *cfg);
int df_rollout_infer_weights(df_rollout_engine *e, const df_model *m, df_infer_weights *w);

/* rollout_sample.c: draw the next token of the listed slots (rows[k]: slot list[k]'s row of
 * e->logits, or of the final hidden states when fused over n_rows rows), then retire or end
 * the turn of those that stopped. */
int df_rollout_sample_slots(gen_ctx *g, const int32_t *list, const int64_t *rows, int64_t n);
int df_rollout_sample_fused(gen_ctx *g, const int32_t *list, const int64_t *rows, int64_t n,
                            int64_t n_rows);
int df_rollout_logits(df_rollout_engine *e, const df_infer_weights *w, int64_t r0, int64_t n);
/* Draw the next token of the listed slots, rows[k] being slot list[k]'s row among the hidden rows
 * [r0, r0 + nr) of the last forward (rows relative to r0); then retire or end the turn of those
 * that stopped. On a device with a sampler the draw happens there; else the chunk's logits
 * (df_rollout_logits) are sampled here (df_rollout_sample_slots). */
int df_rollout_sample_rows(gen_ctx *g, int64_t r0, int64_t nr, const int32_t *list,
                           const int64_t *rows, int64_t n);

/* rollout_gen.c: move a finished slot's response into the result arena and free the slot. */
int df_rollout_retire(gen_ctx *g, int64_t si, int8_t reason);

/* rollout_gen.c: prompts [0, n) of off / tok against the engine and the model: DF_EINVAL
 * names prompt ids[i] (i when ids is NULL) after `what`: a length outside [1, max_seq_len),
 * a token outside the vocabulary, or a sequence whose last position, prompt + min(max_new,
 * max_seq_len - prompt) (its slot's limit), would be past max_pos (the model's
 * max_position_embeddings): one comparison per prompt, the guard behind the config checks. */
int df_rollout_check_prompts(const df_rollout_engine *e, const char *what, int64_t n,
                             const int64_t *off, const int32_t *tok, const int64_t *ids,
                             int64_t max_new, int64_t max_pos);
/* rollout_gen.c: the scheduler over g (fed, or polled when g->hooks), and the end of a call
 * (the cache's pages dropped under free_cache_engine, the stats). */
int df_rollout_run(gen_ctx *g);
double df_rollout_begin_call(df_rollout_engine *e); /* stats zeroed, slots free; the time now */
int df_rollout_finish_call(gen_ctx *g, int rc, double t0);
/* rollout_gen.c: per-call state (g->req's n_prompts * n_samples result rows) and its release. */
int df_rollout_ctx_init(gen_ctx *g);
void df_rollout_ctx_release(gen_ctx *g);

/* rollout_stream.c: poll the hook (in flight: active slots) and apply its answer: a weight
 * change, a feed (checked, copied into the queue), finish / abort. */
int df_rollout_stream_poll(gen_ctx *g, int64_t active);
/* rollout_stream.c: hand slot si's finished response to on_seq. */
int df_rollout_stream_deliver(gen_ctx *g, int64_t si, int8_t reason);
/* rollout_stream.c: the next forward of a recomputation (g->recompute): at most
 * max_num_batched_tokens rows of the K / V in flight, rewritten with the current weights;
 * clears g->recompute once all are. */
int df_rollout_recompute_step(gen_ctx *g);

/* rollout_stop.c: stop strings (g->sp->stop). */
int df_rollout_stop_init(gen_ctx *g);
void df_rollout_stop_release(gen_ctx *g);
/* Slot si's text starts anew (a new sequence, or the turn after an appended reply). */
void df_rollout_stop_reset(gen_ctx *g, int64_t si);
/* Add token tok's text to slot si's: whether a stop string is now complete. */
bool df_rollout_stop_hit(gen_ctx *g, int64_t si, int32_t tok);

/* rollout_routes.c: record_routes (R3). Each forward's rows' routes (df_infer_batch.routes_out
 * = e->b_routes) are stored at their slot and position, so a position holds what the last
 * forward writing its K / V routed; a finished sequence's prompt and response rows are read
 * back from its slot, the last token's row -1 (never fed back). All no-ops without
 * record_routes. */
/* Bytes of the slots' routes and one forward's (0 without record_routes). */
int64_t df_rollout_routes_bytes(const df_model_config *cfg, const df_rollout_options *o,
                                int64_t rows_cap);
/* Allocate them (e->opt, e->max_num_seqs, e->max_seq_len set). Errors: DF_ENOMEM. */
int df_rollout_routes_init(df_rollout_engine *e, int64_t rows_cap);
void df_rollout_routes_free(df_rollout_engine *e);
/* free_cache_engine: their pages back to the OS (dead between calls: a call rewrites every
 * position it reads). */
void df_rollout_routes_drop(df_rollout_engine *e, int64_t rows_cap);
/* e->b_routes, or NULL: the routes_out of a forward. */
int32_t *df_rollout_routes_out(df_rollout_engine *e);
/* After a forward of rows [0, n) of e->b_slot / e->b_pos: their routes into their slots. */
void df_rollout_routes_store(df_rollout_engine *e, int64_t n);
/* The routes of positions [0, n) of slot `from` into slot `to` (kv_copy's). */
void df_rollout_routes_copy(df_rollout_engine *e, int32_t from, int32_t to, int64_t n);
/* Per-call state: a stream's delivery buffer, or the result's arena index. Errors: DF_ENOMEM. */
int df_rollout_routes_ctx_init(gen_ctx *g);
void df_rollout_routes_ctx_release(gen_ctx *g);
/* Slot si's sequence (prompt_len + n_gen tokens) into int32 rows at out, the last row -1. */
void df_rollout_routes_read(const df_rollout_engine *e, int64_t si, int32_t *out);
/* Slot si retires: its routes appended to g's arena. Errors: DF_ENOMEM. */
int df_rollout_routes_retire(gen_ctx *g, int64_t si);
/* The result's route_offsets and routes (NULL without record_routes). Errors: DF_ENOMEM. */
int df_rollout_routes_pack(const gen_ctx *g, df_rollout_result *res);

/* rollout_turns.c: multi-turn. */
/* Per-call state for g->turns (NULL: nothing). Errors: DF_EINVAL (no on_turn_end), DF_ENOMEM. */
int df_rollout_turns_init(gen_ctx *g);
void df_rollout_turns_release(gen_ctx *g);
/* Slot si's turn ended at a stop token: ask the handler, then retire the slot or append the
 * reply's tokens for prefill. */
int df_rollout_turn_end(gen_ctx *g, int32_t si);
/* Rows from row 0 for the waiting continuations, at most `budget`: fills e->b_* and b_out,
 * g->cont_slots / n_cont_out / carried; returns the rows. */
int64_t df_rollout_plan_turns(gen_ctx *g, int64_t budget);
/* The arena's mask and turn count of slot si, retired now into [g->a_len, + n_gen). */
int df_rollout_turns_retire(gen_ctx *g, int64_t si);
/* Slot si ends: its last model tokens marked in g->out_mask; its assistant turns (a turn cut
 * by the length limit included). */
int32_t df_rollout_turns_close(gen_ctx *g, int64_t si);
/* The result's response_mask and assistant_turns (all 1 without a handler). */
int df_rollout_turns_pack(const gen_ctx *g, df_rollout_result *res);

#endif /* DF_ENGINE_ROLLOUT_ENGINE_H */
