/* The synthetic arithmetic task (include/distflow/synth.h). */
#include "distflow/synth.h"

#include "data/jsonl.h"
#include "util/fsutil.h"
#include "distflow/agent.h"
#include "distflow/rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const NAMES[20] = {"Mia", "Emma", "Lily", "Ava",  "Zoe",  "Sara", "Nora",
                                      "Ella", "Anna", "Lucy", "Tom", "Sam",  "Ben",  "Leo",
                                      "Max", "Jack", "Noah", "Liam", "Owen", "Finn"};
static const char *const ITEMS[20] = {"apples", "pears",   "books",    "coins", "cards",
                                      "stamps", "shells",  "marbles",  "pens",  "cookies",
                                      "stickers", "rocks", "beads",    "toys",  "eggs",
                                      "plums",  "cups",    "hats",     "balls", "kites"};
static const char *const ADD_VERB[3] = {"buys", "finds", "gets"};
static const char *const SUB_VERB[3] = {"gives away", "loses", "sells"};

void df_synth_cfg_default(df_synth_cfg *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->min_steps = 2;
    cfg->max_steps = 3;
    cfg->max_operand = 20;
    cfg->max_value = 99;
    strcpy(cfg->ops, "+-*");
    cfg->seed = 0;
    cfg->split = NULL;
    cfg->bare_answer_frac_short = -1;
}

int df_synth_cfg_check(const df_synth_cfg *c)
{
    if (c->min_steps < 1 || c->min_steps > DF_SYNTH_MAX_STEPS)
        return df_error(DF_EINVAL, "synthetic task: min_steps = %d, must be in [1, %d]",
                        c->min_steps, DF_SYNTH_MAX_STEPS);
    if (c->max_steps < c->min_steps || c->max_steps > DF_SYNTH_MAX_STEPS)
        return df_error(DF_EINVAL, "synthetic task: max_steps = %d, must be in [min_steps = %d, %d]",
                        c->max_steps, c->min_steps, DF_SYNTH_MAX_STEPS);
    if (c->max_operand < 1)
        return df_error(DF_EINVAL, "synthetic task: max_operand = %d, must be >= 1", c->max_operand);
    if (c->max_value < c->max_operand || c->max_value > 1000000000)
        return df_error(DF_EINVAL, "synthetic task: max_value = %d, must be in [max_operand = %d, 1e9]",
                        c->max_value, c->max_operand);
    if (!(c->bare_answer_frac >= 0 && c->bare_answer_frac <= 1))
        return df_error(DF_EINVAL, "synthetic task: bare_answer_frac = %g, must be in [0, 1]",
                        c->bare_answer_frac);
    if (!(c->bare_answer_frac_short <= 1)) /* NaN too; any negative value means "as bare_answer_frac" */
        return df_error(DF_EINVAL, "synthetic task: bare_answer_frac_short = %g, must be <= 1 (< 0: as "
                        "bare_answer_frac)", c->bare_answer_frac_short);
    size_t n = strnlen(c->ops, sizeof c->ops);
    if (n == 0 || n == sizeof c->ops)
        return df_error(DF_EINVAL, "synthetic task: ops must be 1 to 3 of \"+-*\"");
    for (size_t i = 0; i < n; i++) {
        if (!strchr("+-*", c->ops[i]))
            return df_error(DF_EINVAL, "synthetic task: ops \"%s\": unknown op '%c' (use + - *)",
                            c->ops, c->ops[i]);
        if (memchr(c->ops, c->ops[i], i))
            return df_error(DF_EINVAL, "synthetic task: ops \"%s\": '%c' repeated", c->ops, c->ops[i]);
    }
    return DF_OK;
}

static int64_t uniform(df_rng *r, int64_t lo, int64_t hi) /* inclusive */
{
    return lo + (int64_t)df_rng_below(r, (uint64_t)(hi - lo + 1));
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static bool applies(char op, int64_t s, const df_synth_cfg *c)
{
    switch (op) {
    case '+':
        return s + 1 <= c->max_value;
    case '-':
        return s >= 1;
    default:
        return 2 * s <= c->max_value;
    }
}

/* One operation on s: appends its sentence and solution line, returns the new value. */
static int64_t apply_op(df_rng *r, const df_synth_cfg *c, int64_t s, bool she, const char *items,
                        df_jsonl_buf *q, df_jsonl_buf *sol, bool *ok)
{
    char cand[3];
    int nc = 0;
    for (const char *o = c->ops; *o; o++)
        if (applies(*o, s, c))
            cand[nc++] = *o;
    char op = nc ? cand[df_rng_below(r, (uint64_t)nc)] : '-';
    const char *P = she ? "She" : "He", *p = she ? "her" : "his";
    int64_t x, t;
    if (op == '+') {
        x = uniform(r, 1, min64(c->max_operand, c->max_value - s));
        t = (int64_t)df_rng_below(r, 3);
        *ok &= df_jsonl_buf_addf(q, " %s %s %lld more.", P, ADD_VERB[t], (long long)x);
        *ok &= df_jsonl_buf_addf(sol, "%lld + %lld = %lld\n", (long long)s, (long long)x,
                              (long long)(s + x));
        return s + x;
    }
    if (op == '-') {
        x = s >= 1 ? uniform(r, 1, min64(c->max_operand, s)) : 0;
        t = (int64_t)df_rng_below(r, 3);
        *ok &= df_jsonl_buf_addf(q, " %s %s %lld.", P, SUB_VERB[t], (long long)x);
        *ok &= df_jsonl_buf_addf(sol, "%lld - %lld = %lld\n", (long long)s, (long long)x,
                              (long long)(s - x));
        return s - x;
    }
    x = (3 * s <= c->max_value) ? uniform(r, 2, 3) : 2;
    *ok &= df_jsonl_buf_addf(q, " %s %s %s %s.", P, x == 2 ? "doubles" : "triples", p, items);
    *ok &= df_jsonl_buf_addf(sol, "%lld * %lld = %lld\n", (long long)s, (long long)x,
                          (long long)(s * x));
    return s * x;
}

/* The worked solution's lines "a op b = c" as one expression: left to right, a product of a sum
   in parentheses. */
static char *expression_of(const char *sol)
{
    df_jsonl_buf e = {0};
    bool ok = true, sum = false;
    for (const char *l = sol; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        long long a, b;
        char op;
        if (sscanf(l, "%lld %c %lld =", &a, &op, &b) != 3)
            break;
        if (!e.len)
            ok &= df_jsonl_buf_addf(&e, "%lld", a);
        if (op == '*' && sum) {
            char *inner = e.p;
            e = (df_jsonl_buf){0};
            ok &= df_jsonl_buf_addf(&e, "(%s)", inner);
            free(inner);
        }
        sum |= op != '*';
        ok &= df_jsonl_buf_addf(&e, " %c %lld", op, b);
    }
    if (!ok) {
        free(e.p);
        return NULL;
    }
    return e.p ? e.p : strdup("");
}

int df_synth_problem_make(const df_synth_cfg *c, int64_t index, df_synth_problem *out)
{
    int rc = df_synth_cfg_check(c);
    if (rc)
        return rc;
    df_rng r;
    df_rng_seed(&r, df_rng_key(c->seed, (uint64_t)index, 0, 0));
    int who = (int)df_rng_below(&r, 20);
    const char *name = NAMES[who], *items = ITEMS[df_rng_below(&r, 20)];
    int64_t s = uniform(&r, 1, c->max_operand);
    int k = (int)uniform(&r, c->min_steps, c->max_steps);
    df_jsonl_buf q = {0}, sol = {0};
    bool ok = df_jsonl_buf_addf(&q, "%s has %lld %s.", name, (long long)s, items);
    for (int i = 0; i < k; i++)
        s = apply_op(&r, c, s, who < 10, items, &q, &sol, &ok);
    ok &= df_jsonl_buf_addf(&q, " How many %s does %s have now?", items, name);
    df_rng style;
    df_rng_seed(&style, df_rng_key(c->seed, (uint64_t)index, 1, 0));
    char *expr = ok ? expression_of(sol.p) : NULL;
    ok &= expr != NULL;
    double bare = c->bare_answer_frac_short >= 0 && k == c->min_steps ? c->bare_answer_frac_short : c->bare_answer_frac;
    out->bare = bare > 0 && df_rng_uniform(&style) < bare;
    if (out->bare) {
        sol.len = 0; /* a bare demonstration: no working, not the verifier's format */
        ok &= df_jsonl_buf_addf(&sol, "The answer is %lld.", (long long)s);
    } else {
        ok &= df_jsonl_buf_addf(&sol, "#### %lld", (long long)s);
    }
    if (!ok) {
        free(q.p);
        free(sol.p);
        free(expr);
        return df_error(DF_ENOMEM, "synthetic task: out of memory");
    }
    out->expression = expr;
    out->question = q.p;
    out->solution = sol.p;
    out->answer = s;
    out->steps = k;
    return DF_OK;
}

void df_synth_problem_free(df_synth_problem *p)
{
    if (!p)
        return;
    free(p->question);
    free(p->solution);
    free(p->expression);
    p->question = p->solution = p->expression = NULL;
}

/* The calculator's answer to `expr`, as the tool gives it in a rollout. */
static char *calculator_text(const char *expr)
{
    json_t *args = json_pack("{s:s}", "expression", expr);
    char *a = args ? json_dumps(args, JSON_COMPACT) : NULL, *text = NULL;
    void *inst = NULL;
    df_tool_result r = {0};
    if (a && !df_tool_calculator.create(NULL, "synth", "{}", &inst) &&
        !df_tool_calculator.execute(NULL, inst, a, &r))
        text = r.text, r.text = NULL;
    if (inst && df_tool_calculator.release)
        df_tool_calculator.release(NULL, inst);
    df_tool_result_clear(&r);
    free(a);
    json_decref(args);
    return text;
}

/* A tool-use demonstration (df_synth_cfg.tool): the conversation as "messages". */
static json_t *tool_messages(const df_synth_problem *p)
{
    char ans[48];
    snprintf(ans, sizeof ans, "#### %lld", (long long)p->answer);
    if (p->bare)
        return json_pack("[{s:s, s:s}, {s:s, s:s}]", "role", "user", "content", p->question, "role", "assistant",
                         "content", ans);
    char *tool = calculator_text(p->expression);
    json_t *call = json_pack("{s:s, s:{s:s}}", "name", "calculator", "arguments", "expression", p->expression);
    char *cj = call ? json_dumps(call, 0) : NULL;
    df_jsonl_buf turn = {0};
    bool ok = tool && cj && df_jsonl_buf_addf(&turn, "<tool_call>\n%s\n</tool_call>", cj);
    json_t *m = ok ? json_pack("[{s:s, s:s}, {s:s, s:s}, {s:s, s:s}, {s:s, s:s}]", "role", "user", "content",
                               p->question, "role", "assistant", "content", turn.p, "role", "tool", "content", tool,
                               "role", "assistant", "content", ans)
                   : NULL;
    free(tool), free(cj), free(turn.p);
    json_decref(call);
    return m;
}

static int append_row(const df_synth_cfg *c, int64_t i, df_jsonl_buf *out)
{
    df_synth_problem p;
    int rc = df_synth_problem_make(c, i, &p);
    if (rc)
        return rc;
    char gt[32];
    snprintf(gt, sizeof gt, "%lld", (long long)p.answer);
    json_t *row = json_pack("{s:s, s:[{s:s, s:s}], s:s, s:{s:s, s:s}, s:{s:s, s:I, s:s, s:i}}",
                            "data_source", DF_SYNTH_DATA_SOURCE,                  //
                            "prompt", "role", "user", "content", p.question,      //
                            "ability", "math",                                    //
                            "reward_model", "style", "rule", "ground_truth", gt,  //
                            "extra_info", "split", c->split ? c->split : "train", //
                            "index", (json_int_t)i, "answer", p.solution, "steps", p.steps);
    if (row && c->tool) {
        json_t *m = tool_messages(&p);
        if (!m || json_object_set_new(row, "messages", m)) {
            json_decref(row);
            row = NULL;
        }
    }
    char *text = row ? df_jsonl_dumps_py(row) : NULL;
    bool ok = text && df_jsonl_buf_add(out, text, strlen(text)) && df_jsonl_buf_add(out, "\n", 1);
    free(text);
    json_decref(row);
    df_synth_problem_free(&p);
    return ok ? DF_OK : df_error(DF_ENOMEM, "synthetic task: out of memory at row %lld", (long long)i);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first message of every row of `ds`, sorted for bsearch (NULL ds: none). */
static int sorted_questions(const df_dataset *ds, const char ***out, int64_t *n)
{
    *n = ds ? df_dataset_size(ds) : 0;
    *out = NULL;
    if (*n == 0)
        return DF_OK;
    const char **q = malloc((size_t)*n * sizeof *q);
    if (!q)
        return df_error(DF_ENOMEM, "synthetic task: out of memory");
    for (int64_t i = 0; i < *n; i++) {
        const char *role;
        if (df_dataset_message(ds, i, 0, &role, &q[i]))
            q[i] = "";
    }
    qsort(q, (size_t)*n, sizeof *q, cmp_str);
    *out = q;
    return DF_OK;
}

static int is_excluded(const df_synth_cfg *c, int64_t i, const char **excl, int64_t n_excl,
                       bool *skip)
{
    df_synth_problem p;
    int rc = df_synth_problem_make(c, i, &p);
    if (rc)
        return rc;
    *skip = bsearch(&p.question, excl, (size_t)n_excl, sizeof *excl, cmp_str) != NULL;
    df_synth_problem_free(&p);
    return DF_OK;
}

int df_synth_jsonl(const df_synth_cfg *cfg, int64_t n, char **text, size_t *len)
{
    int rc = df_synth_cfg_check(cfg);
    if (rc)
        return rc;
    if (n < 0)
        return df_error(DF_EINVAL, "synthetic task: row count %lld < 0", (long long)n);
    const char **excl = NULL;
    int64_t n_excl = 0;
    if ((rc = sorted_questions(cfg->exclude, &excl, &n_excl)))
        return rc;
    df_jsonl_buf out = {0};
    if (!df_jsonl_buf_add(&out, "", 0))
        rc = df_error(DF_ENOMEM, "synthetic task: out of memory");
    /* every problem the exclusion set drops is replaced by the next index; the
       cap only stops knobs so narrow that few distinct problems exist */
    int64_t written = 0, limit = 10 * n + 1000;
    for (int64_t i = 0; !rc && written < n; i++) {
        if (i == limit) {
            rc = df_error(DF_EINVAL, "synthetic task: only %lld of %lld problems are outside the "
                          "excluded set after %lld draws; widen the knobs",
                          (long long)written, (long long)n, (long long)limit);
            break;
        }
        bool skip = false;
        if (n_excl && (rc = is_excluded(cfg, i, excl, n_excl, &skip)))
            break;
        if (!skip && !(rc = append_row(cfg, i, &out)))
            written++;
    }
    free(excl);
    if (rc) {
        free(out.p);
        return rc;
    }
    *text = out.p;
    if (len)
        *len = out.len;
    return DF_OK;
}

int df_synth_write(const df_synth_cfg *cfg, int64_t n, const char *path)
{
    char *text;
    size_t len;
    int rc = df_synth_jsonl(cfg, n, &text, &len);
    if (rc)
        return rc;
    rc = df_write_file_atomic(path, text, len);
    free(text);
    return rc;
}

int df_synth_dataset(const df_synth_cfg *cfg, int64_t n, df_dataset **out)
{
    char *text, name[96];
    size_t len;
    int rc = df_synth_jsonl(cfg, n, &text, &len);
    if (rc)
        return rc;
    snprintf(name, sizeof name, "synthetic:%.80s", cfg->split ? cfg->split : "train");
    rc = df_dataset_load_buffer(text, len, name, NULL, out);
    free(text);
    return rc;
}
