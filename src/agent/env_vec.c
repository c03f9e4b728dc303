/* Vectorised environment episodes and the rollout's adapter (include/distflow/env.h): N episodes of
 * one class on one rank, reset from per-episode seeds, stepped together; a model turn in, the
 * observation as chat messages out; verl's num_turns and the env episode metrics. */
#include "distflow/env.h"

#include "distflow/rng.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* A stream coordinate that keeps environment seeds apart from the other uses of the run's seed. */
#define ENV_SEED_STREAM 0x656e76u /* "env" */

typedef struct env_slot {
    void *state;
    char *observation;
    df_env_episode ep;
} env_slot;

struct df_env_vec {
    const df_env *env;
    int n;
    env_slot *slots;
};

uint64_t df_env_episode_seed(uint64_t seed, int64_t episode)
{
    return df_rng_key(seed, ENV_SEED_STREAM, (uint64_t)episode, 0);
}

void df_env_vec_free(df_env_vec *v)
{
    if (!v)
        return;
    for (int i = 0; i < v->n; i++) {
        if (v->env->release && v->slots[i].state)
            v->env->release(v->slots[i].state);
        free(v->slots[i].observation);
    }
    free(v->slots);
    free(v);
}

int df_env_vec_create(const df_env_spec *spec, int n, df_env_vec **out)
{
    if (!out)
        return df_error(DF_EINVAL, "df_env_vec_create: NULL out");
    *out = NULL;
    if (!spec || !spec->env || !spec->config || n < 1)
        return df_error(DF_EINVAL, "df_env_vec_create: needs a loaded spec and n >= 1 (n = %d)", n);
    df_env_vec *v = calloc(1, sizeof *v);
    if (!v || !(v->slots = calloc((size_t)n, sizeof *v->slots))) {
        free(v);
        return df_error(DF_ENOMEM, "out of memory");
    }
    v->env = spec->env;
    for (; v->n < n; v->n++) {
        int rc = spec->env->create(spec->config, &v->slots[v->n].state);
        if (rc) {
            df_env_vec_free(v);
            return df_error_wrap(rc, "environment '%s'", spec->env->name);
        }
        v->slots[v->n].ep.done = true; /* nothing to step before the first reset */
    }
    *out = v;
    return DF_OK;
}

int df_env_vec_size(const df_env_vec *v) { return v ? v->n : 0; }

/* Reset row i as global episode `id`. */
static int reset_one(df_env_vec *v, int i, uint64_t seed, int64_t id)
{
    env_slot *s = &v->slots[i];
    free(s->observation);
    s->observation = NULL;
    s->ep = (df_env_episode){.seed = df_env_episode_seed(seed, id)};
    int rc = v->env->reset(s->state, s->ep.seed, &s->observation);
    if (rc) {
        s->ep.done = true;
        return df_error_wrap(rc, "environment '%s': reset of episode %lld", v->env->name, (long long)id);
    }
    return DF_OK;
}

int df_env_vec_reset(df_env_vec *v, uint64_t seed, int64_t first_episode)
{
    if (!v || first_episode < 0)
        return df_error(DF_EINVAL, "df_env_vec_reset: NULL vector or negative first_episode");
    int rc = DF_OK;
    for (int i = 0; i < v->n && !rc; i++)
        rc = reset_one(v, i, seed, first_episode + i);
    return rc;
}

int df_env_vec_reset_ids(df_env_vec *v, uint64_t seed, const int64_t *ids)
{
    if (!v || !ids)
        return df_error(DF_EINVAL, "df_env_vec_reset_ids: NULL vector or ids");
    int rc = DF_OK;
    for (int i = 0; i < v->n && !rc; i++)
        rc = ids[i] < 0 ? df_error(DF_EINVAL, "df_env_vec_reset_ids: row %d has a negative id", i)
                        : reset_one(v, i, seed, ids[i]);
    return rc;
}

const char *df_env_vec_observation(const df_env_vec *v, int i)
{
    return v && i >= 0 && i < v->n ? v->slots[i].observation : NULL;
}

const df_env_episode *df_env_vec_episode(const df_env_vec *v, int i)
{
    return v && i >= 0 && i < v->n ? &v->slots[i].ep : NULL;
}

int df_env_vec_n_active(const df_env_vec *v)
{
    int k = 0;
    for (int i = 0; v && i < v->n; i++)
        k += !v->slots[i].ep.done;
    return k;
}

/* Whether the step's info JSON says "success": true. */
static bool info_success(const char *info)
{
    json_t *o = info ? json_loads(info, 0, NULL) : NULL;
    bool yes = json_is_true(json_object_get(o, "success"));
    json_decref(o);
    return yes;
}

/* Step episode i (active) with `action` and record the step. */
static int step_one(df_env_vec *v, int i, const char *action)
{
    env_slot *s = &v->slots[i];
    df_env_step st;
    int rc = v->env->step(s->state, action, &st);
    if (rc) {
        df_env_step_clear(&st);
        return df_error_wrap(rc, "environment '%s': step of episode %d", v->env->name, i);
    }
    free(s->observation);
    s->observation = st.observation ? st.observation : calloc(1, 1);
    st.observation = NULL;
    s->ep.steps++;
    s->ep.ret += st.reward;
    s->ep.terminated = st.terminated;
    s->ep.truncated = st.truncated;
    s->ep.success = info_success(st.info);
    s->ep.done = st.terminated || st.truncated;
    df_env_step_clear(&st);
    return s->observation ? DF_OK : df_error(DF_ENOMEM, "out of memory");
}

int df_env_vec_step(df_env_vec *v, const char *const *actions)
{
    if (!v || !actions)
        return df_error(DF_EINVAL, "df_env_vec_step: NULL vector or actions");
    for (int i = 0; i < v->n; i++) {
        if (v->slots[i].ep.done)
            continue;
        if (!actions[i])
            return df_error(DF_EINVAL, "df_env_vec_step: episode %d is active but its action is NULL", i);
        v->slots[i].ep.model_turns++;
        int rc = step_one(v, i, actions[i]);
        if (rc)
            return rc;
    }
    return DF_OK;
}

/* ---- the adapter --------------------------------------------------------------------------------- */

/* Append {"role": role, "content": text} to arr. */
static int push_message(json_t *arr, const char *role, const char *text)
{
    json_t *m = json_pack("{s:s, s:s}", "role", role, "content", text);
    return m && !json_array_append_new(arr, m) ? DF_OK : df_error(DF_ENOMEM, "out of memory");
}

static int dump(json_t *arr, int rc, char **out)
{
    if (!rc && !(*out = json_dumps(arr, JSON_COMPACT)))
        rc = df_error(DF_ENOMEM, "out of memory");
    json_decref(arr);
    return rc;
}

int df_env_vec_prompt_messages(const df_env_vec *v, int i, const char *system_prompt, char **messages)
{
    if (!messages || !df_env_vec_observation(v, i))
        return df_error(DF_EINVAL, "df_env_vec_prompt_messages: episode %d does not exist or was not reset", i);
    *messages = NULL;
    json_t *arr = json_array();
    int rc = arr ? DF_OK : df_error(DF_ENOMEM, "out of memory");
    if (!rc && system_prompt && system_prompt[0])
        rc = push_message(arr, "system", system_prompt);
    if (!rc)
        rc = push_message(arr, "user", v->slots[i].observation);
    return dump(arr, rc, messages);
}

int df_env_vec_turn(df_env_vec *v, int i, const char *text, const char *role, char **messages, bool *done)
{
    if (!messages || !done || !text || !role)
        return df_error(DF_EINVAL, "df_env_vec_turn: NULL argument");
    *messages = NULL;
    *done = false;
    if (!v || i < 0 || i >= v->n)
        return df_error(DF_EINVAL, "df_env_vec_turn: no episode %d", i);
    if (strcmp(role, "user") && strcmp(role, "tool"))
        return df_error(DF_EINVAL, "df_env_vec_turn: an observation's role is user or tool, not '%s'", role);
    if (v->slots[i].ep.done)
        return df_error(DF_EINVAL, "df_env_vec_turn: episode %d has ended", i);
    v->slots[i].ep.model_turns++;
    int rc = step_one(v, i, text);
    if (rc)
        return rc;
    *done = v->slots[i].ep.done;
    json_t *arr = json_array();
    rc = arr ? push_message(arr, role, v->slots[i].observation) : df_error(DF_ENOMEM, "out of memory");
    return dump(arr, rc, messages);
}

int df_env_vec_cut(df_env_vec *v, int i, bool counted_turn)
{
    if (!v || i < 0 || i >= v->n)
        return df_error(DF_EINVAL, "df_env_vec_cut: no episode %d", i);
    df_env_episode *e = &v->slots[i].ep;
    if (e->done)
        return DF_OK;
    e->model_turns += counted_turn;
    e->truncated = e->done = true;
    return DF_OK;
}

/* ---- metrics ------------------------------------------------------------------------------------- */

static int set3(df_metrics *m, const char *prefix, double lo, double hi, double sum, int n)
{
    char k[96];
    int rc = 0;
    snprintf(k, sizeof k, "%s/min", prefix);
    rc |= df_metrics_set(m, k, lo);
    snprintf(k, sizeof k, "%s/max", prefix);
    rc |= df_metrics_set(m, k, hi);
    snprintf(k, sizeof k, "%s/mean", prefix);
    rc |= df_metrics_set(m, k, sum / n);
    return rc ? df_error(DF_ENOMEM, "out of memory") : DF_OK;
}

int df_env_vec_metrics(const df_env_vec *v, df_metrics *m)
{
    if (!v || !m)
        return df_error(DF_EINVAL, "df_env_vec_metrics: NULL argument");
    double t_lo = 0, t_hi = 0, t_sum = 0, r_lo = 0, r_hi = 0, r_sum = 0, steps = 0, won = 0, cut = 0;
    for (int i = 0; i < v->n; i++) {
        const df_env_episode *e = &v->slots[i].ep;
        /* verl counts the prompt, every assistant turn and every user / tool reply */
        double turns = 1.0 + (double)e->model_turns + (double)e->steps, r = e->ret;
        t_lo = i ? (turns < t_lo ? turns : t_lo) : turns;
        t_hi = i ? (turns > t_hi ? turns : t_hi) : turns;
        r_lo = i ? (r < r_lo ? r : r_lo) : r;
        r_hi = i ? (r > r_hi ? r : r_hi) : r;
        t_sum += turns, r_sum += r, steps += (double)e->steps;
        won += e->success, cut += e->truncated;
    }
    int rc = set3(m, "num_turns", t_lo, t_hi, t_sum, v->n);
    if (!rc)
        rc = set3(m, "env/episode_return", r_lo, r_hi, r_sum, v->n);
    if (!rc && (df_metrics_set(m, "env/success_rate", won / v->n) || df_metrics_set(m, "env/truncated_rate", cut / v->n) ||
                df_metrics_set(m, "env/steps/mean", steps / v->n)))
        rc = df_error(DF_ENOMEM, "out of memory");
    return rc;
}
