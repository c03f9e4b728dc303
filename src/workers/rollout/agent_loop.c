/* The ROLLOUT node's multi-turn agent loop (agent_loop.h). */
#include "workers/rollout/agent_loop.h"

#include "util/utf8.h"
#include "workers/common/prompts.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int df_agent_config_load(df_agent_config *cfg, const char *tool_config_path, const char *interaction_config_path,
                         df_tool_plugin_loader tool_loader, df_tool_plugin_loader interaction_loader,
                         df_env_spec *env)
{
    int rc = DF_OK;
    if (tool_config_path)
        rc = df_tool_set_load(tool_config_path, tool_loader, &cfg->tools);
    if (!rc && cfg->tools)
        rc = df_tool_set_tools_json(cfg->tools, &cfg->tools_json);
    if (!rc && interaction_config_path)
        rc = df_interaction_set_load(interaction_config_path, interaction_loader, &cfg->interactions);
    if (!rc && env) {
        cfg->env = *env;
        memset(env, 0, sizeof *env);
    }
    if (!cfg->truncate_side)
        cfg->truncate_side = "middle";
    if (cfg->max_parallel_calls < 1)
        cfg->max_parallel_calls = 1;
    if (cfg->max_tool_response_length < 1)
        cfg->max_tool_response_length = 256;
    if (rc)
        df_agent_config_clear(cfg);
    return rc;
}

void df_agent_config_clear(df_agent_config *cfg)
{
    if (!cfg)
        return;
    df_tool_set_free(cfg->tools);
    df_interaction_set_free(cfg->interactions);
    free(cfg->tools_json);
    df_env_spec_clear(&cfg->env);
    cfg->tools = NULL, cfg->interactions = NULL, cfg->tools_json = NULL;
}

/* One sequence's conversation and sessions. */
typedef struct agent_seq {
    json_t *messages;            /* the conversation so far (prompt, turns, replies) */
    df_tool_session *tools;      /* NULL without tools */
    df_interaction_session *ia;  /* NULL without an interaction */
    int64_t user_turns;          /* interaction replies so far */
    double reward;               /* tool step rewards + interaction turn rewards */
    bool done;                   /* the loop ended it (not the engine) */
    int64_t answered_len;        /* response length after the last reply the loop gave */
} agent_seq;

struct df_agent_loop {
    df_turn_handler h;
    const df_agent_config *cfg;
    const df_tokenizer *tok;
    int64_t n_seqs;
    agent_seq *seqs;
    df_env_vec *env; /* one episode per sequence, or NULL */
    int32_t *ids;    /* the last reply's tokens (the engine copies them) */
};

/* Text for the conversation from a tool (or a sampled turn: byte tokens) may hold a partial UTF-8
   character: each invalid byte becomes U+FFFD, as Python's errors="replace" gives, so the
   conversation stays text the template and the tokenizer accept. *text is replaced when it changes. */
static int utf8_replace(char **text)
{
    const unsigned char *t = (const unsigned char *)*text;
    size_t n = strlen(*text), bad = 0;
    for (size_t i = 0; i < n;) {
        int k = df_utf8_len(t + i);
        bad += !k;
        i += k ? (size_t)k : 1;
    }
    if (!bad)
        return DF_OK;
    char *o = malloc(n + 2 * bad + 1), *w = o;
    if (!o)
        return df_error(DF_ENOMEM, "out of memory");
    for (size_t i = 0; i < n;) {
        int k = df_utf8_len(t + i);
        if (k)
            memcpy(w, t + i, (size_t)k), w += k, i += (size_t)k;
        else
            memcpy(w, "\xef\xbf\xbd", 3), w += 3, i++;
    }
    *w = 0;
    free(*text);
    *text = o;
    return DF_OK;
}

/* The turn's text and what of the template's end-of-turn text the sequence holds: a special stop
   token (<|im_end|>) is that text; a stop string's last token is ordinary text. */
static int turn_text(const df_tokenizer *tok, const df_turn_info *t, char **text, const char **kept)
{
    int64_t n = t->n_turn;
    *kept = NULL;
    if (n > 0 && df_tokenizer_is_special(tok, t->turn_tokens[n - 1])) {
        *kept = df_tokenizer_id_to_token(tok, t->turn_tokens[n - 1]);
        n--;
    }
    int rc = df_tokenizer_decode(tok, t->turn_tokens, n, false, text);
    return rc ? rc : utf8_replace(text);
}

static int append_msg(json_t *arr, const char *role, const char *content)
{
    json_t *m = json_pack("{s:s, s:s}", "role", role, "content", content);
    if (!m || json_array_append_new(arr, m))
        return df_error(DF_ENOMEM, "out of memory for a message");
    return DF_OK;
}

/* Run the turn's tool calls into `add` (tool messages). *n_calls: how many there were. */
static int run_tools(df_agent_loop *l, agent_seq *s, const char *text, json_t *add, int *n_calls)
{
    const df_agent_config *c = l->cfg;
    df_tool_calls calls = {0};
    int rc = df_tool_calls_parse(text, df_tool_set_names(c->tools), df_tool_set_size(c->tools),
                                 c->max_parallel_calls, &calls);
    *n_calls = rc ? 0 : calls.n_calls;
    for (int i = 0; !rc && i < calls.n_calls; i++) {
        df_tool_result r = {0};
        char *cut = NULL;
        rc = df_tool_session_execute(s->tools, &calls.calls[i], &r);
        if (!rc && r.text) /* a tool's message may quote a byte of a character (the calculator does) */
            rc = utf8_replace(&r.text);
        if (!rc)
            rc = df_agent_truncate(l->tok, r.text ? r.text : "", c->max_tool_response_length, c->truncate_side, &cut);
        if (!rc) {
            s->reward += r.reward;
            rc = append_msg(add, "tool", cut);
        }
        free(cut);
        df_tool_result_clear(&r);
    }
    df_tool_calls_clear(&calls);
    return rc;
}

/* No tool call: the interaction's reply into `add`, or *done. */
static int run_interaction(df_agent_loop *l, agent_seq *s, json_t *add, bool *done)
{
    const df_agent_config *c = l->cfg;
    if (!s->ia || (c->max_user_turns > 0 && s->user_turns >= c->max_user_turns)) {
        *done = true;
        return DF_OK;
    }
    char *msgs = json_dumps(s->messages, JSON_COMPACT);
    if (!msgs)
        return df_error(DF_ENOMEM, "out of memory");
    df_interaction_result r = {0};
    int rc = df_interaction_session_respond(s->ia, msgs, &r);
    free(msgs);
    if (!rc) {
        s->reward += r.reward;
        s->user_turns++;
        *done = r.should_terminate;
        if (!r.should_terminate)
            rc = append_msg(add, "user", r.text ? r.text : "");
    }
    df_interaction_result_clear(&r);
    return rc;
}

/* The environment steps on the turn; its observation into `add`, or *done. */
static int run_env(df_agent_loop *l, int64_t seq, const char *text, json_t *add, bool *done)
{
    char *obs = NULL;
    int rc = df_env_vec_turn(l->env, (int)seq, text, "user", &obs, done);
    json_t *arr = rc ? NULL : json_loads(obs, 0, NULL);
    if (!rc && !arr)
        rc = df_error(DF_EINVAL, "environment: observation messages do not parse");
    if (!rc && json_array_extend(add, arr))
        rc = df_error(DF_ENOMEM, "out of memory");
    json_decref(arr);
    free(obs);
    return rc;
}

/* The token ids of `add` after the conversation (which ends with the model's turn). */
static int render(df_agent_loop *l, agent_seq *s, json_t *add, const char *kept, df_turn_reply *reply)
{
    char *old = json_dumps(s->messages, JSON_COMPACT), *new = json_dumps(add, JSON_COMPACT);
    df_agent_render_opts o = {.tools_json = l->cfg->tools_json, .kept_suffix = kept};
    int64_t n = 0;
    free(l->ids);
    l->ids = NULL;
    int rc = old && new ? df_agent_render_delta(l->tok, old, new, &o, &l->ids, &n) : df_error(DF_ENOMEM, "out of memory");
    free(old), free(new);
    if (!rc && json_array_extend(s->messages, add))
        rc = df_error(DF_ENOMEM, "out of memory");
    reply->tokens = l->ids;
    reply->n_tokens = n;
    return rc;
}

static int on_turn_end(void *user, const df_turn_info *t, df_turn_reply *reply)
{
    df_agent_loop *l = user;
    agent_seq *s = &l->seqs[t->seq];
    char *text = NULL;
    const char *kept = NULL;
    json_t *add = json_array();
    bool done = false;
    int calls = 0;
    int rc = add ? turn_text(l->tok, t, &text, &kept) : df_error(DF_ENOMEM, "out of memory");
    if (!rc)
        rc = append_msg(s->messages, "assistant", text);
    if (!rc && l->env)
        rc = run_env(l, t->seq, text, add, &done);
    else if (!rc && l->cfg->tools)
        rc = run_tools(l, s, text, add, &calls);
    if (!rc && !l->env && !calls)
        rc = run_interaction(l, s, add, &done);
    if (!rc && !done)
        rc = render(l, s, add, kept, reply);
    s->done = done;
    reply->done = done;
    s->answered_len = t->n_response + (done ? 0 : reply->n_tokens);
    free(text);
    json_decref(add);
    return rc ? df_error_wrap(rc, "agent loop: sequence %lld, turn %lld", (long long)t->seq, (long long)t->turn) : DF_OK;
}

/* Row p's first messages: its raw_prompt, or the episode's first observation. */
static int first_messages(df_agent_loop *l, const df_batch *prompts, int64_t p, int64_t n_samples, char **out)
{
    if (l->env)
        return df_env_vec_prompt_messages(l->env, (int)(p * n_samples), NULL, out);
    const char *raw = df_batch_str(prompts, "raw_prompt", p);
    if (!raw)
        return df_error(DF_EINVAL, "row %lld has no raw_prompt (the prompt messages)", (long long)p);
    *out = strdup(raw);
    return *out ? DF_OK : df_error(DF_ENOMEM, "out of memory");
}

/* A JSON object member of extra_info as text ("{}" when absent). */
static char *kwargs_of(const char *extra_info, const char *key)
{
    json_t *e = extra_info ? json_loads(extra_info, 0, NULL) : NULL;
    json_t *v = json_is_object(e) ? json_object_get(e, key) : NULL;
    char *s = json_is_object(v) ? json_dumps(v, JSON_COMPACT) : strdup("{}");
    json_decref(e);
    return s;
}

static int start_sessions(df_agent_loop *l, const df_batch *prompts, int64_t p, int64_t j, int64_t gid,
                          agent_seq *s, const char *msgs)
{
    char id[64];
    snprintf(id, sizeof id, "%lld/%lld", (long long)gid, (long long)j);
    s->messages = json_loads(msgs, 0, NULL);
    if (!json_is_array(s->messages))
        return df_error(DF_EINVAL, "row %lld: the prompt messages are not a JSON array", (long long)p);
    const char *extra = df_batch_str(prompts, "extra_info", p);
    int rc = DF_OK;
    if (l->cfg->tools) {
        char *kw = kwargs_of(extra, "tools_kwargs");
        rc = kw ? df_tool_session_create(l->cfg->tools, id, kw, &s->tools) : df_error(DF_ENOMEM, "out of memory");
        free(kw);
    }
    if (!rc && l->cfg->interactions) {
        char *kw = kwargs_of(extra, "interaction_kwargs");
        rc = kw ? df_interaction_session_start(l->cfg->interactions, id, kw, &s->ia) : df_error(DF_ENOMEM, "out of memory");
        free(kw);
    }
    return rc ? df_error_wrap(rc, "row %lld", (long long)p) : DF_OK;
}

/* The environment's episodes: sample j of row p plays episode index[p]. */
static int start_env(df_agent_loop *l, const df_batch *prompts, int64_t n_samples, uint64_t seed)
{
    int64_t np = df_batch_size(prompts);
    const int64_t *idx = df_batch_i64(prompts, "index");
    int64_t *ids = malloc((size_t)(l->n_seqs ? l->n_seqs : 1) * sizeof *ids);
    if (!ids)
        return df_error(DF_ENOMEM, "out of memory");
    for (int64_t p = 0; p < np; p++)
        for (int64_t j = 0; j < n_samples; j++)
            ids[p * n_samples + j] = idx ? idx[p] : p;
    int rc = df_env_vec_create(&l->cfg->env, (int)l->n_seqs, &l->env);
    if (!rc)
        rc = df_env_vec_reset_ids(l->env, seed, ids);
    free(ids);
    return rc;
}

/* Encode every row's first messages into the copy's prompt_ids (and raw_prompt). */
static int set_prompts(df_agent_loop *l, df_batch *b, char **first)
{
    int64_t np = df_batch_size(b), total = 0;
    int64_t *off = calloc((size_t)np + 1, sizeof *off);
    int32_t **ids = calloc((size_t)(np ? np : 1), sizeof *ids), *all = NULL;
    int rc = off && ids ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    const int64_t max = l->cfg->max_prompt_length;
    for (int64_t p = 0; !rc && p < np; p++) {
        int64_t n = 0;
        rc = df_prompts_encode_json(l->tok, first[p], l->cfg->tools_json, &ids[p], &n);
        off[p + 1] = off[p] + n;
        if (!rc && max > 0 && n > max) /* the data's filter measured this rendering; an episode's is new */
            rc = df_error(DF_EINVAL, "the prompt has %lld tokens, more than data.max_prompt_length = %lld%s",
                          (long long)n, (long long)max,
                          l->env ? " (the environment's first observation: raise data.max_prompt_length)" : "");
        if (rc)
            rc = df_error_wrap(rc, "row %lld: rendering the prompt", (long long)p);
    }
    total = rc ? 0 : off[np];
    if (!rc && !(all = malloc((size_t)(total ? total : 1) * sizeof *all)))
        rc = df_error(DF_ENOMEM, "out of memory");
    for (int64_t p = 0; !rc && p < np; p++)
        memcpy(all + off[p], ids[p], (size_t)(off[p + 1] - off[p]) * sizeof *all);
    if (!rc)
        rc = df_batch_set_tok_i32(b, "prompt_ids", off, all);
    if (!rc && l->env)
        rc = df_batch_set_str(b, "raw_prompt", (const char *const *)first);
    for (int64_t p = 0; ids && p < np; p++)
        free(ids[p]);
    free(ids), free(off), free(all);
    return rc;
}

int df_agent_loop_begin(const df_agent_config *cfg, const df_tokenizer *tok, const df_batch *prompts,
                        int64_t n_samples, uint64_t env_seed, df_agent_loop **out, df_batch **gen_prompts)
{
    int64_t np = df_batch_size(prompts);
    df_agent_loop *l = calloc(1, sizeof *l);
    if (!l)
        return df_error(DF_ENOMEM, "out of memory");
    l->cfg = cfg, l->tok = tok, l->n_seqs = np * n_samples;
    l->h = (df_turn_handler){.user = l, .on_turn_end = on_turn_end, .max_assistant_turns = cfg->max_assistant_turns};
    l->seqs = calloc((size_t)(l->n_seqs ? l->n_seqs : 1), sizeof *l->seqs);
    char **first = calloc((size_t)(np ? np : 1), sizeof *first);
    df_batch *b = NULL;
    int rc = l->seqs && first ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    if (!rc && cfg->env.env && l->n_seqs > 0)
        rc = start_env(l, prompts, n_samples, env_seed);
    const int64_t *idx = df_batch_i64(prompts, "index");
    for (int64_t p = 0; !rc && p < np; p++) {
        rc = first_messages(l, prompts, p, n_samples, &first[p]);
        for (int64_t j = 0; !rc && j < n_samples; j++)
            rc = start_sessions(l, prompts, p, j, idx ? idx[p] : p, &l->seqs[p * n_samples + j], first[p]);
    }
    if (!rc)
        rc = df_batch_copy(prompts, &b);
    if (!rc)
        rc = set_prompts(l, b, first);
    for (int64_t p = 0; first && p < np; p++)
        free(first[p]);
    free(first);
    if (rc) {
        df_batch_free(b);
        df_agent_loop_free(l);
        return df_error_wrap(rc, "multi-turn rollout");
    }
    *out = l;
    *gen_prompts = b;
    return DF_OK;
}

const df_turn_handler *df_agent_loop_handler(df_agent_loop *l) { return &l->h; }

int df_agent_loop_finish(df_agent_loop *l, df_batch *gen)
{
    int64_t n = l->n_seqs;
    if (df_batch_size(gen) != n)
        return df_error(DF_EINVAL, "agent loop: %lld generated rows for %lld sequences",
                        (long long)df_batch_size(gen), (long long)n);
    const int64_t *off = df_batch_offsets(gen, "response_ids");
    float *reward = calloc((size_t)(n ? n : 1), sizeof *reward), *ret = calloc((size_t)(n ? n : 1), sizeof *ret);
    int64_t *calls = calloc((size_t)(n ? n : 1), sizeof *calls), *win = calloc((size_t)(n ? n : 1), sizeof *win);
    int rc = reward && ret && calls && win && off ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = 0; !rc && i < n; i++) {
        agent_seq *s = &l->seqs[i];
        reward[i] = (float)s->reward;
        calls[i] = s->tools ? df_tool_session_n_calls(s->tools) : 0;
        if (!l->env)
            continue;
        /* the engine stopped it: its last model turn was not answered when the response grew after */
        if (!s->done)
            rc = df_env_vec_cut(l->env, (int)i, off[i + 1] - off[i] > s->answered_len);
        const df_env_episode *e = df_env_vec_episode(l->env, (int)i);
        ret[i] = (float)e->ret;
        win[i] = e->success;
    }
    if (!rc)
        rc = df_batch_set_f32(gen, "agent_reward", reward);
    if (!rc)
        rc = df_batch_set_i64(gen, "tool_calls", calls);
    if (!rc && l->env)
        rc = df_batch_set_f32(gen, "env_return", ret);
    if (!rc && l->env)
        rc = df_batch_set_i64(gen, "env_success", win);
    free(reward), free(ret), free(calls), free(win);
    return rc;
}

void df_agent_loop_free(df_agent_loop *l)
{
    if (!l)
        return;
    for (int64_t i = 0; l->seqs && i < l->n_seqs; i++) {
        json_decref(l->seqs[i].messages);
        df_tool_session_free(l->seqs[i].tools);
        df_interaction_session_free(l->seqs[i].ia);
    }
    free(l->seqs);
    df_env_vec_free(l->env);
    free(l->ids);
    free(l);
}

int df_agent_generate(const df_agent_config *cfg, const df_tokenizer *tok, df_rollout_engine *e, const df_model *m,
                      const df_batch *prompts, int64_t n, const df_sampling_params *sp, uint64_t seed,
                      uint64_t env_seed, const char *label, df_batch **out)
{
    if (!cfg)
        return df_generate_batch_turns(e, m, prompts, n, sp, NULL, seed, label, out);
    df_agent_loop *l = NULL;
    df_batch *gp = NULL, *b = NULL;
    int rc = df_agent_loop_begin(cfg, tok, prompts, n, env_seed, &l, &gp);
    if (!rc)
        rc = df_generate_batch_turns(e, m, gp, n, sp, df_agent_loop_handler(l), seed, label, &b);
    if (!rc)
        rc = df_agent_loop_finish(l, b);
    df_agent_loop_free(l);
    df_batch_free(gp);
    if (rc)
        df_batch_free(b);
    else
        *out = b;
    return rc;
}
