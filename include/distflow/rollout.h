/*
 * distflow/rollout.h — response generation for RL (verl's rollout worker; the
 * role vLLM plays there) with distflow's own model (distflow/model.h).
 *
 * The engine keeps a KV cache for `max_num_seqs` sequences ("slots") of at most
 * `max_seq_len` tokens (prompt + response) and decodes every active sequence
 * together, one token per sequence per step. Scheduling (docs/conventions.md §4):
 *   - each prompt is prefilled once and its KV state copied into the slots of
 *     its n samples (rollout.n);
 *   - continuous batching: at most max_num_seqs sequences are active; between
 *     decode steps, as soon as enough slots are free the next prompt group is
 *     admitted (prefilled). A group is admitted whole when n <= max_num_seqs;
 *     when n > max_num_seqs it is admitted in parts of whatever is free (its
 *     prompt is prefilled once per part).
 *
 * Determinism: sample j of prompt i draws from its own generator, keyed by
 * (seed, prompt key, j) and advanced once per generated token (not at all when
 * greedy), so the outputs do not depend on max_num_seqs, admission order or
 * the number of OpenMP threads (up to float rounding of the matmuls, which can
 * differ in the last bits with the batch shape).
 *
 * Memory, allocated once by df_rollout_engine_create (float32 = 4 bytes;
 * H hidden, I intermediate, nh / nkv heads, hd head_dim, kv_dim = nkv * hd):
 *   KV cache    = 2 (K, V) * num_hidden_layers * max_num_seqs * max_seq_len * kv_dim * e
 *                 bytes (e = 4, or 2 for a bf16 cache), laid out per layer as
 *                 [slot][max_seq_len][kv_dim] (llama2.c); preallocated, never grown
 *   activations = R * ((2 H + 2 nh hd + 2 kv_dim + 3 I + r) * 4 + 20) bytes for
 *                 R = max_num_batched_tokens rows (max(max_seq_len, 2048) unless given,
 *                 vLLM's default), r = 1 (r = nh with qwen3's q/k norms: their per-head
 *                 statistics), plus R * 4 with an o_proj bias, plus max_num_seqs *
 *                 ((H + nh hd) * 4 + 8) for the last layer's output rows
 *   attention   = n_threads * nh * max_seq_len * 4 bytes of scores, plus the RoPE
 *                 table max_seq_len * hd * 4
 *   logits      = min(R, max(1, 2^22 / vocab)) * vocab * 4 bytes (rows are chunked)
 *   outputs     = max_num_seqs * max_seq_len * 8 bytes (tokens and log-probs per slot)
 *   bf16 only   = the weight copy (2 bytes per q/k/v/o, gate/up/down and LM-head weight;
 *                 made at the first weight sync, none while a copy is shared:
 *                 df_rollout_engine_share_weights16) and 2 * R * max(H, I, nh hd) * 2 bytes
 *                 of matmul operand scratch
 *   routes      = record_routes only: max_num_seqs * max_seq_len * W * 2 bytes of each slot's
 *                 routes (W = df_model_route_width; 4 bytes an entry past 32767 experts) and
 *                 R * W * 4 of one forward's; a reservation whose pages are taken as written
 *                 and given back with free_cache_engine, as the KV cache's
 * df_rollout_engine_bytes() returns the total. The KV cache is one reservation whose pages
 * are taken as the rollout writes them, and given back after every call with
 * free_cache_engine. Example: hidden 256, 4 layers,
 * kv_dim 128, 256 seqs x 192 tokens: KV 201 MB, total 237 MB.
 *
 * Precision (df_rollout_options.dtype, actor_rollout_ref.rollout.dtype): float32, or
 * bf16 matmuls over a bf16 copy of the weights (the engine's own, converted once per weight
 * sync by df_rollout_engine_load_weights, never per matmul; or a colocated trainer's, shared)
 * with a bf16 KV cache. Whichever copy is read must be of the model's current weight version
 * (df_model.version, df_weights16_is_current), else df_rollout_generate refuses.
 * Every forward runs the model's one decoder layer (src/model/decoder_layer.c, shared
 * with training) through the compute-backend seam (distflow/backend.h); only the
 * attention step differs (K / V written to the cache, queries attending over it).
 *
 * Sampling: without top-k / top-p (or when greedy) a token is drawn straight
 * from the final hidden states: per-group softmax statistics over vocabulary
 * tiles computed in cache, then an inverse-CDF walk in id order that
 * recomputes one group of 512 logits of the row (src/model/ops_vocab.c); the
 * logits buffer is not used. With top-k / top-p each row of logits is
 * materialised and filtered. Each df_rollout_generate call also allocates, for
 * the former, max_num_seqs * ceil(vocab / 512) * 24 bytes of statistics; for
 * the latter, per thread, 24 bytes per vocabulary entry plus a histogram of at
 * most 192 KiB. With a turn handler (df_rollout_generate_turns) a call also allocates
 * max_num_seqs * (max_seq_len + 8) bytes of masks and slot lists and 1 byte per response
 * token; with stop strings, max_num_seqs * (8 + the longest string) bytes of text tails;
 * with record_routes, W * 4 bytes per prompt and response token of the finished sequences
 * (their routes, gathered as they finish, then the result's).
 *
 * Threading: OpenMP inside each call (matmuls through oneDNN). One engine runs
 * one df_rollout_generate or df_rollout_stream at a time; use one engine per thread otherwise.
 */
#ifndef DISTFLOW_ROLLOUT_H
#define DISTFLOW_ROLLOUT_H

#include "distflow/backend.h"
#include "distflow/common.h"
#include "distflow/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Why a response ended. */
enum { DF_FINISH_STOP = 0, DF_FINISH_LENGTH = 1 };

/**
 * Sampling parameters (names and meaning as in vLLM's SamplingParams / HF
 * generate). Filtering order as in HF's logits warpers: temperature, then
 * top-k, then top-p on the distribution renormalised after top-k.
 */
typedef struct df_sampling_params {
    float temperature;      /**< > 0; logits are divided by it. 0 means greedy (vLLM convention) */
    int top_k;              /**< keep the tokens whose scaled logit >= the k-th largest
                                 (ties at the boundary are kept, as HF TopKLogitsWarper); <= 0: off */
    float top_p;            /**< (0, 1]: keep the smallest set of most probable tokens (ties ->
                                 lower id first) whose cumulative probability >= top_p, at least
                                 one token; 1: off */
    bool greedy;            /**< argmax of the logits (ties -> lowest id); ignores the above */
    int64_t max_new_tokens; /**< >= 1; also capped by max_seq_len - prompt length */
    const int32_t *stop_ids;/**< [n_stop] extra stop tokens (each in [0, vocab)) */
    int n_stop;
    bool ignore_eos;        /**< false: the model's eos_token_ids stop too (vLLM ignore_eos) */
    /* Stop strings (vLLM's SamplingParams.stop): a response (with a turn handler, a turn) ends
     * after the token whose text completes one of them; that token is kept (the output is token
     * ids; vLLM's include_stop_str_in_output only changes its text). The text is the tokens'
     * bytes (df_tokenizer_token_bytes) with special tokens adding none, as a decode with
     * skip_special_tokens; matched as bytes, so a string may span tokens and partial UTF-8. */
    const char *const *stop;             /**< [n_stop_str] non-empty strings of at most
                                              DF_STOP_STR_MAX bytes */
    int n_stop_str;
    const struct df_tokenizer *tokenizer; /**< borrowed: the detokenizer of `stop` (needed when
                                               n_stop_str > 0) */
} df_sampling_params;

/** Longest stop string, in bytes. */
#define DF_STOP_STR_MAX 256

/** temperature 1, top_k -1, top_p 1, greedy false, max_new_tokens 512 (verl's default
 *  response length), no extra stop ids, ignore_eos false, no stop strings. */
DF_API void df_sampling_params_defaults(df_sampling_params *sp);

/** Check the parameters against a vocabulary of `vocab` tokens. DF_EINVAL names the field. */
DF_API int df_sampling_params_validate(const df_sampling_params *sp, int64_t vocab);

/*
 * Multi-turn rollouts (verl's agent loop, multi_turn.*): a caller-supplied turn handler.
 *
 * When a sequence's assistant turn ends at a stop token (or stop string), the engine calls
 * on_turn_end, which either ends the sequence (reply->done) or gives tokens to append: the tool
 * response or user message rendered through the chat template, the next assistant header
 * included. The engine appends them to the same response (response_mask 0, log-prob 0),
 * prefills them into that sequence's existing KV cache (the turn's stop token with them: its
 * K / V were not written yet) -- chunked by max_num_batched_tokens and batched with other
 * sequences' prefill -- and decodes on from the last one. The conversation is never prefilled
 * again.
 *
 * Limits (verl's tool_agent_loop):
 *   - max_assistant_turns > 0: a sequence ends (DF_FINISH_STOP) after that many assistant
 *     turns, without calling the handler for the last one;
 *   - the response budget min(max_new_tokens, max_seq_len - prompt length) counts model and
 *     appended tokens (verl's response_length). A reply that would leave no room for one more
 *     model token is not appended: the sequence ends at the turn's stop token with
 *     DF_FINISH_LENGTH. A model turn that runs into the budget ends it as in a single turn;
 *   - max_user_turns and tool-call limits are the handler's: it counts its own replies and
 *     answers done.
 *
 * Determinism: a sequence's generator advances once per model token only, and the handler
 * sees nothing of other sequences, so a deterministic handler gives results independent of
 * how the sequences' turns interleave (max_num_seqs, admission order). The engine calls the
 * handler from one thread, between forward passes, in an unspecified order of sequences.
 *
 * A stream takes a handler too (df_rollout_stream_hooks.turns), with the same semantics per
 * sequence; it tells the handler the prompt's fed id (df_turn_info.prompt) and the sample.
 */

/** What the handler is told when an assistant turn of one sequence ends (the arrays are the
 *  engine's, valid during the call). */
typedef struct df_turn_info {
    int64_t seq;                 /**< prompt * n_samples + sample: the result's row
                                      (df_rollout_generate_turns) */
    int64_t prompt;              /**< index into the request's prompts; in a stream, the id the
                                      prompt was fed with (df_rollout_poll.prompt_ids) */
    int64_t sample;              /**< j in [0, n_samples) */
    int64_t turn;                /**< assistant turns ended so far, this one included (>= 1) */
    const int32_t *turn_tokens;  /**< [n_turn] this turn's model tokens, the one that stopped it
                                      (a stop token, or the end of a stop string) last */
    int64_t n_turn;
    const int32_t *response;     /**< [n_response] the whole response so far (earlier turns and
                                      appended tokens, this turn last) */
    int64_t n_response;
    int64_t budget_left;         /**< response tokens still allowed (model + appended): a reply
                                      is appended when it has at most budget_left - 1 tokens */
} df_turn_info;

/** The handler's answer. The engine zeroes it before each call. */
typedef struct df_turn_reply {
    bool done;                   /**< end the sequence now (DF_FINISH_STOP) */
    const int32_t *tokens;       /**< [n_tokens] ids in [0, vocab) to append when !done, n_tokens
                                      >= 1. Borrowed: the engine copies them as on_turn_end
                                      returns, so the handler may reuse one buffer for every call */
    int64_t n_tokens;
} df_turn_reply;

/** A turn handler (df_rollout_generate_turns). on_turn_end returns 0, or a DF_E* status that
 *  ends df_rollout_generate with that status (its df_error message kept). */
typedef struct df_turn_handler {
    void *user;
    int (*on_turn_end)(void *user, const df_turn_info *turn, df_turn_reply *reply);
    int64_t max_assistant_turns; /**< > 0: end a sequence after that many turns; <= 0: no limit */
} df_turn_handler;

/** Prompts to complete, packed without padding. */
typedef struct df_rollout_request {
    int64_t n_prompts;
    const int64_t *prompt_offsets; /**< [n_prompts + 1], prompt i = tokens[offsets[i], offsets[i+1]) */
    const int32_t *prompt_tokens;  /**< [prompt_offsets[n_prompts]] token ids in [0, vocab) */
    int64_t n_samples;             /**< responses per prompt (rollout.n), >= 1 */
    uint64_t seed;                 /**< base seed; callers fold in rank / step (df_rng_key) */
    const uint64_t *prompt_keys;   /**< optional [n_prompts]: the RNG key of each prompt (e.g. its
                                        global dataset index, so results do not depend on how
                                        prompts are split across ranks); NULL: key of prompt i is i */
    const uint64_t *prompt_seeds;  /**< optional [n_prompts]: the base seed of each prompt, in place
                                        of `seed` (a stream's prompts of different steps); NULL: seed */
} df_rollout_request;

/** Generated responses (owned by the caller; free with df_rollout_result_free). */
typedef struct df_rollout_result {
    int64_t n_seqs;        /**< n_prompts * n_samples, prompt-major: sequence i * n + j */
    int64_t *offsets;      /**< [n_seqs + 1]: response s = tokens[offsets[s], offsets[s+1]) */
    int32_t *tokens;       /**< [offsets[n_seqs]] response token ids (a stop token is included) */
    float *log_probs;      /**< [offsets[n_seqs]] log_softmax(logits / temperature)[token] before
                                top-k / top-p (temperature 1 when greedy): the old_log_probs the
                                actor recomputes at that temperature */
    int8_t *finish_reason; /**< [n_seqs] DF_FINISH_STOP or DF_FINISH_LENGTH */
    int8_t *response_mask; /**< [offsets[n_seqs]] 1 on a model token, 0 on a token a turn handler
                                appended (whose log_probs entry is 0); all 1 without a handler */
    int32_t *assistant_turns; /**< [n_seqs] model turns of each response (1 without a handler) */
    /** record_routes (R3; NULL otherwise): [n_seqs + 1] offsets in TOKENS into `routes`.
     *  Sequence s's routes cover its prompt, then its response: route_offsets[s + 1] -
     *  route_offsets[s] = P_s + (offsets[s + 1] - offsets[s]), P_s its prompt's length. */
    int64_t *route_offsets;
    /** record_routes (NULL otherwise): [route_offsets[n_seqs], W] expert indices row-major,
     *  W = df_model_route_width(cfg): token t of sequence s (t < P_s: prompt token t, else
     *  response token t - P_s) is row route_offsets[s] + t, holding the sparse layers' k
     *  experts each in layer order, as df_seq_batch.routes_in expects of the packed prompt ++
     *  response. A token's route is what the forward that wrote its K / V into the cache
     *  computed (prefill, chunk, decode step, a turn's continuation; the samples of one prompt
     *  share its prefill's). -1 fills a layer's k entries where that forward did not route
     *  the token there (training then routes it live): every layer of the last response token
     *  (sampled, never fed back), and the last layer, when sparse, of every token whose output
     *  row sampled nothing (a prefill runs that layer only for the rows that sample): the
     *  prompt's tokens but its last, a turn's stop token and the reply's tokens but its last,
     *  and in a stream every token a recompute_kv rewrote. */
    int32_t *routes;
} df_rollout_result;

/** Counters of the last df_rollout_generate call (or of a whole df_rollout_stream). */
typedef struct df_rollout_stats {
    int64_t prefill_tokens;   /**< prompt tokens run through the model (a prompt once per admission)
                                   plus appended tokens (each once; the turn's stop token that
                                   is prefilled with them is a model token, not counted) */
    int64_t prefill_batches;
    int64_t decode_steps;
    int64_t generated_tokens;
    double mean_active;       /**< mean sequences per decode step (occupancy * max_num_seqs) */
    double seconds;           /**< wall time of the call */
    int64_t appended_tokens;  /**< tokens turn handlers appended (df_rollout_generate_turns) */
    int64_t recomputed_tokens; /**< tokens whose K / V a stream's weight change with recompute_kv
                                    rewrote (df_rollout_poll; not in prefill_tokens): at each
                                    such change, every in-flight sequence's prompt and response
                                    but its last token (with a reply waiting for its prefill:
                                    up to the turn's stop token, excluded), and the done chunks
                                    of a prompt in chunked prefill */
} df_rollout_stats;

typedef struct df_rollout_engine df_rollout_engine;

/** What the rollout computes in (actor_rollout_ref.rollout.dtype). */
typedef enum df_rollout_dtype {
    DF_ROLLOUT_F32 = 0,  /**< float32 weights, matmuls and KV cache */
    DF_ROLLOUT_BF16 = 1  /**< bf16 matmuls (the LM head's too) with float32 accumulation over
                              a bf16 copy of the weights (the engine's own, refreshed by
                              df_rollout_engine_load_weights once per weight sync, or a shared
                              one: df_rollout_engine_share_weights16), and a bf16 KV cache;
                              embedding, norms, RoPE, attention scores / softmax and sampling
                              stay float32 (vLLM's dtype=bfloat16 rounds those too) */
} df_rollout_dtype;

/** Sizes and precision of an engine (vLLM's EngineArgs of the same names). */
typedef struct df_rollout_options {
    int64_t max_num_seqs;           /**< concurrent sequences (KV slots), >= 1 */
    int64_t max_seq_len;            /**< prompt + response tokens per slot, >= 2 */
    int64_t max_num_batched_tokens; /**< rows of one forward call (>= max_num_seqs): prefill
                                         batches are filled up to it and a longer prompt is
                                         prefilled in chunks of it (vLLM's chunked prefill);
                                         0: max(max_seq_len, 2048) */
    df_rollout_dtype dtype;
    const df_backend *backend;      /**< where the decoder runs; NULL: the CPU. It needs the
                                         kv_* operators and host memory; bf16 runs on the CPU
                                         backend only (its bf16 matmul context) */
    bool free_cache_engine;         /**< give the pages of the KV cache and of the activation
                                         scratch (hidden rows, MLP rows, logits, bf16 operands:
                                         ~0.7 GiB at the 0.5B shape and 8192 rows per forward;
                                         and record_routes' routes) back to the OS at the end
                                         of every df_rollout_generate (and df_rollout_stream)
                                         (madvise MADV_DONTNEED: both stay reserved, the next call
                                         faults their pages in again), so what runs between
                                         rollouts (training) does not carry them; false: they
                                         stay resident (verl's rollout.free_cache_engine) */
    bool plain_weights;             /**< bf16: the forwards read the row-major bf16 copy. false
                                         (default): each weight version is first packed into
                                         oneDNN's blocked layout (the layers' projections, ~0.7
                                         GiB at the 0.5B shape; given back with the other pages
                                         under free_cache_engine), which the decode steps' short
                                         matmuls read 20-30% faster (docs/performance.md) */
    bool record_routes;             /**< R3, Rollout Routing Replay (arXiv 2507.18071): record,
                                         for every token of every sequence, the experts each
                                         sparse layer routed it to (df_rollout_result.routes,
                                         df_rollout_seq.routes), so training can replay them
                                         (df_seq_batch.routes_in; docs/rollout.md "Recording
                                         routes (R3)"). Only for a model with experts:
                                         df_rollout_engine_create_ex refuses it (DF_EINVAL)
                                         when df_model_route_width(cfg) == 0. Costs
                                         max_num_seqs * max_seq_len * df_model_route_width * 2
                                         bytes of per-slot routes (4 with more than 32767
                                         experts) and 4 bytes per route entry of the rows of
                                         one forward */
} df_rollout_options;

/** Progress callback: sequences finished so far, total sequences, tokens generated so far. */
typedef void (*df_rollout_progress_fn)(void *user, int64_t done_seqs, int64_t total_seqs,
                                       int64_t tokens);

/** Bytes df_rollout_engine_create allocates for these sizes (formula in the file comment;
 *  float32, max_num_batched_tokens max(max_seq_len, 2048)). */
DF_API int64_t df_rollout_engine_bytes(const df_model_config *cfg, int64_t max_num_seqs,
                                       int64_t max_seq_len);

/**
 * Allocate a float32 engine (KV cache and scratch, see the memory formula above) for
 * models with configuration `cfg`: df_rollout_engine_create_ex with max_num_batched_tokens
 * max(max_seq_len, 2048). max_num_seqs >= 1, max_seq_len >= 2.
 * Errors: DF_EINVAL (bad sizes or config), DF_ENOMEM.
 */
DF_API int df_rollout_engine_create(const df_model_config *cfg, int64_t max_num_seqs,
                                    int64_t max_seq_len, df_rollout_engine **out);
DF_API void df_rollout_engine_free(df_rollout_engine *e);

/** df_rollout_engine_bytes for options o (the bf16 weight copy and matmul scratch included). */
DF_API int64_t df_rollout_engine_bytes_ex(const df_model_config *cfg,
                                          const df_rollout_options *o);
/**
 * An engine with options o, on o->backend (the CPU when NULL; a backend without the
 * seam's kv_* operators or host memory is refused). Errors: DF_EINVAL (bad sizes,
 * max_num_batched_tokens below max_num_seqs, record_routes for a model without experts),
 * DF_EUNSUPPORTED (bf16 on a CPU without native bf16 matmuls: df_model_bf16_available),
 * DF_ENOMEM.
 */
DF_API int df_rollout_engine_create_ex(const df_model_config *cfg, const df_rollout_options *o,
                                       df_rollout_engine **out);
/**
 * The weight sync: make the engine's copy of m's weights for its dtype (bf16: one conversion
 * of every matmul weight into the engine's own copy, allocated at the first call; float32:
 * nothing to copy, the engine reads m's own; a shared bf16 copy: nothing, its owner refreshes
 * it). Call it after every change of m's weights and before the next df_rollout_generate; a
 * bf16 engine refuses a model whose copy is not of its current version (df_model.version).
 * Errors: DF_EINVAL (m's shapes are not the engine's), DF_ENOMEM.
 */
DF_API int df_rollout_engine_load_weights(df_rollout_engine *e, const df_model *m);
/**
 * Read `w` (borrowed) instead of an own bf16 copy: the trainer colocated with the rollout
 * (the actor's bf16 weights, make with DF_W16_LM_HEAD: the same round-to-nearest-even bits
 * the engine's own copy would hold), so one copy serves both. The engine's own copy, if made,
 * is freed. `w` must stay alive, and be refreshed by its owner (df_weights16_refresh_model)
 * after every change of the model's weights, until the engine is freed or another call
 * replaces it; NULL stops sharing (the next df_rollout_engine_load_weights makes an own copy).
 * df_rollout_generate checks that the copy was converted from its model at the model's
 * current version. Errors: DF_EINVAL (a float32 engine, a copy without the LM head or of
 * other shapes).
 */
DF_API int df_rollout_engine_share_weights16(df_rollout_engine *e, const df_weights16 *w);
/** The options the engine was made with (max_num_batched_tokens resolved). */
DF_API void df_rollout_engine_options(const df_rollout_engine *e, df_rollout_options *o);
/** Bytes of its KV cache (K and V, preallocated once) and of everything it allocated (a bf16
 *  engine's own weight copy counted once made: not while one is shared). */
DF_API void df_rollout_engine_memory(const df_rollout_engine *e, int64_t *kv_bytes,
                                     int64_t *total_bytes);

/**
 * Generate req->n_samples responses for each prompt with the weights of `m`
 * (whose architecture must equal the engine's config). Fills *res (its arrays
 * are malloc'd; free with df_rollout_result_free). `progress` (may be NULL) is
 * called after every prefill batch and decode step.
 * Response s stops after a stop token (included) or after
 * min(max_new_tokens, max_seq_len - prompt length) tokens (DF_FINISH_LENGTH).
 * Errors: DF_EINVAL for an empty prompt, a prompt longer than max_seq_len - 1,
 * a prompt whose sequence could reach past the model's range (prompt length +
 * min(max_new_tokens, max_seq_len - prompt length) > m->cfg.max_position_embeddings,
 * whatever a turn handler appends within that limit; vLLM refuses the like),
 * a token id outside [0, vocab), n_samples < 1, bad sampling parameters or a
 * model whose shapes, RoPE (theta, rope_type and its parameters) or q/k norms
 * differ from the engine's; DF_ENOMEM. On error *res is
 * left empty (all NULL).
 */
DF_API int df_rollout_generate(df_rollout_engine *e, const df_model *m,
                               const df_rollout_request *req, const df_sampling_params *sp,
                               df_rollout_result *res, df_rollout_progress_fn progress,
                               void *user);

/**
 * df_rollout_generate with a turn handler (multi-turn, see df_turn_handler above; NULL: exactly
 * df_rollout_generate). A stop token ends an assistant turn and the handler decides whether
 * the sequence goes on; the result's response_mask marks the appended tokens.
 * Errors: as df_rollout_generate; DF_EINVAL for a handler without on_turn_end or a reply with
 * no tokens or a token outside [0, vocab); the handler's own status.
 */
DF_API int df_rollout_generate_turns(df_rollout_engine *e, const df_model *m,
                                     const df_rollout_request *req, const df_sampling_params *sp,
                                     const df_turn_handler *turns, df_rollout_result *res,
                                     df_rollout_progress_fn progress, void *user);

/*
 * Streaming generation (df_rollout_stream): the engine as a continuous executor on a rollout
 * rank (AReaL's asynchronous RL, docs/async.md). The same scheduler as df_rollout_generate
 * (which is a stream fed every prompt at once and finished at once, its results packed at the
 * end), but prompts are fed through a poll hook while others are in flight, every finished
 * sequence is handed to on_seq at once, and the weights may change between forward passes.
 *
 * The hook is polled before every forward pass (prefill batch, prefill chunk or decode step),
 * and repeatedly while nothing is in flight and nothing is queued (it may block or sleep then).
 * Fed prompts are copied by the engine; they wait in a queue until slots are free and are
 * admitted in feed order as df_rollout_generate admits a request's prompts.
 *
 * Weight changes (AReaL's interruptible generation): when a poll answers weights_changed, the
 * engine re-makes what it reads of m (df_rollout_engine_load_weights: bf16 converts m's weights
 * into its own copy and packs them again: one weight sync's cost; float32 reads m in place;
 * a shared bf16 copy must have been refreshed by its owner) and the next forward runs the new
 * weights. Every token sampled by a forward after the change carries new_version in
 * df_rollout_seq.versions; tokens sampled before keep their version and their log-prob. What
 * happens to the KV cache is the poll's choice:
 *  - kept (recompute_kv false; AReaL's choice): the K / V of the prompt and of every response
 *    token but the latest of each sequence stay as the old weights computed them (the latest
 *    one's are written by the next forward, with the new weights). Free.
 *  - recomputed (recompute_kv true): before its next decode step, every sequence in flight runs
 *    its prompt and its response tokens but the latest through the new weights, rewriting their
 *    K / V (forwards of max_num_batched_tokens rows, as prefill; each sequence recomputes its
 *    own prompt, samples of one prompt do not share it). A prompt in chunked prefill has its
 *    done chunks recomputed the same way and its remaining chunks run the new weights. The
 *    next token is then what a fresh prefill of the new weights gives (up to float rounding of
 *    the batch shape). Cost: a prefill of every token in flight at every such change
 *    (df_rollout_stats.recomputed_tokens); each of those forwards is polled before as any
 *    other, and a weight change among them starts the recomputation over.
 *
 * Memory: besides the engine, a stream allocates what a df_rollout_generate call does without
 * its result arena, plus max_num_seqs * max_seq_len * 4 bytes of versions, as many of the
 * prompts in flight (what a recomputation reads) and the queue of fed prompts not yet
 * admitted (grown to the largest queue, compacted at every feed): nothing grows with the
 * stream's length. With a turn handler, max_num_seqs * (max_seq_len + 8) bytes of masks and
 * slot lists more. With record_routes, max_seq_len * df_model_route_width * 4 bytes for the
 * routes of the sequence being delivered.
 */

/** What a stream's poll hook is told and answers (df_rollout_stream). */
typedef struct df_rollout_poll {
    /* in */
    int64_t free_slots;      /**< KV slots free now (max_num_seqs - active) */
    int64_t active;          /**< sequences in flight (admitted, not finished; a prompt in
                                  chunked prefill counts its reserved slots) */
    int64_t version;         /**< the policy version tokens are tagged with now */
    int64_t queued;          /**< prompts fed and not yet wholly admitted (waiting for slots) */
    /* out (zeroed by the engine before each call) */
    bool weights_changed;    /**< the hook changed m's weights in place (and called
                                  df_model_weights_changed): the engine re-makes its copy (as
                                  df_rollout_engine_load_weights) and tags tokens sampled from
                                  now on with new_version */
    int64_t new_version;     /**< in [0, INT32_MAX] */
    bool recompute_kv;       /**< with weights_changed: rewrite the K / V of every sequence in
                                  flight with the new weights before decoding on (a prefill of
                                  all their tokens); false: keep the cache (AReaL). Read only
                                  with weights_changed, as new_version */
    int64_t n_prompts;       /**< prompts fed now (0: none); each gets n_samples sequences */
    const int64_t *prompt_offsets; /**< [n_prompts + 1], offsets[0] == 0, borrowed for the call */
    const int32_t *prompt_tokens;  /**< [prompt_offsets[n_prompts]] ids in [0, vocab) */
    const uint64_t *prompt_keys;   /**< [n_prompts] RNG key of each (as df_rollout_request.prompt_keys);
                                        NULL: each prompt's id is its key */
    const uint64_t *prompt_seeds;  /**< [n_prompts] base seed of each (as df_rollout_request.prompt_seeds);
                                        NULL: the stream's seed */
    const int64_t *prompt_ids;     /**< [n_prompts] caller's id of each, given back in df_rollout_seq
                                        (needed; ids need not be unique) */
    bool finish;             /**< admit nothing more (sticky; a later feed is refused): return once
                                  the queued prompts and the sequences in flight ended. Prompts fed
                                  in the same answer are still taken */
    bool abort;              /**< drop the queue and the sequences in flight and return now
                                  (DF_OK; none delivered) */
} df_rollout_poll;

/** One finished sequence (arrays valid during the on_seq call only). */
typedef struct df_rollout_seq {
    int64_t prompt_id;       /**< the id its prompt was fed with */
    int64_t sample;          /**< j in [0, n_samples) */
    const int32_t *tokens;   /**< [n_tokens] response (stop token included) */
    const float *log_probs;  /**< [n_tokens] as df_rollout_result.log_probs, each under the
                                  weights of its version */
    const int32_t *versions; /**< [n_tokens] policy version that sampled each token */
    int64_t n_tokens;
    int8_t finish_reason;    /**< DF_FINISH_STOP or DF_FINISH_LENGTH */
    const int8_t *response_mask; /**< [n_tokens] with a turn handler: 1 on a model token, 0 on an
                                      appended one (as df_rollout_result.response_mask); NULL
                                      without one (every token the model's) */
    int32_t assistant_turns; /**< model turns of the response (1 without a turn handler) */
    int64_t prompt_len;      /**< tokens of its prompt */
    const int32_t *routes;   /**< record_routes (NULL otherwise): [prompt_len + n_tokens,
                                  df_model_route_width] the prompt's then the response's
                                  routes, as df_rollout_result.routes; with recompute_kv the
                                  last rewrite of a token's K / V gave its route */
} df_rollout_seq;

typedef struct df_rollout_stream_hooks {
    void *user;
    /** Before every forward pass, and repeatedly while nothing is in flight (the hook may block
     *  or sleep then). Non-zero status ends the stream with it (its df_error message kept). */
    int (*poll)(void *user, df_rollout_poll *p);
    /** A sequence finished (called from the generating thread between forward passes, in an
     *  unspecified order). Non-zero status ends the stream with it. */
    int (*on_seq)(void *user, const df_rollout_seq *s);
    /** Optional (NULL: single-turn): multi-turn, as df_rollout_generate_turns per sequence (a
     *  stop token ends an assistant turn; the handler appends a reply or ends the sequence).
     *  Borrowed for the stream's length. Appended tokens carry log-prob 0, response_mask 0 and
     *  the version of the turn's stop token (the weights current when the handler answered;
     *  their K / V are written by whichever weights are current at their prefill): they are
     *  not the policy's samples, so they add no version of their own to a response. */
    const df_turn_handler *turns;
} df_rollout_stream_hooks;

/**
 * Run the engine as a stream until a poll answers finish (and the queued prompts and the
 * sequences in flight end) or abort. Sampling, RNG keys (seed, prompt key, sample j), stop
 * tokens / strings and limits as df_rollout_generate: a sequence's tokens do not depend on
 * when its prompt was fed or what else is in flight (up to float rounding of the matmuls
 * with the batch shape). n_samples responses per fed prompt; version0 tags tokens until the
 * first weights_changed. Multi-turn with hooks->turns (df_rollout_stream_hooks), else
 * single-turn. Stats (df_rollout_engine_stats) count the whole stream; free_cache_engine drops
 * the cache's pages when it returns.
 * Errors: DF_EINVAL for NULL arguments or hooks, n_samples < 1, version0 or new_version
 * outside [0, INT32_MAX], bad sampling parameters or model (as df_rollout_generate), a feed
 * with NULL arrays or offsets[0] != 0, an empty prompt, one longer than max_seq_len - 1, one
 * that could reach past m->cfg.max_position_embeddings (as df_rollout_generate) or a
 * token outside [0, vocab) (naming the prompt's id), a feed after finish, a change of m's
 * version (df_model_weights_changed) that no poll answered with weights_changed; a weight change's
 * errors (df_rollout_engine_load_weights, a stale shared bf16 copy); a turn handler's errors
 * (as df_rollout_generate_turns); DF_ENOMEM; the hooks' own statuses. On error the sequences in
 * flight are dropped.
 */
DF_API int df_rollout_stream(df_rollout_engine *e, const df_model *m, int64_t n_samples,
                             uint64_t seed, const df_sampling_params *sp, int64_t version0,
                             const df_rollout_stream_hooks *hooks);

/** Counters of the last df_rollout_generate or df_rollout_stream on `e`. */
DF_API void df_rollout_engine_stats(const df_rollout_engine *e, df_rollout_stats *st);
/** Bytes of the KV cache resident in memory now (mincore of its pages): 0 after a
 *  df_rollout_generate with free_cache_engine; -1 when the kernel does not say. */
DF_API int64_t df_rollout_engine_kv_resident(const df_rollout_engine *e);
/** Bytes of the per-row activation scratch (hidden rows, MLP rows, attention scratch) and of
 *  the packed bf16 weights (plain_weights false) resident now, in whole pages (mincore): at
 *  most two partial pages per buffer after a df_rollout_generate with free_cache_engine; -1
 *  when the kernel does not say. */
DF_API int64_t df_rollout_engine_scratch_resident(const df_rollout_engine *e);

/** Free the arrays of a result and zero it (NULL-safe, idempotent). */
DF_API void df_rollout_result_free(df_rollout_result *r);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_ROLLOUT_H */
