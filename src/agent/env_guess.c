/* The built-in guess-the-number environment (include/distflow/env.h: df_env_guess_number;
 * docs/environments.md). The environment draws a whole number in [low, high] from the seed; the
 * model guesses, the environment answers "higher" / "lower" / "correct". It needs several turns
 * (7 for 1..100 by bisection), so it exercises the multi-turn loop; it is deterministic given the
 * seed, so a transcript can be checked by hand. */
#include "distflow/env.h"

#include "distflow/rng.h"

#include "agent/agent_internal.h"
#include "util/sbuf.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct guess_config {
    int64_t low, high;   /* the range of the secret, inclusive */
    int64_t max_turns;   /* guesses before the episode is truncated */
    double turn_penalty; /* subtracted from the success reward per guess after the first */
} guess_config;

typedef struct guess_state {
    guess_config cfg;
    int64_t secret, turns;
    bool done, started;
} guess_state;

/* ---- config ------------------------------------------------------------------------------------- */

static int parse_config(const char *config_json, guess_config *c)
{
    *c = (guess_config){.low = 1, .high = 100, .max_turns = 10, .turn_penalty = 0.05};
    const double lim = 1e9; /* keeps every difference and message well inside int64 */
    const df_env_option opts[] = {
        {"low", DF_ENV_OPT_INT, -lim, lim, &c->low},
        {"high", DF_ENV_OPT_INT, -lim, lim, &c->high},
        {"max_turns", DF_ENV_OPT_INT, 1, 1000, &c->max_turns},
        {"turn_penalty", DF_ENV_OPT_NUMBER, 0, 1, &c->turn_penalty},
    };
    int rc = df_env_config_read("guess_number", config_json, opts, (int)(sizeof opts / sizeof *opts));
    if (!rc && c->low >= c->high)
        rc = df_error(DF_EINVAL, "guess_number: config.low (%lld) must be below config.high (%lld)",
                      (long long)c->low, (long long)c->high);
    return rc;
}

/* ---- the action --------------------------------------------------------------------------------- */

/* The guess in `s` (trimmed of spaces): an optional sign and 1..12 digits, nothing else. */
static bool read_int(const char *s, size_t n, int64_t *v)
{
    while (n && isspace((unsigned char)*s))
        s++, n--;
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
    size_t i = (n && (*s == '-' || *s == '+')) ? 1 : 0;
    if (i == n || n - i > 12)
        return false;
    int64_t x = 0;
    for (size_t k = i; k < n; k++) {
        if (!isdigit((unsigned char)s[k]))
            return false;
        x = x * 10 + (s[k] - '0');
    }
    *v = *s == '-' ? -x : x;
    return true;
}

static const char *last_of(const char *text, const char *needle)
{
    const char *last = NULL;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
        last = p;
    return last;
}

int agent_env_guess_parse(const char *text, int64_t *guess, char *what, size_t cap)
{
    /* the last <answer>...</answer> block wins: a model may think aloud with earlier numbers */
    const char *open = last_of(text, "<answer>");
    if (open) {
        const char *body = open + 8, *close = strstr(body, "</answer>");
        if (!close) {
            snprintf(what, cap, "your <answer> has no closing </answer>");
            return AGENT_GUESS_MALFORMED;
        }
        if (read_int(body, (size_t)(close - body), guess))
            return AGENT_GUESS_OK;
        snprintf(what, cap, "<answer>%.*s</answer> does not hold a whole number",
                 (int)((close - body) > 40 ? 40 : close - body), body);
        return AGENT_GUESS_MALFORMED;
    }
    const char *ans = last_of(text, "Answer:");
    if (ans) {
        const char *p = ans + 7, *e;
        while (*p == ' ' || *p == '\t')
            p++;
        e = p;
        if (*e == '-' || *e == '+')
            e++;
        while (isdigit((unsigned char)*e))
            e++;
        if (read_int(p, (size_t)(e - p), guess))
            return AGENT_GUESS_OK;
        snprintf(what, cap, "\"Answer:\" is not followed by a whole number");
        return AGENT_GUESS_MALFORMED;
    }
    snprintf(what, cap, "I found no guess in your reply");
    return AGENT_GUESS_NONE;
}

/* ---- the vtable --------------------------------------------------------------------------------- */

static int guess_create(const char *config_json, void **state)
{
    guess_config c;
    int rc = parse_config(config_json, &c);
    if (rc)
        return rc;
    guess_state *s = calloc(1, sizeof *s);
    if (!s)
        return df_error(DF_ENOMEM, "out of memory");
    s->cfg = c;
    *state = s;
    return DF_OK;
}

static int guess_reset(void *state, uint64_t seed, char **observation)
{
    guess_state *s = state;
    df_rng r;
    df_rng_seed(&r, seed);
    s->secret = s->cfg.low + (int64_t)df_rng_below(&r, (uint64_t)(s->cfg.high - s->cfg.low + 1));
    s->turns = 0;
    s->done = false;
    s->started = true;
    df_sbuf b = {0};
    df_sbuf_printf(&b, "I am thinking of a whole number from %lld to %lld. Find it in at most %lld guesses. "
                       "After each guess I say whether my number is higher or lower. Think briefly, then end "
                       "your reply with your guess as <answer>N</answer>.",
                   (long long)s->cfg.low, (long long)s->cfg.high, (long long)s->cfg.max_turns);
    return df_sbuf_finish(&b, observation);
}

/* The reward of a win after `turns` guesses: 1, less turn_penalty for every guess after the first
   (never below turn_penalty, so a late win still beats a loss). */
static double win_reward(const guess_config *c, int64_t turns)
{
    double r = 1.0 - c->turn_penalty * (double)(turns - 1);
    return r < c->turn_penalty ? c->turn_penalty : r;
}

static void describe(const guess_state *s, int kind, int64_t g, const char *what, df_sbuf *b, bool *win)
{
    *win = false;
    if (kind != AGENT_GUESS_OK)
        df_sbuf_printf(b, "%s%s. End your reply with your guess as <answer>N</answer>, N a whole number from "
                          "%lld to %lld.", kind == AGENT_GUESS_NONE ? "" : "I could not read your guess: ",
                       what, (long long)s->cfg.low, (long long)s->cfg.high);
    else if (g < s->cfg.low || g > s->cfg.high)
        df_sbuf_printf(b, "%lld is outside the range: my number is from %lld to %lld.", (long long)g,
                       (long long)s->cfg.low, (long long)s->cfg.high);
    else if (g == s->secret) {
        *win = true;
        df_sbuf_printf(b, "Correct! My number is %lld. You found it in %lld %s.", (long long)g, (long long)s->turns,
                       s->turns == 1 ? "guess" : "guesses");
    } else
        df_sbuf_printf(b, "%lld is too %s: my number is %s.", (long long)g, g < s->secret ? "low" : "high",
                       g < s->secret ? "higher" : "lower");
}

static int guess_step(void *state, const char *action, df_env_step *out)
{
    guess_state *s = state;
    memset(out, 0, sizeof *out);
    if (!action)
        return df_error(DF_EINVAL, "guess_number: NULL action");
    if (!s->started || s->done)
        return df_error(DF_EINVAL, "guess_number: the episode has %s; reset it", s->started ? "ended" : "not started");
    int64_t g = 0;
    char what[96];
    int kind = agent_env_guess_parse(action, &g, what, sizeof what);
    s->turns++; /* every reply is a turn, a malformed one too: the turn limit bounds the episode */
    df_sbuf b = {0};
    bool win;
    describe(s, kind, g, what, &b, &win);
    int64_t left = s->cfg.max_turns - s->turns;
    if (win) {
        out->terminated = true;
        out->reward = win_reward(&s->cfg, s->turns);
    } else if (left <= 0) {
        out->truncated = true;
        df_sbuf_printf(&b, " No guesses left: my number was %lld.", (long long)s->secret);
    } else {
        df_sbuf_printf(&b, " %lld %s left.", (long long)left, left == 1 ? "guess" : "guesses");
    }
    s->done = out->terminated || out->truncated;
    char info[160];
    snprintf(info, sizeof info, "{\"success\": %s, \"valid\": %s, \"turns\": %lld}", win ? "true" : "false",
             kind == AGENT_GUESS_OK ? "true" : "false", (long long)s->turns);
    int rc = df_sbuf_finish(&b, &out->observation);
    if (!rc && !(out->info = strdup(info)))
        rc = df_error(DF_ENOMEM, "out of memory");
    if (rc)
        df_env_step_clear(out);
    return rc;
}

static void guess_release(void *state) { free(state); }

const df_env df_env_guess_number = {
    .name = "guess_number",
    .create = guess_create,
    .reset = guess_reset,
    .step = guess_step,
    .release = guess_release,
};
