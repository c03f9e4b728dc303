/* Scripted demonstrations for grid_place (include/distflow/embodied.h): a breadth-first planner over
 * (arm cell, object cell, held) that moves with the simulator's own dynamics (gp_apply), and the
 * writer of its solutions as SFT JSON lines, one row per model call, for a warm start before RL. */
#include "embodied/grid_place.h"

#include "util/fsutil.h"
#include "util/sbuf.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define GP_MAX_ACTIONS 15 /* 5 moves x 3 gripper commands */

/* The decoded actions the class accepts, in the order the search tries them. */
static int action_set(const gp_state *s, int *moves, int *grips)
{
    int n = 0;
    for (int g = 0; g < GP_N_GRIPS; g++)
        for (int m = 0; m < GP_N_MOVES; m++) {
            if (s->token_len == 1 && g != GP_KEEP && m != GP_STAY)
                continue; /* one token: a move or a gripper command, not both */
            moves[n] = m, grips[n] = g, n++;
        }
    return n;
}

static int state_index(const gp_state *s, const gp_dyn *d)
{
    int cells = s->size * s->size;
    return (d->arm * cells + d->obj) * 2 + d->held;
}

static gp_dyn state_of(const gp_state *s, int idx)
{
    int cells = s->size * s->size;
    return (gp_dyn){.arm = idx / 2 / cells, .obj = idx / 2 % cells, .held = idx % 2};
}

/* Walk the parents back from `last` (reached by action `final`) into tokens; DF_EINVAL when longer
   than max_actions. */
static int unwind(const gp_state *s, const int *parent, const unsigned char *via, int last, int final,
                  const int *moves, const int *grips, int32_t *tokens, int max_actions, int *n_actions)
{
    int len = 1;
    for (int x = last; parent[x] >= 0; x = parent[x])
        len++;
    if (len > max_actions)
        return df_error(DF_EINVAL, "grid_place: the shortest plan has %d actions, more than %d", len, max_actions);
    int k = len - 1, tl = s->token_len;
    gp_encode(s, moves[final], grips[final], tokens + k * tl);
    for (int x = last; parent[x] >= 0; x = parent[x]) {
        k--;
        gp_encode(s, moves[via[x]], grips[via[x]], tokens + k * tl);
    }
    *n_actions = len;
    return DF_OK;
}

/* Breadth-first search from s's current state to a release in the goal region. */
int gp_plan(const gp_state *s, int32_t *tokens, int max_actions, int *n_actions)
{
    int cells = s->size * s->size, n_states = cells * cells * 2, moves[GP_MAX_ACTIONS], grips[GP_MAX_ACTIONS];
    int n_act = action_set(s, moves, grips);
    int *parent = malloc((size_t)n_states * sizeof *parent), *queue = malloc((size_t)n_states * sizeof *queue);
    unsigned char *via = malloc((size_t)n_states), *seen = calloc((size_t)n_states, 1);
    int rc = DF_OK, head = 0, tail = 0, last = -1, final = -1, start = state_index(s, &s->d);
    if (!parent || !queue || !via || !seen)
        rc = df_error(DF_ENOMEM, "out of memory");
    else
        seen[start] = 1, parent[start] = -1, queue[tail++] = start;
    while (head < tail && last < 0) {
        int x = queue[head++];
        for (int a = 0; a < n_act && last < 0; a++) {
            gp_dyn d = state_of(s, x);
            if (gp_apply(s, &d, moves[a], grips[a])) {
                last = x, final = a;
                break;
            }
            int y = state_index(s, &d);
            if (!seen[y])
                seen[y] = 1, parent[y] = x, via[y] = (unsigned char)a, queue[tail++] = y;
        }
    }
    if (!rc)
        rc = last < 0 ? df_error(DF_EINVAL, "grid_place: no plan reaches the goal")
                      : unwind(s, parent, via, last, final, moves, grips, tokens, max_actions, n_actions);
    free(parent), free(queue), free(via), free(seen);
    return rc;
}

int df_grid_place_plan(const char *config_json, int64_t task_id, int64_t trial_id, int32_t *tokens, int max_actions,
                       int *n_actions)
{
    *n_actions = 0;
    void *st = NULL;
    int rc = df_embodied_grid_place.create(config_json ? config_json : "{}", &st);
    if (!rc)
        rc = df_embodied_grid_place.reset(st, task_id, trial_id);
    if (!rc)
        rc = gp_plan(st, tokens, max_actions, n_actions);
    df_embodied_grid_place.release(st);
    return rc;
}

/* One row: the observation before model call k and the call's actions as words. */
static int write_row(df_tmpfile *f, const char *prompt, const char *response, int64_t task, int64_t trial, int64_t k)
{
    json_t *row = json_pack("{s:s, s:s, s:I, s:I, s:I}", "prompt", prompt, "response", response, "task_id",
                            (json_int_t)task, "trial_id", (json_int_t)trial, "call", (json_int_t)k);
    char *line = row ? json_dumps(row, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(row);
    if (!line)
        return df_error(DF_ENOMEM, "out of memory");
    int rc = df_tmpfile_write(f, line, strlen(line));
    if (!rc)
        rc = df_tmpfile_write(f, "\n", 1);
    free(line);
    return rc;
}

/* The demonstration of one (task, trial): plan, then replay it call by call in a fresh episode. */
static int write_episode(df_tmpfile *f, gp_state *s, const df_embodied_vec_opts *o, int64_t task, int64_t trial,
                         int32_t *plan, int32_t *chunk, int64_t *n_rows)
{
    int n = 0, tl = s->token_len, cl = o->action_chunks_len;
    int rc = df_embodied_grid_place.reset(s, task, trial);
    if (!rc)
        rc = gp_plan(s, plan, (int)o->max_steps, &n);
    df_embodied_info info;
    df_embodied_grid_place.describe(s, &info);
    bool complete = false;
    for (int k = 0; !rc && k * cl < n; k++) {
        char *prompt = NULL, *response = NULL;
        for (int j = 0; j < cl; j++) /* past the plan's end: the no-op action */
            if (k * cl + j < n)
                memcpy(chunk + j * tl, plan + (k * cl + j) * tl, (size_t)tl * sizeof *chunk);
            else
                gp_encode(s, GP_STAY, GP_KEEP, chunk + j * tl);
        rc = df_embodied_grid_place.observe(s, &prompt);
        if (!rc)
            rc = df_embodied_actions_text(&info, chunk, cl, &response);
        /* every word after a space, the first too: each is then one token of a BPE tokenizer trained
           on these rows, the same token wherever it stands (the embodied rollout reads them so) */
        char *spaced = rc ? NULL : malloc(strlen(response) + 2);
        if (!rc && !spaced)
            rc = df_error(DF_ENOMEM, "out of memory");
        if (!rc) {
            spaced[0] = ' ';
            strcpy(spaced + 1, response);
            rc = write_row(f, prompt, spaced, task, trial, k);
        }
        free(spaced);
        for (int j = 0; !rc && j < cl && k * cl + j < n; j++)
            rc = df_embodied_grid_place.step(s, chunk + j * tl, &complete);
        free(prompt), free(response);
        *n_rows += !rc;
    }
    if (!rc && !complete)
        rc = df_error(DF_EINTERNAL, "grid_place: the plan of task %lld trial %lld does not complete it",
                      (long long)task, (long long)trial);
    return rc;
}

int df_grid_place_write_demos(const char *path, const char *config_json, const df_embodied_vec_opts *o,
                              int64_t first_task, int64_t n_tasks, int64_t trials, int64_t *n_rows)
{
    int64_t rows = 0;
    if (n_rows)
        *n_rows = 0;
    if (!path || !o || o->max_steps < 1 || o->max_steps > 1000000 || o->action_chunks_len < 1 || first_task < 0 ||
        n_tasks < 0 || trials < 0)
        return df_error(DF_EINVAL, "df_grid_place_write_demos: needs a path, max_steps in [1, 1e6], "
                                   "action_chunks_len >= 1 and non-negative task / trial counts");
    void *st = NULL;
    int rc = df_embodied_grid_place.create(config_json ? config_json : "{}", &st);
    if (rc)
        return rc;
    int32_t *plan = malloc((size_t)o->max_steps * 2 * sizeof *plan);
    int32_t *chunk = malloc((size_t)o->action_chunks_len * 2 * sizeof *chunk);
    df_tmpfile f = {0};
    rc = plan && chunk ? df_tmpfile_open(&f, path) : df_error(DF_ENOMEM, "out of memory");
    for (int64_t t = first_task; !rc && t < first_task + n_tasks; t++)
        for (int64_t r = 0; !rc && r < trials; r++)
            rc = write_episode(&f, st, o, t, r, plan, chunk, &rows);
    if (!rc)
        rc = df_tmpfile_commit(&f);
    df_tmpfile_discard(&f);
    df_embodied_grid_place.release(st);
    free(plan), free(chunk);
    if (!rc && n_rows)
        *n_rows = rows;
    return rc;
}
