/*
 * Text environments (include/distflow/env.h, src/agent/env*.c): the built-in guess-the-number game
 * (a transcript for a fixed seed, checked by hand; malformed actions; truncation; its config),
 * vectorised episodes equal to single-episode runs whatever the split over ranks, the rollout's
 * adapter (messages, done, cut) and its metrics, and dag.environment_path's resolution.
 */
#include "distflow/env.h"
#include "distflow/rng.h"

#include "testutil.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void *make(const char *config)
{
    void *st = NULL;
    if (df_env_guess_number.create(config, &st))
        fail_msg("%s", df_last_error());
    return st;
}

static void reset(void *st, uint64_t seed, const char *expect)
{
    char *obs = NULL;
    assert_int_equal(df_env_guess_number.reset(st, seed, &obs), DF_OK);
    if (expect)
        assert_string_equal(obs, expect);
    free(obs);
}

/* One step: its observation, reward, flags and info must be exactly these. */
static void step(void *st, const char *action, const char *obs, double reward, bool term, bool trunc,
                 const char *info)
{
    df_env_step s;
    assert_int_equal(df_env_guess_number.step(st, action, &s), DF_OK);
    assert_string_equal(s.observation, obs);
    assert_true(s.reward == reward);
    assert_int_equal(s.terminated, term);
    assert_int_equal(s.truncated, trunc);
    assert_string_equal(s.info, info);
    df_env_step_clear(&s);
}

/* Seed 1 hides 58 (1 + df_rng_below(seed 1, 100), checked below). A bisection finds it in 7 guesses:
   50 low, 75 high, 62 high, 56 low, 59 high, 57 low, 58: reward 1 - 0.05 * 6 = 0.7. */
static void test_guess_transcript(void **state)
{
    (void)state;
    df_rng r;
    df_rng_seed(&r, 1);
    assert_int_equal(1 + (int)df_rng_below(&r, 100), 58);
    void *st = make("{}");
    reset(st, 1, "I am thinking of a whole number from 1 to 100. Find it in at most 10 guesses. After each "
                 "guess I say whether my number is higher or lower. Think briefly, then end your reply with "
                 "your guess as <answer>N</answer>.");
    const char *f = "{\"success\": false, \"valid\": true, \"turns\": %d}";
    char info[80];
    struct { const char *action, *obs; } t[] = {
        {"Start in the middle. <answer>50</answer>", "50 is too low: my number is higher. 9 guesses left."},
        {"<answer> 75 </answer>", "75 is too high: my number is lower. 8 guesses left."},
        {"Between 51 and 74, so <answer>62</answer>", "62 is too high: my number is lower. 7 guesses left."},
        {"Answer: 56", "56 is too low: my number is higher. 6 guesses left."},
        {"<answer>1</answer> no wait <answer>59</answer>", "59 is too high: my number is lower. 5 guesses left."},
        {"<answer>+57</answer>", "57 is too low: my number is higher. 4 guesses left."},
    };
    for (int i = 0; i < 6; i++) {
        snprintf(info, sizeof info, f, i + 1);
        step(st, t[i].action, t[i].obs, 0.0, false, false, info);
    }
    step(st, "It must be <answer>58</answer>", "Correct! My number is 58. You found it in 7 guesses.", 0.7, true,
         false, "{\"success\": true, \"valid\": true, \"turns\": 7}");
    /* the episode has ended: stepping it is an error, a reset starts it again */
    df_env_step s;
    assert_int_equal(df_env_guess_number.step(st, "<answer>58</answer>", &s), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "the episode has ended; reset it"));
    reset(st, 1, NULL);
    step(st, "<answer>58</answer>", "Correct! My number is 58. You found it in 1 guess.", 1.0, true, false,
         "{\"success\": true, \"valid\": true, \"turns\": 1}");
    df_env_guess_number.release(st);
}

/* What the model cannot get right is answered, counts as a turn and is no error. */
static void test_guess_malformed(void **state)
{
    (void)state;
    void *st = make("{\"max_turns\": 20}");
    reset(st, 1, NULL);
    const char *tail = ". End your reply with your guess as <answer>N</answer>, N a whole number from 1 to 100.";
    char want[256];
    struct { const char *action, *why; } bad[] = {
        {"I think it is fifty.", "I found no guess in your reply"},
        {"<answer>fifty</answer>", "I could not read your guess: <answer>fifty</answer> does not hold a whole number"},
        {"<answer>50", "I could not read your guess: your <answer> has no closing </answer>"},
        {"<answer>5 0</answer>", "I could not read your guess: <answer>5 0</answer> does not hold a whole number"},
        {"<answer>1234567890123</answer>",
         "I could not read your guess: <answer>1234567890123</answer> does not hold a whole number"},
        {"Answer: maybe 50", "I could not read your guess: \"Answer:\" is not followed by a whole number"},
        {"", "I found no guess in your reply"},
    };
    int n = (int)(sizeof bad / sizeof *bad);
    for (int i = 0; i < n; i++) {
        snprintf(want, sizeof want, "%s%s %d guesses left.", bad[i].why, tail, 20 - (i + 1));
        char info[80];
        snprintf(info, sizeof info, "{\"success\": false, \"valid\": false, \"turns\": %d}", i + 1);
        step(st, bad[i].action, want, 0.0, false, false, info);
    }
    /* outside the range: read, answered, a turn */
    step(st, "<answer>101</answer>", "101 is outside the range: my number is from 1 to 100. 12 guesses left.", 0.0,
         false, false, "{\"success\": false, \"valid\": true, \"turns\": 8}");
    step(st, "Answer: -3", "-3 is outside the range: my number is from 1 to 100. 11 guesses left.", 0.0, false, false,
         "{\"success\": false, \"valid\": true, \"turns\": 9}");
    /* a late win still beats a loss: 1 - 0.05 * 9 */
    df_env_step s;
    assert_int_equal(df_env_guess_number.step(st, "<answer>58</answer>", &s), DF_OK);
    assert_true(s.terminated && s.reward > 0.549 && s.reward < 0.551);
    df_env_step_clear(&s);
    df_env_guess_number.release(st);
}

static void test_guess_truncation(void **state)
{
    (void)state;
    void *st = make("{\"low\": 1, \"high\": 100, \"max_turns\": 3, \"turn_penalty\": 0}");
    reset(st, 1, NULL);
    step(st, "<answer>10</answer>", "10 is too low: my number is higher. 2 guesses left.", 0.0, false, false,
         "{\"success\": false, \"valid\": true, \"turns\": 1}");
    step(st, "no idea", "I found no guess in your reply. End your reply with your guess as <answer>N</answer>, N a "
                        "whole number from 1 to 100. 1 guess left.", 0.0, false, false,
         "{\"success\": false, \"valid\": false, \"turns\": 2}");
    step(st, "<answer>90</answer>", "90 is too high: my number is lower. No guesses left: my number was 58.", 0.0,
         false, true, "{\"success\": false, \"valid\": true, \"turns\": 3}");
    df_env_step s;
    assert_int_equal(df_env_guess_number.step(st, "<answer>58</answer>", &s), DF_EINVAL);
    df_env_guess_number.release(st);
    /* the same episode with turn_penalty 0: a win is worth 1 whatever the turn */
    st = make("{\"turn_penalty\": 0}");
    reset(st, 1, NULL);
    step(st, "<answer>50</answer>", "50 is too low: my number is higher. 9 guesses left.", 0.0, false, false,
         "{\"success\": false, \"valid\": true, \"turns\": 1}");
    step(st, "<answer>58</answer>", "Correct! My number is 58. You found it in 2 guesses.", 1.0, true, false,
         "{\"success\": true, \"valid\": true, \"turns\": 2}");
    df_env_guess_number.release(st);
    /* a win after 12 guesses at turn_penalty 0.1 would be worth -0.1: it is floored at 0.1, above a loss */
    st = make("{\"turn_penalty\": 0.1, \"max_turns\": 20}");
    reset(st, 1, NULL);
    for (int i = 0; i < 11; i++) {
        assert_int_equal(df_env_guess_number.step(st, "<answer>1</answer>", &s), DF_OK);
        df_env_step_clear(&s);
    }
    step(st, "<answer>58</answer>", "Correct! My number is 58. You found it in 12 guesses.", 0.1, true, false,
         "{\"success\": true, \"valid\": true, \"turns\": 12}");
    df_env_guess_number.release(st);
}

static void test_guess_config(void **state)
{
    (void)state;
    struct { const char *config, *msg; } bad[] = {
        {"[]", "guess_number: config is not a JSON object"},
        {"{\"lo\": 1}", "unknown key config.lo (known: low, high, max_turns, turn_penalty); did you mean 'low'?"},
        {"{\"low\": 5, \"high\": 5}", "config.low (5) must be below config.high (5)"},
        {"{\"max_turns\": 0}", "config.max_turns must be an integer in [1, 1000], got 0"},
        {"{\"high\": 1.5}", "config.high must be an integer"},
        {"{\"turn_penalty\": 2}", "config.turn_penalty must be a number in [0, 1], got 2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        void *st = NULL;
        assert_int_equal(df_env_guess_number.create(bad[i].config, &st), DF_EINVAL);
        if (!strstr(df_last_error(), bad[i].msg))
            fail_msg("config %s: \"%s\" lacks \"%s\"", bad[i].config, df_last_error(), bad[i].msg);
    }
}

/* ---- grid_nav ------------------------------------------------------------------------------------ */

static void grid_step(void *st, const char *move, const char *obs, double reward, bool term, bool trunc)
{
    df_env_step s;
    char a[64];
    snprintf(a, sizeof a, "Let me go %s. <answer>%s</answer>", move, move);
    assert_int_equal(df_env_grid_nav.step(st, a, &s), DF_OK);
    assert_string_equal(s.observation, obs);
    assert_true(s.reward == reward);
    assert_int_equal(s.terminated, term);
    assert_int_equal(s.truncated, trunc);
    df_env_step_clear(&s);
}

/* Seed 2 of the default 5x5 grid with 4 walls, checked by hand: A at (4, 2), G at (2, 4), walls at
   (1, 5), (3, 1), (4, 4); shortest path 4. right, right (the wall at (4, 4)), up, up, an unreadable
   move, right: the goal in 6 moves, reward 1 - 0.05 * (6 - 4) = 0.9. */
static void test_grid_transcript(void **state)
{
    (void)state;
    void *st = NULL;
    assert_int_equal(df_env_grid_nav.create("{}", &st), DF_OK);
    char *obs = NULL;
    assert_int_equal(df_env_grid_nav.reset(st, 2, &obs), DF_OK);
    assert_string_equal(obs, "You are A on this 5x5 grid; G is the goal and # are walls (row 1 is the top):\n"
                             ". . . . #\n. . . G .\n# . . . .\n. A . # .\n. . . . .\n"
                             "You are at row 4, column 2; the goal is at row 2, column 4. Move one cell per turn: "
                             "end your reply with <answer>up</answer>, <answer>down</answer>, <answer>left</answer> "
                             "or <answer>right</answer>. You have 20 moves.");
    free(obs);
    grid_step(st, "right", "You moved right. You are at row 4, column 3. 19 moves left.", 0, false, false);
    grid_step(st, "right", "A wall blocks the way right. You are at row 4, column 3. 18 moves left.", 0, false, false);
    grid_step(st, "up", "You moved up. You are at row 3, column 3. 17 moves left.", 0, false, false);
    grid_step(st, " UP ", "You moved up. You are at row 2, column 3. 16 moves left.", 0, false, false);
    grid_step(st, "north", "I could not read a move. End your reply with <answer>up</answer>, <answer>down</answer>, "
                           "<answer>left</answer> or <answer>right</answer>. You are at row 2, column 3. 15 moves "
                           "left.", 0, false, false);
    grid_step(st, "right", "You moved right. You are at row 2, column 4: the goal. You reached it in 6 moves (the "
                           "shortest path has 4).", 0.9, true, false);
    /* seed 1: A in the top-left corner; the edge stops it; two moves of a 2-move limit truncate */
    df_env_grid_nav.release(st);
    assert_int_equal(df_env_grid_nav.create("{\"max_turns\": 2}", &st), DF_OK);
    assert_int_equal(df_env_grid_nav.reset(st, 1, &obs), DF_OK);
    assert_non_null(strstr(obs, "You are at row 1, column 1"));
    free(obs);
    grid_step(st, "up", "You cannot move up: that is the edge of the grid. You are at row 1, column 1. 1 move left.",
              0, false, false);
    grid_step(st, "left", "You cannot move left: that is the edge of the grid. You are at row 1, column 1. No moves "
                          "left.", 0, false, true);
    df_env_grid_nav.release(st);
    struct { const char *config, *msg; } bad[] = {
        {"{\"size\": 10}", "grid_nav: config.size must be an integer in [3, 9]"},
        {"{\"size\": 3, \"walls\": 4}", "grid_nav: config.walls must be an integer in [0, 3], got 4"},
        {"{\"goal\": 1}", "grid_nav: unknown key config.goal (known: size, walls, max_turns, turn_penalty)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(df_env_grid_nav.create(bad[i].config, &st), DF_EINVAL);
        assert_non_null(strstr(df_last_error(), bad[i].msg));
    }
}

/* Every seed and size gives a start and goal at least size - 1 moves apart with a path between. */
static void test_grid_solvable(void **state)
{
    (void)state;
    for (int size = 3; size <= 9; size++) {
        char cfg[64];
        snprintf(cfg, sizeof cfg, "{\"size\": %d, \"walls\": %d}", size, size * size / 3);
        void *st = NULL;
        assert_int_equal(df_env_grid_nav.create(cfg, &st), DF_OK);
        for (uint64_t seed = 0; seed < 60; seed++) {
            char *obs = NULL;
            assert_int_equal(df_env_grid_nav.reset(st, seed, &obs), DF_OK);
            free(obs);
            df_env_step s;
            assert_int_equal(df_env_grid_nav.step(st, "?", &s), DF_OK);
            const char *p = strstr(s.info, "\"shortest\": ");
            assert_non_null(p);
            assert_true(atoi(p + 12) >= size - 1);
            df_env_step_clear(&s);
        }
        df_env_grid_nav.release(st);
    }
}

/* ---- vectorised episodes ----------------------------------------------------------------------- */

/* A policy that bisects from what the last observation says; lo / hi per episode. */
static void policy(const char *obs, int *lo, int *hi, char *action, size_t cap)
{
    int g = (*lo + *hi) / 2;
    if (strstr(obs, "too low"))
        *lo = atoi(obs) + 1;
    else if (strstr(obs, "too high"))
        *hi = atoi(obs) - 1;
    g = (*lo + *hi) / 2;
    snprintf(action, cap, "<answer>%d</answer>", g);
}

/* Run episodes [first, first + n) of base seed `seed` in one vector; write each one's transcript. */
static void run_vec(const df_env_spec *spec, uint64_t seed, int first, int n, char (*log)[2048], double *ret)
{
    df_env_vec *v = NULL;
    assert_int_equal(df_env_vec_create(spec, n, &v), DF_OK);
    assert_int_equal(df_env_vec_reset(v, seed, first), DF_OK);
    int lo[16], hi[16];
    char act[16][64];
    const char *acts[16];
    for (int i = 0; i < n; i++)
        lo[i] = 1, hi[i] = 100, log[i][0] = 0;
    while (df_env_vec_n_active(v) > 0) {
        for (int i = 0; i < n; i++) {
            acts[i] = NULL;
            if (df_env_vec_episode(v, i)->done)
                continue;
            policy(df_env_vec_observation(v, i), &lo[i], &hi[i], act[i], sizeof act[i]);
            acts[i] = act[i];
        }
        assert_int_equal(df_env_vec_step(v, acts), DF_OK);
        for (int i = 0; i < n; i++)
            if (acts[i])
                strncat(log[i], df_env_vec_observation(v, i), 2047 - strlen(log[i]));
    }
    for (int i = 0; i < n; i++)
        ret[i] = df_env_vec_episode(v, i)->ret;
    df_env_vec_free(v);
}

/* Six episodes in one vector = two ranks of three = six single-episode runs with df_env_episode_seed. */
static void test_vec_equals_single(void **state)
{
    (void)state;
    df_env_spec spec;
    assert_int_equal(df_env_spec_load("guess_number", NULL, &spec), DF_OK);
    char all[6][2048], half[6][2048];
    double r_all[6], r_half[6];
    run_vec(&spec, 1234, 0, 6, all, r_all);
    run_vec(&spec, 1234, 0, 3, half, r_half);
    run_vec(&spec, 1234, 3, 3, half + 3, r_half + 3);
    int distinct = 0;
    for (int i = 0; i < 6; i++) {
        assert_string_equal(all[i], half[i]);
        assert_true(r_all[i] == r_half[i] && r_all[i] > 0); /* bisection always wins in <= 7 of 10 */
        distinct += i && strcmp(all[i], all[0]);
        /* the same episode alone */
        void *st = make("{}");
        reset(st, df_env_episode_seed(1234, i), NULL);
        int lo = 1, hi = 100;
        char act[64], log[2048] = "", *obs = NULL;
        df_env_step s = {.observation = strdup("")};
        for (;;) {
            policy(s.observation, &lo, &hi, act, sizeof act);
            df_env_step_clear(&s);
            assert_int_equal(df_env_guess_number.step(st, act, &s), DF_OK);
            strncat(log, s.observation, sizeof log - 1 - strlen(log));
            if (s.terminated || s.truncated)
                break;
        }
        assert_string_equal(log, all[i]);
        df_env_step_clear(&s);
        free(obs);
        df_env_guess_number.release(st);
    }
    assert_true(distinct >= 4); /* the seeds differ per episode */
    df_env_spec_clear(&spec);
}

/* GRPO groups: rows sharing an id play one episode; distinct ids equal df_env_vec_reset's seeds. */
static void test_vec_group_ids(void **state)
{
    (void)state;
    df_env_spec spec;
    assert_int_equal(df_env_spec_load("grid_nav", NULL, &spec), DF_OK);
    df_env_vec *a = NULL, *b = NULL;
    assert_int_equal(df_env_vec_create(&spec, 4, &a), DF_OK);
    assert_int_equal(df_env_vec_create(&spec, 4, &b), DF_OK);
    const int64_t ids[4] = {6, 6, 7, 7};
    assert_int_equal(df_env_vec_reset_ids(a, 42, ids), DF_OK);
    assert_int_equal(df_env_vec_reset(b, 42, 6), DF_OK); /* rows: episodes 6, 7, 8, 9 */
    assert_string_equal(df_env_vec_observation(a, 0), df_env_vec_observation(a, 1));
    assert_string_equal(df_env_vec_observation(a, 2), df_env_vec_observation(a, 3));
    assert_string_not_equal(df_env_vec_observation(a, 0), df_env_vec_observation(a, 2));
    assert_string_equal(df_env_vec_observation(a, 0), df_env_vec_observation(b, 0));
    assert_string_equal(df_env_vec_observation(a, 2), df_env_vec_observation(b, 1));
    assert_true(df_env_vec_episode(a, 3)->seed == df_env_episode_seed(42, 7));
    const int64_t neg[4] = {0, -1, 0, 0};
    assert_int_equal(df_env_vec_reset_ids(a, 42, neg), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "row 1 has a negative id"));
    df_env_vec_free(a);
    df_env_vec_free(b);
    df_env_spec_clear(&spec);
}

/* The adapter: prompt messages, a turn's messages and done, cut, errors, and the metrics. */
static void test_adapter(void **state)
{
    (void)state;
    df_env_spec spec;
    assert_int_equal(df_env_spec_load("guess_number", NULL, &spec), DF_OK);
    df_env_vec *v = NULL;
    assert_int_equal(df_env_vec_create(&spec, 3, &v), DF_OK);
    /* episode 0 of base seed s has seed df_env_episode_seed(s, 0): find a base whose episode 0 hides 58 is
       not needed; the turn texts below are checked against the episode's own secret */
    assert_int_equal(df_env_vec_reset(v, 99, 0), DF_OK);
    char *m = NULL;
    assert_int_equal(df_env_vec_prompt_messages(v, 0, "You play games.", &m), DF_OK);
    assert_non_null(strstr(m, "[{\"role\":\"system\",\"content\":\"You play games.\"},{\"role\":\"user\","
                              "\"content\":\"I am thinking of a whole number from 1 to 100."));
    free(m);
    assert_int_equal(df_env_vec_prompt_messages(v, 1, NULL, &m), DF_OK);
    assert_true(!strncmp(m, "[{\"role\":\"user\"", 15));
    free(m);
    bool done = true;
    assert_int_equal(df_env_vec_turn(v, 0, "no guess", "user", &m, &done), DF_OK);
    assert_false(done);
    assert_string_equal(m, "[{\"role\":\"user\",\"content\":\"I found no guess in your reply. End your reply with "
                           "your guess as <answer>N</answer>, N a whole number from 1 to 100. 9 guesses left.\"}]");
    free(m);
    assert_int_equal(df_env_vec_turn(v, 0, "x", "assistant", &m, &done), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "role is user or tool, not 'assistant'"));
    /* episode 0 wins by trying every number; episode 1 is cut by the engine; episode 2 by truncation */
    int g = 1;
    for (done = false; !done; g++) {
        char a[32];
        snprintf(a, sizeof a, "Answer: %d", g);
        free(m);
        assert_int_equal(df_env_vec_turn(v, 0, a, "tool", &m, &done), DF_OK);
        assert_true(!strncmp(m, "[{\"role\":\"tool\"", 15));
    }
    free(m);
    const df_env_episode *e0 = df_env_vec_episode(v, 0);
    int won = e0->terminated && e0->success;
    assert_int_equal(df_env_vec_turn(v, 0, "Answer: 1", "user", &m, &done), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "episode 0 has ended"));
    assert_int_equal(df_env_vec_turn(v, 1, "Answer: 0", "user", &m, &done), DF_OK);
    free(m);
    assert_int_equal(df_env_vec_cut(v, 1, true), DF_OK);
    for (int k = 0; k < 10; k++) {
        assert_int_equal(df_env_vec_turn(v, 2, "pass", "user", &m, &done), DF_OK);
        free(m);
        assert_int_equal(done, k == 9);
    }
    assert_int_equal(df_env_vec_n_active(v), 0);
    df_metrics *mt = df_metrics_new();
    assert_int_equal(df_env_vec_metrics(v, mt), DF_OK);
    /* episode 0: 1 + s0 model turns + s0 steps (s0 = its steps, 1 + a miss: the turn above had no guess);
       episode 1: 1 + 2 model turns + 1 step; episode 2: 1 + 10 + 10 */
    double s0 = (double)e0->steps, t0 = 1 + 2 * s0;
    assert_true(won && s0 >= 2 && s0 <= 10);
    assert_true(df_metrics_get(mt, "num_turns/min", -1) == (t0 < 4 ? t0 : 4));
    assert_true(df_metrics_get(mt, "num_turns/max", -1) == 21);
    assert_true(df_metrics_get(mt, "num_turns/mean", -1) == (t0 + 4 + 21) / 3);
    assert_true(df_metrics_get(mt, "env/success_rate", -1) == 1.0 / 3);
    assert_true(df_metrics_get(mt, "env/truncated_rate", -1) == 2.0 / 3);
    assert_true(df_metrics_get(mt, "env/episode_return/max", -1) == e0->ret);
    assert_true(df_metrics_get(mt, "env/episode_return/min", -1) == 0);
    assert_true(df_metrics_get(mt, "env/steps/mean", -1) == (s0 + 1 + 10) / 3);
    df_metrics_free(mt);
    assert_true(df_env_vec_episode(v, 1)->truncated && df_env_vec_episode(v, 1)->model_turns == 2);
    df_env_vec_free(v);
    df_env_spec_clear(&spec);
}

/* ---- dag.environment_path ----------------------------------------------------------------------- */

static void expect_load(const char *path, int code, const char *msg)
{
    df_env_spec s;
    assert_int_equal(df_env_spec_load(path, NULL, &s), code);
    if (!strstr(df_last_error(), msg))
        fail_msg("'%s': \"%s\" lacks \"%s\"", path ? path : "(null)", df_last_error(), msg);
    assert_null(s.env);
}

static void test_spec_load(void **state)
{
    const char *dir = *state;
    char path[512];
    snprintf(path, sizeof path, "%s/env.yaml", dir);
    FILE *f = fopen(path, "w");
    fputs("environment:\n  name: guess_number\n  config: {low: 10, high: 20, max_turns: 4}\n", f);
    fclose(f);
    df_env_spec s;
    assert_int_equal(df_env_spec_load(path, NULL, &s), DF_OK);
    assert_ptr_equal(s.env, &df_env_guess_number);
    assert_string_equal(s.config, "{\"high\":20,\"low\":10,\"max_turns\":4}");
    df_env_vec *v = NULL;
    assert_int_equal(df_env_vec_create(&s, 1, &v), DF_OK);
    assert_int_equal(df_env_vec_reset(v, 5, 0), DF_OK);
    assert_non_null(strstr(df_env_vec_observation(v, 0), "from 10 to 20. Find it in at most 4 guesses"));
    df_env_vec_free(v);
    df_env_spec_clear(&s);

    expect_load(NULL, DF_EINVAL, "no environment named");
    expect_load("guess", DF_ENOTFOUND, "unknown environment class 'guess' (known: grid_nav, guess_number)");
    expect_load("/nonexistent/env.yaml", DF_ENOTFOUND, "environment config /nonexistent/env.yaml");
    expect_load("/nonexistent/libx.so:env", DF_ENOTFOUND, "a plugin ref must be loaded first (df_plugin_env)");
    struct { const char *body, *msg; } bad[] = {
        {"name: guess_number\n", "no `environment:` mapping"},
        {"environment:\n  config: {}\n", "environment.name must be a class name or a plugin ref"},
        {"environment:\n  name: guess_number\n  config: [1]\n", "environment.config must be a mapping"},
        {"environment:\n  name: grid\n", "environment.name: unknown environment class 'grid'"},
        {"environment:\n  name: guess_number\n  config: {low: 3, high: 2}\n",
         "environment 'guess_number' (" /* then the path */},
        /* nothing is ignored: a key given twice, a key of no place, each with its line */
        {"environment:\n  name: guess_number\n  config: {low: 1, low: 2}\n",
         "env.yaml:3:20: the key 'low' appears twice in one mapping"},
        {"environment:\n  name: guess_number\n  confg: {low: 1}\n",
         "env.yaml:3:3: environment: unknown key 'confg' (environment holds name and config); did you mean 'config'?"},
        {"environment:\n  name: guess_number\nenv_path: x\n",
         "env.yaml:3:1: unknown key 'env_path' (the file holds `environment:` only)"},
        /* the class's errors point at the key's line */
        {"environment:\n  name: guess_number\n  config:\n    low: 1\n    max_turn: 5\n",
         "env.yaml:5:5, environment.config.max_turn): guess_number: unknown key config.max_turn (known: low, high, "
         "max_turns, turn_penalty); did you mean 'max_turns'?"},
        {"environment:\n  name: guess_number\n  config:\n    max_turns: ten\n",
         "env.yaml:4:5, environment.config.max_turns): guess_number: config.max_turns must be an integer in "
         "[1, 1000], got \"ten\""},
        {"environment:\n  name: grid_nav\n  config: {size: 4, turn_penalty: 1.5}\n",
         "env.yaml:3:21, environment.config.turn_penalty): grid_nav: config.turn_penalty must be a number in "
         "[0, 1], got 1.5"},
        {"environment:\n  name: guess_number\n  config: {max_turns: 3, max_turns_x: 1}\n",
         "environment.config.max_turns_x): guess_number: unknown key config.max_turns_x"},
        {"environment: {name: guess_number\n", "env.yaml:"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        f = fopen(path, "w");
        fputs(bad[i].body, f);
        fclose(f);
        int rc = df_env_spec_load(path, NULL, &s);
        assert_int_not_equal(rc, DF_OK);
        if (!strstr(df_last_error(), bad[i].msg))
            fail_msg("case %zu: \"%s\" lacks \"%s\"", i, df_last_error(), bad[i].msg);
    }
    assert_non_null(strstr(df_last_error(), "environment config"));
}

static int setup(void **state) { return df_test_mkdtemp(state); }
static int teardown(void **state) { return df_test_rmtree(state); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_guess_transcript),
        cmocka_unit_test(test_guess_malformed),
        cmocka_unit_test(test_guess_truncation),
        cmocka_unit_test(test_guess_config),
        cmocka_unit_test(test_grid_transcript),
        cmocka_unit_test(test_grid_solvable),
        cmocka_unit_test(test_vec_equals_single),
        cmocka_unit_test(test_vec_group_ids),
        cmocka_unit_test(test_adapter),
        cmocka_unit_test_setup_teardown(test_spec_load, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
