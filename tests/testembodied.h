/*
 * testembodied.h — inputs of the embodied pipeline's tests: a tiny random Qwen2 whose tokenizer has
 * every action word as one token (trained on grid_place's compact demonstrations and the test
 * class's words), episode rows, and the job's keys.
 */
#ifndef DF_TEST_EMBODIED_H
#define DF_TEST_EMBODIED_H

#include "testutil.h"

#include "distflow/embodied.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

/* grid_place as the tests configure it (compact observations: short prompts) */
#define EMB_GRID_JSON "{\"size\": 5, \"obstacles\": 2, \"num_tasks\": 6, \"num_heldout\": 2, \"compact\": 1}"

/* Episode rows (task_id, trial_id)[n] as dir/name in the embodied manifest's schema. */
static inline void emb_write_tasks(const char *dir, const char *name, const int64_t (*ids)[2], int n)
{
    char path[1024], line[256], *text = calloc((size_t)n + 1, 256);
    assert_non_null(text);
    for (int i = 0; i < n; i++) {
        snprintf(line, sizeof line,
                 "{\"prompt\": \"episode\", \"data_source\": \"grid_place\", \"reward_model\": {\"style\": "
                 "\"rule\", \"ground_truth\": \"\"}, \"task_id\": %lld, \"trial_id\": %lld}\n",
                 (long long)ids[i][0], (long long)ids[i][1]);
        strcat(text, line);
    }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_equal(df_write_file_atomic(path, text, strlen(text)), 0);
    free(text);
}

/* dir/model: a tiny random model (hidden 32, 2 layers) with a tokenizer trained on grid_place's
   demonstrations (EMB_GRID_JSON) and on `words` (extra action words, each repeated). */
static inline void emb_model(const char *dir, const char *words)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/demos.jsonl", dir);
    df_embodied_vec_opts o = {.num_envs = 1, .max_steps = 16, .action_chunks_len = 2};
    assert_int_equal(df_grid_place_write_demos(path, EMB_GRID_JSON, &o, 0, 6, 2, NULL), 0);
    char *text = NULL;
    assert_int_equal(df_read_file(path, &text, NULL), 0);
    const char *texts[512];
    char *store[512];
    int n = 0;
    for (char *l = strtok(text, "\n"); l && n < 500; l = strtok(NULL, "\n")) {
        json_t *row = json_loads(l, 0, NULL);
        assert_non_null(row);
        const char *p = json_string_value(json_object_get(row, "prompt")),
                   *r = json_string_value(json_object_get(row, "response"));
        store[n] = malloc(strlen(p) + strlen(r) + 2);
        sprintf(store[n], "%s\n%s", p, r);
        texts[n] = store[n];
        n++;
        json_decref(row);
    }
    for (int k = 0; k < 12 && words; k++) /* the words a test's own class uses */
        texts[n] = words, store[n++] = NULL;
    df_test_tiny_model(dir, texts, n, 380, 32, 2, 7);
    for (int i = 0; i < n; i++)
        free(store[i]);
    free(text);
}

#endif
