/* The built-in grid navigation environment (include/distflow/env.h: df_env_grid_nav;
 * docs/environments.md). A square grid drawn as text, with a start, a goal and walls placed from the
 * seed (a path always exists); the model moves one cell per turn with <answer>up|down|left|right</answer>
 * and the environment says where it is now. Unlike guess_number, the whole state is in the first
 * observation: the model can plan the path at once, and a shorter path earns more. */
#include "distflow/env.h"

#include "distflow/rng.h"

#include "util/sbuf.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define GRID_MAX 9

typedef struct grid_state {
    int size, walls, max_turns;
    double turn_penalty;
    bool wall[GRID_MAX * GRID_MAX];
    int pos, goal, turns, shortest;
    bool done, started;
} grid_state;

static int parse_config(const char *config_json, grid_state *s)
{
    int64_t size = 5, walls = 4, max_turns = 20;
    s->turn_penalty = 0.05;
    const df_env_option opts[] = {
        {"size", DF_ENV_OPT_INT, 3, GRID_MAX, &size},
        {"walls", DF_ENV_OPT_INT, 0, GRID_MAX * GRID_MAX / 3, &walls},
        {"max_turns", DF_ENV_OPT_INT, 1, 1000, &max_turns},
        {"turn_penalty", DF_ENV_OPT_NUMBER, 0, 1, &s->turn_penalty},
    };
    int rc = df_env_config_read("grid_nav", config_json, opts, (int)(sizeof opts / sizeof *opts));
    if (!rc && walls > size * size / 3) /* a third of the cells at most leaves room for a path */
        rc = df_error(DF_EINVAL, "grid_nav: config.walls must be an integer in [0, %lld], got %lld",
                      (long long)(size * size / 3), (long long)walls);
    s->size = (int)size, s->walls = (int)walls, s->max_turns = (int)max_turns;
    return rc;
}

/* Moves from `from` to `to` around the walls (breadth-first), or -1 when no path exists. */
static int distance(const grid_state *s, int from, int to)
{
    int n = s->size, queue[GRID_MAX * GRID_MAX], dist[GRID_MAX * GRID_MAX], head = 0, tail = 0;
    for (int i = 0; i < n * n; i++)
        dist[i] = -1;
    dist[from] = 0;
    queue[tail++] = from;
    static const int dr[4] = {-1, 1, 0, 0}, dc[4] = {0, 0, -1, 1};
    while (head < tail) {
        int c = queue[head++];
        for (int k = 0; k < 4; k++) {
            int r = c / n + dr[k], col = c % n + dc[k], x = r * n + col;
            if (r < 0 || r >= n || col < 0 || col >= n || s->wall[x] || dist[x] >= 0)
                continue;
            dist[x] = dist[c] + 1;
            queue[tail++] = x;
        }
    }
    return dist[to];
}

/* Start and goal at least size - 1 moves apart, then the walls, redrawn until a path remains. */
static void place(grid_state *s, uint64_t seed)
{
    df_rng r;
    df_rng_seed(&r, seed);
    int n = s->size, cells = n * n;
    do {
        s->pos = (int)df_rng_below(&r, (uint64_t)cells);
        s->goal = (int)df_rng_below(&r, (uint64_t)cells);
    } while (abs(s->pos / n - s->goal / n) + abs(s->pos % n - s->goal % n) < n - 1);
    for (int attempt = 0;; attempt++) {
        memset(s->wall, 0, sizeof s->wall);
        for (int w = 0; w < s->walls && attempt < 100; w++) {
            int x = (int)df_rng_below(&r, (uint64_t)cells);
            if (x != s->pos && x != s->goal)
                s->wall[x] = true;
        }
        if ((s->shortest = distance(s, s->pos, s->goal)) > 0)
            return;
    }
}

static void draw(const grid_state *s, df_sbuf *b)
{
    int n = s->size;
    for (int r = 0; r < n; r++) {
        for (int c = 0; c < n; c++) {
            int x = r * n + c;
            df_sbuf_puts(b, c ? " " : "");
            df_sbuf_puts(b, x == s->pos ? "A" : x == s->goal ? "G" : s->wall[x] ? "#" : ".");
        }
        df_sbuf_puts(b, "\n");
    }
}

static int grid_create(const char *config_json, void **state)
{
    grid_state *s = calloc(1, sizeof *s);
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

static int grid_reset(void *state, uint64_t seed, char **observation)
{
    grid_state *s = state;
    place(s, seed);
    s->turns = 0;
    s->done = false;
    s->started = true;
    df_sbuf b = {0};
    df_sbuf_printf(&b, "You are A on this %dx%d grid; G is the goal and # are walls (row 1 is the top):\n",
                   s->size, s->size);
    draw(s, &b);
    df_sbuf_printf(&b, "You are at row %d, column %d; the goal is at row %d, column %d. Move one cell per turn: "
                       "end your reply with <answer>up</answer>, <answer>down</answer>, <answer>left</answer> or "
                       "<answer>right</answer>. You have %d moves.",
                   s->pos / s->size + 1, s->pos % s->size + 1, s->goal / s->size + 1, s->goal % s->size + 1,
                   s->max_turns);
    return df_sbuf_finish(&b, observation);
}

/* The direction of the last <answer>...</answer> (0..3: up, down, left, right), or -1. */
static int read_move(const char *action)
{
    const char *last = NULL;
    for (const char *p = strstr(action, "<answer>"); p; p = strstr(p + 1, "<answer>"))
        last = p;
    const char *end = last ? strstr(last + 8, "</answer>") : NULL;
    if (!end)
        return -1;
    const char *p = last + 8;
    while (p < end && isspace((unsigned char)*p))
        p++;
    while (end > p && isspace((unsigned char)end[-1]))
        end--;
    static const char *const names[4] = {"up", "down", "left", "right"};
    for (int k = 0; k < 4; k++)
        if ((size_t)(end - p) == strlen(names[k]) && !strncasecmp(p, names[k], (size_t)(end - p)))
            return k;
    return -1;
}

/* Apply move k; describe it into b. */
static void move(grid_state *s, int k, df_sbuf *b)
{
    static const char *const names[4] = {"up", "down", "left", "right"};
    static const int dr[4] = {-1, 1, 0, 0}, dc[4] = {0, 0, -1, 1};
    int n = s->size, r = s->pos / n + dr[k], c = s->pos % n + dc[k];
    if (r < 0 || r >= n || c < 0 || c >= n)
        df_sbuf_printf(b, "You cannot move %s: that is the edge of the grid.", names[k]);
    else if (s->wall[r * n + c])
        df_sbuf_printf(b, "A wall blocks the way %s.", names[k]);
    else {
        s->pos = r * n + c;
        df_sbuf_printf(b, "You moved %s.", names[k]);
    }
    df_sbuf_printf(b, " You are at row %d, column %d", s->pos / n + 1, s->pos % n + 1);
}

static int grid_step(void *state, const char *action, df_env_step *out)
{
    grid_state *s = state;
    memset(out, 0, sizeof *out);
    if (!action || !s->started || s->done)
        return df_error(DF_EINVAL, "grid_nav: %s", action ? "the episode has ended or not started; reset it"
                                                          : "NULL action");
    int k = read_move(action);
    s->turns++; /* an unreadable move is a turn too: the limit bounds the episode */
    df_sbuf b = {0};
    if (k < 0)
        df_sbuf_printf(&b, "I could not read a move. End your reply with <answer>up</answer>, <answer>down</answer>, "
                           "<answer>left</answer> or <answer>right</answer>. You are at row %d, column %d",
                       s->pos / s->size + 1, s->pos % s->size + 1);
    else
        move(s, k, &b);
    bool win = s->pos == s->goal;
    int left = s->max_turns - s->turns;
    if (win) {
        /* 1 for a shortest path, less turn_penalty for every move beyond it, never below turn_penalty */
        double r = 1.0 - s->turn_penalty * (double)(s->turns - s->shortest);
        out->reward = r < s->turn_penalty ? s->turn_penalty : r;
        out->terminated = true;
        df_sbuf_printf(&b, ": the goal. You reached it in %d moves (the shortest path has %d).", s->turns, s->shortest);
    } else if (left <= 0) {
        out->truncated = true;
        df_sbuf_puts(&b, ". No moves left.");
    } else {
        df_sbuf_printf(&b, ". %d %s left.", left, left == 1 ? "move" : "moves");
    }
    s->done = out->terminated || out->truncated;
    int rc = df_sbuf_finish(&b, &out->observation);
    char info[128];
    snprintf(info, sizeof info, "{\"success\": %s, \"valid\": %s, \"turns\": %d, \"shortest\": %d}",
             win ? "true" : "false", k >= 0 ? "true" : "false", s->turns, s->shortest);
    if (!rc && !(out->info = strdup(info)))
        rc = df_error(DF_ENOMEM, "out of memory");
    if (rc)
        df_env_step_clear(out);
    return rc;
}

static void grid_release(void *state) { free(state); }

const df_env df_env_grid_nav = {
    .name = "grid_nav",
    .create = grid_create,
    .reset = grid_reset,
    .step = grid_step,
    .release = grid_release,
};
