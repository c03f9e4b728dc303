/* The synthetic arithmetic task: format, arithmetic, knob bounds, determinism. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "distflow/reward.h"
#include "distflow/synth.h"

static const char *const SHE[] = {"Mia", "Emma", "Lily", "Ava", "Zoe", "Sara", "Nora", "Ella", "Anna", "Lucy"};
static const char *const HE[] = {"Tom", "Sam", "Ben", "Leo", "Max", "Jack", "Noah", "Liam", "Owen", "Finn"};

static bool in_list(const char *s, const char *const *list, int n)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(s, list[i]))
            return true;
    return false;
}

typedef struct {
    long add_tmpl[3], sub_tmpl[3], factor[4], ops[3], fallback;
} tally;

/* Parse one operation sentence: returns the op and its operand. */
static char parse_sentence(const char *sent, const char *P, const char *p, const char *items,
                           long long *x, tally *t)
{
    static const char *const add[] = {"buys", "finds", "gets"}, *const sub[] = {"gives away", "loses", "sells"};
    char buf[256];
    for (int k = 0; k < 3; k++) {
        snprintf(buf, sizeof buf, "%s %s %%lld more", P, add[k]);
        if (sscanf(sent, buf, x) == 1) {
            snprintf(buf, sizeof buf, "%s %s %lld more", P, add[k], *x);
            assert_string_equal(sent, buf);
            t->add_tmpl[k]++;
            return '+';
        }
        snprintf(buf, sizeof buf, "%s %s %%lld", P, sub[k]);
        if (sscanf(sent, buf, x) == 1) {
            snprintf(buf, sizeof buf, "%s %s %lld", P, sub[k], *x);
            assert_string_equal(sent, buf);
            t->sub_tmpl[k]++;
            return '-';
        }
    }
    for (int f = 2; f <= 3; f++) {
        snprintf(buf, sizeof buf, "%s %s %s %s", P, f == 2 ? "doubles" : "triples", p, items);
        if (!strcmp(sent, buf)) {
            *x = f;
            t->factor[f]++;
            return '*';
        }
    }
    fail_msg("unrecognised sentence '%s'", sent);
    return 0;
}

static bool op_applies(char op, long long s, const df_synth_cfg *c)
{
    return op == '+' ? s + 1 <= c->max_value : op == '-' ? s >= 1 : 2 * s <= c->max_value;
}

/* Check one problem: the text, its worked solution and the knob bounds. */
static void check_problem(const df_synth_cfg *c, const char *q, const char *sol, const char *gt,
                          int steps, tally *t)
{
    char name[32], items[32], rest[1024];
    long long s0;
    assert_int_equal(sscanf(q, "%31s has %lld %31[a-z].", name, &s0, items), 3);
    bool she = in_list(name, SHE, 10);
    assert_true(she || in_list(name, HE, 10));
    assert_true(s0 >= 1 && s0 <= c->max_operand);
    char head[128], want_tail[128];
    snprintf(head, sizeof head, "%s has %lld %s. ", name, s0, items);
    assert_memory_equal(q, head, strlen(head));
    snprintf(want_tail, sizeof want_tail, "How many %s does %s have now?", items, name);
    size_t ql = strlen(q), tl = strlen(want_tail);
    assert_true(ql > strlen(head) + tl);
    assert_string_equal(q + ql - tl, want_tail);
    /* the operation sentences between head and tail, each ending in ". " */
    size_t ml = ql - tl - strlen(head);
    memcpy(rest, q + strlen(head), ml);
    rest[ml] = '\0';
    assert_true(steps >= c->min_steps && steps <= c->max_steps);

    long long s = s0;
    const char *line = sol, *sent = rest;
    for (int k = 0; k < steps; k++) {
        const char *dot = strstr(sent, ". ");
        assert_non_null(dot);
        char one[256];
        memcpy(one, sent, (size_t)(dot - sent));
        one[dot - sent] = '\0';
        sent = dot + 2;
        long long x, a, b, r;
        char op = parse_sentence(one, she ? "She" : "He", she ? "her" : "his", items, &x, t);
        char sop;
        assert_int_equal(sscanf(line, "%lld %c %lld = %lld", &a, &sop, &b, &r), 4);
        char expect[96];
        snprintf(expect, sizeof expect, "%lld %c %lld = %lld\n", a, sop, b, r);
        assert_memory_equal(line, expect, strlen(expect));
        line += strlen(expect);
        assert_int_equal(sop, op);
        assert_int_equal(a, s);
        assert_int_equal(b, x);
        assert_int_equal(r, op == '+' ? a + b : op == '-' ? a - b : a * b);
        if (!strchr(c->ops, op)) { /* only when no enabled op applies */
            for (const char *o = c->ops; *o; o++)
                assert_false(op_applies(*o, s, c));
            assert_int_equal(op, '-');
            t->fallback++;
        }
        if (op == '+')
            assert_true(x >= 1 && x <= c->max_operand);
        if (op == '-')
            assert_true(s == 0 ? x == 0 : (x >= 1 && x <= c->max_operand && x <= s));
        if (op == '*')
            assert_true(x == 2 || x == 3);
        t->ops[op == '+' ? 0 : op == '-' ? 1 : 2]++;
        s = r;
        assert_true(s >= 0 && s <= c->max_value);
    }
    assert_string_equal(sent, ""); /* exactly `steps` sentences */
    char fin[40];
    snprintf(fin, sizeof fin, "#### %lld", s);
    assert_string_equal(line, fin);
    snprintf(fin, sizeof fin, "%lld", s);
    assert_string_equal(gt, fin);
    double score = -1;
    assert_int_equal(df_reward_synthetic(DF_SYNTH_DATA_SOURCE, sol, gt, NULL, &score), 0);
    assert_true(score == 1.0);
}

/* Generate n rows through the JSONL path, reload them as a dataset and check every row. */
static tally check_rows(const df_synth_cfg *c, int64_t n)
{
    tally t;
    memset(&t, 0, sizeof t);
    df_dataset *ds = NULL;
    if (df_synth_dataset(c, n, &ds))
        fail_msg("%s", df_last_error());
    assert_int_equal(df_dataset_size(ds), n);
    for (int64_t i = 0; i < n; i++) {
        const char *q;
        char *sol, *steps, *idx, *split;
        assert_string_equal(df_dataset_data_source(ds, i), "synthetic/arithmetic");
        assert_string_equal(df_dataset_ability(ds, i), "math");
        assert_string_equal(df_dataset_reward_style(ds, i), "rule");
        assert_int_equal(df_dataset_num_messages(ds, i), 1);
        assert_int_equal(df_dataset_message(ds, i, 0, NULL, &q), 0);
        assert_int_equal(df_dataset_field(ds, i, "extra_info.answer", &sol), 0);
        assert_int_equal(df_dataset_field(ds, i, "extra_info.steps", &steps), 0);
        assert_int_equal(df_dataset_field(ds, i, "extra_info.index", &idx), 0);
        assert_int_equal(df_dataset_field(ds, i, "extra_info.split", &split), 0);
        assert_int_equal(atoll(idx), i);
        assert_string_equal(split, c->split ? c->split : "train");
        check_problem(c, q, sol, df_dataset_ground_truth(ds, i), atoi(steps), &t);
        free(sol);
        free(steps);
        free(idx);
        free(split);
    }
    df_dataset_free(ds);
    return t;
}

static void test_default_task(void **state)
{
    (void)state;
    df_synth_cfg c;
    df_synth_cfg_default(&c);
    assert_int_equal(c.min_steps, 2);
    assert_int_equal(c.max_steps, 3);
    assert_int_equal(c.max_operand, 20);
    assert_int_equal(c.max_value, 99);
    assert_string_equal(c.ops, "+-*");
    c.seed = 1;
    tally t = check_rows(&c, 3000);
    /* every op, factor and template occurs */
    for (int k = 0; k < 3; k++) {
        assert_true(t.ops[k] > 500);
        assert_true(t.add_tmpl[k] > 100);
        assert_true(t.sub_tmpl[k] > 100);
    }
    assert_true(t.factor[2] > 100 && t.factor[3] > 100);
    assert_int_equal(t.fallback, 0);
}

static void test_knobs(void **state)
{
    (void)state;
    static const struct {
        int lo, hi, opnd, maxv;
        const char *ops;
    } cases[] = {
        {1, 1, 5, 10, "+-*"}, {4, 6, 3, 50, "+"}, {2, 3, 20, 99, "*"},
        {3, 3, 10, 10, "-"},  {2, 5, 99, 99, "-*"}, {6, 8, 50, 1000, "*+"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        df_synth_cfg c;
        df_synth_cfg_default(&c);
        c.min_steps = cases[k].lo;
        c.max_steps = cases[k].hi;
        c.max_operand = cases[k].opnd;
        c.max_value = cases[k].maxv;
        strcpy(c.ops, cases[k].ops);
        c.seed = 100 + k;
        c.split = "test";
        tally t = check_rows(&c, 400);
        if (!strcmp(cases[k].ops, "*"))
            assert_true(t.fallback > 0); /* 20 -> 40 -> 80 cannot double again */
        if (!strcmp(cases[k].ops, "+"))
            assert_int_equal(t.ops[1] + t.ops[2], 0);
    }
}

static void test_bad_knobs(void **state)
{
    (void)state;
    df_synth_cfg c;
    char *text = NULL;
    size_t len;
    static const struct {
        int lo, hi, opnd, maxv;
        const char *ops, *msg;
    } bad[] = {
        {0, 3, 20, 99, "+", "min_steps = 0"},   {3, 2, 20, 99, "+", "max_steps = 2"},
        {1, 65, 20, 99, "+", "max_steps = 65"}, {2, 3, 0, 99, "+", "max_operand = 0"},
        {2, 3, 20, 19, "+", "max_value = 19"},  {2, 3, 20, 99, "", "ops must be"},
        {2, 3, 20, 99, "+/", "unknown op '/'"}, {2, 3, 20, 99, "+-+", "'+' repeated"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        df_synth_cfg_default(&c);
        c.min_steps = bad[k].lo;
        c.max_steps = bad[k].hi;
        c.max_operand = bad[k].opnd;
        c.max_value = bad[k].maxv;
        strcpy(c.ops, bad[k].ops);
        assert_int_equal(df_synth_cfg_check(&c), DF_EINVAL);
        if (!strstr(df_last_error(), bad[k].msg))
            fail_msg("case %zu: '%s' lacks '%s'", k, df_last_error(), bad[k].msg);
        assert_int_equal(df_synth_jsonl(&c, 3, &text, &len), DF_EINVAL);
        assert_null(text);
    }
    df_synth_cfg_default(&c);
    assert_int_equal(df_synth_jsonl(&c, -1, &text, &len), DF_EINVAL);
}

static void test_determinism(void **state)
{
    (void)state;
    df_synth_cfg c;
    df_synth_cfg_default(&c);
    c.seed = 42;
    char *a, *b, *p, *d;
    size_t al, bl, pl, dl;
    assert_int_equal(df_synth_jsonl(&c, 500, &a, &al), 0);
    assert_int_equal(df_synth_jsonl(&c, 500, &b, &bl), 0);
    assert_int_equal(al, bl);
    assert_memory_equal(a, b, al); /* same seed: byte-identical */
    assert_int_equal(df_synth_jsonl(&c, 200, &p, &pl), 0);
    assert_true(pl < al);
    assert_memory_equal(a, p, pl); /* rows do not depend on n */
    c.seed = 43;
    c.split = "test";
    assert_int_equal(df_synth_jsonl(&c, 500, &d, &dl), 0);
    /* another seed: a different problem list (count identical questions at each index) */
    int same = 0;
    df_synth_cfg c42 = c;
    c42.seed = 42;
    for (int i = 0; i < 500; i++) {
        df_synth_problem x, y;
        assert_int_equal(df_synth_problem_make(&c42, i, &x), 0);
        assert_int_equal(df_synth_problem_make(&c, i, &y), 0);
        same += !strcmp(x.question, y.question);
        df_synth_problem_free(&x);
        df_synth_problem_free(&y);
    }
    assert_true(same < 5);

    /* the file is the in-memory text, written atomically */
    char path[64];
    snprintf(path, sizeof path, "/tmp/df_test_synth_%ld.jsonl", (long)getpid());
    c.seed = 42;
    c.split = NULL;
    assert_int_equal(df_synth_write(&c, 500, path), 0);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *got = malloc(al + 1);
    assert_int_equal(fread(got, 1, al + 1, f), al);
    fclose(f);
    assert_memory_equal(got, a, al);
    unlink(path);
    assert_int_equal(df_synth_write(&c, 5, "/nonexistent-dir/x.jsonl"), DF_EIO);
    free(got);
    free(a);
    free(b);
    free(p);
    free(d);
}

#define GOLDEN_ROW0                                                                             \
    "{\"data_source\": \"synthetic/arithmetic\", \"prompt\": [{\"role\": \"user\", \"content\": "    \
    "\"Ella has 6 plums. She buys 11 more. She gives away 10. How many plums does Ella have "      \
    "now?\"}], \"ability\": \"math\", \"reward_model\": {\"style\": \"rule\", \"ground_truth\": "     \
    "\"7\"}, \"extra_info\": {\"split\": \"train\", \"index\": 0, \"answer\": \"6 + 11 = 17\\n17 - 10 = " \
    "7\\n#### 7\", \"steps\": 2}}\n"

static void test_golden_row(void **state)
{
    (void)state;
    /* Row 0 of the default task with seed 0: pins the draw order, so the
     * demo's data does not change silently. */
    df_synth_cfg c;
    df_synth_cfg_default(&c);
    char *text;
    size_t len;
    assert_int_equal(df_synth_jsonl(&c, 1, &text, &len), 0);
    assert_string_equal(text, GOLDEN_ROW0);
    free(text);
}

/* tool: the row's "messages" call the calculator with the problem's expression, whose value (the
   calculator's own answer) is the answer; a bare row answers at once. Row 0 of seed 1 with the
   grpo_tool knobs, checked by hand: 845 + 794 + 927 = 2566, times 3 = 7698. */
static void test_tool_rows(void **state)
{
    (void)state;
    df_synth_cfg c;
    df_synth_cfg_default(&c);
    c.seed = 1, c.max_operand = 999, c.max_value = 99999, c.tool = true, c.bare_answer_frac = 0.33;
    char *text;
    size_t len;
    assert_int_equal(df_synth_jsonl(&c, 40, &text, &len), 0);
    assert_non_null(strstr(text, "{\"role\": \"assistant\", \"content\": \"<tool_call>\\n{\\\"name\\\": "
                                 "\\\"calculator\\\", \\\"arguments\\\": {\\\"expression\\\": \\\"(845 + 794 + 927) * 3\\\"}}"
                                 "\\n</tool_call>\"}, {\"role\": \"tool\", \"content\": \"(845 + 794 + 927) * 3 = 7698\"}, "
                                 "{\"role\": \"assistant\", \"content\": \"#### 7698\"}]"));
    int bare = 0, rows = 0;
    for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n"), rows++)
        bare += strstr(l, "\"messages\"") && !strstr(l, "<tool_call>");
    assert_int_equal(rows, 40);
    assert_true(bare >= 5 && bare <= 25); /* about a third */
    free(text);
}

/* bare_answer_frac swaps the demonstration's style, never the problem. */
static void test_bare_answers(void **state)
{
    (void)state;
    df_synth_cfg worked, mixed;
    df_synth_cfg_default(&worked);
    worked.seed = 5;
    mixed = worked;
    mixed.bare_answer_frac = 0.5;
    int bare = 0;
    for (int64_t i = 0; i < 2000; i++) {
        df_synth_problem a, b;
        assert_int_equal(df_synth_problem_make(&worked, i, &a), 0);
        assert_int_equal(df_synth_problem_make(&mixed, i, &b), 0);
        assert_string_equal(a.question, b.question);
        assert_int_equal(a.answer, b.answer);
        if (strcmp(a.solution, b.solution)) {
            char want[64];
            snprintf(want, sizeof want, "The answer is %lld.", (long long)a.answer);
            assert_string_equal(b.solution, want);
            bare++;
        }
        df_synth_problem_free(&a);
        df_synth_problem_free(&b);
    }
    /* binomial(2000, 0.5): mean 1000, sd sqrt(2000 / 4) = 22.4, 5 sd = 112 (the draws are seeded:
       the same count on every machine) */
    assert_in_range(bare, 1000 - 112, 1000 + 112);
    mixed.bare_answer_frac = 1.5;
    df_synth_problem p;
    assert_int_equal(df_synth_problem_make(&mixed, 0, &p), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "bare_answer_frac"));
}

/* bare_answer_frac_short: the problems with min_steps operations take their own share of bare answers
   (make demo ALGO=grpo_tool answers short problems without the tool), the longer ones bare_answer_frac;
   the same draw, so 0 / 1 split the rows by length exactly, and the problems never change. */
static void test_bare_answers_short(void **state)
{
    (void)state;
    df_synth_cfg worked, split;
    df_synth_cfg_default(&worked);
    worked.seed = 3, worked.min_steps = 1, worked.max_steps = 2;
    split = worked;
    split.bare_answer_frac = 0, split.bare_answer_frac_short = 1;
    int shorts = 0;
    for (int64_t i = 0; i < 400; i++) {
        df_synth_problem a, b;
        assert_int_equal(df_synth_problem_make(&worked, i, &a), 0);
        assert_int_equal(df_synth_problem_make(&split, i, &b), 0);
        assert_string_equal(a.question, b.question);
        assert_false(a.bare);
        assert_int_equal(b.bare, b.steps == 1);
        if (b.steps == 1) {
            char want[64];
            snprintf(want, sizeof want, "The answer is %lld.", (long long)a.answer);
            assert_string_equal(b.solution, want);
        } else {
            assert_string_equal(b.solution, a.solution);
        }
        shorts += b.steps == 1;
        df_synth_problem_free(&a);
        df_synth_problem_free(&b);
    }
    assert_in_range(shorts, 150, 250); /* k uniform in {1, 2} */
    /* 0.7 / 0: about 70% of the short problems, none of the long ones (the demo's knobs) */
    split.bare_answer_frac_short = 0.7;
    int bare_short = 0;
    for (int64_t i = 0; i < 400; i++) {
        df_synth_problem p;
        assert_int_equal(df_synth_problem_make(&split, i, &p), 0);
        assert_true(!p.bare || p.steps == 1);
        bare_short += p.bare;
        df_synth_problem_free(&p);
    }
    /* binomial(shorts ~ 200, 0.7): sd ~ 6.5 */
    assert_in_range(bare_short, (int)(0.7 * shorts) - 35, (int)(0.7 * shorts) + 35);
    split.bare_answer_frac_short = 1.5;
    df_synth_problem p;
    assert_int_equal(df_synth_problem_make(&split, 0, &p), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "bare_answer_frac_short"));
}

/* A test set made with `exclude` shares no problem with the training set. */
static void test_exclude(void **state)
{
    (void)state;
    df_synth_cfg c;
    df_synth_cfg_default(&c);
    c.seed = 1;
    df_dataset *train, *test;
    assert_int_equal(df_synth_dataset(&c, 300, &train), 0);
    c.exclude = train; /* same seed: problems 0..299 are all excluded */
    assert_int_equal(df_synth_dataset(&c, 50, &test), 0);
    assert_int_equal(df_dataset_size(test), 50);
    char *idx;
    assert_int_equal(df_dataset_field(test, 0, "extra_info.index", &idx), 0);
    assert_string_equal(idx, "300");
    free(idx);
    df_dataset_free(test);
    /* knobs with only a handful of distinct problems cannot avoid a large set */
    df_synth_cfg tiny;
    df_synth_cfg_default(&tiny);
    tiny.min_steps = tiny.max_steps = 1;
    tiny.max_operand = 2;
    tiny.max_value = 2;
    strcpy(tiny.ops, "-");
    df_dataset *all;
    assert_int_equal(df_synth_dataset(&tiny, 40000, &all), 0); /* covers its ~3600 problems */
    tiny.exclude = all;
    tiny.seed = 9;
    assert_int_equal(df_synth_dataset(&tiny, 10, &test), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "excluded"));
    df_dataset_free(all);
    df_dataset_free(train);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_task), cmocka_unit_test(test_knobs),
        cmocka_unit_test(test_bad_knobs),    cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_golden_row),   cmocka_unit_test(test_bare_answers),
        cmocka_unit_test(test_exclude),      cmocka_unit_test(test_tool_rows),
        cmocka_unit_test(test_bare_answers_short),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
