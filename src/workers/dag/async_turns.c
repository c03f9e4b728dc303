/* Multi-turn episodes on the rollout side of the asynchronous runtime (async.h, docs/async.md):
 * each episode in flight runs its own agent loop (workers/rollout/agent_loop.h) over its one
 * prompt row, started as the synchronous rollout node starts the loop of its batch, so a row's
 * conversations, tool / interaction sessions and environment episodes are the synchronous run's.
 * The stream's one turn handler passes each turn end to the loop of the episode it belongs to. */
#include "workers/dag/async.h"

#include "workers/rollout/agent_loop.h"
#include "workers/rollout/rollout_batch.h"

#include <stdlib.h>
#include <string.h>

struct df_async_turns {
    df_turn_handler h;           /* the stream's: dispatches on the fed id (the episode's slot) */
    const df_agent_config *cfg;
    const df_tokenizer *tok;
    int64_t cap, n;
    df_agent_loop **loops;       /* [cap] the loop of each slot's episode, NULL when free */
};

/* A turn of sample j of slot i's episode: the loop's sequence j (its batch is the one row). */
static int on_turn_end(void *user, const df_turn_info *t, df_turn_reply *reply)
{
    df_async_turns *x = user;
    if (t->prompt < 0 || t->prompt >= x->cap || !x->loops[t->prompt])
        return df_error(DF_EINTERNAL, "async rollout: a turn of episode slot %lld, which has no agent loop",
                        (long long)t->prompt);
    const df_turn_handler *h = df_agent_loop_handler(x->loops[t->prompt]);
    df_turn_info mine = *t;
    mine.seq = t->sample;
    mine.prompt = 0;
    return h->on_turn_end(h->user, &mine, reply);
}

int df_async_turns_create(const df_agent_config *cfg, const df_tokenizer *tok, int64_t cap, int64_t n,
                          df_async_turns **out)
{
    df_async_turns *x = calloc(1, sizeof *x);
    if (x)
        x->loops = calloc((size_t)(cap ? cap : 1), sizeof *x->loops);
    if (!x || !x->loops) {
        free(x);
        return df_error(DF_ENOMEM, "out of memory");
    }
    x->cfg = cfg, x->tok = tok, x->cap = cap, x->n = n;
    x->h = (df_turn_handler){.user = x, .on_turn_end = on_turn_end, .max_assistant_turns = cfg->max_assistant_turns};
    *out = x;
    return DF_OK;
}

void df_async_turns_free(df_async_turns *x)
{
    for (int64_t i = 0; x && i < x->cap; i++)
        df_async_turns_end(x, i);
    if (x)
        free(x->loops);
    free(x);
}

const df_turn_handler *df_async_turns_handler(df_async_turns *x) { return &x->h; }

int df_async_turns_begin(df_async_turns *x, int64_t slot, uint64_t env_seed, df_batch **prompt)
{
    df_batch *gen = NULL;
    df_async_turns_end(x, slot);
    int rc = df_agent_loop_begin(x->cfg, x->tok, *prompt, x->n, env_seed, &x->loops[slot], &gen);
    if (rc) {
        const int64_t *idx = df_batch_i64(*prompt, "index");
        return df_error_wrap(rc, "async rollout: the episode of prompt index %lld", idx ? (long long)idx[0] : -1LL);
    }
    df_batch_free(*prompt);
    *prompt = gen;
    return DF_OK;
}

int df_async_turns_finish(df_async_turns *x, int64_t slot, df_batch *rows, const int8_t *mask, const int32_t *turns)
{
    const int64_t *off = df_batch_offsets(rows, "response_ids");
    int rc = off ? df_generate_set_turn_columns(rows, x->n, off, mask, turns)
                 : df_error(DF_EINTERNAL, "async rollout: an episode's rows without response_ids");
    return rc ? rc : df_agent_loop_finish(x->loops[slot], rows);
}

void df_async_turns_end(df_async_turns *x, int64_t slot)
{
    if (!x || !x->loops[slot])
        return;
    df_agent_loop_free(x->loops[slot]);
    x->loops[slot] = NULL;
}
