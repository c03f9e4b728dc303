/*
 * The chained multi-agent rollout (siiRL MultiAgentLoop.generate_colocate with
 * multi_turn.use_all_traj=false): every sample is an episode, a text the agents take turns on.
 * In each turn each agent, in group order, reads its prompt built from the episode
 * (df_marft_chain_prompt), answers with its own engine and model, and its answer is appended
 * (df_marft_chain_pass); after the last agent an environment, when the last agent's node names one,
 * scores the turn and gives the next episode text, or ends the episode. An episode also ends after
 * multi_turn.max_assistant_turns turns, or when an agent's next prompt would be longer than
 * data.max_prompt_length (siiRL's LENGTH_FINISH; the agents after it keep the turn before). Each
 * agent's row is its last turn's prompt and response (use_all_traj=false).
 * Samples draw from keys of their prompt's dataset index, so a sample's episode does not depend on
 * how the batch is split over ranks.
 */
#include "workers/dag/marft_run.h"

#include "distflow/rng.h"
#include "util/timeutil.h"
#include "workers/rollout/rollout_batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One agent's last turn per sequence. */
typedef struct agent_rows {
    int32_t **prompt, **resp;
    float **lp;
    int64_t *prompt_len, *resp_len;
    char **after; /* the episode after its answer this turn (siiRL's action for the environment) */
    char **text;  /* its answer, special tokens dropped */
} agent_rows;

typedef struct chain {
    df_dag_worker *w;
    df_marft_run *r;
    int64_t n;           /* sequences */
    const df_batch *base; /* the prompts' rows, repeated n times */
    char **episode;      /* [n] */
    char **obs;          /* [A * n] each agent's observation from the environment, or NULL */
    bool *live;
    int64_t *turns;
    float *score;        /* the environment's last score */
    uint64_t *keys;      /* [n] random-stream key of each sequence */
    agent_rows *ag;      /* [A] */
} chain;

#define FREE_N(p, n)                                                                                \
    do {                                                                                            \
        for (int64_t i_ = 0; (p) && i_ < (n); i_++)                                                 \
            free((p)[i_]);                                                                          \
        free(p);                                                                                    \
    } while (0)

static void chain_free(chain *c)
{
    FREE_N(c->episode, c->n);
    FREE_N(c->obs, c->n * c->r->n_agents);
    for (int a = 0; c->ag && a < c->r->n_agents; a++) {
        agent_rows *g = &c->ag[a];
        FREE_N(g->prompt, c->n);
        FREE_N(g->resp, c->n);
        FREE_N(g->lp, c->n);
        FREE_N(g->after, c->n);
        FREE_N(g->text, c->n);
        free(g->prompt_len), free(g->resp_len);
    }
    free(c->ag), free(c->live), free(c->turns), free(c->score), free(c->keys);
}

static int chain_alloc(chain *c)
{
    int64_t n = c->n ? c->n : 1;
    int A = c->r->n_agents;
    c->episode = calloc((size_t)n, sizeof *c->episode);
    c->obs = calloc((size_t)(n * A), sizeof *c->obs);
    c->live = calloc((size_t)n, sizeof *c->live);
    c->turns = calloc((size_t)n, sizeof *c->turns);
    c->score = calloc((size_t)n, sizeof *c->score);
    c->keys = calloc((size_t)n, sizeof *c->keys);
    c->ag = calloc((size_t)A, sizeof *c->ag);
    bool ok = c->episode && c->obs && c->live && c->turns && c->score && c->keys && c->ag;
    for (int a = 0; ok && a < A; a++) {
        agent_rows *g = &c->ag[a];
        g->prompt = calloc((size_t)n, sizeof *g->prompt), g->resp = calloc((size_t)n, sizeof *g->resp);
        g->lp = calloc((size_t)n, sizeof *g->lp), g->after = calloc((size_t)n, sizeof *g->after);
        g->text = calloc((size_t)n, sizeof *g->text);
        g->prompt_len = calloc((size_t)n, sizeof *g->prompt_len), g->resp_len = calloc((size_t)n, sizeof *g->resp_len);
        ok = g->prompt && g->resp && g->lp && g->after && g->text && g->prompt_len && g->resp_len;
    }
    return ok ? DF_OK : df_error(DF_ENOMEM, "out of memory for %lld episodes", (long long)c->n);
}

/* The first episode text: the row's prompt as agent 0's chat template rendered it (siiRL decodes
 * the dataloader's templated ids), and each sequence's key. */
static int chain_start(chain *c, const df_batch *prompts, int64_t n_samples)
{
    const df_tokenizer *tok0 = df_worker_slot(c->w, c->r->rollout[0]).tok;
    const int64_t *idx = df_batch_i64(prompts, "index");
    int rc = DF_OK;
    for (int64_t i = 0; !rc && i < c->n; i++) {
        int64_t p = i / n_samples, len;
        const int32_t *ids = df_batch_tok_i32(prompts, "prompt_ids", p, &len);
        if (!ids)
            return df_error(DF_EINVAL, "multi-agent rollout: the batch has no prompt_ids");
        rc = df_tokenizer_decode(tok0, ids, len, false, &c->episode[i]);
        c->keys[i] = (uint64_t)(idx ? idx[p] : p) * (uint64_t)n_samples + (uint64_t)(i % n_samples);
        c->live[i] = true;
    }
    return rc;
}

/* Agent a's prompt tokens for sequence i into *ids (malloc'd) / *len. */
static int agent_prompt(chain *c, int a, int64_t i, const df_tokenizer *tok, int32_t **ids, int64_t *len)
{
    const df_agent_options *o = c->r->rollout[a]->agent_options;
    const char *obs = o && o->obs_with_env ? c->obs[(int64_t)a * c->n + i] : NULL;
    char *text = NULL;
    int rc = df_marft_chain_prompt(c->r->chain, a, c->episode[i], obs, &text);
    if (!rc)
        rc = df_tokenizer_encode(tok, text, false, ids, len);
    free(text);
    return rc;
}

/* The live sequences' prompts for agent a as a batch (prompt_ids, index = the sequence's key);
 * map[j]: the sequence of row j. A sequence whose prompt is over the limit ends (turn > 0). */
static int turn_prompts(chain *c, int a, int64_t turn, const df_tokenizer *tok, int64_t *map, df_batch **out)
{
    const int64_t max = c->w->global.cfg.data.max_prompt_length;
    int64_t m = 0, total = 0;
    int32_t **ids = calloc((size_t)(c->n ? c->n : 1), sizeof *ids);
    int64_t *lens = calloc((size_t)(c->n ? c->n : 1), sizeof *lens);
    int rc = ids && lens ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; !rc && i < c->n; i++) {
        if (!c->live[i] || (rc = agent_prompt(c, a, i, tok, &ids[m], &lens[m])))
            continue;
        if (max > 0 && lens[m] > max) {
            if (turn == 0)
                rc = df_error(DF_EINVAL, "multi-agent rollout: agent %d's first prompt has %lld tokens, more than "
                              "data.max_prompt_length = %lld (its pre_chat_template around the data's prompt)",
                              a, (long long)lens[m], (long long)max);
            free(ids[m]);
            c->live[i] = false;
            continue;
        }
        total += lens[m];
        map[m++] = i;
    }
    int64_t *off = rc ? NULL : malloc((size_t)(m + 1) * sizeof *off);
    int64_t *key = rc ? NULL : malloc((size_t)(m ? m : 1) * sizeof *key);
    int32_t *flat = rc ? NULL : malloc((size_t)(total ? total : 1) * sizeof *flat);
    df_batch *b = rc ? NULL : df_batch_new(m);
    if (!rc && (!off || !key || !flat || !b))
        rc = df_error(DF_ENOMEM, "out of memory");
    if (!rc)
        off[0] = 0;
    for (int64_t j = 0; !rc && j < m; j++) {
        off[j + 1] = off[j] + lens[j];
        memcpy(flat + off[j], ids[j], (size_t)lens[j] * sizeof *flat);
        key[j] = (int64_t)c->keys[map[j]];
    }
    if (!rc)
        rc = df_batch_set_tok_i32(b, "prompt_ids", off, flat);
    if (!rc)
        rc = df_batch_set_i64(b, "index", key);
    for (int64_t j = 0; ids && j < m; j++)
        free(ids[j]);
    free(ids), free(lens), free(off), free(key), free(flat);
    if (rc)
        df_batch_free(b);
    else
        *out = b;
    return rc;
}

static void *dup_mem(const void *p, size_t bytes)
{
    void *q = malloc(bytes ? bytes : 1);
    if (q && bytes)
        memcpy(q, p, bytes);
    return q;
}

/* Row j of the generated batch is agent a's answer in sequence i: keep it, pass the episode on. */
static int take_answer(chain *c, int a, int64_t i, const df_batch *gen, int64_t j, const df_tokenizer *tok)
{
    agent_rows *g = &c->ag[a];
    int64_t pl, rl;
    const int32_t *p = df_batch_tok_i32(gen, "prompt_ids", j, &pl), *r = df_batch_tok_i32(gen, "response_ids", j, &rl);
    const float *lp = df_batch_tok_f32(gen, "rollout_log_probs", j, NULL);
    free(g->prompt[i]), free(g->resp[i]), free(g->lp[i]), free(g->after[i]), free(g->text[i]);
    g->after[i] = g->text[i] = NULL;
    g->prompt[i] = dup_mem(p, (size_t)pl * sizeof *p), g->resp[i] = dup_mem(r, (size_t)rl * sizeof *r);
    g->lp[i] = dup_mem(lp, (size_t)rl * sizeof *lp);
    g->prompt_len[i] = pl, g->resp_len[i] = rl;
    if (!g->prompt[i] || !g->resp[i] || !g->lp[i])
        return df_error(DF_ENOMEM, "out of memory");
    char *full = NULL, *next = NULL;
    /* the episode keeps the answer's special tokens (its end of turn), as siiRL's decode of the ids */
    int rc = df_tokenizer_decode(tok, r, rl, false, &full);
    if (!rc)
        rc = df_tokenizer_decode(tok, r, rl, true, &g->text[i]);
    if (!rc)
        rc = df_marft_chain_pass(c->r->chain, a, c->episode[i], full, &next);
    free(full);
    if (!rc && !(g->after[i] = strdup(next)))
        rc = df_error(DF_ENOMEM, "out of memory");
    if (!rc) {
        free(c->episode[i]);
        c->episode[i] = next;
    } else {
        free(next);
    }
    return rc;
}

/* Agent a's turn over the live sequences. */
static int agent_turn(chain *c, int a, int64_t turn, const df_sampling_params *sp, uint64_t seed, const char *label)
{
    df_agent_slot s = df_worker_slot(c->w, c->r->rollout[a]);
    int64_t *map = malloc((size_t)(c->n ? c->n : 1) * sizeof *map);
    df_batch *prompts = NULL, *gen = NULL;
    int rc = map ? df_worker_slot_sync(&s) : df_error(DF_ENOMEM, "out of memory");
    if (!rc)
        rc = turn_prompts(c, a, turn, s.tok, map, &prompts);
    char what[64];
    snprintf(what, sizeof what, "%s agent %d turn %lld", label ? label : "", a, (long long)turn);
    df_sampling_params own = *sp; /* the job's settings resolved with group 0's tokenizer: this agent's ends */
    if (s.tok != c->w->tok) {
        if (!own.ignore_eos)
            own.stop_ids = df_tokenizer_eos_ids(s.tok, &own.n_stop);
        if (own.tokenizer)
            own.tokenizer = s.tok;
    }
    if (!rc)
        rc = df_generate_batch(s.rollout->engine, df_actor_model(s.actor->model), prompts, 1, &own,
                               df_rng_key(seed, 0xa6e, (uint64_t)a, (uint64_t)turn), label ? what : NULL, &gen);
    for (int64_t j = 0; !rc && j < df_batch_size(gen); j++)
        rc = take_answer(c, a, map[j], gen, j, s.tok);
    df_batch_free(prompts);
    df_batch_free(gen);
    free(map);
    return rc ? df_error_wrap(rc, "agent group %d (node '%s')", a, c->r->rollout[a]->node_id) : DF_OK;
}

/* After the last agent: the environment scores each live episode's turn and gives what comes next. */
static int env_step(chain *c)
{
    const int A = c->r->n_agents;
    const char **eps = malloc((size_t)A * sizeof *eps), **resp = malloc((size_t)A * sizeof *resp);
    int rc = eps && resp ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; !rc && i < c->n; i++) {
        if (!c->live[i])
            continue;
        for (int a = 0; a < A; a++)
            eps[a] = c->ag[a].after[i], resp[a] = c->ag[a].text[i];
        df_marft_env_turn t = {.n_agents = A, .episodes = eps, .responses = resp,
                               .ground_truth = df_batch_str(c->base, "ground_truth", i),
                               .data_source = df_batch_str(c->base, "data_source", i),
                               .extra_info = df_batch_str(c->base, "extra_info", i),
                               .reward_kwargs = &c->w->reward.kwargs};
        df_marft_env_result res = {0};
        if ((rc = df_marft_env_step(c->r->env, &t, &res))) {
            df_error_wrap(rc, "episode %lld", (long long)i);
            break;
        }
        for (int a = 0; a < A; a++) {
            free(c->obs[(int64_t)a * c->n + i]);
            c->obs[(int64_t)a * c->n + i] = res.obs[a];
            res.obs[a] = NULL;
        }
        free(c->episode[i]);
        c->episode[i] = strdup(c->obs[(int64_t)(A - 1) * c->n + i]);
        c->score[i] = (float)res.score;
        c->live[i] = !res.stop;
        df_marft_env_result_clear(&res);
        if (!c->episode[i])
            rc = df_error(DF_ENOMEM, "out of memory");
    }
    free(eps), free(resp);
    return rc;
}

/* Agent a's rows as its prefixed columns of b. */
static int agent_columns(const chain *c, int a, df_batch *b)
{
    const agent_rows *g = &c->ag[a];
    int64_t *po = malloc((size_t)(c->n + 1) * sizeof *po), *ro = malloc((size_t)(c->n + 1) * sizeof *ro);
    int rc = po && ro ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    if (!rc)
        po[0] = ro[0] = 0;
    for (int64_t i = 0; !rc && i < c->n; i++) {
        po[i + 1] = po[i] + g->prompt_len[i], ro[i + 1] = ro[i] + g->resp_len[i];
    }
    int32_t *pt = rc ? NULL : malloc((size_t)(po[c->n] ? po[c->n] : 1) * sizeof *pt);
    int32_t *rt = rc ? NULL : malloc((size_t)(ro[c->n] ? ro[c->n] : 1) * sizeof *rt);
    float *lt = rc ? NULL : malloc((size_t)(ro[c->n] ? ro[c->n] : 1) * sizeof *lt);
    if (!rc && (!pt || !rt || !lt))
        rc = df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; !rc && i < c->n; i++) {
        memcpy(pt + po[i], g->prompt[i], (size_t)g->prompt_len[i] * sizeof *pt);
        memcpy(rt + ro[i], g->resp[i], (size_t)g->resp_len[i] * sizeof *rt);
        memcpy(lt + ro[i], g->lp[i], (size_t)g->resp_len[i] * sizeof *lt);
    }
    char name[DF_COL_NAME_MAX];
    if (!rc && !(rc = df_marft_column(a, "prompt_ids", name, sizeof name)))
        rc = df_batch_set_tok_i32(b, name, po, pt);
    if (!rc && !(rc = df_marft_column(a, "response_ids", name, sizeof name)))
        rc = df_batch_set_tok_i32(b, name, ro, rt);
    if (!rc && !(rc = df_marft_column(a, "rollout_log_probs", name, sizeof name)))
        rc = df_batch_set_tok_f32(b, name, ro, lt);
    free(po), free(ro), free(pt), free(rt), free(lt);
    return rc;
}

/* The output: the repeated rows without their prompt_ids (each agent has its own), every agent's
 * columns, num_turns, and the environment's score as the last agent's env_return (rewards_with_env:
 * the reward node takes it as the score, df_reward_naive). */
static int chain_output(chain *c, df_batch *b)
{
    df_batch_drop(b, "prompt_ids");
    int rc = DF_OK;
    for (int a = 0; !rc && a < c->r->n_agents; a++)
        rc = agent_columns(c, a, b);
    if (!rc)
        rc = df_batch_set_i64(b, "num_turns", c->turns);
    char name[DF_COL_NAME_MAX];
    if (!rc && c->r->env && c->r->rewards_with_env && !(rc = df_marft_column(c->r->n_agents - 1, "env_return", name, sizeof name)))
        rc = df_batch_set_f32(b, name, c->score);
    return rc;
}

static bool any_live(const chain *c)
{
    for (int64_t i = 0; i < c->n; i++)
        if (c->live[i])
            return true;
    return false;
}

int df_marft_generate(df_dag_worker *w, const df_batch *prompts, int64_t n, const df_sampling_params *val_sp,
                      uint64_t seed, const char *label, df_batch **out)
{
    chain c = {.w = w, .r = w->marft, .n = df_batch_size(prompts) * n};
    df_batch *base = NULL;
    int rc = df_batch_repeat_interleave(prompts, n, &base);
    c.base = base;
    if (!rc)
        rc = chain_alloc(&c);
    if (!rc)
        rc = chain_start(&c, prompts, n);
    for (int64_t t = 0; !rc && t < c.r->max_turns && any_live(&c); t++) {
        for (int a = 0; !rc && a < c.r->n_agents; a++) {
            const df_sampling_params *sp = val_sp ? val_sp : &df_worker_node_settings(w, c.r->rollout[a])->sampling;
            rc = agent_turn(&c, a, t, sp, seed, label);
        }
        for (int64_t i = 0; !rc && i < c.n; i++)
            c.turns[i] += c.live[i];
        if (!rc && c.r->env)
            rc = env_step(&c);
    }
    if (!rc)
        rc = chain_output(&c, base);
    chain_free(&c);
    if (rc) {
        df_batch_free(base);
        return rc;
    }
    *out = base;
    return DF_OK;
}

int df_marft_node_rollout(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    double t0 = df_now();
    df_dag_worker *w = df_node_worker(ctx);
    int rc = df_worker_need_batch(batch, "generate");
    if (!rc && (ctx->flags & DF_PASS_GREEDY))
        rc = df_error(DF_EUNSUPPORTED, "a greedy pass of the multi-agent rollout (ReMax) is not supported");
    uint64_t seed = df_rng_key(df_worker_seed(w), 0x6e6, (uint64_t)ctx->step, (uint64_t)ctx->pass);
    if (!rc)
        rc = df_marft_generate(w, batch, df_worker_n_samples(w), NULL, seed,
                               w->console && w->rank == 0 ? "rollout" : NULL, &out->batch);
    df_worker_timing(ctx, "gen", t0);
    return rc;
}

int df_marft_val_generate(void *user, const df_batch *prompts, int64_t n, uint64_t seed, df_batch **out)
{
    df_dag_worker *w = user;
    df_batch *b = NULL;
    w->marft->view = -1; /* a fresh batch */
    int rc = df_marft_generate(w, prompts, n, &w->rollout.val_sp, seed,
                               w->console && w->rank == 0 ? "validate" : NULL, &b);
    if (!rc)
        rc = df_marft_view(w->marft, b, w->marft->n_agents - 1);
    w->marft->view = -1; /* the training step's batch starts with none */
    if (rc) {
        df_batch_free(b);
        return rc;
    }
    *out = b;
    return DF_OK;
}

/* The later agents' rollout nodes: their turns ran in the first one's chain. */
int df_marft_node_pass(df_node_ctx *ctx, df_batch *batch, df_node_output *out)
{
    (void)ctx, (void)batch, (void)out;
    return DF_OK;
}
