/*
 * distflow/marft_demos.h — supervised demonstrations for `make demo ALGO=marft`: a planner and a
 * solver (two agents of a siiRL MARFT chain, distflow/marft.h) on the synthetic arithmetic task
 * (distflow/synth.h). For each problem the planner's prompt and the solver's prompt are built
 * exactly as the chained rollout builds them (df_marft_chain_prompt / df_marft_chain_pass), so
 * SFT trains on the prompt text the agents later see; docs/demo.md, "ALGO=marft".
 *
 * The division of labour, on a worked solution "8 + 2 = 10\n10 + 9 = 19\n19 * 2 = 38\n#### 38":
 *   planner: the operations in the problem's order, "8 + 2, then + 9, then * 2" (the words of
 *            the problem turned into numbers and operators; no arithmetic)
 *   solver:  the worked solution itself (the arithmetic, ending "#### N" as the scorer reads), or
 *            a bare answer for a share of the problems (no work shown; see the CLI's
 *            --bare-answers), which the scorer's reward then teaches the pair to avoid.
 */
#ifndef DISTFLOW_MARFT_DEMOS_H
#define DISTFLOW_MARFT_DEMOS_H

#include "distflow/common.h"
#include "distflow/dataset.h"
#include "distflow/marft.h"
#include "distflow/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * The planner's demonstration for a worked synthetic solution (distflow/synth.h's format: lines
 * "a op b = c" with op one of + - *, each line's a the line before's c, then "#### N" with N the
 * last c): "a op b" for the first line, then ", then op b" for each further one. *plan and
 * *answer (may be NULL) set on success: *plan malloc'd, *answer N.
 * Errors: DF_EINVAL naming the first line that is not of that form, a chain that breaks (a line
 * not starting from the value before), a missing or disagreeing "#### N", no operation lines (a
 * bare answer such as "The answer is N."); DF_ENOMEM.
 */
DF_API int df_marft_demo_plan(const char *solution, char **plan, int64_t *answer);

/**
 * The first episode of row i (what the chained rollout starts from, distflow/marft.h): its
 * prompt messages through tok's chat template with the generation prompt, the text the
 * dataloader's prompt ids decode to. *episode malloc'd. Errors: the chat template's
 * (distflow/tokenizer.h), DF_EINVAL for a row out of range; DF_ENOMEM.
 */
DF_API int df_marft_first_episode(const df_dataset *ds, int64_t i, const df_tokenizer *tok, char **episode);

/** One problem's demonstrations: the prompt and response of agent 0 (planner) and 1 (solver). */
typedef struct df_marft_demo {
    char *prompt[2];   /**< df_marft_chain_prompt of each agent, chat-templated text */
    char *response[2]; /**< the plan; the worked solution or the bare answer */
    int64_t answer;    /**< the solution's "#### N" */
} df_marft_demo;

/**
 * The demonstrations of one problem on chain c (at least two agents: 0 plans, 1 solves; more
 * are not read): planner prompt = df_marft_chain_prompt(c, 0, episode); its response the plan
 * of `solution` (df_marft_demo_plan); solver prompt = df_marft_chain_prompt(c, 1,
 * df_marft_chain_pass(c, 0, episode, plan)); its response `solution`, or when bare_fmt is not
 * NULL a bare answer: bare_fmt with each "{answer}" replaced by N (e.g. "The answer is
 * {answer}." gives "The answer is 38."). No environment observation (${obs} renders "").
 * *out filled on success (free with df_marft_demo_free), zeroed on failure.
 * Errors: df_marft_demo_plan's, df_marft_chain_prompt's (an agent 1 the chain lacks); DF_ENOMEM.
 */
DF_API int df_marft_demo_make(const df_marft_chain *c, const char *episode, const char *solution,
                              const char *bare_fmt, df_marft_demo *out);
DF_API void df_marft_demo_free(df_marft_demo *d);

#ifdef __cplusplus
}
#endif
#endif /* DISTFLOW_MARFT_DEMOS_H */
