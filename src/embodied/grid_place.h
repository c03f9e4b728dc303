/*
 * grid_place.h (internal) — the built-in simulator's state and dynamics (grid_place.c), shared with
 * its planner and demonstration writer (grid_place_demo.c), which must move exactly as an episode does.
 */
#ifndef DF_EMBODIED_GRID_PLACE_H
#define DF_EMBODIED_GRID_PLACE_H

#include "distflow/embodied.h"

#define GP_MAX 12 /* largest grid side */
#define GP_CELLS (GP_MAX * GP_MAX)
#define GP_FEATURES 12

/* Decoded actions: a move and a gripper command, applied in that order. */
enum { GP_STAY, GP_NORTH, GP_EAST, GP_SOUTH, GP_WEST, GP_N_MOVES };
enum { GP_KEEP, GP_CLOSE, GP_OPEN, GP_N_GRIPS };

/* What changes while an episode runs: the arm's cell, the object's cell, whether it is held. */
typedef struct gp_dyn {
    int arm, obj;
    bool held;
} gp_dyn;

typedef struct gp_state {
    /* config */
    int size, obstacles, token_len;
    bool compact;            /* observation "compact": the task line, the grid and the gripper only */
    int64_t num_tasks, num_heldout;
    uint64_t seed;
    /* the task's layout */
    int64_t task, trial;
    bool wall[GP_CELLS];
    int goal;                /* top-left cell of the 2x2 goal region */
    int obj_start;           /* the object's cell at reset */
    int kind;                /* which object (its name) */
    int goal_dist[GP_CELLS]; /* moves from each cell to the nearest goal cell, -1 behind walls */
    /* the episode */
    gp_dyn d;
    int obj_dist[GP_CELLS]; /* moves from each cell to the object's cell (while it lies on the floor) */
    bool started, complete;
} gp_state;

/* Whether cell x lies in the goal region. */
bool gp_in_goal(const gp_state *s, int x);

/* Decode one action's tokens into (move, grip); false when a token is out of range (a no-op). */
bool gp_decode(const gp_state *s, const int32_t *action, int *move, int *grip);

/* Apply (move, grip) to d under s's layout; true when the object was just released in the goal. */
bool gp_apply(const gp_state *s, gp_dyn *d, int move, int grip);

/* The token(s) of (move, grip) into action[token_len]. */
void gp_encode(const gp_state *s, int move, int grip, int32_t *action);

/* Recompute goal_dist and obj_dist from the walls, the goal and the object's cell (after a layout is
   set by hand, as the tests do). */
void gp_distances(gp_state *s);

/* A shortest action sequence from s's current state to a release in the goal (grid_place_demo.c):
   tokens[*n_actions * token_len]. DF_EINVAL when none or longer than max_actions, DF_ENOMEM. */
int gp_plan(const gp_state *s, int32_t *tokens, int max_actions, int *n_actions);

#endif
