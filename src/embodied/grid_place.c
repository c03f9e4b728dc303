/* The built-in simulator grid_place (include/distflow/embodied.h; docs/embodied.md): an arm with a
 * gripper on a square grid with obstacles must pick up an object and put it down in a 2x2 goal region.
 * A task (a suite's variant) is a layout drawn from (seed, task id); a trial draws the arm's start
 * cell. Everything is deterministic: the same (config, task, trial, actions) gives the same episode. */
#include "embodied/grid_place.h"

#include "distflow/env.h"
#include "distflow/rng.h"

#include "util/sbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A stream coordinate that keeps layout draws apart from other uses of a seed. */
#define GP_STREAM 0x67706cu /* "gpl" */

static const char *const k_objects[4] = {"red cube", "blue ball", "green cup", "yellow block"};
static const char *const k_descriptions[4] = {
    "put the red cube in the goal region", "put the blue ball in the goal region",
    "put the green cup in the goal region", "put the yellow block in the goal region"};

/* Token words: action_token_len 2 is [move, gripper] (vocabulary 5), 1 is one of seven actions. */
static const char *const k_names2[2 * GP_N_MOVES] = {"stay", "north", "east", "south", "west",
                                                    "keep", "close", "open", NULL, NULL};
static const char *const k_names1[7] = {"stay", "north", "east", "south", "west", "close", "open"};

static int parse_config(const char *config_json, gp_state *s)
{
    int64_t size = 7, obstacles = 6, num_tasks = 10, num_heldout = 4, seed = 0, token_len = 2, compact = 0;
    const df_env_option opts[] = {
        {"size", DF_ENV_OPT_INT, 5, GP_MAX, &size},
        {"obstacles", DF_ENV_OPT_INT, 0, GP_CELLS / 4, &obstacles},
        {"num_tasks", DF_ENV_OPT_INT, 1, 1000000, &num_tasks},
        {"num_heldout", DF_ENV_OPT_INT, 0, 1000000, &num_heldout},
        {"seed", DF_ENV_OPT_INT, 0, 9007199254740991.0, &seed},
        {"action_token_len", DF_ENV_OPT_INT, 1, 2, &token_len},
        {"compact", DF_ENV_OPT_INT, 0, 1, &compact},
    };
    int rc = df_env_config_read("grid_place", config_json, opts, (int)(sizeof opts / sizeof *opts));
    if (!rc && obstacles > size * size / 4) /* a quarter of the cells at most keeps the free cells connected */
        rc = df_error(DF_EINVAL, "grid_place: config.obstacles must be an integer in [0, %lld], got %lld",
                      (long long)(size * size / 4), (long long)obstacles);
    s->size = (int)size, s->obstacles = (int)obstacles, s->token_len = (int)token_len, s->compact = compact != 0;
    s->num_tasks = num_tasks, s->num_heldout = num_heldout, s->seed = (uint64_t)seed;
    return rc;
}

bool gp_in_goal(const gp_state *s, int x)
{
    int n = s->size, dr = x / n - s->goal / n, dc = x % n - s->goal % n;
    return dr >= 0 && dr < 2 && dc >= 0 && dc < 2;
}

/* The cell one move from x, or x itself when the edge or an obstacle blocks it. */
static int neighbour(const gp_state *s, int x, int move)
{
    static const int dr[GP_N_MOVES] = {0, -1, 0, 1, 0}, dc[GP_N_MOVES] = {0, 0, 1, 0, -1};
    int n = s->size, r = x / n + dr[move], c = x % n + dc[move];
    if (r < 0 || r >= n || c < 0 || c >= n || s->wall[r * n + c])
        return x;
    return r * n + c;
}

/* Breadth-first distances over free cells from the sources (src[x] true); -1 where unreachable.
   Returns the number of cells reached. */
static int bfs(const gp_state *s, const bool *src, int *dist)
{
    int cells = s->size * s->size, queue[GP_CELLS], head = 0, tail = 0;
    for (int x = 0; x < cells; x++) {
        dist[x] = src[x] && !s->wall[x] ? 0 : -1;
        if (!dist[x])
            queue[tail++] = x;
    }
    while (head < tail) {
        int x = queue[head++];
        for (int m = GP_NORTH; m < GP_N_MOVES; m++) {
            int y = neighbour(s, x, m);
            if (dist[y] < 0) {
                dist[y] = dist[x] + 1;
                queue[tail++] = y;
            }
        }
    }
    return tail;
}

static void object_distances(gp_state *s)
{
    bool src[GP_CELLS] = {0};
    src[s->d.obj] = true;
    bfs(s, src, s->obj_dist);
}

/* Distances to the goal region; returns the cells that reach it. */
static int goal_distances(gp_state *s)
{
    bool goal_cells[GP_CELLS] = {0};
    for (int x = 0; x < s->size * s->size; x++)
        goal_cells[x] = gp_in_goal(s, x);
    return bfs(s, goal_cells, s->goal_dist);
}

void gp_distances(gp_state *s)
{
    goal_distances(s);
    object_distances(s);
}

/* The task's layout: the goal region, the object's cell, then obstacles redrawn until every free cell
   is reachable from every other (so any start can solve it) and the object lies at least size / 2
   moves from the goal. */
static void place_task(gp_state *s, int64_t task)
{
    df_rng r;
    df_rng_seed(&r, df_rng_key(s->seed, GP_STREAM, (uint64_t)task, 0));
    int n = s->size, cells = n * n;
    s->kind = (int)df_rng_below(&r, 4);
    for (int attempt = 0;; attempt++) {
        memset(s->wall, 0, sizeof s->wall);
        s->goal = (int)df_rng_below(&r, (uint64_t)(n - 1)) * n + (int)df_rng_below(&r, (uint64_t)(n - 1));
        do
            s->d.obj = (int)df_rng_below(&r, (uint64_t)cells);
        while (gp_in_goal(s, s->d.obj));
        /* after many failed draws, fall back to no obstacles: still a valid task */
        for (int k = 0; k < s->obstacles && attempt < 1000; k++) {
            int x = (int)df_rng_below(&r, (uint64_t)cells);
            if (x != s->d.obj && !gp_in_goal(s, x))
                s->wall[x] = true;
        }
        int free_cells = 0;
        for (int x = 0; x < cells; x++)
            free_cells += !s->wall[x];
        if (goal_distances(s) == free_cells && s->goal_dist[s->d.obj] >= n / 2) {
            s->obj_start = s->d.obj;
            return;
        }
    }
}

static int gp_create(const char *config_json, void **state)
{
    gp_state *s = calloc(1, sizeof *s);
    if (!s)
        return df_error(DF_ENOMEM, "out of memory");
    int rc = parse_config(config_json, s);
    if (rc) {
        free(s);
        return rc;
    }
    *state = s;
    return DF_OK;
}

static void gp_describe(const void *state, df_embodied_info *info)
{
    const gp_state *s = state;
    *info = (df_embodied_info){
        .action_token_len = s->token_len,
        .action_vocab = s->token_len == 2 ? GP_N_MOVES : 7,
        .token_names = s->token_len == 2 ? k_names2 : k_names1,
        .feature_dim = GP_FEATURES,
        .num_tasks = s->num_tasks,
        .num_heldout = s->num_heldout,
    };
}

static int gp_reset(void *state, int64_t task_id, int64_t trial_id)
{
    gp_state *s = state;
    int64_t tasks = s->num_tasks + s->num_heldout;
    if (task_id < 0 || task_id >= tasks || trial_id < 0)
        return df_error(DF_EINVAL, "grid_place: task %lld / trial %lld out of range (tasks 0..%lld, trials >= 0)",
                        (long long)task_id, (long long)trial_id, (long long)tasks - 1);
    if (!s->started || s->task != task_id)
        place_task(s, task_id); /* a new trial of the same task keeps its layout */
    s->d.obj = s->obj_start;
    df_rng r;
    df_rng_seed(&r, df_rng_key(s->seed, GP_STREAM, (uint64_t)task_id, (uint64_t)trial_id + 1));
    int cells = s->size * s->size;
    do
        s->d.arm = (int)df_rng_below(&r, (uint64_t)cells);
    while (s->wall[s->d.arm] || s->d.arm == s->d.obj);
    s->d.held = false;
    s->task = task_id, s->trial = trial_id;
    s->started = true, s->complete = false;
    object_distances(s);
    return DF_OK;
}

bool gp_decode(const gp_state *s, const int32_t *a, int *move, int *grip)
{
    if (s->token_len == 2) {
        if (a[0] < 0 || a[0] >= GP_N_MOVES || a[1] < 0 || a[1] >= GP_N_GRIPS)
            return false;
        *move = a[0], *grip = a[1];
        return true;
    }
    if (a[0] < 0 || a[0] >= 7)
        return false;
    *move = a[0] < GP_N_MOVES ? a[0] : GP_STAY;
    *grip = a[0] == 5 ? GP_CLOSE : a[0] == 6 ? GP_OPEN : GP_KEEP;
    return true;
}

void gp_encode(const gp_state *s, int move, int grip, int32_t *a)
{
    if (s->token_len == 2)
        a[0] = move, a[1] = grip;
    else
        a[0] = grip == GP_CLOSE ? 5 : grip == GP_OPEN ? 6 : move;
}

bool gp_apply(const gp_state *s, gp_dyn *d, int move, int grip)
{
    d->arm = neighbour(s, d->arm, move);
    if (d->held)
        d->obj = d->arm; /* the object travels in the gripper */
    if (grip == GP_CLOSE && !d->held && d->arm == d->obj)
        d->held = true;
    else if (grip == GP_OPEN && d->held) {
        d->held = false;
        return gp_in_goal(s, d->obj);
    }
    return false;
}

static int gp_step(void *state, const int32_t *action, bool *complete)
{
    gp_state *s = state;
    if (!action || !s->started || s->complete)
        return df_error(DF_EINVAL, "grid_place: %s", action ? "the episode has ended or not started; reset it"
                                                            : "NULL action");
    int move, grip;
    if (gp_decode(s, action, &move, &grip)) {
        bool held = s->d.held;
        s->complete = gp_apply(s, &s->d, move, grip);
        if (held && !s->d.held)
            object_distances(s); /* put down, maybe somewhere new */
    }
    *complete = s->complete;
    return DF_OK;
}

static void draw(const gp_state *s, df_sbuf *b)
{
    int n = s->size;
    for (int x = 0; x < n * n; x++) {
        char c = x == s->d.arm ? 'A' : x == s->d.obj ? 'o' : s->wall[x] ? '#' : gp_in_goal(s, x) ? 'G' : '.';
        df_sbuf_printf(b, "%c%s", c, x % n == n - 1 ? "\n" : " ");
    }
}

static int gp_observe(const void *state, char **text)
{
    const gp_state *s = state;
    int n = s->size, g = s->goal;
    df_sbuf b = {0};
    df_sbuf_printf(&b, "Task: %s.\n", k_descriptions[s->kind]);
    if (s->compact) { /* offsets from the arm only: a short prompt, the geometry left to the policy */
        int ar = s->d.arm / n, ac = s->d.arm % n, gr = g / n, gc = g % n;
        int dr = ar < gr ? gr - ar : ar > gr + 1 ? gr + 1 - ar : 0, dc = ac < gc ? gc - ac : ac > gc + 1 ? gc + 1 - ac : 0;
        if (s->d.held)
            df_sbuf_printf(&b, "holding; goal %d %d", dr, dc);
        else
            df_sbuf_printf(&b, "open; %s %d %d; goal %d %d", k_objects[s->kind], s->d.obj / n - ar, s->d.obj % n - ac,
                           dr, dc);
        for (int x = 0; x < n * n; x++)
            if (s->wall[x])
                df_sbuf_printf(&b, "; wall %d %d", x / n - ar, x % n - ac);
        return df_sbuf_finish(&b, text);
    }
    draw(s, &b);
    df_sbuf_printf(&b, "A is the arm, o the %s, G the goal region, # obstacles; row 1 is the top.\n", k_objects[s->kind]);
    if (s->d.held)
        df_sbuf_printf(&b, "The arm is at row %d, column %d, holding the %s.", s->d.arm / n + 1, s->d.arm % n + 1,
                       k_objects[s->kind]);
    else
        df_sbuf_printf(&b, "The arm is at row %d, column %d with its gripper open; the %s is at row %d, column %d.",
                       s->d.arm / n + 1, s->d.arm % n + 1, k_objects[s->kind], s->d.obj / n + 1, s->d.obj % n + 1);
    df_sbuf_printf(&b, " The goal region covers rows %d-%d, columns %d-%d.", g / n + 1, g / n + 2, g % n + 1,
                   g % n + 2);
    return df_sbuf_finish(&b, text);
}

/* The 12 features of docs/embodied.md: positions scaled to [0, 1], flags, path distances over the
   number of cells (obstacles included, so they measure progress as the arm must travel). */
static void gp_features(const void *state, float *f)
{
    const gp_state *s = state;
    float side = (float)(s->size - 1), cells = (float)(s->size * s->size);
    int n = s->size;
    f[0] = (float)(s->d.arm / n) / side, f[1] = (float)(s->d.arm % n) / side;
    f[2] = (float)(s->d.obj / n) / side, f[3] = (float)(s->d.obj % n) / side;
    f[4] = ((float)(s->goal / n) + 0.5f) / side, f[5] = ((float)(s->goal % n) + 0.5f) / side;
    f[6] = s->d.held ? 1.0f : 0.0f;
    f[7] = gp_in_goal(s, s->d.obj) ? 1.0f : 0.0f;
    f[8] = s->d.held ? 0.0f : (float)s->obj_dist[s->d.arm] / cells;
    f[9] = (float)s->goal_dist[s->d.obj] / cells;
    f[10] = s->complete ? 1.0f : 0.0f;
    f[11] = (float)s->goal_dist[s->d.arm] / cells;
}

static const char *gp_task_description(const void *state)
{
    return k_descriptions[((const gp_state *)state)->kind];
}

static void gp_release(void *state) { free(state); }

const df_embodied_env df_embodied_grid_place = {
    .name = "grid_place",
    .create = gp_create,
    .describe = gp_describe,
    .reset = gp_reset,
    .step = gp_step,
    .observe = gp_observe,
    .features = gp_features,
    .task_description = gp_task_description,
    .release = gp_release,
};
