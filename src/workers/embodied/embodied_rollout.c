/*
 * The env rollout (embodied_worker.h; siiRL EmbodiedHFRollout._generate_chunk_rollout): episodes
 * run in waves of env.num_envs; at each model call every active episode's observation becomes a
 * chat prompt, the policy answers it with exactly action_chunks_len x action_token_len tokens
 * (no stop token ends a call early), the tokens are read as action words and the vector steps the
 * chunk with siiRL's stopping rule. The episodes' calls are then laid out as one row each.
 */
#include "workers/embodied/embodied_worker.h"

#include "distflow/rng.h"
#include "util/timeutil.h"
#include "workers/common/prompts.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int df_embodied_prompt_episodes(const df_dataset *ds, const df_batch *prompts, int64_t *task, int64_t *trial)
{
    const int64_t *row = df_batch_i64(prompts, "row");
    if (!row)
        return df_error(DF_EINVAL, "embodied rollout: the prompt batch has no `row` column");
    for (int64_t i = 0; i < df_batch_size(prompts); i++) {
        const char *keys[2] = {"task_id", "trial_id"};
        int64_t *dst[2] = {task + i, trial + i};
        for (int k = 0; k < 2; k++) {
            char *v = NULL, *end = NULL;
            int rc = df_dataset_field(ds, row[i], keys[k], &v);
            long long x = !rc && v ? strtoll(v, &end, 10) : -1;
            bool ok = !rc && v && end != v && !*end && x >= 0;
            free(v);
            if (!ok) {
                int64_t line = 0;
                const char *file = df_dataset_source(ds, row[i], &line);
                return df_error(DF_EINVAL, "%s:%lld: an embodied row (data.dataset_type=embodied) needs %s, a "
                                "whole number >= 0 (siiRL's manifest; `distflow embodied tasks` writes them)",
                                file, (long long)line, keys[k]);
            }
            *dst[k] = x;
        }
    }
    return DF_OK;
}

/* One episode's record while the wave runs. */
typedef struct ep_buf {
    int64_t prompt_row, sample;
    int32_t *tokens;     /* [traj_len * C] */
    float *logp;         /* [traj_len * C] */
    int32_t **prompts;   /* [traj_len] the call prompts (NULL: the call did not run) */
    int64_t *plen;       /* [traj_len] */
} ep_buf;

static void ep_free(ep_buf *e, int64_t traj_len)
{
    for (int64_t k = 0; e->prompts && k < traj_len; k++)
        free(e->prompts[k]);
    free(e->tokens), free(e->logp), free(e->prompts), free(e->plen);
}

/* The observation of episode i as a chat prompt: one user message, as the SFT rows' "prompt". */
static int call_prompt(const df_embodied_vec *v, int i, const df_tokenizer *tok, int32_t **ids, int64_t *n)
{
    char *obs = NULL;
    int rc = df_embodied_vec_observation(v, i, &obs);
    json_t *msgs = rc ? NULL : json_pack("[{s:s, s:s}]", "role", "user", "content", obs);
    char *text = msgs ? json_dumps(msgs, JSON_COMPACT) : NULL;
    if (!rc && !text)
        rc = df_error(DF_ENOMEM, "out of memory");
    if (!rc)
        rc = df_prompts_encode_json(tok, text, NULL, ids, n);
    json_decref(msgs);
    free(text), free(obs);
    return rc;
}

/* Model call k of the wave's active episodes: generate, record, step. */
static int run_call(const df_embodied_setup *s, df_embodied_vec *v, ep_buf *eps, int ne, int64_t k,
                    df_rollout_engine *e, const df_model *m, const df_tokenizer *tok, const int64_t *index,
                    const df_embodied_rollout_opts *o)
{
    const int64_t C = s->call_tokens;
    int64_t *off = calloc((size_t)ne + 1, sizeof *off);
    uint64_t *keys = calloc((size_t)ne + 1, sizeof *keys);
    int *who = calloc((size_t)ne + 1, sizeof *who);
    int32_t *act = calloc((size_t)(ne * C) + 1, sizeof *act);
    int rc = off && keys && who && act ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    int na = 0;
    for (int i = 0; !rc && i < ne; i++) {
        if (!df_embodied_vec_episode(v, i)->active)
            continue;
        ep_buf *b = &eps[i];
        rc = call_prompt(v, i, tok, &b->prompts[k], &b->plen[k]);
        who[na] = i;
        /* the episode's draws: its prompt's dataset index, its sample and the call */
        keys[na] = df_rng_key((uint64_t)index[b->prompt_row], (uint64_t)b->sample, (uint64_t)k, 0xe3b);
        off[na + 1] = off[na] + b->plen[k];
        na++;
    }
    int32_t *flat = rc ? NULL : malloc((size_t)(off[na] ? off[na] : 1) * sizeof *flat);
    if (!rc && !flat)
        rc = df_error(DF_ENOMEM, "out of memory");
    for (int a = 0; !rc && a < na; a++)
        memcpy(flat + off[a], eps[who[a]].prompts[k], (size_t)eps[who[a]].plen[k] * sizeof *flat);
    df_sampling_params sp = o->sp;
    sp.max_new_tokens = C, sp.ignore_eos = true, sp.n_stop = 0, sp.stop_ids = NULL, sp.n_stop_str = 0;
    df_rollout_request req = {.n_prompts = na, .prompt_offsets = off, .prompt_tokens = flat, .n_samples = 1,
                              .seed = o->seed, .prompt_keys = keys};
    df_rollout_result res = {0};
    if (!rc && na)
        rc = df_rollout_generate(e, m, &req, &sp, &res, NULL, NULL);
    for (int a = 0; !rc && a < na; a++) {
        if (res.offsets[a + 1] - res.offsets[a] != C) {
            rc = df_error(DF_EINVAL, "embodied rollout: call %lld answered %lld tokens, not %lld (the observation "
                          "prompt of %lld tokens leaves too little room: raise data.max_prompt_length)",
                          (long long)k, (long long)(res.offsets[a + 1] - res.offsets[a]), (long long)C,
                          (long long)eps[who[a]].plen[k]);
            break;
        }
        ep_buf *b = &eps[who[a]];
        memcpy(b->tokens + k * C, res.tokens + res.offsets[a], (size_t)C * sizeof *b->tokens);
        memcpy(b->logp + k * C, res.log_probs + res.offsets[a], (size_t)C * sizeof *b->logp);
        df_embodied_decode_call(s, b->tokens + k * C, act + (int64_t)who[a] * C);
    }
    if (!rc && na)
        rc = df_embodied_vec_step_chunk(v, act);
    df_rollout_result_free(&res);
    free(off), free(keys), free(who), free(act), free(flat);
    return rc;
}

/* Episodes [first, first + ne) of the rollout (episode q = prompt q / n, sample q % n) as one wave. */
static int run_wave(const df_embodied_setup *s, ep_buf *eps, int64_t first, int ne, df_rollout_engine *e,
                    const df_model *m, const df_tokenizer *tok, const int64_t *task, const int64_t *trial,
                    const int64_t *index, const df_embodied_rollout_opts *o, df_embodied_episode *rec, float *emb)
{
    df_embodied_vec_opts vo = s->vo;
    vo.num_envs = ne;
    df_embodied_vec *v = NULL;
    int64_t *tk = malloc((size_t)ne * sizeof *tk), *tr = malloc((size_t)ne * sizeof *tr);
    int rc = tk && tr ? df_embodied_vec_create(s->env, s->env_config, &vo, &v) : df_error(DF_ENOMEM, "out of memory");
    for (int i = 0; i < ne && tk && tr; i++) {
        eps[i].prompt_row = (first + i) / o->n, eps[i].sample = (first + i) % o->n;
        tk[i] = task[eps[i].prompt_row], tr[i] = trial[eps[i].prompt_row];
    }
    if (!rc)
        rc = df_embodied_vec_reset(v, tk, tr);
    for (int64_t k = 0; !rc && k < s->traj_len && df_embodied_vec_n_active(v) > 0; k++)
        rc = run_call(s, v, eps, ne, k, e, m, tok, index, o);
    const int dim = 2 * s->info.feature_dim;
    for (int i = 0; !rc && i < ne; i++) {
        rec[i] = *df_embodied_vec_episode(v, i);
        rc = df_embodied_vec_embedding(v, i, emb + (int64_t)i * dim);
    }
    df_embodied_vec_free(v);
    free(tk), free(tr);
    return rc;
}

/* Episode q's calls that did not run: the no-op word's tokens (value 0 at each position), log-prob 0,
   a one-token prompt (the first call's first token). */
static int fill_unrun(const df_embodied_setup *s, ep_buf *b)
{
    const int atl = s->info.action_token_len, V = s->info.action_vocab;
    for (int64_t k = 1; k < s->traj_len; k++) {
        if (b->prompts[k])
            continue;
        for (int64_t t = 0; t < s->call_tokens; t++) {
            int32_t w = s->word[(t % atl) * V];
            b->tokens[k * s->call_tokens + t] = w >= 0 ? w : 0;
            b->logp[k * s->call_tokens + t] = 0.0f;
        }
        b->plen[k] = 1;
        if (!(b->prompts[k] = malloc(sizeof *b->prompts[k])))
            return df_error(DF_ENOMEM, "out of memory");
        b->prompts[k][0] = b->prompts[0][0];
    }
    return DF_OK;
}

/* The episodes as the batch's columns (embodied_worker.h). */
static int assemble(const df_embodied_setup *s, ep_buf *eps, int64_t N, const df_embodied_episode *rec,
                    const float *emb, df_batch *b)
{
    const int64_t T = s->traj_len, C = s->call_tokens, R = T * C, dim = 2 * s->info.feature_dim;
    int64_t *ro = malloc((size_t)(N + 1) * sizeof *ro), *po = malloc((size_t)(N + 1) * sizeof *po),
            *co = malloc((size_t)(N + 1) * sizeof *co), *lo = malloc((size_t)(N + 1) * sizeof *lo),
            *eo = malloc((size_t)(N + 1) * sizeof *eo), *i64 = malloc((size_t)(N ? N : 1) * 5 * sizeof *i64);
    int32_t *rt = malloc((size_t)(N * R + 1) * sizeof *rt), *mask = malloc((size_t)(N * R + 1) * sizeof *mask),
            *lens = malloc((size_t)(N * T + 1) * sizeof *lens);
    float *lp = malloc((size_t)(N * R + 1) * sizeof *lp);
    int rc = ro && po && co && lo && eo && i64 && rt && mask && lens && lp ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    ro[0] = po[0] = co[0] = lo[0] = eo[0] = 0;
    for (int64_t q = 0; !rc && q < N; q++) {
        ro[q + 1] = ro[q] + R, lo[q + 1] = lo[q] + T, eo[q + 1] = eo[q] + dim;
        po[q + 1] = po[q] + eps[q].plen[0];
        co[q + 1] = co[q];
        for (int64_t k = 0; k < T; k++)
            co[q + 1] += eps[q].plen[k], lens[q * T + k] = (int32_t)eps[q].plen[k];
        memcpy(rt + q * R, eps[q].tokens, (size_t)R * sizeof *rt);
        memcpy(lp + q * R, eps[q].logp, (size_t)R * sizeof *lp);
        uint8_t *m8 = malloc((size_t)R + 1);
        if (!m8 || (rc = df_embodied_response_mask(&rec[q].finish_step, 1, R, s->info.action_token_len, m8)))
            rc = rc ? rc : df_error(DF_ENOMEM, "out of memory");
        for (int64_t t = 0; !rc && t < R; t++)
            mask[q * R + t] = m8[t];
        free(m8);
        int64_t *x = i64 + q * 5;
        x[0] = rec[q].finish_step, x[1] = rec[q].complete, x[2] = rec[q].task_id, x[3] = rec[q].trial_id,
        x[4] = rec[q].invalid;
    }
    int32_t *pt = rc ? NULL : malloc((size_t)(po[N] + 1) * sizeof *pt), *ct = rc ? NULL : malloc((size_t)(co[N] + 1) * sizeof *ct);
    if (!rc && (!pt || !ct))
        rc = df_error(DF_ENOMEM, "out of memory");
    for (int64_t q = 0, c = 0; !rc && q < N; q++) {
        memcpy(pt + po[q], eps[q].prompts[0], (size_t)eps[q].plen[0] * sizeof *pt);
        for (int64_t k = 0; k < T; c += eps[q].plen[k], k++)
            memcpy(ct + c, eps[q].prompts[k], (size_t)eps[q].plen[k] * sizeof *ct);
    }
    static const char *const names[5] = {"finish_step", "complete", "task_id", "trial_id", "invalid_actions"};
    int64_t *col = rc ? NULL : malloc((size_t)(N ? N : 1) * sizeof *col);
    for (int j = 0; !rc && j < 5; j++) {
        for (int64_t q = 0; col && q < N; q++)
            col[q] = i64[q * 5 + j];
        rc = col ? df_batch_set_i64(b, names[j], col) : df_error(DF_ENOMEM, "out of memory");
    }
    if (!rc)
        rc = df_batch_set_tok_i32(b, "prompt_ids", po, pt);
    if (!rc)
        rc = df_batch_set_tok_i32(b, "response_ids", ro, rt);
    if (!rc)
        rc = df_batch_set_tok_f32(b, "rollout_log_probs", ro, lp);
    if (!rc)
        rc = df_batch_set_tok_i32(b, "response_mask", ro, mask);
    if (!rc)
        rc = df_batch_set_tok_i32(b, DF_EMB_CALL_PROMPTS, co, ct);
    if (!rc)
        rc = df_batch_set_tok_i32(b, DF_EMB_CALL_LENS, lo, lens);
    if (!rc)
        rc = df_batch_set_tok_f32(b, DF_EMB_EMBEDDING, eo, emb);
    free(ro), free(po), free(co), free(lo), free(eo), free(i64), free(rt), free(mask), free(lens), free(lp);
    free(pt), free(ct), free(col);
    return rc;
}

int df_embodied_rollout(const df_embodied_setup *s, df_rollout_engine *e, const df_model *m, const df_tokenizer *tok,
                        const df_batch *prompts, const int64_t *task, const int64_t *trial,
                        const df_embodied_rollout_opts *o, df_batch **out)
{
    const int64_t np = df_batch_size(prompts), N = np * o->n, T = s->traj_len, C = s->call_tokens;
    const int64_t dim = 2 * s->info.feature_dim;
    const int64_t *index = df_batch_i64(prompts, "index");
    if (!index)
        return df_error(DF_EINVAL, "embodied rollout: the prompt batch has no `index` column");
    ep_buf *eps = calloc((size_t)(N ? N : 1), sizeof *eps);
    df_embodied_episode *rec = calloc((size_t)(N ? N : 1), sizeof *rec);
    float *emb = calloc((size_t)(N * dim + 1), sizeof *emb);
    int rc = eps && rec && emb ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    for (int64_t q = 0; !rc && q < N; q++) {
        ep_buf *b = &eps[q];
        b->tokens = calloc((size_t)(T * C), sizeof *b->tokens), b->logp = calloc((size_t)(T * C), sizeof *b->logp);
        b->prompts = calloc((size_t)T, sizeof *b->prompts), b->plen = calloc((size_t)T, sizeof *b->plen);
        if (!b->tokens || !b->logp || !b->prompts || !b->plen)
            rc = df_error(DF_ENOMEM, "out of memory");
    }
    df_progress bar;
    df_progress_begin(&bar, o->label, N); /* episodes; drawn on a terminal only */
    for (int64_t first = 0; !rc && first < N; first += s->vo.num_envs) {
        int ne = (int)(N - first < s->vo.num_envs ? N - first : s->vo.num_envs);
        rc = run_wave(s, eps + first, first, ne, e, m, tok, task, trial, index, o, rec + first, emb + first * dim);
        df_progress_update(&bar, first + ne, "episodes");
    }
    df_progress_end(&bar);
    for (int64_t q = 0; !rc && q < N; q++)
        rc = fill_unrun(s, &eps[q]);
    df_batch *b = NULL;
    if (!rc)
        rc = df_batch_repeat_interleave(prompts, o->n, &b);
    if (!rc)
        rc = assemble(s, eps, N, rec, emb, b);
    for (int64_t q = 0; eps && q < N; q++)
        ep_free(&eps[q], T);
    free(eps), free(rec), free(emb);
    if (rc) {
        df_batch_free(b);
        return rc;
    }
    *out = b;
    return DF_OK;
}
