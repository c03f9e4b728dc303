/*
 * The built-in embodied simulator grid_place and the vectorised episodes (include/distflow/embodied.h,
 * src/embodied/): dynamics on a layout drawn by hand (an obstacle and the edge block, grip / release
 * rules, the object travels in the gripper, a release in the goal completes), the planner's shortest
 * solution there, BFS demonstrations completing every training and held-out task, siiRL's stopping
 * rule (max_steps truncation, the rest of a chunk not executed after success), determinism by seed,
 * the action text codec, the SFT demonstrations file, config errors and the steps per second.
 */
#include "distflow/embodied.h"
#include "embodied/grid_place.h"

#include "testutil.h"

#include <math.h>
#include <time.h>

static gp_state *make_state(const char *config)
{
    void *st = NULL;
    if (df_embodied_grid_place.create(config, &st))
        fail_msg("%s", df_last_error());
    assert_int_equal(df_embodied_grid_place.reset(st, 0, 0), DF_OK);
    return st;
}

/* The 5x5 layout below (row 0 is the top): a wall at (1,1), the goal region rows 2-3 x columns 3-4,
   the object at (0,1), the arm at (1,0).
     . o . . .
     A # . . .
     . . . G G
     . . . G G
     . . . . .                                                                                   */
static gp_state *hand_layout(const char *config)
{
    gp_state *s = make_state(config);
    memset(s->wall, 0, sizeof s->wall);
    s->wall[6] = true;
    s->goal = 13;
    s->d = (gp_dyn){.arm = 5, .obj = 1, .held = false};
    s->complete = false;
    s->kind = 0;
    gp_distances(s);
    return s;
}

static void step2(gp_state *s, int a0, int a1, int arm, int obj, bool held, bool complete)
{
    int32_t a[2] = {a0, a1};
    bool done = false;
    assert_int_equal(df_embodied_grid_place.step(s, a, &done), DF_OK);
    assert_int_equal(s->d.arm, arm);
    assert_int_equal(s->d.obj, obj);
    assert_int_equal(s->d.held, held);
    assert_int_equal(done, complete);
}

/* Every rule, step by step, on the hand layout (cells are row * 5 + column). */
static void test_dynamics_by_hand(void **state)
{
    (void)state;
    gp_state *s = hand_layout("{\"size\": 5, \"obstacles\": 0}");
    char *obs = NULL;
    assert_int_equal(df_embodied_grid_place.observe(s, &obs), DF_OK);
    assert_string_equal(obs, "Task: put the red cube in the goal region.\n"
                             ". o . . .\nA # . . .\n. . . G G\n. . . G G\n. . . . .\n"
                             "A is the arm, o the red cube, G the goal region, # obstacles; row 1 is the top.\n"
                             "The arm is at row 2, column 1 with its gripper open; the red cube is at row 1, column 2. "
                             "The goal region covers rows 3-4, columns 4-5.");
    free(obs);
    step2(s, GP_EAST, GP_KEEP, 5, 1, false, false);   /* the wall at (1,1) blocks */
    step2(s, GP_NORTH, GP_CLOSE, 0, 1, false, false); /* moved; closing away from the object grips nothing */
    step2(s, GP_NORTH, GP_KEEP, 0, 1, false, false);  /* the edge blocks */
    step2(s, GP_EAST, GP_KEEP, 1, 1, false, false);   /* over the object */
    step2(s, GP_STAY, GP_OPEN, 1, 1, false, false);   /* opening an empty gripper does nothing */
    step2(s, GP_STAY, GP_CLOSE, 1, 1, true, false);   /* gripped */
    step2(s, GP_SOUTH, GP_KEEP, 1, 1, true, false);   /* the wall blocks the arm and what it holds */
    step2(s, GP_EAST, GP_KEEP, 2, 2, true, false);    /* the object travels in the gripper */
    step2(s, GP_SOUTH, GP_OPEN, 7, 7, false, false);  /* put down outside the goal: no success */
    step2(s, GP_SOUTH, GP_KEEP, 12, 7, false, false); /* the object stays where it was put */
    step2(s, GP_NORTH, GP_CLOSE, 7, 7, true, false);  /* move onto it and grip in one action */
    step2(s, GP_SOUTH, GP_KEEP, 12, 12, true, false);
    step2(s, GP_EAST, GP_KEEP, 13, 13, true, false);  /* in the goal but still held: not yet */
    step2(s, 7, GP_KEEP, 13, 13, true, false);        /* a token out of range: a no-op */
    step2(s, GP_STAY, GP_OPEN, 13, 13, false, true);  /* released in the goal: complete */
    int32_t a[2] = {GP_STAY, GP_KEEP};
    bool done = false;
    assert_int_equal(df_embodied_grid_place.step(s, a, &done), DF_EINVAL); /* the episode has ended */
    /* the features of the final state (docs/embodied.md): positions / 4, goal centre, flags, path
       distances / 25 */
    float f[GP_FEATURES], want[GP_FEATURES] = {0.5f, 0.75f, 0.5f, 0.75f, 2.5f / 4, 3.5f / 4, 0, 1, 0, 0, 1, 0};
    df_embodied_grid_place.features(s, f);
    for (int k = 0; k < GP_FEATURES; k++)
        assert_float_equal(f[k], want[k], 1e-7);
    df_embodied_grid_place.release(s);
}

/* One-token actions on the same layout: a move or a gripper command per action. */
static void test_one_token_actions(void **state)
{
    (void)state;
    gp_state *s = hand_layout("{\"size\": 5, \"obstacles\": 0, \"action_token_len\": 1}");
    int32_t seq[] = {1 /* north */, 2 /* east */, 5 /* close */, 2, 3 /* south */, 3, 2, 6 /* open */};
    bool done = false;
    for (size_t k = 0; k < sizeof seq / sizeof *seq; k++) {
        assert_false(done);
        assert_int_equal(df_embodied_grid_place.step(s, &seq[k], &done), DF_OK);
    }
    assert_true(done);
    assert_int_equal(s->d.obj, 13);
    df_embodied_grid_place.release(s);
}

/* The planner's solution on the hand layout is a shortest one, counted by hand: to the object in 2
   actions (north; east + close), then 4 cells to the goal around the wall, the last with open. */
static void test_plan_shortest_by_hand(void **state)
{
    (void)state;
    for (int tl = 1; tl <= 2; tl++) {
        gp_state *s = hand_layout(tl == 2 ? "{\"size\": 5}" : "{\"size\": 5, \"action_token_len\": 1}");
        int32_t plan[64];
        int n = 0;
        assert_int_equal(gp_plan(s, plan, 32, &n), DF_OK);
        assert_int_equal(n, tl == 2 ? 6 : 8); /* one token: close and open are actions of their own */
        bool done = false;
        for (int k = 0; k < n; k++)
            assert_int_equal(df_embodied_grid_place.step(s, plan + k * tl, &done), DF_OK);
        assert_true(done);
        df_embodied_grid_place.release(s);
        s = hand_layout("{\"size\": 5}");
        assert_int_equal(gp_plan(s, plan, 5, &n), DF_EINVAL); /* longer than max_actions */
        df_embodied_grid_place.release(s);
    }
}

/* Run plans through a vector: every episode of `ids` completes at exactly its plan's length. */
static void run_plans(const char *config, int token_len, int chunk, int64_t max_steps)
{
    void *probe = NULL;
    assert_int_equal(df_embodied_grid_place.create(config, &probe), DF_OK);
    df_embodied_info info;
    df_embodied_grid_place.describe(probe, &info);
    df_embodied_grid_place.release(probe);
    int trials = 3, n_envs = (int)(info.num_tasks + info.num_heldout) * trials;
    assert_true(n_envs > 0);
    df_embodied_vec_opts o = {.num_envs = n_envs, .max_steps = max_steps, .action_chunks_len = chunk};
    df_embodied_vec *v = NULL;
    assert_int_equal(df_embodied_vec_create(&df_embodied_grid_place, config, &o, &v), DF_OK);
    int64_t calls = df_embodied_model_calls(max_steps, chunk), *task = calloc((size_t)n_envs, sizeof *task),
            *trial = calloc((size_t)n_envs, sizeof *trial);
    int32_t *plans = calloc((size_t)(n_envs * calls * chunk * token_len), sizeof *plans);
    int *len = calloc((size_t)n_envs, sizeof *len);
    for (int i = 0; i < n_envs; i++) {
        task[i] = i / trials, trial[i] = i % trials;
        int32_t *p = plans + (size_t)i * (size_t)(calls * chunk * token_len);
        assert_int_equal(df_grid_place_plan(config, task[i], trial[i], p, (int)max_steps, &len[i]), DF_OK);
        assert_true(len[i] >= 2); /* the arm never starts on the object */
    }
    assert_int_equal(df_embodied_vec_reset(v, task, trial), DF_OK);
    int32_t *call = calloc((size_t)n_envs * (size_t)chunk * (size_t)token_len, sizeof *call);
    for (int64_t k = 0; k < calls && df_embodied_vec_n_active(v) > 0; k++) {
        for (int i = 0; i < n_envs; i++)
            memcpy(call + (size_t)i * (size_t)(chunk * token_len),
                   plans + (size_t)i * (size_t)(calls * chunk * token_len) + (size_t)(k * chunk * token_len),
                   (size_t)(chunk * token_len) * sizeof *call);
        assert_int_equal(df_embodied_vec_step_chunk(v, call), DF_OK);
    }
    for (int i = 0; i < n_envs; i++) {
        const df_embodied_episode *e = df_embodied_vec_episode(v, i);
        assert_true(e->complete);
        assert_false(e->active);
        assert_int_equal(e->finish_step, len[i]);
        assert_int_equal(e->invalid, 0);
    }
    df_embodied_vec_free(v);
    free(task), free(trial), free(plans), free(len), free(call);
}

/* The planner solves every training and held-out task (3 trials each), with both action layouts. */
static void test_demos_solve_every_task(void **state)
{
    (void)state;
    run_plans("{}", 2, 4, 64);
    run_plans("{\"action_token_len\": 1, \"size\": 9, \"obstacles\": 16, \"num_tasks\": 20, \"seed\": 7}", 1, 3, 96);
}

/* max_steps cuts an episode mid-chunk, and after success the rest of a chunk is not executed. */
static void test_stopping_rule(void **state)
{
    (void)state;
    df_embodied_vec_opts o = {.num_envs = 2, .max_steps = 5, .action_chunks_len = 4};
    df_embodied_vec *v = NULL;
    assert_int_equal(df_embodied_vec_create(&df_embodied_grid_place, "{}", &o, &v), DF_OK);
    assert_int_equal(df_embodied_model_calls(5, 4), 2);
    assert_int_equal(df_embodied_model_calls(8, 4), 2);
    int64_t task[2] = {1, 1}, trial[2] = {0, 0};
    assert_int_equal(df_embodied_vec_reset(v, task, trial), DF_OK);
    int32_t stay[2 * 4 * 2] = {0}; /* stay + keep */
    assert_int_equal(df_embodied_vec_step_chunk(v, stay), DF_OK);
    assert_int_equal(df_embodied_vec_episode(v, 0)->finish_step, 4);
    assert_true(df_embodied_vec_episode(v, 0)->active);
    assert_int_equal(df_embodied_vec_step_chunk(v, stay), DF_OK);
    const df_embodied_episode *e = df_embodied_vec_episode(v, 0);
    assert_int_equal(e->finish_step, 5); /* the 5th action, the first of the chunk, ends it */
    assert_false(e->active);
    assert_false(e->complete);
    assert_int_equal(df_embodied_vec_n_active(v), 0);
    df_embodied_vec_free(v);

    /* success at action n: a chunk of the plan then "north" padding; the arm must not move after */
    int32_t plan[64 * 2];
    int n = 0;
    assert_int_equal(df_grid_place_plan("{}", 1, 0, plan, 64, &n), DF_OK);
    o = (df_embodied_vec_opts){.num_envs = 1, .max_steps = 100, .action_chunks_len = n + 3};
    assert_int_equal(df_embodied_vec_create(&df_embodied_grid_place, "{}", &o, &v), DF_OK);
    assert_int_equal(df_embodied_vec_reset(v, task, trial), DF_OK);
    int32_t chunk[(64 + 3) * 2];
    memcpy(chunk, plan, (size_t)n * 2 * sizeof *chunk);
    for (int j = n; j < n + 3; j++)
        chunk[2 * j] = GP_NORTH, chunk[2 * j + 1] = GP_KEEP;
    float before[GP_FEATURES], after[GP_FEATURES];
    assert_int_equal(df_embodied_vec_step_chunk(v, chunk), DF_OK);
    assert_int_equal(df_embodied_vec_features(v, 0, before), DF_OK);
    assert_int_equal(df_embodied_vec_episode(v, 0)->finish_step, n);
    assert_true(df_embodied_vec_episode(v, 0)->complete);
    assert_float_equal(before[7], 1.0f, 0); /* the object lies in the goal */
    assert_int_equal(df_embodied_vec_step_chunk(v, chunk), DF_OK); /* inactive: nothing happens */
    assert_int_equal(df_embodied_vec_features(v, 0, after), DF_OK);
    assert_memory_equal(before, after, sizeof before);
    /* the embedding: the last state's features, then the mean over the n + 1 states */
    float emb[2 * GP_FEATURES];
    assert_int_equal(df_embodied_vec_embedding(v, 0, emb), DF_OK);
    assert_memory_equal(emb, after, sizeof after);
    assert_float_equal(emb[GP_FEATURES + 10], 1.0f / (float)(n + 1), 1e-6); /* "complete" only in the last */
    df_embodied_vec_free(v);
}

/* The layout of (task, trial) as its first observation and embedding. */
static void first_view(const char *config, int64_t task, int64_t trial, char **text, float *emb)
{
    df_embodied_vec_opts o = {.num_envs = 1, .max_steps = 10, .action_chunks_len = 1};
    df_embodied_vec *v = NULL;
    assert_int_equal(df_embodied_vec_create(&df_embodied_grid_place, config, &o, &v), DF_OK);
    assert_int_equal(df_embodied_vec_reset(v, &task, &trial), DF_OK);
    assert_int_equal(df_embodied_vec_observation(v, 0, text), DF_OK);
    assert_int_equal(df_embodied_vec_embedding(v, 0, emb), DF_OK);
    df_embodied_vec_free(v);
}

/* The same (seed, task, trial) gives the same episode; the trial moves only the arm; held-out tasks
   have layouts of their own; another seed gives other layouts. */
static void test_determinism(void **state)
{
    (void)state;
    char *a = NULL, *b = NULL;
    float ea[2 * GP_FEATURES], eb[2 * GP_FEATURES];
    first_view("{}", 3, 2, &a, ea);
    first_view("{}", 3, 2, &b, eb);
    assert_string_equal(a, b);
    assert_memory_equal(ea, eb, sizeof ea);
    free(b);
    gp_state *s1 = make_state("{}"), *s2 = make_state("{}");
    assert_int_equal(df_embodied_grid_place.reset(s1, 3, 2), DF_OK);
    assert_int_equal(df_embodied_grid_place.reset(s2, 3, 5), DF_OK);
    assert_memory_equal(s1->wall, s2->wall, sizeof s1->wall);
    assert_int_equal(s1->goal, s2->goal);
    assert_int_equal(s1->d.obj, s2->d.obj);
    int moved = 0;
    for (int64_t r = 0; r < 8; r++) {
        assert_int_equal(df_embodied_grid_place.reset(s2, 3, r), DF_OK);
        moved += s2->d.arm != s1->d.arm;
    }
    assert_true(moved >= 5);
    /* a reset after an episode that moved the object puts it back: the same first observation */
    char *again = NULL, *first = NULL;
    assert_int_equal(df_embodied_grid_place.reset(s1, 3, 2), DF_OK);
    assert_int_equal(df_embodied_grid_place.observe(s1, &first), DF_OK);
    int32_t plan[64 * 2];
    int n = 0;
    bool done = false;
    assert_int_equal(gp_plan(s1, plan, 64, &n), DF_OK);
    for (int k = 0; k < n; k++)
        assert_int_equal(df_embodied_grid_place.step(s1, plan + 2 * k, &done), DF_OK);
    assert_true(done);
    assert_int_equal(df_embodied_grid_place.reset(s1, 3, 2), DF_OK);
    assert_int_equal(df_embodied_grid_place.observe(s1, &again), DF_OK);
    assert_string_equal(first, again);
    assert_string_equal(first, a);
    free(first), free(again);
    /* the 4 held-out layouts (ids 10..13) are none of the 10 training ones */
    for (int64_t h = 10; h < 14; h++)
        for (int64_t t = 0; t < 10; t++) {
            assert_int_equal(df_embodied_grid_place.reset(s1, h, 0), DF_OK);
            assert_int_equal(df_embodied_grid_place.reset(s2, t, 0), DF_OK);
            assert_true(memcmp(s1->wall, s2->wall, sizeof s1->wall) || s1->goal != s2->goal || s1->d.obj != s2->d.obj);
        }
    assert_int_equal(df_embodied_grid_place.reset(s1, 14, 0), DF_EINVAL); /* past the held-out ids */
    assert_int_equal(df_embodied_grid_place.reset(s1, 0, -1), DF_EINVAL);
    df_embodied_grid_place.release(s1);
    df_embodied_grid_place.release(s2);
    first_view("{\"seed\": 1}", 3, 2, &b, eb);
    assert_string_not_equal(a, b);
    free(a), free(b);
}

static void test_action_text(void **state)
{
    (void)state;
    df_embodied_vec_opts o = {.num_envs = 1, .max_steps = 10, .action_chunks_len = 2};
    df_embodied_vec *v = NULL;
    assert_int_equal(df_embodied_vec_create(&df_embodied_grid_place, NULL, &o, &v), DF_OK);
    const df_embodied_info *in = df_embodied_vec_info(v);
    int32_t t[4] = {GP_NORTH, GP_KEEP, GP_WEST, GP_OPEN}, back[6];
    char *text = NULL;
    assert_int_equal(df_embodied_actions_text(in, t, 2, &text), DF_OK);
    assert_string_equal(text, "north keep west open");
    int valid = 0;
    assert_int_equal(df_embodied_actions_parse(in, text, 2, back, &valid), DF_OK);
    assert_memory_equal(back, t, sizeof t);
    assert_int_equal(valid, 4);
    free(text);
    /* a move word in the gripper's place, and a missing last action: -1 (no-op), extra words ignored */
    assert_int_equal(df_embodied_actions_parse(in, "  south\nnorth east", 3, back, &valid), DF_OK);
    int32_t want[6] = {GP_SOUTH, -1, GP_EAST, -1, -1, -1};
    assert_memory_equal(back, want, sizeof want);
    assert_int_equal(valid, 2);
    t[1] = 3; /* no gripper word for 3 */
    assert_int_equal(df_embodied_actions_text(in, t, 2, &text), DF_EINVAL);
    df_embodied_vec_free(v);
}

/* The demonstrations file: one row per model call; replaying the responses completes each episode,
   and each prompt is the observation before its call. */
static void test_demos_file(void **state)
{
    char *path = df_path_join(*state, "demos.jsonl");
    df_embodied_vec_opts o = {.num_envs = 1, .max_steps = 64, .action_chunks_len = 4};
    int64_t rows = 0;
    assert_int_equal(df_grid_place_write_demos(path, "{}", &o, 2, 3, 2, &rows), DF_OK);
    char *data = NULL;
    assert_int_equal(df_read_file(path, &data, NULL), DF_OK);
    df_embodied_vec *v = NULL;
    assert_int_equal(df_embodied_vec_create(&df_embodied_grid_place, "{}", &o, &v), DF_OK);
    int64_t seen = 0, episodes = 0, last_task = -1, last_trial = -1;
    for (char *line = strtok(data, "\n"); line; line = strtok(NULL, "\n"), seen++) {
        json_t *row = json_loads(line, 0, NULL);
        assert_non_null(row);
        int64_t task = json_integer_value(json_object_get(row, "task_id"));
        int64_t trial = json_integer_value(json_object_get(row, "trial_id"));
        if (task != last_task || trial != last_trial) {
            if (episodes)
                assert_true(df_embodied_vec_episode(v, 0)->complete);
            assert_int_equal(json_integer_value(json_object_get(row, "call")), 0);
            assert_int_equal(df_embodied_vec_reset(v, &task, &trial), DF_OK);
            last_task = task, last_trial = trial, episodes++;
        }
        char *obs = NULL;
        assert_int_equal(df_embodied_vec_observation(v, 0, &obs), DF_OK);
        assert_string_equal(json_string_value(json_object_get(row, "prompt")), obs);
        free(obs);
        int32_t tokens[8];
        int valid = 0;
        assert_int_equal(df_embodied_actions_parse(df_embodied_vec_info(v),
                                                   json_string_value(json_object_get(row, "response")), 4, tokens,
                                                   &valid), DF_OK);
        assert_int_equal(valid, 8);
        assert_int_equal(df_embodied_vec_step_chunk(v, tokens), DF_OK);
        json_decref(row);
    }
    assert_true(df_embodied_vec_episode(v, 0)->complete);
    assert_int_equal(episodes, 6);
    assert_int_equal(seen, rows);
    df_embodied_vec_free(v);
    free(data);
    /* a directory that does not exist: DF_EIO, and nothing left behind */
    char *bad = df_path_join(*state, "no/such/dir.jsonl");
    assert_int_equal(df_grid_place_write_demos(bad, "{}", &o, 0, 1, 1, NULL), DF_EIO);
    free(bad), free(path);
}

static void test_config_errors(void **state)
{
    (void)state;
    void *st = NULL;
    assert_int_equal(df_embodied_grid_place.create("{\"sise\": 5}", &st), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "did you mean 'size'"));
    assert_int_equal(df_embodied_grid_place.create("{\"size\": 5, \"obstacles\": 7}", &st), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "config.obstacles must be an integer in [0, 6]"));
    assert_int_equal(df_embodied_grid_place.create("{\"action_token_len\": 3}", &st), DF_EINVAL);
    const df_embodied_env *env = NULL;
    assert_int_equal(df_embodied_env_lookup("grid_place", &env), DF_OK);
    assert_ptr_equal(env, &df_embodied_grid_place);
    assert_int_equal(df_embodied_env_lookup("libero", &env), DF_ENOTFOUND);
    assert_non_null(strstr(df_last_error(), "known: grid_place"));
    df_embodied_vec_opts o = {.num_envs = 0, .max_steps = 10, .action_chunks_len = 1};
    df_embodied_vec *v = NULL;
    assert_int_equal(df_embodied_vec_create(&df_embodied_grid_place, "{}", &o, &v), DF_EINVAL);
}

/* Thousands of steps per second per core (docs/embodied.md quotes the measured rate). */
static void test_speed(void **state)
{
    (void)state;
    df_embodied_vec_opts o = {.num_envs = 64, .max_steps = 1000000, .action_chunks_len = 8};
    df_embodied_vec *v = NULL;
    assert_int_equal(df_embodied_vec_create(&df_embodied_grid_place, "{}", &o, &v), DF_OK);
    int64_t task[64], trial[64];
    for (int i = 0; i < 64; i++)
        task[i] = i % 10, trial[i] = i;
    assert_int_equal(df_embodied_vec_reset(v, task, trial), DF_OK);
    int32_t tokens[64 * 8 * 2];
    df_rng r;
    df_rng_seed(&r, 1);
    for (size_t k = 0; k < sizeof tokens / sizeof *tokens; k += 2) /* moves and gripper commands at random */
        tokens[k] = (int32_t)df_rng_below(&r, GP_N_MOVES), tokens[k + 1] = (int32_t)df_rng_below(&r, GP_N_GRIPS);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int64_t steps = 0;
    for (int call = 0; call < 400; call++) {
        if (df_embodied_vec_n_active(v) < 64) { /* count the actions executed, then start again */
            for (int i = 0; i < 64; i++)
                steps += df_embodied_vec_episode(v, i)->finish_step;
            assert_int_equal(df_embodied_vec_reset(v, task, trial), DF_OK);
        }
        assert_int_equal(df_embodied_vec_step_chunk(v, tokens), DF_OK);
    }
    for (int i = 0; i < 64; i++)
        steps += df_embodied_vec_episode(v, i)->finish_step;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("grid_place: %lld steps in %.3f s = %.0f steps/s on one core\n", (long long)steps, s, (double)steps / s);
    assert_true(steps > 100000);
    assert_true((double)steps / s > 5000.0);
    df_embodied_vec_free(v);
}

/* compact observations: the offsets from the arm, checked against the features' positions, holding or not */
static void test_compact_observation(void **state)
{
    (void)state;
    const df_embodied_env *E = &df_embodied_grid_place;
    void *st = NULL;
    assert_int_equal(E->create("{\"size\": 6, \"obstacles\": 0, \"compact\": 1}", &st), 0);
    for (int64_t t = 0; t < 6; t++) {
        assert_int_equal(E->reset(st, t, 0), 0);
        float f[12];
        E->features(st, f);
        int ar = (int)lroundf(f[0] * 5), ac = (int)lroundf(f[1] * 5), or_ = (int)lroundf(f[2] * 5),
            oc = (int)lroundf(f[3] * 5), gr = (int)lroundf(f[4] * 5 - 0.5f), gc = (int)lroundf(f[5] * 5 - 0.5f);
        int dr = ar < gr ? gr - ar : ar > gr + 1 ? gr + 1 - ar : 0, dc = ac < gc ? gc - ac : ac > gc + 1 ? gc + 1 - ac : 0;
        char want[256], *got = NULL;
        snprintf(want, sizeof want, " %d %d; goal %d %d", or_ - ar, oc - ac, dr, dc);
        assert_int_equal(E->observe(st, &got), 0);
        assert_non_null(strstr(got, "\nopen; "));
        if (!strstr(got, want))
            fail_msg("task %lld: '%s' lacks '%s'", (long long)t, got, want);
        assert_null(strchr(strchr(got, '\n') + 1, '\n')); /* no grid */
        free(got);
    }
    const int32_t close[2] = {0, 1};
    bool done = false;
    gp_state *s = st; /* put the arm on the object, grip it: "holding", the goal's offset only */
    s->d.arm = s->d.obj;
    assert_int_equal(E->step(st, close, &done), 0);
    char *got = NULL;
    assert_int_equal(E->observe(st, &got), 0);
    assert_non_null(strstr(got, "\nholding; goal "));
    free(got);
    E->release(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dynamics_by_hand),
        cmocka_unit_test(test_one_token_actions),
        cmocka_unit_test(test_plan_shortest_by_hand),
        cmocka_unit_test(test_demos_solve_every_task),
        cmocka_unit_test(test_stopping_rule),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_action_text),
        cmocka_unit_test_setup_teardown(test_demos_file, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_speed),
        cmocka_unit_test(test_compact_observation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
