/* Vectorised embodied episodes (include/distflow/embodied.h): the class registry, num_envs episodes
 * stepped one model call (one chunk of actions) at a time with siiRL's LIBEROAdapter stopping rule,
 * the trajectory embedding, and the action text codec. */
#include "distflow/embodied.h"

#include "util/fn_registry.h"
#include "util/sbuf.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static void class_marker(void) {}

static const df_fn_entry k_classes[] = {
    {"grid_place", class_marker, &df_embodied_grid_place},
};

static df_fn_registry g_classes = {"embodied environment class", k_classes, sizeof k_classes / sizeof *k_classes,
                                   NULL, 0, 0, NULL, 0};

int df_embodied_env_register(const df_embodied_env *env)
{
    if (!env || !env->name || !env->name[0] || !env->create || !env->describe || !env->reset || !env->step ||
        !env->observe || !env->features || !env->task_description)
        return df_error(DF_EINVAL, "df_embodied_env_register: a class needs a name, create, describe, reset, step, "
                                   "observe, features and task_description");
    return df_fn_registry_add_data(&g_classes, env->name, (df_any_fn)env->step, env, sizeof *env);
}

int df_embodied_env_lookup(const char *name, const df_embodied_env **out)
{
    *out = NULL;
    const df_fn_entry *e = name ? df_fn_registry_find_entry(&g_classes, name) : NULL;
    if (e && e->data) {
        *out = e->data;
        return DF_OK;
    }
    char known[512];
    df_fn_registry_names(&g_classes, known, sizeof known);
    return df_error(DF_ENOTFOUND, "unknown embodied environment class '%s' (known: %s)", name ? name : "(null)", known);
}

typedef struct emb_slot {
    void *state;
    df_embodied_episode ep;
    float *last;    /* [feature_dim] the current state's features */
    double *sum;    /* [feature_dim] summed over the episode's states */
    int64_t states; /* states summed */
} emb_slot;

struct df_embodied_vec {
    const df_embodied_env *env;
    df_embodied_vec_opts o;
    df_embodied_info info;
    emb_slot *slots;
    float *scratch; /* [feature_dim] */
};

int64_t df_embodied_model_calls(int64_t max_steps, int action_chunks_len)
{
    return action_chunks_len < 1 || max_steps < 1 ? 0 : (max_steps + action_chunks_len - 1) / action_chunks_len;
}

void df_embodied_vec_free(df_embodied_vec *v)
{
    if (!v)
        return;
    for (int i = 0; v->slots && i < v->o.num_envs; i++) {
        if (v->slots[i].state && v->env->release)
            v->env->release(v->slots[i].state);
        free(v->slots[i].last);
        free(v->slots[i].sum);
    }
    free(v->slots);
    free(v->scratch);
    free(v);
}

static int check_opts(const df_embodied_env *env, const df_embodied_vec_opts *o)
{
    if (!env || !o)
        return df_error(DF_EINVAL, "df_embodied_vec_create: NULL class or options");
    if (o->num_envs < 1 || o->max_steps < 1 || o->action_chunks_len < 1)
        return df_error(DF_EINVAL, "df_embodied_vec_create: num_envs, max_steps and action_chunks_len must be >= 1 "
                                   "(got %d, %lld, %d)", o->num_envs, (long long)o->max_steps, o->action_chunks_len);
    return DF_OK;
}

/* The class's info from its first episode, checked for what the vector relies on. */
static int read_info(df_embodied_vec *v)
{
    df_embodied_info *in = &v->info;
    v->env->describe(v->slots[0].state, in);
    if (in->action_token_len < 1 || in->action_token_len > DF_EMBODIED_MAX_TOKEN_LEN || in->action_vocab < 1 ||
        in->feature_dim < 1)
        return df_error(DF_EINVAL, "embodied environment '%s': describe gave action_token_len %d (1..%d), "
                                   "action_vocab %d, feature_dim %d (both >= 1)", v->env->name, in->action_token_len,
                        DF_EMBODIED_MAX_TOKEN_LEN, in->action_vocab, in->feature_dim);
    return DF_OK;
}

int df_embodied_vec_create(const df_embodied_env *env, const char *config_json, const df_embodied_vec_opts *o,
                           df_embodied_vec **out)
{
    if (!out)
        return df_error(DF_EINVAL, "df_embodied_vec_create: NULL out");
    *out = NULL;
    int rc = check_opts(env, o);
    if (rc)
        return rc;
    df_embodied_vec *v = calloc(1, sizeof *v);
    if (!v || !(v->slots = calloc((size_t)o->num_envs, sizeof *v->slots))) {
        free(v);
        return df_error(DF_ENOMEM, "out of memory");
    }
    v->env = env, v->o = *o;
    for (int i = 0; i < o->num_envs && !rc; i++) {
        rc = env->create(config_json ? config_json : "{}", &v->slots[i].state);
        if (rc)
            rc = df_error_wrap(rc, "embodied environment '%s'", env->name);
        else if (i == 0)
            rc = read_info(v);
        if (rc)
            break;
        size_t f = (size_t)v->info.feature_dim;
        if (!(v->slots[i].last = calloc(f, sizeof(float))) || !(v->slots[i].sum = calloc(f, sizeof(double))))
            rc = df_error(DF_ENOMEM, "out of memory");
    }
    if (!rc && !(v->scratch = calloc((size_t)v->info.feature_dim, sizeof(float))))
        rc = df_error(DF_ENOMEM, "out of memory");
    if (rc) {
        df_embodied_vec_free(v);
        return rc;
    }
    *out = v;
    return DF_OK;
}

const df_embodied_info *df_embodied_vec_info(const df_embodied_vec *v) { return v ? &v->info : NULL; }

/* Record the slot's current state: its features become the last, and join the mean. */
static void observe_state(df_embodied_vec *v, emb_slot *s)
{
    v->env->features(s->state, s->last);
    for (int k = 0; k < v->info.feature_dim; k++)
        s->sum[k] += s->last[k];
    s->states++;
}

int df_embodied_vec_reset(df_embodied_vec *v, const int64_t *task_ids, const int64_t *trial_ids)
{
    if (!v || !task_ids || !trial_ids)
        return df_error(DF_EINVAL, "df_embodied_vec_reset: NULL vector or ids");
    for (int i = 0; i < v->o.num_envs; i++) {
        emb_slot *s = &v->slots[i];
        s->ep = (df_embodied_episode){.task_id = task_ids[i], .trial_id = trial_ids[i]};
        int rc = v->env->reset(s->state, task_ids[i], trial_ids[i]);
        if (rc)
            return df_error_wrap(rc, "embodied environment '%s': reset of episode %d", v->env->name, i);
        memset(s->sum, 0, (size_t)v->info.feature_dim * sizeof *s->sum);
        s->states = 0;
        observe_state(v, s);
        s->ep.active = true;
    }
    return DF_OK;
}

/* Whether a token value is no value of its position (the action then is a no-op). */
static bool token_invalid(const df_embodied_info *in, int pos, int32_t t)
{
    return t < 0 || t >= in->action_vocab || (in->token_names && !in->token_names[pos * in->action_vocab + t]);
}

/* Execute one action of an active slot and apply the stopping rule. */
static int step_one(df_embodied_vec *v, int i, const int32_t *action)
{
    emb_slot *s = &v->slots[i];
    for (int p = 0; p < v->info.action_token_len; p++)
        if (token_invalid(&v->info, p, action[p])) {
            s->ep.invalid++;
            break;
        }
    bool complete = false;
    int rc = v->env->step(s->state, action, &complete);
    if (rc)
        return df_error_wrap(rc, "embodied environment '%s': step of episode %d", v->env->name, i);
    s->ep.finish_step++;
    observe_state(v, s);
    s->ep.complete = complete;
    s->ep.active = !complete && s->ep.finish_step < v->o.max_steps;
    return DF_OK;
}

int df_embodied_vec_step_chunk(df_embodied_vec *v, const int32_t *tokens)
{
    if (!v || !tokens)
        return df_error(DF_EINVAL, "df_embodied_vec_step_chunk: NULL vector or tokens");
    int chunk = v->o.action_chunks_len, tl = v->info.action_token_len;
    for (int j = 0; j < chunk; j++)
        for (int i = 0; i < v->o.num_envs; i++) {
            if (!v->slots[i].ep.active)
                continue;
            int rc = step_one(v, i, tokens + ((size_t)i * (size_t)chunk + (size_t)j) * (size_t)tl);
            if (rc)
                return rc;
        }
    return DF_OK;
}

int df_embodied_vec_n_active(const df_embodied_vec *v)
{
    int k = 0;
    for (int i = 0; v && i < v->o.num_envs; i++)
        k += v->slots[i].ep.active;
    return k;
}

const df_embodied_episode *df_embodied_vec_episode(const df_embodied_vec *v, int i)
{
    return v && i >= 0 && i < v->o.num_envs ? &v->slots[i].ep : NULL;
}

static int check_row(const df_embodied_vec *v, int i, const char *who)
{
    if (!v || i < 0 || i >= v->o.num_envs)
        return df_error(DF_EINVAL, "%s: episode %d out of range (%d episodes)", who, i, v ? v->o.num_envs : 0);
    return DF_OK;
}

int df_embodied_vec_observation(const df_embodied_vec *v, int i, char **text)
{
    int rc = check_row(v, i, "df_embodied_vec_observation");
    return rc ? rc : v->env->observe(v->slots[i].state, text);
}

int df_embodied_vec_features(const df_embodied_vec *v, int i, float *out)
{
    int rc = check_row(v, i, "df_embodied_vec_features");
    if (!rc)
        memcpy(out, v->slots[i].last, (size_t)v->info.feature_dim * sizeof *out);
    return rc;
}

int df_embodied_vec_embedding(const df_embodied_vec *v, int i, float *out)
{
    int rc = check_row(v, i, "df_embodied_vec_embedding");
    if (rc)
        return rc;
    const emb_slot *s = &v->slots[i];
    int f = v->info.feature_dim;
    for (int k = 0; k < f; k++) {
        out[k] = s->last[k];
        out[f + k] = s->states ? (float)(s->sum[k] / (double)s->states) : 0.0f;
    }
    return DF_OK;
}

/* ---- text codec ---------------------------------------------------------------------------------- */

int df_embodied_actions_text(const df_embodied_info *in, const int32_t *tokens, int n_actions, char **text)
{
    *text = NULL;
    if (!in || !in->token_names)
        return df_error(DF_EINVAL, "df_embodied_actions_text: the class has no action words");
    df_sbuf b = {0};
    for (int k = 0; k < n_actions * in->action_token_len; k++) {
        int p = k % in->action_token_len;
        if (token_invalid(in, p, tokens[k])) {
            df_sbuf_free(&b);
            return df_error(DF_EINVAL, "df_embodied_actions_text: token %d (position %d) is %d, no action word",
                            k, p, (int)tokens[k]);
        }
        df_sbuf_printf(&b, "%s%s", k ? " " : "", in->token_names[p * in->action_vocab + tokens[k]]);
    }
    return df_sbuf_finish(&b, text);
}

/* The token value named `w` (n bytes) at position p, or -1. */
static int32_t word_token(const df_embodied_info *in, int p, const char *w, size_t n)
{
    for (int t = 0; t < in->action_vocab; t++) {
        const char *name = in->token_names[p * in->action_vocab + t];
        if (name && strlen(name) == n && !strncmp(name, w, n))
            return t;
    }
    return -1;
}

int df_embodied_actions_parse(const df_embodied_info *in, const char *text, int n_actions, int32_t *tokens,
                              int *n_valid)
{
    if (!in || !in->token_names || !text)
        return df_error(DF_EINVAL, "df_embodied_actions_parse: %s", text ? "the class has no action words" : "NULL text");
    int total = n_actions * in->action_token_len, k = 0, valid = 0;
    const char *p = text;
    while (k < total) {
        while (*p && isspace((unsigned char)*p))
            p++;
        if (!*p)
            break;
        const char *w = p;
        while (*p && !isspace((unsigned char)*p))
            p++;
        tokens[k] = word_token(in, k % in->action_token_len, w, (size_t)(p - w));
        valid += tokens[k] >= 0;
        k++;
    }
    for (; k < total; k++)
        tokens[k] = -1;
    if (n_valid)
        *n_valid = valid;
    return DF_OK;
}
