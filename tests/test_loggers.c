/*
 * The metrics sinks of trainer.logger (src/logging/loggers.h). TensorBoard event files are read
 * back independently of the writer: the test parses the TFRecord framing itself, checks both CRCs
 * with its own bit-at-a-time CRC32C (against RFC 3720's check value), and decodes every payload
 * with Google's protoc (--decode, tests/fixtures/tb_event_reader.proto written from TensorFlow's
 * schema), not with the protobuf-c code that packed it; the decoded steps, tags and values must
 * be those of metrics.jsonl. Runs the sinks directly, then a short `train` and `sft` with
 * logger=[tensorboard] (and `distflow plot` on the train run's metrics.jsonl).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"

#include "distflow/config.h"
#include "distflow/metrics.h"
#include "distflow/reward.h"
#include "distflow/worker.h"
#include "logging/loggers.h"
#include "logging/plot.h"
#include "logging/tfrecord.h"
#include "util/fsutil.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#define MAX_VALS 256
#define MAX_EVENTS 64

typedef struct {
    double wall_time;
    long long step;
    char file_version[64];
    int session_status; /* 0: no session_log */
    int n;              /* summary values */
    char tag[MAX_VALS][128];
    float value[MAX_VALS];
    bool has_value[MAX_VALS];
} tb_event;

/* ---- the independent reader ------------------------------------------------------------------ */

/* CRC32C a bit at a time (reflected 0x82f63b78): not the writer's table. */
static uint32_t crc32c_bitwise(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
    }
    return ~c;
}

static uint32_t masked(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* A quoted protobuf text string (no escapes expected in metric names) into out. */
static void unquote(const char *s, char *out, size_t cap)
{
    const char *a = strchr(s, '"'), *b = a ? strrchr(s, '"') : NULL;
    assert_true(a && b > a && (size_t)(b - a - 1) < cap);
    assert_null(memchr(a + 1, '\\', (size_t)(b - a - 1)));
    memcpy(out, a + 1, (size_t)(b - a - 1));
    out[b - a - 1] = 0;
}

/* protoc's text output of one Event into *e; any line the writer should not produce fails. */
static void parse_text(char *text, tb_event *e)
{
    memset(e, 0, sizeof *e);
    for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n")) {
        while (*l == ' ')
            l++;
        if (!strncmp(l, "wall_time: ", 11))
            e->wall_time = strtod(l + 11, NULL);
        else if (!strncmp(l, "step: ", 6))
            e->step = strtoll(l + 6, NULL, 10);
        else if (!strncmp(l, "file_version: ", 14))
            unquote(l, e->file_version, sizeof e->file_version);
        else if (!strcmp(l, "status: START"))
            e->session_status = 1;
        else if (!strncmp(l, "tag: ", 5)) {
            assert_true(e->n < MAX_VALS);
            unquote(l, e->tag[e->n++], sizeof e->tag[0]);
        } else if (!strncmp(l, "simple_value: ", 14)) {
            assert_true(e->n > 0 && !e->has_value[e->n - 1]);
            e->value[e->n - 1] = strtof(l + 14, NULL);
            e->has_value[e->n - 1] = true;
        } else if (strcmp(l, "summary {") && strcmp(l, "value {") && strcmp(l, "session_log {") && strcmp(l, "}"))
            fail_msg("unexpected line in the decoded event: '%s'", l);
    }
}

/* Decode one payload with protoc. */
static void decode(const char *dir, const uint8_t *payload, size_t n, tb_event *e)
{
    char bin[512], cmd[2048], out[65536];
    snprintf(bin, sizeof bin, "%s/payload.bin", dir);
    assert_int_equal(df_write_file_atomic(bin, payload, n), 0);
    snprintf(cmd, sizeof cmd, "'%s' --decode=tbreader.Event -I'%s/tests/fixtures' '%s/tests/fixtures/tb_event_reader.proto' "
             "< '%s' 2>&1", DF_PROTOC, DF_SOURCE_DIR, DF_SOURCE_DIR, bin);
    int st = df_test_command(cmd, out, sizeof out);
    if (st)
        fail_msg("protoc --decode failed (%d): %s", st, out);
    parse_text(out, e);
}

/* Every record of an event file: framing and CRCs checked, payloads decoded into ev[]. Returns
   the count. */
static int read_events(const char *dir, const char *path, tb_event *ev, int max)
{
    char *data;
    size_t len, off = 0;
    assert_int_equal(df_read_file(path, &data, &len), 0);
    const uint8_t *p = (const uint8_t *)data;
    int n = 0;
    while (off < len) {
        assert_true(len - off >= 12);
        uint64_t plen = le(p + off, 8);
        assert_int_equal(le(p + off + 8, 4), masked(crc32c_bitwise(p + off, 8)));
        assert_true(len - off - 12 >= plen + 4);
        assert_int_equal(le(p + off + 12 + plen, 4), masked(crc32c_bitwise(p + off + 12, plen)));
        assert_true(n < max);
        decode(dir, p + off + 12, plen, &ev[n++]);
        off += 12 + plen + 4;
    }
    free(data);
    return n;
}

/* The one file of `sub` whose name starts with "events.out.tfevents." (fails if not exactly one),
   optionally skipping `except`. */
static char *event_file(const char *sub, const char *except)
{
    DIR *d = opendir(sub);
    assert_non_null(d);
    char *found = NULL;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, "events.out.tfevents.", 20))
            continue;
        char *p = df_path_join(sub, e->d_name);
        if (except && !strcmp(p, except)) {
            free(p);
            continue;
        }
        if (found)
            fail_msg("two event files in %s: %s and %s", sub, found, p);
        found = p;
    }
    closedir(d);
    assert_non_null(found);
    return found;
}

/* float32 of a metrics.jsonl value against the event's: metrics.jsonl keeps 10 significant digits
   (relative error <= 5e-10), so its float32 may be the neighbour of the exact value's, never further. */
static bool same_float(float event, double jsonl)
{
    float f = (float)jsonl;
    return event == f || nextafterf(event, INFINITY) == f || nextafterf(event, -INFINITY) == f;
}

/* The summary events ev[first..n) against metrics.jsonl's lines from line skip + 1 to its end: same
   steps, the same names in the same order, the same values as float32 (the rows' "timestamp", when
   written, is the wall time the event carries as wall_time, not a metric). */
static void compare_with_jsonl(const tb_event *ev, int first, int n, const char *jsonl, int skip)
{
    char *text;
    assert_int_equal(df_read_file(jsonl, &text, NULL), 0);
    int i = first - skip;
    for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n"), i++) {
        if (i < first)
            continue;
        assert_true(i < n);
        json_t *o = json_loads(l, 0, NULL);
        assert_non_null(o);
        assert_int_equal(ev[i].step, json_integer_value(json_object_get(o, "step")));
        assert_int_equal(ev[i].session_status, 0);
        int stamped = json_object_get(o, "timestamp") != NULL; /* the row's wall time: not a metric */
        assert_int_equal(ev[i].n, (int)json_object_size(o) - 1 - stamped);
        int k = 0;
        const char *key;
        json_t *v;
        json_object_foreach(o, key, v) { /* jansson keeps the file's order */
            if (!strcmp(key, "step") || !strcmp(key, "timestamp"))
                continue;
            assert_string_equal(ev[i].tag[k], key);
            assert_true(ev[i].has_value[k]);
            if (json_is_number(v) && !same_float(ev[i].value[k], json_number_value(v)))
                fail_msg("step %lld %s: event %.9g, metrics.jsonl %.17g", ev[i].step, key, ev[i].value[k],
                         json_number_value(v));
            if (json_is_null(v)) /* non-finite: null in JSON, the float itself in TensorBoard */
                assert_false(isfinite(ev[i].value[k]));
            k++;
        }
        json_decref(o);
    }
    assert_int_equal(i, n);
    free(text);
}

/* ---- the sinks, driven directly --------------------------------------------------------------- */

static double now_s(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1e-6 * (double)tv.tv_usec;
}

static void test_crc32c(void **state)
{
    (void)state;
    assert_int_equal(df_crc32c("123456789", 9), 0xe3069283u); /* RFC 3720, B.4 */
    assert_int_equal(crc32c_bitwise((const uint8_t *)"123456789", 9), 0xe3069283u);
    uint8_t buf[1000];
    for (int i = 0; i < 1000; i++)
        buf[i] = (uint8_t)(i * 131 + 7);
    for (size_t n = 0; n <= 1000; n += 37)
        assert_int_equal(df_crc32c(buf, n), crc32c_bitwise(buf, n));
    assert_int_equal(df_crc32c_mask(0), 0xa282ead8u);
    assert_int_equal(df_crc32c_mask(0x12345678u), masked(0x12345678u));
}

/* Three steps through a set of console + tensorboard: the event file is TensorBoard's, and it says
   what metrics.jsonl (written here as the trainers write it) says. */
static void test_tensorboard_readback(void **state)
{
    const char *dir = *state;
    if (!df_tensorboard_available() || !*DF_PROTOC)
        skip();
    char *jsonl = df_path_join(dir, "metrics.jsonl"), *tb = df_path_join(dir, "tb/run");
    const char *names[] = {"tensorboard", "console"};
    df_loggers_opts o = {.names = names, .n_names = 2, .tb_dir = tb}; /* console: no callback */
    df_loggers *l;
    double t0 = now_s();
    assert_int_equal(df_loggers_open(&o, &l), 0);
    df_metrics *m = df_metrics_new();
    FILE *jf = fopen(jsonl, "w"); /* metrics.jsonl as the trainers write it beside the sinks */
    assert_non_null(jf);
    const double vals[] = {0.1, -2.5, 1e6, 0.0, 3.0e-12, 123456789.0};
    for (int s = 1; s <= 3; s++) {
        df_metrics_clear(m);
        df_metrics_set(m, "critic/score/mean", vals[s - 1] * s);
        df_metrics_set(m, "actor/pg_loss", vals[s + 2]);
        df_metrics_set(m, "val-core/openai/gsm8k/acc/mean@1", 0.25 * s);
        if (s == 2)
            df_metrics_set(m, "actor/grad_norm", NAN);
        assert_int_equal(df_loggers_log(l, s == 3 ? (1LL << 40) : s, m), 0);
        char *line;
        assert_int_equal(df_metrics_to_json(m, s == 3 ? (1LL << 40) : s, &line), 0);
        fputs(line, jf);
        free(line);
    }
    fclose(jf);
    const char *path = df_loggers_tensorboard_path(l);
    assert_non_null(path);
    char *events = strdup(path);
    assert_int_equal(df_loggers_close(l), 0);
    double t1 = now_s();
    df_metrics_free(m);

    /* TensorBoard's name, in the directory asked for */
    char *found = event_file(tb, NULL), host[256] = "";
    assert_string_equal(found, events);
    gethostname(host, sizeof host);
    char *base = strrchr(events, '/') + 1, *end;
    long long secs = strtoll(base + 20, &end, 10);
    assert_true(secs >= (long long)t0 - 1 && secs <= (long long)t1);
    assert_true(*end == '.' && !strcmp(end + 1, host));

    tb_event *ev = calloc(MAX_EVENTS, sizeof *ev);
    int n = read_events(dir, events, ev, MAX_EVENTS);
    assert_int_equal(n, 4);
    assert_string_equal(ev[0].file_version, "brain.Event:2");
    assert_int_equal(ev[0].n, 0);
    for (int i = 0; i < n; i++)
        assert_true(ev[i].wall_time >= t0 - 1e-3 && ev[i].wall_time <= t1 + 1e-3);
    assert_int_equal(ev[3].step, 1LL << 40);
    for (int s = 1; s <= 3; s++) /* exactly the float32 of what was logged */
        assert_true(ev[s].value[0] == (float)(vals[s - 1] * s) && ev[s].value[1] == (float)vals[s + 2]);
    assert_true(ev[1].value[1] == 0.0f && ev[1].has_value[1]); /* a zero is written, not left out */
    assert_true(isnan(ev[2].value[3]));
    compare_with_jsonl(ev, 1, n, jsonl, 0);

    /* the reader notices a flipped payload byte (so its CRC check above means something) */
    char *data;
    size_t len;
    assert_int_equal(df_read_file(events, &data, &len), 0);
    uint64_t plen = le((uint8_t *)data, 8);
    data[12 + plen / 2] ^= 1;
    assert_int_not_equal(le((uint8_t *)data + 12 + plen, 4), masked(crc32c_bitwise((uint8_t *)data + 12, plen)));
    free(data);
    free(ev), free(found), free(events), free(jsonl), free(tb);
}

/* A resumed run starts a second file in the same directory (even within the same second), whose
   second record is TensorBoard's restart marker at the first step the run will log. */
static void test_tensorboard_resume(void **state)
{
    const char *dir = *state;
    if (!df_tensorboard_available() || !*DF_PROTOC)
        skip();
    char *tb = df_path_join(dir, "tb");
    df_metrics_sink a, b;
    assert_int_equal(df_sink_tensorboard_open(tb, 0, &a), 0);
    assert_int_equal(df_sink_tensorboard_open(tb, 5, &b), 0);
    assert_string_not_equal(a.file, b.file);
    char *second = strdup(b.file);
    assert_int_equal(a.close(a.self), 0);
    assert_int_equal(b.close(b.self), 0);
    tb_event ev[4];
    assert_int_equal(read_events(dir, second, ev, 4), 2);
    assert_string_equal(ev[0].file_version, "brain.Event:2");
    assert_int_equal(ev[1].session_status, 1);
    assert_int_equal(ev[1].step, 6);
    free(second), free(tb);
}

static void test_tensorboard_dir_rules(void **state)
{
    (void)state;
    char *p;
    unsetenv("TENSORBOARD_DIR");
    assert_string_equal(p = df_tensorboard_dir(NULL, "proj", "exp"), "tensorboard_log/proj/exp"), free(p);
    setenv("TENSORBOARD_DIR", "/runs/tb", 1); /* verl reads it as the directory itself */
    assert_string_equal(p = df_tensorboard_dir(NULL, "proj", "exp"), "/runs/tb"), free(p);
    assert_string_equal(p = df_tensorboard_dir("/key/dir", "proj", "exp"), "/key/dir"), free(p);
    setenv("HOME", "/home/u", 1);
    assert_string_equal(p = df_tensorboard_dir("~/tb", "proj", "exp"), "/home/u/tb"), free(p);
    setenv("TENSORBOARD_DIR", "", 1);
    assert_string_equal(p = df_tensorboard_dir("", "proj", "exp"), "tensorboard_log/proj/exp"), free(p);
    unsetenv("TENSORBOARD_DIR");
}

static void test_names_and_errors(void **state)
{
    const char *dir = *state;
    const char *bad[] = {"console", "wandb"};
    assert_int_equal(df_loggers_check_names(bad, 2, "trainer.logger (x.yaml:3)"), DF_EUNSUPPORTED);
    assert_last_error_mentions("trainer.logger (x.yaml:3): logger 'wandb' is not available in distflow; the "
                               "loggers are console, file, jsonl, tensorboard");
    const char *ok[] = {"file", "jsonl", "console"};
    assert_int_equal(df_loggers_check_names(ok, 3, "k"), DF_OK);
    assert_int_equal(df_loggers_check_names(NULL, 0, "k"), DF_OK);

    /* an unknown name opens nothing, not even the event directory */
    char *tbdir = df_path_join(dir, "tb_unopened"), *file = df_path_join(dir, "a_file");
    const char *bad_tb[] = {"tensorboard", "wandb"};
    df_loggers_opts o = {.names = bad_tb, .n_names = 2, .tb_dir = tbdir};
    df_loggers *l = (df_loggers *)1;
    assert_int_equal(df_loggers_open(&o, &l), DF_EUNSUPPORTED);
    assert_null(l);
    assert_false(df_dir_exists(tbdir));
    if (df_tensorboard_available()) { /* write errors name the file and the reason: tensorboard_dir names a file */
        assert_int_equal(df_write_file_atomic(file, "x", 1), 0);
        const char *tbn[] = {"tensorboard"};
        o.names = tbn, o.n_names = 1, o.tb_dir = file;
        assert_int_equal(df_loggers_open(&o, &l), DF_EIO);
        assert_last_error_mentions("a_file");
    }
    /* NULL sets (ranks other than 0) */
    assert_int_equal(df_loggers_log(NULL, 1, NULL), DF_OK);
    assert_int_equal(df_loggers_close(NULL), DF_OK);
    free(tbdir), free(file);
}


/* ---- through the trainers ----------------------------------------------------------------------- */

/* A GRPO run of 2 steps (validation before and at the end) with logger [tensorboard]: the event
   file holds every line of metrics.jsonl, step 0's validation included; then `distflow plot`
   draws the run. */
static void test_train_tensorboard(void **state)
{
    const char *dir = *state;
    if (!df_tensorboard_available() || !*DF_PROTOC)
        skip();
    df_test_digits_inputs(dir, "train.jsonl", 16, "test/digits", true);
    assert_int_equal(df_reward_register("test/digits", df_test_digit_share), 0);
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [%s/train.jsonl], train_batch_size: 4,\n"
             "       max_prompt_length: 128, max_response_length: 6, val_max_samples: 4}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {optim: {lr: 0.01}, ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 4}\n"
             "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 8}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "trainer: {total_training_steps: 2, save_freq: -1, test_freq: 2, logger: [tensorboard],\n"
             "          tensorboard_dir: %s/tb, default_local_dir: %s/out}\n",
             dir, dir, dir, dir, dir);
    df_test_fit(yaml, "tb.yaml");
    char *tb = df_path_join(dir, "tb"), *events = event_file(tb, NULL), *jsonl = df_path_join(dir, "out/metrics.jsonl");
    tb_event *ev = calloc(MAX_EVENTS, sizeof *ev);
    int n = read_events(dir, events, ev, MAX_EVENTS);
    assert_int_equal(n, 4); /* the header, step 0 (validation), steps 1 and 2 */
    assert_int_equal(ev[1].step, 0);
    assert_true(ev[3].n > 20);
    compare_with_jsonl(ev, 1, n, jsonl, 0);
    free(ev), free(events), free(tb);

    if (!df_plot_available()) { /* a build without PLplot: test_plot skips too */
        free(jsonl);
        return;
    }
    char cmd[2048], out[8192], png[1024];
    snprintf(cmd, sizeof cmd, "'%s/distflow' plot '%s' --out '%s/plots' 2>&1", DF_BINARY_DIR, jsonl, dir);
    int st = df_test_command(cmd, out, sizeof out);
    if (st)
        fail_msg("distflow plot: %d: %s", st, out);
    const char *want[] = {"score", "response_length", "losses", "entropy", "grad_norm", "throughput", "timing",
                          "validation"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        snprintf(png, sizeof png, "%s/plots/%s.png", dir, want[i]);
        if (!strstr(out, png))
            fail_msg("distflow plot did not report %s: %s", png, out);
        char *data;
        size_t len;
        assert_int_equal(df_read_file(png, &data, &len), 0);
        assert_memory_equal(data, "\x89PNG\r\n\x1a\n", 8);
        assert_true(len > 10000);
        free(data);
    }
    free(jsonl);
}

/* A run resumed from its step-1 checkpoint starts a second event file: TensorBoard's restart marker
   at step 2, then step 2, which is metrics.jsonl's second line. */
static void test_train_resume_tensorboard(void **state)
{
    const char *dir = *state;
    if (!df_tensorboard_available() || !*DF_PROTOC)
        skip();
    df_test_digits_inputs(dir, "train.jsonl", 16, "test/digits", true);
    assert_int_equal(df_reward_register("test/digits", df_test_digit_share), 0);
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 4,\n"
             "       max_prompt_length: 128, max_response_length: 6}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {optim: {lr: 0.01}, ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 4}\n"
             "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 8}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "trainer: {save_freq: 1, logger: [tensorboard], tensorboard_dir: %s/tb, default_local_dir: %s/out}\n",
             dir, dir, dir, dir);
    const char *first[] = {"trainer.total_training_steps=1"}, *second[] = {"trainer.total_training_steps=2"};
    if (df_test_run(NULL, df_test_config(yaml, "tb.yaml", first, 1)))
        fail_msg("%s", df_last_error());
    char *tb = df_path_join(dir, "tb"), *one = event_file(tb, NULL);
    if (df_test_run(NULL, df_test_config(yaml, "tb.yaml", second, 1)))
        fail_msg("%s", df_last_error());
    char *two = event_file(tb, one), *jsonl = df_path_join(dir, "out/metrics.jsonl");
    tb_event *ev = calloc(MAX_EVENTS, sizeof *ev);
    assert_int_equal(read_events(dir, one, ev, MAX_EVENTS), 2);
    assert_int_equal(ev[1].step, 1);
    int n = read_events(dir, two, ev, MAX_EVENTS);
    assert_int_equal(n, 3);
    assert_string_equal(ev[0].file_version, "brain.Event:2");
    assert_int_equal(ev[1].session_status, 1);
    assert_int_equal(ev[1].step, 2);
    compare_with_jsonl(ev, 2, n, jsonl, 1); /* metrics.jsonl's second line: step 2 */
    free(ev), free(one), free(two), free(tb), free(jsonl);
}

/* SFT through the same sinks: the event file says what its metrics.jsonl says. */
static void test_sft_tensorboard(void **state)
{
    const char *dir = *state;
    if (!df_tensorboard_available() || !*DF_PROTOC)
        skip();
    const char *texts[] = {"What is 2 plus 3?", "5", "What is 4 plus 4?", "8"};
    df_test_tiny_model(dir, texts, 4, 300, 32, 2, 7);
    char *data = df_path_join(dir, "sft.jsonl");
    const char *rows = "{\"question\": \"What is 2 plus 3?\", \"answer\": \"5\"}\n"
                       "{\"question\": \"What is 4 plus 4?\", \"answer\": \"8\"}\n";
    assert_int_equal(df_write_file_atomic(data, rows, strlen(rows)), 0);
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s], val_files: [%s], train_batch_size: 2, micro_batch_size_per_gpu: 2,\n"
             "       max_length: 256}\n"
             "model: {partial_pretrain: %s/model}\n"
             "trainer: {total_training_steps: 2, logger: [tensorboard], tensorboard_dir: %s/sfttb,\n"
             "          default_local_dir: %s/sftout}\n",
             data, data, dir, dir, dir);
    df_config *cfg;
    if (df_config_load_text(df_config_schema_sft(), yaml, "sft.yaml", NULL, 0, &cfg))
        fail_msg("%s", df_last_error());
    if (df_sft_run(cfg, NULL, NULL))
        fail_msg("%s", df_last_error());
    df_config_free(cfg);
    char *tb = df_path_join(dir, "sfttb"), *events = event_file(tb, NULL), *jsonl = df_path_join(dir, "sftout/metrics.jsonl");
    tb_event *ev = calloc(MAX_EVENTS, sizeof *ev);
    int n = read_events(dir, events, ev, MAX_EVENTS);
    assert_int_equal(n, 3);
    assert_string_equal(ev[1].tag[0], "train/loss");
    compare_with_jsonl(ev, 1, n, jsonl, 0);
    free(ev), free(events), free(tb), free(jsonl), free(data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c),
        cmocka_unit_test_setup_teardown(test_tensorboard_readback, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_tensorboard_resume, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test(test_tensorboard_dir_rules),
        cmocka_unit_test_setup_teardown(test_names_and_errors, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_train_tensorboard, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_train_resume_tensorboard, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_sft_tensorboard, df_test_mkdtemp, df_test_rmtree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
