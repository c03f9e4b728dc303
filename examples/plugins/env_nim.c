/*
 * env_nim.c — an example distflow environment plugin (distflow/env.h): the game of Nim against the
 * environment. A pile of stones (its size drawn from the seed); the model and the environment take
 * turns removing 1, 2 or 3 stones; whoever takes the last stone wins. The environment plays the
 * winning strategy when it has one (leave a multiple of 4), so the model wins only by playing it
 * too. It shows every part of the df_env lifecycle:
 *   create   reads the environment's `config:` (min_stones, max_stones, max_turns) with
 *            df_env_config_read, so a misspelt or ill-typed key is an error naming its line
 *   reset    draws the pile from the seed and describes the game
 *   step     applies the model's move (<answer>k</answer>), answers with the environment's move;
 *            an unreadable or illegal move is explained and costs a turn
 *   release  frees the episode's state
 * An environment config names it by its ref (dag.environment_path: nim.yaml):
 *   environment:
 *     name: build/plugins/libenv_nim.so:nim_env
 *     config: {min_stones: 9, max_stones: 21}
 */
#define _POSIX_C_SOURCE 200809L /* strdup */

#include <distflow/dag.h>
#include <distflow/env.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

DF_PLUGIN_DECLARE_ABI;

typedef struct nim {
    int min_stones, max_stones, max_turns;
    int pile, turns, done;
} nim;

static int nim_create(const char *config_json, void **state)
{
    int64_t min_stones = 10, max_stones = 20, max_turns = 12;
    /* the host's reader: an unknown key, a wrong type or a value out of range is an error */
    const df_env_option opts[] = {
        {"min_stones", DF_ENV_OPT_INT, 1, 1000, &min_stones},
        {"max_stones", DF_ENV_OPT_INT, 1, 1000, &max_stones},
        {"max_turns", DF_ENV_OPT_INT, 1, 1000, &max_turns},
    };
    int rc = df_env_config_read("nim", config_json, opts, 3);
    if (!rc && min_stones > max_stones)
        rc = df_error(DF_EINVAL, "nim: config.min_stones (%d) is above config.max_stones (%d)", (int)min_stones,
                      (int)max_stones);
    nim *s = rc ? NULL : calloc(1, sizeof *s);
    if (!rc && !s)
        rc = df_error(DF_ENOMEM, "out of memory");
    if (!rc) {
        s->min_stones = (int)min_stones, s->max_stones = (int)max_stones, s->max_turns = (int)max_turns;
        *state = s;
    }
    return rc;
}

/* splitmix64: the plugin's own generator, so that it needs nothing of the host but df_error. */
static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static int nim_reset(void *state, uint64_t seed, char **observation)
{
    nim *s = state;
    s->pile = s->min_stones + (int)(mix(seed) % (uint64_t)(s->max_stones - s->min_stones + 1));
    s->turns = s->done = 0;
    char text[400];
    snprintf(text, sizeof text, "We play Nim with a pile of %d stones. We take turns removing 1, 2 or 3 stones; "
             "whoever takes the last stone wins. You move first. End your reply with your move as "
             "<answer>k</answer>.", s->pile);
    return (*observation = strdup(text)) ? DF_OK : df_error(DF_ENOMEM, "out of memory");
}

/* The model's move: the number in the last <answer>...</answer>, or 0 when there is none. */
static int read_move(const char *action)
{
    const char *last = NULL;
    for (const char *p = strstr(action, "<answer>"); p; p = strstr(p + 1, "<answer>"))
        last = p;
    int k = 0;
    char close[2];
    return last && sscanf(last + 8, " %d %1[<]", &k, close) == 2 ? k : 0;
}

static int nim_step(void *state, const char *action, df_env_step *out)
{
    nim *s = state;
    memset(out, 0, sizeof *out);
    if (s->done)
        return df_error(DF_EINVAL, "nim: the episode has ended; reset it");
    char text[300];
    int k = read_move(action), win = 0;
    s->turns++;
    if (k < 1 || k > 3 || k > s->pile) {
        snprintf(text, sizeof text, "That is not a legal move: take 1, 2 or 3 stones, at most the %d left, "
                 "as <answer>k</answer>.", s->pile);
    } else if ((s->pile -= k) == 0) {
        win = 1;
        snprintf(text, sizeof text, "You took the last stone. You win!");
    } else {
        int mine = s->pile % 4 ? s->pile % 4 : 1; /* leave a multiple of 4 when possible */
        s->pile -= mine;
        if (s->pile == 0)
            snprintf(text, sizeof text, "I take %d and with it the last stone. I win.", mine);
        else
            snprintf(text, sizeof text, "I take %d; %d left in the pile. Your move.", mine, s->pile);
    }
    out->terminated = s->pile == 0;
    out->truncated = !out->terminated && s->turns >= s->max_turns;
    out->reward = win ? 1.0 : 0.0;
    s->done = out->terminated || out->truncated;
    out->observation = strdup(text);
    out->info = strdup(win ? "{\"success\": true}" : "{\"success\": false}");
    return out->observation && out->info ? DF_OK : df_error(DF_ENOMEM, "out of memory");
}

static void nim_release(void *state) { free(state); }

DF_API const df_env nim_env = {
    .name = "nim",
    .create = nim_create,
    .reset = nim_reset,
    .step = nim_step,
    .release = nim_release,
};
