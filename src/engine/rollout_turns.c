/*
 * Multi-turn rollouts (df_turn_handler in include/distflow/rollout.h): when a sequence's
 * assistant turn ends at a stop token the handler answers; its tokens are appended to the
 * slot's response (mask 0, log-prob 0) and prefilled into the slot's own KV cache, after the
 * stop token whose K / V the next decode step would have written, and decoding resumes
 * from the last appended token. Nothing of the conversation is prefilled twice.
 */
#include "engine/rollout_engine.h"

#include <stdlib.h>
#include <string.h>

int df_rollout_turns_init(gen_ctx *g)
{
    if (!g->turns)
        return DF_OK;
    if (!g->turns->on_turn_end)
        return df_error(DF_EINVAL, "rollout: a turn handler without on_turn_end");
    const df_rollout_engine *e = g->e;
    g->out_mask = malloc((size_t)(e->max_num_seqs * e->max_seq_len));
    g->n_turns = calloc((size_t)g->n_seqs + 1, sizeof *g->n_turns);
    g->cont_slots = malloc((size_t)e->max_num_seqs * sizeof *g->cont_slots);
    if (!g->out_mask || !g->n_turns || !g->cont_slots)
        return df_error(DF_ENOMEM, "rollout: out of memory for multi-turn state");
    return DF_OK;
}

void df_rollout_turns_release(gen_ctx *g)
{
    free(g->out_mask);
    free(g->a_mask);
    free(g->n_turns);
    free(g->cont_slots);
}

/* Model tokens [turn_start, n_gen) of slot si: mask 1. */
static void mark_model_tokens(gen_ctx *g, int64_t si)
{
    slot_state *s = &g->e->slots[si];
    int8_t *mask = g->out_mask + si * g->e->max_seq_len;
    memset(mask + s->turn_start, 1, (size_t)(s->n_gen - s->turn_start));
}

static int check_reply(const gen_ctx *g, const df_turn_info *t, const df_turn_reply *r)
{
    if (!r->tokens || r->n_tokens < 1)
        return df_error(DF_EINVAL, "rollout: the turn handler neither ended sequence %lld (turn %lld) "
                        "nor gave tokens to append", (long long)t->seq, (long long)t->turn);
    for (int64_t k = 0; k < r->n_tokens; k++)
        if (r->tokens[k] < 0 || r->tokens[k] >= g->e->cfg.vocab_size)
            return df_error(DF_EINVAL, "rollout: the turn handler's token %lld for sequence %lld is "
                            "%d, outside [0, %lld)", (long long)k, (long long)t->seq, r->tokens[k],
                            (long long)g->e->cfg.vocab_size);
    return DF_OK;
}

/* Append the reply to slot si: it waits for the prefill of [stop token, reply). */
static void append_reply(gen_ctx *g, int32_t si, const df_turn_reply *r)
{
    df_rollout_engine *e = g->e;
    slot_state *s = &e->slots[si];
    const int64_t at = si * e->max_seq_len + s->n_gen;
    memcpy(e->out_tok + at, r->tokens, (size_t)r->n_tokens * sizeof(int32_t));
    memset(e->out_logp + at, 0, (size_t)r->n_tokens * sizeof(float));
    memset(g->out_mask + at, 0, (size_t)r->n_tokens);
    if (g->out_ver) /* a stream: the stop token's version (the handler answered right after it) */
        for (int64_t k = 0; k < r->n_tokens; k++)
            g->out_ver[at + k] = g->out_ver[at - 1];
    s->cont = true;
    s->cont_at = s->n_gen - 1; /* the stop token: its K / V are not in the cache yet */
    s->n_gen += r->n_tokens;
    s->turn_start = s->n_gen;
    df_rollout_stop_reset(g, si); /* stop strings match within one turn's text */
    e->stats.appended_tokens += r->n_tokens;
    g->n_cont++;
}

int df_rollout_turn_end(gen_ctx *g, int32_t si)
{
    df_rollout_engine *e = g->e;
    slot_state *s = &e->slots[si];
    const df_turn_handler *h = g->turns;
    const int64_t n_turn = s->n_gen - s->turn_start;
    mark_model_tokens(g, si);
    s->turn_start = s->n_gen;
    s->turns++;
    if (h->max_assistant_turns > 0 && s->turns >= h->max_assistant_turns)
        return df_rollout_retire(g, si, DF_FINISH_STOP);
    const int32_t *resp = e->out_tok + si * e->max_seq_len;
    /* the prompt's id: its request index in df_rollout_generate_turns, its fed id in a stream */
    const int64_t seq = s->prompt_id * g->req->n_samples + s->sample;
    const df_turn_info t = {seq, s->prompt_id, s->sample, s->turns, resp + s->n_gen - n_turn,
                            n_turn, resp, s->n_gen, s->limit - s->n_gen};
    df_turn_reply r = {0};
    int rc = h->on_turn_end(h->user, &t, &r);
    if (rc)
        return rc;
    if (r.done)
        return df_rollout_retire(g, si, DF_FINISH_STOP);
    if ((rc = check_reply(g, &t, &r)))
        return rc;
    /* verl's agent loop: a reply that leaves no room for a model token ends the response */
    if (s->n_gen + r.n_tokens >= s->limit)
        return df_rollout_retire(g, si, DF_FINISH_LENGTH);
    append_reply(g, si, &r);
    return DF_OK;
}

int64_t df_rollout_plan_turns(gen_ctx *g, int64_t budget)
{
    df_rollout_engine *e = g->e;
    int64_t rows = 0;
    g->n_cont_out = g->carried = 0;
    for (int64_t si = 0; si < e->max_num_seqs && rows < budget && g->n_cont; si++) {
        slot_state *s = &e->slots[si];
        if (!s->active || !s->cont)
            continue;
        const int32_t *tok = e->out_tok + si * e->max_seq_len;
        const int64_t left = s->n_gen - s->cont_at;
        const int64_t n = left < budget - rows ? left : budget - rows;
        /* the first row of a continuation carries the turn's stop token (a model token) */
        g->carried += g->out_mask[si * e->max_seq_len + s->cont_at] == 1;
        for (int64_t t = 0; t < n; t++) {
            e->b_tok[rows + t] = tok[s->cont_at + t];
            e->b_slot[rows + t] = (int32_t)si;
            e->b_pos[rows + t] = (int32_t)(s->prompt_len + s->cont_at + t);
        }
        rows += n;
        s->cont_at += n;
        if (s->cont_at == s->n_gen) { /* complete: its last row samples the next model token */
            s->cont = false;
            g->n_cont--;
            e->b_out[g->n_cont_out] = rows - 1;
            g->cont_slots[g->n_cont_out++] = (int32_t)si;
        }
    }
    return rows;
}

int df_rollout_turns_retire(gen_ctx *g, int64_t si)
{
    if (!g->turns)
        return DF_OK;
    slot_state *s = &g->e->slots[si];
    if (g->a_len + s->n_gen > g->a_mask_cap) {
        int64_t cap = g->a_mask_cap ? g->a_mask_cap : 4096;
        while (cap < g->a_len + s->n_gen)
            cap *= 2;
        int8_t *m = realloc(g->a_mask, (size_t)cap);
        if (!m)
            return df_error(DF_ENOMEM, "rollout: out of memory storing %lld mask entries",
                            (long long)cap);
        g->a_mask = m;
        g->a_mask_cap = cap;
    }
    g->n_turns[s->seq] = df_rollout_turns_close(g, si);
    memcpy(g->a_mask + g->a_len, g->out_mask + si * g->e->max_seq_len, (size_t)s->n_gen);
    return DF_OK;
}

int32_t df_rollout_turns_close(gen_ctx *g, int64_t si)
{
    const slot_state *s = &g->e->slots[si];
    mark_model_tokens(g, si);
    /* a turn cut by the length limit counts too */
    return (int32_t)(s->turns + (s->turn_start < s->n_gen));
}

int df_rollout_turns_pack(const gen_ctx *g, df_rollout_result *res)
{
    const int64_t n = g->n_seqs, total = res->offsets[n];
    res->response_mask = malloc((size_t)(total ? total : 1));
    res->assistant_turns = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    if (!res->response_mask || !res->assistant_turns)
        return df_error(DF_ENOMEM, "rollout: out of memory for the response mask");
    if (!g->turns) {
        memset(res->response_mask, 1, (size_t)total);
        for (int64_t s = 0; s < n; s++)
            res->assistant_turns[s] = 1;
        return DF_OK;
    }
    for (int64_t s = 0; s < n; s++) {
        memcpy(res->response_mask + res->offsets[s], g->a_mask + g->seq_start[s],
               (size_t)g->seq_len[s]);
        res->assistant_turns[s] = g->n_turns[s];
    }
    return DF_OK;
}
