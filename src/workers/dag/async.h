/*
 * The asynchronous runtime (actor_rollout_ref.rollout.mode=async; docs/async.md): the job's ranks
 * split into a trainer side (ranks 0 .. T-1, which run the DAG worker as a job of T ranks would)
 * and a rollout side (the last R = rollout.nnodes x rollout.n_gpus_per_node ranks), after AReaL's
 * disaggregated allocation and verl's fully-async recipe.
 *
 * Wire protocol, all on the job's world communicator or the weights group:
 *   - weights: trainer rank 0 and the rollout ranks form the weights group (trainer rank 0 is
 *     its rank 0). Every update is a header (df_async_header) broadcast without blocking the
 *     rollout ranks, which post it ahead and test it between decode steps, then the float32
 *     parameters broadcast in full; header.stop ends the rollout side.
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

#include <stdbool.h>
#include <stdint.h>

struct df_dag_worker;
struct df_node_ctx;
struct df_train_config;

#define DF_ASYNC_TAG_EPISODE 101
#define DF_ASYNC_TAG_DROPPED 102
/** int64 column the trainer side adds to every received row: the rollout rank (0 .. R-1) that
 *  generated it, so a rank the hand-off moved it to can report it rejected to its source. */
#define DF_ASYNC_SOURCE_COLUMN "rollout_rank"

/** The weights broadcast's header. */
typedef struct df_async_header {
    int64_t version;  /**< trainer version of the parameters that follow (optimizer steps taken) */
    int64_t stop;     /**< 0: parameters follow; -1: training finished; > 0: stopped on that signal */
    int64_t n_params; /**< float32 elements that follow */
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
/** The `take` episodes of smallest order, in that order, out of the inbox as one batch into *out
 *  (take 0: no rows, the columns of the first waiting); each taken one's gap to trainer version
 *  `version` is counted in st (df_staleness_consume: call drop_stale at that version first).
 *  Errors: DF_EINVAL for take outside [0, n] or an empty inbox, DF_ENOMEM, those of
 *  df_staleness_consume. */
int df_async_inbox_take(df_async_inbox *in, int64_t take, df_staleness *st, int64_t version,
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
    df_model *model;      /**< the weights the engine samples from (owned) */
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
} df_async;

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

/** Trainer side: make the graph's rollout node take its batch from the rollout side. */
int df_async_trainer_setup(struct df_dag_worker *w);
/** Trainer side: send the actor's weights at version `version` to the rollout side. Collective
 *  over the weights group (trainer rank 0; other trainer ranks return at once). */
int df_async_publish(struct df_dag_worker *w, int64_t version);
/** Trainer side: end the rollout side (stop: -1 finished, > 0 the signal) and drain its last
 *  messages. Every trainer rank calls it once, whatever happened. */
int df_async_finish(struct df_dag_worker *w, int64_t stop);

#endif
