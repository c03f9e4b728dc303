/*
 * Fuzz target: a model turn through the guess-the-number environment (src/agent/env_guess.c):
 * agent_env_guess_parse, then the same text as an action of df_env_guess_number's step, over a
 * 1..100 game whose secret is the parsed guess when it is in range (so every path of the step runs).
 * Properties: every text is a valid action (the step never fails: an unreadable guess is answered);
 * the parser's guess fits its 12 digits; the step is a win exactly when the text's guess is the
 * secret, worth 1; the observation is non-empty and the info a JSON object whose "valid" says
 * whether a guess was read. So every seed is ok-*.
 */
#include "fuzz.h"

#include "agent/agent_internal.h"
#include "distflow/env.h"

#include <jansson.h>

int df_fuzz_status;

/* The seed whose episode hides `secret` in 1..100 (seeds 0.. are tried in order; a few hundred do). */
static uint64_t seed_for(int64_t secret)
{
    static uint64_t table[101];
    static bool done;
    if (!done) {
        void *st = NULL;
        df_env_guess_number.create("{\"turn_penalty\": 0}", &st);
        for (uint64_t seed = 0, found = 0; found < 100 && seed < 100000; seed++) {
            char *obs = NULL;
            df_env_guess_number.reset(st, seed, &obs);
            free(obs);
            for (int g = 1; g <= 100; g++)
                if (!table[g]) {
                    df_env_step s;
                    char a[32];
                    snprintf(a, sizeof a, "<answer>%d</answer>", g);
                    df_env_guess_number.step(st, a, &s);
                    bool win = s.terminated;
                    df_env_step_clear(&s);
                    df_env_guess_number.reset(st, seed, &obs);
                    free(obs);
                    if (win) {
                        table[g] = seed + 1, found++;
                        break;
                    }
                }
        }
        df_env_guess_number.release(st);
        done = true;
    }
    return secret >= 1 && secret <= 100 && table[secret] ? table[secret] - 1 : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    df_clear_error();
    char *text = df_fuzz_cstr(data, size);
    int64_t guess = 0;
    char what[96] = "";
    int kind = agent_env_guess_parse(text, &guess, what, sizeof what);
    DF_FUZZ_CHECK(kind == AGENT_GUESS_OK || kind == AGENT_GUESS_NONE || kind == AGENT_GUESS_MALFORMED);
    DF_FUZZ_CHECK(kind == AGENT_GUESS_OK ? guess >= -999999999999LL && guess <= 999999999999LL : what[0] != 0);
    void *st = NULL;
    df_fuzz_status = df_env_guess_number.create("{\"turn_penalty\": 0}", &st);
    DF_FUZZ_CHECK(df_fuzz_status == 0);
    char *obs = NULL;
    df_fuzz_status = df_env_guess_number.reset(st, seed_for(kind == AGENT_GUESS_OK ? guess : 0), &obs);
    free(obs);
    df_env_step s;
    if (!df_fuzz_status)
        df_fuzz_status = df_env_guess_number.step(st, text, &s);
    DF_FUZZ_CHECK(df_fuzz_status == 0);
    bool in_range = kind == AGENT_GUESS_OK && guess >= 1 && guess <= 100;
    DF_FUZZ_CHECK(s.terminated == in_range && s.reward == (in_range ? 1.0 : 0.0) && !s.truncated);
    DF_FUZZ_CHECK(s.observation && s.observation[0]);
    json_t *info = json_loads(s.info, 0, NULL);
    DF_FUZZ_CHECK(json_is_object(info) && json_is_true(json_object_get(info, "valid")) == (kind == AGENT_GUESS_OK));
    json_decref(info);
    df_env_step_clear(&s);
    df_env_guess_number.release(st);
    free(text);
    return 0;
}
