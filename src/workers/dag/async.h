/*
 * The asynchronous runtime (actor_rollout_ref.rollout.mode=async; docs/async.md): the job's ranks
 * split into a trainer side (ranks 0 .. T-1, which run the DAG worker as a job of T ranks would)
 * and a rollout side (the last R = rollout.nnodes x rollout.n_gpus_per_node ranks), after AReaL's
 * disaggregated allocation and verl's fully-async recipe.
 *
 * Wire protocol, all on the job's world communicator or the weights group:
 *   - weights: trainer rank 0 and the rollout ranks form the weights group (trainer rank 0 is
 *     its rank 0). Every update is a header (df_async_header) broadcast without blocking the
 *     rollout ranks, which post it ahead and test it between decode steps, then the parameters
 *     in the header's wire format (df_async_wire, async_weights.c): float32 in full, or, for a
 *     bf16 rollout, the bf16 copy the engine reads and the float32 tensors it reads in float32;
 *     header.stop ends the rollout side.
 *   - episodes: a rollout rank sends each finished episode (one prompt with its rollout.n
 *     responses) to the trainer ranks in turn, tag DF_ASYNC_TAG_EPISODE: a df_async_episode
 *     header, then the serialized batch rows. A header with `done` set is the rank's last
 *     message to that trainer rank (same tag, so it arrives after every episode: MPI's
 *     non-overtaking rule).
 *   - drops: a trainer rank that drops episodes as too stale, or whose DAPO filter throws
 *     away taken groups, tells their rollout rank at once (int64 count, tag
 *     DF_ASYNC_TAG_DROPPED), which takes them out of its accepted count: else its admission
 *     would stop short of the batch the trainer waits for.
 */
#ifndef DF_WORKERS_DAG_ASYNC_H
#define DF_WORKERS_DAG_ASYNC_H

#include "distflow/async.h"
#include "distflow/batch.h"
#include "distflow/comm.h"
#include "distflow/dag.h"
#include "distflow/model.h"
#include "distflow/rollout.h"
#include "distflow/tokenizer.h"

#include <stdbool.h>
#include <stdint.h>

struct df_agent_config;
struct df_dag_worker;
struct df_node_ctx;
struct df_train_config;

#define DF_ASYNC_TAG_EPISODE 101
#define DF_ASYNC_TAG_DROPPED 102
/** int64 column the trainer side adds to every received row: the rollout rank (0 .. R-1) that
 *  generated it, so a rank the hand-off moved it to can report it rejected to its source. */
#define DF_ASYNC_SOURCE_COLUMN "rollout_rank"

/**
 * How the parameters follow a weights header: both sides derive it from their rollout's dtype
 * (df_async_wire_for on the trainer, the engine's dtype on a rollout rank) and a rollout rank
 * refuses a header of another format.
 */
typedef enum df_async_wire {
    /** every parameter in float32: df_model.params [n_params], in layout order (one broadcast) */
    DF_ASYNC_WIRE_F32 = 1,
    /** a bf16 rollout's weights, two broadcasts: (1) the blob of a df_weights16 made with
     *  DF_W16_LM_HEAD | DF_W16_EMBED (the engine's own copy's flags: every layer's q/k/v/o and
     *  gate/up/down, the LM head and the embedding, rounded to nearest even from the float32
     *  master weights, each tensor padded to 32 elements: df_weights16_blob) [n_bf16]; (2) the
     *  float32 tensors the engine reads in float32, the norms and biases, packed in layout order
     *  [n_params] */
    DF_ASYNC_WIRE_BF16 = 2,
} df_async_wire;

/** The weights broadcast's header. */
typedef struct df_async_header {
    int64_t version;  /**< trainer version of the parameters that follow (optimizer steps taken) */
    int64_t stop;     /**< 0: parameters follow; -1: training finished; > 0: stopped on that signal */
    int64_t wire;     /**< df_async_wire of the parameters that follow */
    int64_t n_bf16;   /**< bfloat16 elements that follow first (0 with DF_ASYNC_WIRE_F32) */
    int64_t n_params; /**< float32 elements that follow (then) */
    int64_t data_epoch, data_step; /**< the trainer's dataloader position (df_dataloader_tell): where
                                        the rollout side's starts from (the first header only) */
} df_async_header;

/** What precedes an episode's rows. */
typedef struct df_async_episode {
    int64_t done;          /**< 1: the sender's last message to this rank (no rows follow) */
    int64_t order;         /**< position in the rollout side's prompt order (sorting key) */
    int64_t min_version;   /**< oldest policy version among its tokens (AReaL's head version) */
    int64_t max_version;
    int64_t bytes;         /**< serialized rows that follow in the same message */
    double idle_s, busy_s; /**< the sender's cumulative idle / generating seconds */
    int64_t running, accepted; /**< the sender's staleness counters when it sent */
} df_async_episode;

/** A trainer rank's received, not yet consumed episodes. */
typedef struct df_async_inbox {
    struct df_batch **rows;  /**< [n] */
    int64_t *order, *version, *src; /**< src: the sender's rollout index */
    int64_t n, cap;
} df_async_inbox;

/** Append an episode's rows (ownership taken), its order, oldest token version and sender's rollout
 *  index. Errors: DF_ENOMEM. */
int df_async_inbox_push(df_async_inbox *in, struct df_batch *b, int64_t order, int64_t version, int64_t src);
/** Drop (free) every episode more than st's max_staleness versions behind `version`, counting
 *  each dropped one's gap in st (df_staleness_consume) and adding one to dropped[src]; the others
 *  keep their arrival order and are not counted (a check, repeated while the trainer waits; they
 *  are counted once, when taken). Errors: those of df_staleness_consume. */
int df_async_inbox_drop_stale(df_async_inbox *in, df_staleness *st, int64_t version, int64_t *dropped);
/** Every episode of rollout rank r with order <= limit[r] (limit: one per sender index; INT64_MIN:
 *  none of its), in order, out of the inbox as one batch into *out (none: no rows, the columns of
 *  the first waiting); each taken one's gap to trainer version `version` is counted in st
 *  (df_staleness_consume: call drop_stale at that version first). Errors: DF_EINVAL for an empty
 *  inbox, DF_ENOMEM, those of df_staleness_consume. */
int df_async_inbox_take(df_async_inbox *in, const int64_t *limit, df_staleness *st, int64_t version,
                        struct df_batch **out);
void df_async_inbox_clear(df_async_inbox *in);

/** Count the groups (rows sharing a uid: one episode each) of b with no row among keep[n_keep]
 *  (row indices of b) into per_src[n_src] (added to), by their DF_ASYNC_SOURCE_COLUMN value: what
 *  a filter that kept those rows must report to each rollout rank. An empty b counts nothing;
 *  on an error per_src is unchanged. Errors: DF_EINVAL without the uid or source columns, a kept index or a source out of range;
 *  DF_ENOMEM. */
int df_async_count_rejected(const struct df_batch *b, const int64_t *keep, int64_t n_keep, int n_src,
                            int64_t *per_src);
/** The rollout side's account of n reported episodes: no longer accepted (at most all of those),
 *  rejected instead, so df_staleness_capacity admits as many again. */
void df_async_unaccept(df_staleness *st, int64_t n);

typedef struct df_async {
    df_comm *world;       /**< the job (borrowed) */
    df_comm *side;        /**< this side's ranks (owned) */
    df_comm *weights;     /**< trainer rank 0 + the rollout ranks (owned), NULL elsewhere */
    int n_trainers, n_rollouts;
    bool rollout_side;
    int index;            /**< rank within the side */
    df_staleness st;      /**< rollout side: admission; trainer side: the consume check */
    /* rollout side */
    df_model *model;      /**< the weights the engine samples from (owned; with DF_ASYNC_WIRE_BF16 only
                               its norms and biases are kept: the engine reads the rest in bf16) */
    struct df_async_weights *wx; /**< the weights' transfer state (owned; made at the first send /
                                      receive) */
    /* trainer side */
    df_async_inbox inbox;
    int done_from;        /**< rollout ranks whose last message arrived */
    double idle_s, busy_s; /**< the rollout side's idle / busy seconds at the last step's record */
    double *last_idle, *last_busy; /**< [n_rollouts] the latest per rollout rank */
    int64_t *last_running, *last_accepted;
    int64_t *dropped;     /**< trainer side: [n_rollouts] episodes of each rollout rank dropped as too
                               stale or rejected by a filter, and not yet reported to it */
    int64_t refill;       /**< episodes the next re-run of the rollout node takes (DAPO's refill,
                               df_async_set_refill); 0: none asked */
    struct df_batch *columns; /**< no rows, the columns of the step's episodes: a rank's empty share
                                   of a refill it holds no episode for */
    struct df_batch *prompts; /**< one row per episode of the latest take, without the responses:
                                   what ReMax's greedy pass decodes on this rank */
    df_node_fn generate;  /**< the rollout node's own function (the greedy pass runs it) */
    int64_t *take_limit;  /**< trainer side: [n_rollouts] the step's take (df_async_inbox_take's limit) */
} df_async;

/* ---- the weights' wire format (async_weights.c) ---- */

typedef struct df_async_weights df_async_weights;
struct df_rollout_engine;

/** The format a trainer sends in for config t: DF_ASYNC_WIRE_BF16 when
 *  actor_rollout_ref.rollout.dtype is bfloat16 and this machine has native bf16 matmuls (where
 *  the rollout ranks' engines then run bf16, as dag_worker.c's rollout_dtype decides), else F32. */
df_async_wire df_async_wire_for(const struct df_train_config *t);
/** Transfer state for m's shapes in `wire` (the copies are allocated at first use).
 *  Errors: DF_EINVAL (an unknown wire), DF_ENOMEM. */
int df_async_weights_create(const df_model *m, df_async_wire wire, df_async_weights **out);
void df_async_weights_free(df_async_weights *x);
/** Bytes one update puts on the wire (n_bf16 * 2 + n_params * 4). */
int64_t df_async_weights_bytes(const df_async_weights *x);
/**
 * Trainer rank 0: fill h's wire, n_bf16 and n_params, broadcast h over `comm` (root 0; the
 * rollout ranks posted it: df_comm_ibroadcast), then m's weights in x's format. With
 * DF_ASYNC_WIRE_BF16, `w16` (may be NULL: the actor's bf16 copy under mixed precision) is sent
 * as is when it is current at m's version with the engine's flags (df_weights16_is_current),
 * else m is converted into x's own copy first (the engine's conversion: the same bits).
 * Errors: DF_ENOMEM, comm errors.
 */
int df_async_weights_send(df_async_weights *x, df_comm *comm, const df_model *m, const df_weights16 *w16,
                          df_async_header *h);
/**
 * Rollout rank: receive the parameters that follow header h (checked against x: a wire format
 * or a size of another build or dtype is refused, naming both) into the weights the engine reads
 * (staged false; call df_async_weights_install at once) or into a second copy (staged true,
 * partial_rollout false: installed later). Collective over `comm`, root 0. Errors: DF_EINVAL (a
 * mismatch), DF_ENOMEM, comm errors.
 */
int df_async_weights_receive(df_async_weights *x, df_comm *comm, df_model *m, const df_async_header *h,
                             bool staged);
/**
 * Rollout rank: make the weights received last (staged: into the second copy) those of m and of
 * engine e: m gets a new version (df_model_weights_changed); F32: the staged copy into m->params;
 * BF16: the float32 tensors into m, the received bf16 copy marked as m's and shared with e
 * (df_rollout_engine_share_weights16: no conversion, the engine only packs it), and, after the
 * first, m's float32 pages of the tensors the engine reads in bf16 given back to the OS (they
 * read as zeros from then on). Errors: those of df_rollout_engine_share_weights16.
 */
int df_async_weights_install(df_async_weights *x, df_model *m, struct df_rollout_engine *e, bool staged);

/** Rollout rank i's part of a job-wide count over n rollout ranks (the even split, the remainder one
 *  each to the first ranks): its share of max_concurrent_rollouts and of each batch, which its
 *  admission counts on and the trainer takes of its episodes. */
int64_t df_async_share(int64_t total, int n, int i);

/** Rollout ranks of a typed config (0: colocated, mode=sync). */
int64_t df_async_rollout_ranks(const struct df_train_config *t);

/**
 * Split the job `world` (size W) for a config with R = df_async_rollout_ranks > 0: ranks W-R ..
 * W-1 the rollout side. Collective over world. *out NULL for a colocated config.
 * Errors: DF_EINVAL when R >= W (no trainer rank left), comm errors.
 */
int df_async_create(const struct df_train_config *t, df_comm *world, df_async **out);
void df_async_free(df_async *a);

/** The rollout side's whole run: initial weights, then the executor until the stop header. */
int df_async_rollout_run(struct df_dag_worker *w);
/** Rollout side setup: the tokenizer, its data shard, the model and the engine. */
int df_async_rollout_setup(struct df_dag_worker *w);

/*
 * Multi-turn episodes on the rollout side (async_turns.c; multi_turn.enable or dag.env_enable):
 * an agent loop per episode in flight, in slots [0, cap) (the executor's episode slots, which
 * are the ids it feeds the stream with), each over its one prompt row with n responses.
 */
typedef struct df_async_turns df_async_turns;

/** Slots for cap episodes of n responses each; cfg and tok are borrowed for its life.
 *  Errors: DF_ENOMEM. */
int df_async_turns_create(const struct df_agent_config *cfg, const df_tokenizer *tok, int64_t cap, int64_t n,
                          df_async_turns **out);
/** Ends every loop still running (NULL ok). */
void df_async_turns_free(df_async_turns *x);
/** The stream's turn handler (df_rollout_stream_hooks.turns): a turn end of the sequence fed with
 *  id `slot`, sample j, goes to slot's loop as its sequence j. Valid while x lives. */
const df_turn_handler *df_async_turns_handler(df_async_turns *x);
/**
 * Start slot's episode (a loop already there is ended first) over *prompt (1 row, taken): the
 * loop of df_agent_loop_begin with environment seed env_seed (the synchronous rollout's for the
 * row's step); *prompt becomes the row as the model sees it first (prompt_ids re-rendered with
 * the tool schemas, or the environment's first observation). Errors: df_agent_loop_begin's,
 * naming the row's index; *prompt is kept then.
 */
int df_async_turns_begin(df_async_turns *x, int64_t slot, uint64_t env_seed, struct df_batch **prompt);
/**
 * The episode's rows (n, response_ids set) get the synchronous rollout node's multi-turn columns:
 * response_mask and num_turns from mask ([total response tokens] int8, 1 on a model token) and
 * turns ([n] assistant turns), then the loop's agent_reward, tool_calls (env_return, env_success).
 * Errors: DF_EINTERNAL (no response_ids), DF_ENOMEM, df_agent_loop_finish's.
 */
int df_async_turns_finish(df_async_turns *x, int64_t slot, struct df_batch *rows, const int8_t *mask,
                          const int32_t *turns);
/** Free slot's loop: its sessions and episodes end (none: nothing). */
void df_async_turns_end(df_async_turns *x, int64_t slot);

/** Trainer side: make the graph's rollout node take its batch from the rollout side. */
int df_async_trainer_setup(struct df_dag_worker *w);
/** Trainer side: send the actor's weights at version `version` to the rollout side. Collective
 *  over the weights group (trainer rank 0; other trainer ranks return at once). */
int df_async_publish(struct df_dag_worker *w, int64_t version);
/**
 * Trainer side: the step's episodes, as df_async_inbox_take limits ([n_rollouts]): of each
 * rollout rank r, its df_async_share(need, n_rollouts, r) oldest (smallest order) of those the
 * trainer ranks hold together (every rank's (order, sender) gathered); limit[r] the largest order
 * taken of r's, INT64_MIN for none. Each rollout rank's share, as its admission counts on, not
 * the job's oldest (docs/async.md). Call once the ranks hold every share. `each` false (DAPO's
 * refill): the job's `need` oldest, whichever ranks sent them (the rejected groups were reported
 * to their senders, whose admission makes up for them). Collective over the side. Errors:
 * DF_ENOMEM, comm errors.
 */
int df_async_take_limits(df_async *a, int64_t need, bool each, int64_t *limit);
/** Trainer side: tell each rollout rank how many of its episodes were dropped as too stale since the
 *  last report (a->dropped[r], zeroed once sent: tag DF_ASYNC_TAG_DROPPED). Errors: comm errors. */
int df_async_report_drops(df_async *a);
/** Rollout side: every drop report waiting now (from any trainer rank) taken out of a->st.accepted
 *  (at most all of it) and counted as rejected, so that admission makes up for them. Errors: comm
 *  errors. */
int df_async_take_drops(df_async *a);
/** Trainer side: end the rollout side (stop: -1 finished, > 0 the signal) and drain its last
 *  messages. Every trainer rank calls it once, whatever happened. */
int df_async_finish(struct df_dag_worker *w, int64_t stop);

#endif
