/*
 * test_sft_chat.c — multi-turn SFT (data.multiturn.enable; src/workers/sft/sft_chat.c, docs/sft.md).
 *
 * On the real Qwen2.5 tokenizer and template: the default system turn and generation prompt found
 * as verl finds them; a conversation with tools (user, assistant tool call, tool response, assistant
 * answer) tokenised turn by turn equals the whole conversation's tokens, and the loss mask is 1 on
 * exactly two runs, hand-checked: the tool call through "<|im_end|>\n" and the answer through
 * "<|im_end|>\n" (never the "<|im_start|>assistant\n" in front, the tool response, the user or the
 * system turn). Truncation left / right keeps the last / first max_length tokens with their mask;
 * malformed rows fail naming file:line (no messages, empty list, a bad role, no assistant turn,
 * tools that are not a list, a template raise, consecutive tool messages that do not render turn by
 * turn, an over-long row). The actor's loss_mask weighs tokens exactly (the loss of a mask with two
 * ones is the mean NLL of those two tokens). `distflow sft` on 2-turn chats with a tiny model trains
 * (the loss falls below half its start), refuses an unreadable data.chat_template, renders with
 * the template of a data.chat_template file and gives data.apply_chat_template_kwargs to the
 * message renders (not to the prefix extraction).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "engine/actor.h"
#include "testcli.h"
#include "testutil.h"
#include "workers/sft/sft_chat.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static df_tokenizer *qwen(void)
{
    df_tokenizer *t = NULL;
    assert_int_equal(df_tokenizer_load(DF_SHARED_DIR "/data/tokenizers/qwen2.5", &t), 0);
    return t;
}

static char *decode(const df_tokenizer *t, const int32_t *ids, int64_t n)
{
    char *s = NULL;
    assert_int_equal(df_tokenizer_decode(t, ids, n, false, &s), 0);
    return s;
}

static const char TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"calculator\", \"description\": \"Evaluate\", "
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"expression\": {\"type\": \"string\"}}}}}]";
static const char CONV[] =
    "[{\"role\": \"user\", \"content\": \"What is 12*7?\"},"
    " {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"type\": \"function\", \"function\": "
    "{\"name\": \"calculator\", \"arguments\": {\"expression\": \"12*7\"}}}]},"
    " {\"role\": \"tool\", \"content\": \"84\"},"
    " {\"role\": \"assistant\", \"content\": \"12*7 = 84.\"}]";

static void test_qwen_prefixes(void **state)
{
    (void)state;
    df_tokenizer *t = qwen();
    df_sft_chat_prefix p;
    assert_int_equal(df_sft_chat_prefix_init(t, &p), 0);
    char *sys = decode(t, p.system, p.n_system), *gen = decode(t, p.gen, p.n_gen);
    assert_string_equal(sys, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
                             "assistant.<|im_end|>\n");
    assert_string_equal(gen, "<|im_start|>assistant\n");
    assert_int_equal(p.n_gen, 3); /* <|im_start|> assistant \n */
    free(sys);
    free(gen);
    df_sft_chat_prefix_free(&p);
    df_tokenizer_free(t);
}

static void test_qwen_tool_mask(void **state)
{
    (void)state;
    df_tokenizer *t = qwen();
    df_sft_chat_prefix p;
    assert_int_equal(df_sft_chat_prefix_init(t, &p), 0);
    int32_t *ids;
    uint8_t *mask;
    int64_t n;
    assert_int_equal(df_sft_chat_encode(t, &p, CONV, TOOLS, -1, NULL, &ids, &mask, &n), 0);
    /* the tokens are the whole conversation's */
    char *whole = NULL;
    int32_t *wids;
    int64_t wn;
    assert_int_equal(df_tokenizer_apply_chat_template_json(t, CONV, TOOLS, false, NULL, &whole), 0);
    assert_int_equal(df_tokenizer_encode(t, whole, false, &wids, &wn), 0);
    assert_int_equal(wn, n);
    assert_memory_equal(wids, ids, (size_t)n * sizeof *ids);
    /* the runs of 1s, hand-checked against the rendered text */
    const char *want[] = {"<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"12*7\"}}\n"
                          "</tool_call><|im_end|>\n",
                          "12*7 = 84.<|im_end|>\n"};
    int runs = 0;
    int64_t ones = 0;
    for (int64_t i = 0; i < n;) {
        assert_true(mask[i] == 0 || mask[i] == 1);
        if (!mask[i]) {
            i++;
            continue;
        }
        int64_t j = i;
        while (j < n && mask[j])
            j++;
        assert_true(runs < 2);
        char *text = decode(t, ids + i, j - i);
        assert_string_equal(text, want[runs]);
        free(text);
        /* what comes just before a run is the generation prompt, unmasked */
        char *before = decode(t, ids + i - 3, 3);
        assert_string_equal(before, "<|im_start|>assistant\n");
        free(before);
        ones += j - i;
        runs++;
        i = j;
    }
    assert_int_equal(runs, 2);
    assert_int_equal(mask[n - 1], 1); /* the last "\n" after <|im_end|> is trained, as verl */
    /* the tool response is a user turn in Qwen2.5's template and stays 0 */
    assert_non_null(strstr(whole, "<|im_start|>user\n<tool_response>\n84\n</tool_response><|im_end|>\n"));
    print_message("%lld tokens, %lld trained\n", (long long)n, (long long)ones);
    free(whole);
    free(wids);
    free(ids);
    free(mask);
    df_sft_chat_prefix_free(&p);
    df_tokenizer_free(t);
}

/* df_sft_chat_load on rows.jsonl = `good` row then `line` (NULL: none). */
static int load_rows(df_tokenizer *t, const char *line, int64_t max_len, const char *trunc, df_prompt_cache *pc,
                     df_prompt_cache *rc_, float **mask)
{
    char text[8192];
    snprintf(text, sizeof text, "{\"messages\": %s, \"tools\": %s}\n%s\n", CONV, TOOLS, line ? line : "");
    df_dataset *ds = NULL;
    df_dataset_opts o = {.reward_optional = true, .no_prompt = true};
    assert_int_equal(df_dataset_load_buffer(text, strlen(text), "rows.jsonl", &o, &ds), 0);
    df_sft_chat_keys k = {.messages_key = "messages", .tools_key = "tools", .enable_thinking_key = "enable_thinking",
                          .max_length = max_len, .truncation = trunc};
    df_sft_chat_prefix pre;
    assert_int_equal(df_sft_chat_prefix_init(t, &pre), 0);
    int rc = df_sft_chat_load(ds, t, &pre, &k, pc, rc_, mask, NULL);
    df_sft_chat_prefix_free(&pre);
    df_dataset_free(ds);
    return rc;
}

static void expect_bad(df_tokenizer *t, const char *line, const char *what)
{
    df_prompt_cache p = {0}, r = {0};
    float *mask = NULL;
    assert_int_equal(load_rows(t, line, 4096, "error", &p, &r, &mask), DF_EINVAL);
    const char *msg = df_last_error();
    if (!strstr(msg, "rows.jsonl:2") || !strstr(msg, what))
        fail_msg("row %s: expected rows.jsonl:2 and \"%s\", got: %s", line, what, msg);
    assert_null(mask);
}

static void test_malformed_rows(void **state)
{
    (void)state;
    df_tokenizer *t = qwen();
    expect_bad(t, "{\"other\": 1}", "column \"messages\"");
    expect_bad(t, "{\"messages\": []}", "empty");
    expect_bad(t, "{\"messages\": \"hello\"}", "JSON list");
    expect_bad(t, "{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}", "role 'robot'");
    expect_bad(t, "{\"messages\": [{\"content\": \"x\"}]}", "string \"role\"");
    expect_bad(t, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", "no assistant message");
    expect_bad(t, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", "
                  "\"content\": \"yo\"}], \"tools\": 5}", "tools_key");
    expect_bad(t, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", "
                  "\"content\": \"yo\"}], \"enable_thinking\": \"yes\"}", "enable_thinking_key");
    /* two tool responses in a row share one user turn in context but not alone (verl's sanity check) */
    expect_bad(t, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"tool\", \"content\": "
                  "\"1\"}, {\"role\": \"tool\", \"content\": \"2\"}, {\"role\": \"assistant\", \"content\": \"3\"}]}",
               "first differing at token");
    /* over-long with truncation=error */
    df_prompt_cache p = {0}, r = {0};
    float *mask = NULL;
    assert_int_equal(load_rows(t, NULL, 20, "error", &p, &r, &mask), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "rows.jsonl:1"));
    assert_non_null(strstr(df_last_error(), "data.max_length = 20"));
    /* a template that raises */
    assert_int_equal(df_tokenizer_set_chat_template(t, "{% for m in messages %}{% if m.content == 'boom' %}"
                                                       "{{ raise_exception('no boom') }}{% endif %}"
                                                       "{{ m.role + ': ' + m.content + '\\n' }}{% endfor %}"),
                     0);
    expect_bad(t, "{\"messages\": [{\"role\": \"user\", \"content\": \"boom\"}, {\"role\": \"assistant\", "
                  "\"content\": \"yo\"}]}", "no boom");
    df_tokenizer_free(t);
}

static void test_truncation(void **state)
{
    (void)state;
    df_tokenizer *t = qwen();
    df_prompt_cache p = {0}, r = {0};
    float *mask = NULL;
    assert_int_equal(load_rows(t, NULL, 4096, "error", &p, &r, &mask), 0);
    int64_t n = p.offsets[1] + r.offsets[1];
    int32_t *full = malloc((size_t)n * sizeof *full);
    float *fm = calloc((size_t)n, sizeof *fm);
    memcpy(full, p.tokens, (size_t)p.offsets[1] * sizeof *full);
    memcpy(full + p.offsets[1], r.tokens, (size_t)r.offsets[1] * sizeof *full);
    memcpy(fm + p.offsets[1], mask, (size_t)r.offsets[1] * sizeof *fm);
    assert_true(fm[p.offsets[1]] == 1.0f && fm[p.offsets[1] - 1] == 0.0f); /* split at the first trained token */
    df_prompt_cache_free(&p);
    df_prompt_cache_free(&r);
    free(mask);
    const int64_t L = n - 5;
    for (int left = 0; left < 2; left++) {
        assert_int_equal(load_rows(t, NULL, L, left ? "left" : "right", &p, &r, &mask), 0);
        int64_t P = p.offsets[1], R = r.offsets[1], from = left ? n - L : 0;
        assert_int_equal(P + R, L);
        assert_memory_equal(p.tokens, full + from, (size_t)P * sizeof *full);
        assert_memory_equal(r.tokens, full + from + P, (size_t)R * sizeof *full);
        assert_memory_equal(mask, fm + from + P, (size_t)R * sizeof *mask);
        df_prompt_cache_free(&p);
        df_prompt_cache_free(&r);
        free(mask);
    }
    free(full);
    free(fm);
    df_tokenizer_free(t);
}

/* train/loss with a loss_mask of two ones is the mean NLL of those two tokens. */
static void test_actor_loss_mask(void **state)
{
    (void)state;
    df_actor *a;
    df_actor_params prm = {.optim.lr = 1e-2, .optim.beta1 = 0.9, .optim.beta2 = 0.999, .optim.adam_eps = 1e-8,
                           .optim.grad_clip = 1e9, .micro_batch_size = 2, .logprob_micro_batch_size = 2,
                           .temperature = 1.0f};
    assert_int_equal(df_actor_create(df_test_micro_model(3), &prm, true, &a), 0);
    df_batch *b = df_test_small_batch();
    assert_int_equal(df_actor_compute_log_prob(a, b, "log_probs", NULL), 0);
    const df_column *lp = df_batch_column(b, "log_probs");
    const int64_t *ro = df_batch_offsets(b, "response_ids");
    int64_t nt = ro[df_batch_size(b)];
    assert_true(nt >= 3);
    float *w = calloc((size_t)nt, sizeof *w);
    w[0] = w[nt - 1] = 1.0f;
    double want = -(((const float *)lp->data)[0] + ((const float *)lp->data)[nt - 1]) / 2;
    assert_int_equal(df_batch_set_tok_f32(b, "loss_mask", ro, w), 0);
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_actor_sft_step(a, b, m), 0);
    double got = df_metrics_get(m, "train/loss", 0);
    print_message("masked loss %.6f, want %.6f\n", got, want);
    assert_true(fabs(got - want) <= 1e-4 * fabs(want) + 1e-5);
    df_metrics_free(m);
    df_batch_free(b);
    free(w);
    df_actor_free(a);
}

static char dir[256];

static int sft2(const char *out, const char *extra, const char *extra2)
{
    char yaml[512], outp[600], log[600];
    snprintf(yaml, sizeof yaml, "%s/sft.yaml", dir);
    snprintf(outp, sizeof outp, "trainer.default_local_dir=%s/%s", dir, out);
    snprintf(log, sizeof log, "%s/%s.log", dir, out);
    const char *argv[] = {"sft", yaml, outp, extra, extra ? extra2 : NULL, NULL};
    df_cli_run o = {.np = 1, .log = log};
    return df_cli_exec(&o, argv);
}

static int sft(const char *out, const char *extra)
{
    return sft2(out, extra, NULL);
}

static void test_cli_trains(void **state)
{
    (void)state;
    int rc = sft("run", NULL);
    if (rc) {
        char log[600];
        snprintf(log, sizeof log, "%s/run.log", dir);
        char *text = df_cli_log(log);
        fail_msg("distflow sft: status %d; log:\n%s", rc, text);
    }
    json_t *lines = df_test_metrics(dir, "run", true);
    size_t n = json_array_size(lines);
    assert_true(n >= 10);
    double first = json_real_value(json_object_get(json_array_get(lines, 0), "train/loss"));
    double last = json_real_value(json_object_get(json_array_get(lines, n - 1), "train/loss"));
    print_message("multi-turn SFT loss %.4f -> %.4f over %zu steps\n", first, last, n);
    assert_true(first > 0 && last < 0.5 * first); /* an optimisation outcome: 20 steps memorise 16 chats */
    json_decref(lines);
    /* an unreadable data.chat_template is refused before training */
    assert_int_not_equal(sft("bad_tmpl", "data.chat_template=/nonexistent/tmpl.jinja"), 0);
    char log[600];
    snprintf(log, sizeof log, "%s/bad_tmpl.log", dir);
    char *text = df_cli_log(log);
    assert_non_null(strstr(text, "data.chat_template"));
    free(text);
    /* a template file replaces the tokenizer's: this one raises, naming itself */
    char opt[600], *tmpl = df_path_join(dir, "raise.jinja");
    const char *src = "{{ raise_exception('the file template ran') }}";
    assert_int_equal(df_write_file_atomic(tmpl, src, strlen(src)), 0);
    snprintf(opt, sizeof opt, "data.chat_template=%s", tmpl);
    free(tmpl);
    assert_int_not_equal(sft("file_tmpl", opt), 0);
    snprintf(log, sizeof log, "%s/file_tmpl.log", dir);
    text = df_cli_log(log);
    if (!strstr(text, "the file template ran"))
        fail_msg("the template file was not used; log:\n%s", text);
    free(text);
    /* data.apply_chat_template_kwargs reach the message renders, not the prefixes (verl): this
       template raises only when the kwarg is set, so the run fails at the first message */
    tmpl = df_path_join(dir, "kw.jinja");
    src = "{% if boom %}{{ raise_exception('the kwargs reached the template') }}{% endif %}"
          "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    assert_int_equal(df_write_file_atomic(tmpl, src, strlen(src)), 0);
    snprintf(opt, sizeof opt, "data.chat_template=%s", tmpl);
    free(tmpl);
    assert_int_not_equal(sft2("kw_tmpl", opt, "+data.apply_chat_template_kwargs.boom=true"), 0);
    snprintf(log, sizeof log, "%s/kw_tmpl.log", dir);
    text = df_cli_log(log);
    if (!strstr(text, "the kwargs reached the template") || !strstr(text, "message 0"))
        fail_msg("the kwargs did not reach the first message's render; log:\n%s", text);
    free(text);
    /* without the kwarg the run trains, and its checkpoint carries the template (chat_template.jinja,
       read before tokenizer_config.json's), so the saved model renders as it was trained */
    assert_int_equal(sft2("kw_saved", opt, "trainer.total_training_steps=1"), 0);
    char *saved = NULL;
    snprintf(log, sizeof log, "%s/kw_saved/global_step_1/chat_template.jinja", dir);
    assert_int_equal(df_read_file(log, &saved, NULL), 0);
    assert_string_equal(saved, src);
    free(saved);
    /* distflow eval hands --chat-template-kwargs to the tokenizer (df_tokenizer_set_chat_template_kwargs):
       a key of apply_chat_template's own is refused there, naming the flag */
    char model[300], data[300];
    snprintf(model, sizeof model, "%s/model", dir);
    snprintf(data, sizeof data, "%s/chats.jsonl", dir);
    snprintf(log, sizeof log, "%s/eval_kw.log", dir);
    const char *eargv[] = {"eval", "--model", model, "--data", data, "--chat-template-kwargs",
                           "{\"tools\": []}", NULL};
    df_cli_run eo = {.np = 1, .log = log};
    assert_int_not_equal(df_cli_exec(&eo, eargv), 0);
    text = df_cli_log(log);
    if (!strstr(text, "--chat-template-kwargs") || !strstr(text, "chat template kwargs"))
        fail_msg("eval did not refuse the kwargs naming the flag; log:\n%s", text);
    free(text);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/df_sftchat_XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    char *rows = calloc(1, 1 << 16), line[1024];
    const char *texts[16];
    char store[16][160];
    for (int i = 0; i < 16; i++) {
        snprintf(store[i], sizeof store[i], "Add %d and %d. %d And double it? %d", i, i + 3, 2 * i + 3,
                 4 * i + 6);
        texts[i] = store[i];
        snprintf(line, sizeof line,
                 "{\"messages\": [{\"role\": \"user\", \"content\": \"Add %d and %d.\"}, {\"role\": \"assistant\", "
                 "\"content\": \"%d\"}, {\"role\": \"user\", \"content\": \"And double it?\"}, "
                 "{\"role\": \"assistant\", \"content\": \"%d\"}]}\n",
                 i, i + 3, 2 * i + 3, 4 * i + 6);
        strcat(rows, line);
    }
    char *path = df_path_join(dir, "chats.jsonl");
    int rc = df_write_file_atomic(path, rows, strlen(rows));
    free(path);
    free(rows);
    df_test_tiny_model(dir, texts, 16, 300, 32, 2, 7);
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/chats.jsonl], val_files: [%s/chats.jsonl], train_batch_size: 8,\n"
             "       micro_batch_size_per_gpu: 4, max_length: 128, multiturn: {enable: true}}\n"
             "model: {partial_pretrain: %s/model}\n"
             "optim: {lr: 0.02, lr_warmup_steps: 1}\n"
             "trainer: {total_epochs: 10, seed: 3, logger: [console]}\n",
             dir, dir, dir);
    char *p = df_path_join(dir, "sft.yaml");
    rc = rc ? rc : df_write_file_atomic(p, yaml, strlen(yaml));
    free(p);
    return rc ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    return df_test_remove_tree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen_prefixes),
        cmocka_unit_test(test_qwen_tool_mask),
        cmocka_unit_test(test_malformed_rows),
        cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_actor_loss_mask),
        cmocka_unit_test(test_cli_trains),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
