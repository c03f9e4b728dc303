/* verl's GSM8K tool and interaction (include/distflow/agent.h: df_tool_gsm8k, df_interaction_gsm8k):
 * verl/tools/gsm8k_tool.py and verl/interactions/gsm8k_interaction.py, both scoring with verl's
 * gsm8k.compute_score(method="flexible", format_score=0.0, score=1.0) after prefixing "#### " -- the
 * rewards module's scorer (df_reward_gsm8k_ex), not a copy. */
#include "distflow/agent.h"
#include "distflow/reward.h"

#include "agent/agent_internal.h"
#include "util/sbuf.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* verl's scorer call: gsm8k.compute_score(response, ground_truth, method="flexible", format_score=0.0,
 * score=1.0) of current verl, which reads the last 300 characters (the rewards module's last_match). */
static double flexible_score(const char *response, const char *ground_truth)
{
    df_reward_kwargs kw = df_reward_kwargs_default();
    kw.method = "flexible";
    kw.last_match = true;
    df_reward_result r;
    return df_reward_gsm8k_ex(response, ground_truth, &kw, &r) ? 0.0 : r.score;
}

/* "#### " + text unless it starts with it, as both verl classes store the answer. */
static char *with_marker(const char *text)
{
    df_sbuf b = {0};
    if (strncmp(text, "#### ", 5))
        df_sbuf_puts(&b, "#### ");
    df_sbuf_puts(&b, text);
    char *out = NULL;
    return df_sbuf_finish(&b, &out) ? NULL : out;
}

/* Python's str() of a JSON value, enough for answers: strings as they are, numbers as digits. */
static char *py_str(const json_t *v)
{
    char buf[64];
    if (!v)
        return strdup("");
    if (json_is_string(v))
        return strdup(json_string_value(v));
    if (json_is_integer(v)) {
        snprintf(buf, sizeof buf, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return strdup(buf);
    }
    if (json_is_real(v)) {
        snprintf(buf, sizeof buf, "%.17g", json_real_value(v));
        return strdup(buf);
    }
    return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}

typedef struct gsm8k_inst {
    char *ground_truth; /* NULL when the kwargs gave none: every answer scores 0 */
    char *response;     /* the last answer with its "#### " */
    double reward;      /* the best-so-far reward the shaping compares with */
} gsm8k_inst;

static int inst_new(const char *what, const char *kwargs, void **out)
{
    gsm8k_inst *g = calloc(1, sizeof *g);
    if (!g)
        return df_error(DF_ENOMEM, "out of memory");
    json_error_t e;
    json_t *k = kwargs ? json_loads(kwargs, 0, &e) : json_object();
    if (!json_is_object(k)) {
        json_decref(k);
        free(g);
        return df_error(DF_EINVAL, "%s: the kwargs are not a JSON object", what);
    }
    json_t *gt = json_object_get(k, "ground_truth");
    bool has_gt = gt && !json_is_null(gt);
    g->ground_truth = has_gt ? py_str(gt) : NULL;
    g->response = strdup("");
    json_decref(k);
    if ((has_gt && !g->ground_truth) || !g->response) {
        free(g->ground_truth);
        free(g->response);
        free(g);
        return df_error(DF_ENOMEM, "out of memory");
    }
    *out = g;
    return DF_OK;
}

static void inst_free(gsm8k_inst *g)
{
    if (g) {
        free(g->ground_truth);
        free(g->response);
        free(g);
    }
}

static int inst_set_response(gsm8k_inst *g, const char *text)
{
    char *r = with_marker(text);
    if (!r)
        return df_error(DF_ENOMEM, "out of memory");
    free(g->response);
    g->response = r;
    return DF_OK;
}

/* ---- the tool: calc_gsm8k_reward(answer) ----------------------------------------------------------- */

static int tool_create(const void *tool, const char *instance_id, const char *kwargs, void **inst)
{
    (void)tool, (void)instance_id;
    return inst_new("gsm8k tool", kwargs, inst);
}

static int tool_calc_reward(const void *tool, void *inst, double *reward)
{
    (void)tool;
    gsm8k_inst *g = inst;
    *reward = flexible_score(g->response, g->ground_truth);
    return DF_OK;
}

static int tool_execute(const void *tool, void *inst, const char *arguments, df_tool_result *out)
{
    gsm8k_inst *g = inst;
    json_t *args = json_loads(arguments, 0, NULL);
    /* verl: a non-object argument is answer "" */
    char *answer = json_is_object(args) ? py_str(json_object_get(args, "answer")) : strdup("");
    json_decref(args);
    if (!answer || inst_set_response(g, answer)) {
        free(answer);
        return df_error(DF_ENOMEM, "out of memory");
    }
    double reward = 0;
    tool_calc_reward(tool, g, &reward);
    /* verl's shaping: -0.05 for an answer that does not improve on the best so far */
    out->reward = reward > g->reward ? 0.0 : -0.05;
    g->reward = reward;
    df_sbuf b = {0};
    df_sbuf_printf(&b, "Current parsed answer='%s' reward=%.1f", answer, reward);
    free(answer);
    return df_sbuf_finish(&b, &out->text);
}

static void tool_release(const void *tool, void *inst)
{
    (void)tool;
    inst_free(inst);
}

const df_tool df_tool_gsm8k = {
    .name = "gsm8k",
    .schema = "{\"type\": \"function\", \"function\": {\"name\": \"calc_gsm8k_reward\", \"description\": "
              "\"A tool for calculating the reward of gsm8k. (1.0 if your answer is correct, 0.0 if your answer "
              "is incorrect)\", \"parameters\": {\"type\": \"object\", \"properties\": {\"answer\": {\"type\": "
              "\"string\", \"description\": \"The model's answer to the GSM8K math problem, must be a digits\"}}, "
              "\"required\": [\"answer\"]}}}",
    .create = tool_create,
    .execute = tool_execute,
    .calc_reward = tool_calc_reward,
    .release = tool_release,
};

/* ---- the interaction ------------------------------------------------------------------------------- */

static int ia_start(const void *state, const char *instance_id, const char *kwargs, void **inst)
{
    (void)state, (void)instance_id;
    return inst_new("gsm8k interaction", kwargs, inst);
}

static int ia_score(const void *state, void *inst, double *score)
{
    (void)state;
    gsm8k_inst *g = inst;
    *score = flexible_score(g->response, g->ground_truth);
    return DF_OK;
}

/* The content of the last assistant message ("" when none or not a string). */
static const char *last_assistant(const json_t *msgs)
{
    for (size_t i = json_array_size(msgs); i-- > 0;) {
        json_t *m = json_array_get(msgs, i);
        json_t *role = json_object_get(m, "role");
        if (json_is_string(role) && !strcmp(json_string_value(role), "assistant")) {
            json_t *c = json_object_get(m, "content");
            return json_is_string(c) ? json_string_value(c) : "";
        }
    }
    return "";
}

static int ia_respond(const void *state, void *inst, const char *messages, df_interaction_result *out)
{
    json_error_t e;
    json_t *msgs = json_loads(messages, 0, &e);
    if (!json_is_array(msgs)) {
        json_decref(msgs);
        return df_error(DF_EINVAL, "gsm8k interaction: the messages are not a JSON array%s%s",
                        msgs ? "" : ": ", msgs ? "" : e.text);
    }
    int rc = inst_set_response(inst, last_assistant(msgs));
    json_decref(msgs);
    if (rc)
        return rc;
    ia_score(state, inst, &out->reward);
    out->should_terminate = out->reward == 1.0;
    out->text = strdup(out->should_terminate ? "Your response is correct!"
                                             : "Your response is incorrect! You need to reflect on your answer "
                                               "and try again.");
    return out->text ? DF_OK : df_error(DF_ENOMEM, "out of memory");
}

static void ia_finalize(const void *state, void *inst)
{
    (void)state;
    inst_free(inst);
}

const df_interaction df_interaction_gsm8k = {
    .name = "gsm8k",
    .start = ia_start,
    .generate_response = ia_respond,
    .calculate_score = ia_score,
    .finalize = ia_finalize,
};
