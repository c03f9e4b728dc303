/* distflow — command dispatch. */
#include "cli/cli.h"

#include "distflow/backend.h"
#include "distflow/common.h"
#include "distflow/platform.h"
#ifdef DF_HAVE_CUDA
#include "cli/cuda_module.h"
#endif

#include <malloc.h>
#include <stdio.h>
#include <string.h>

static const df_cli_command commands[] = {
    {"train", "GRPO / PPO-family RL training from a YAML config (siiRL keys)", df_cmd_train},
    {"plan", "show the DAG plan of a train config: pipeline, subgraphs, rank assignment, process groups",
     df_cmd_plan},
    {"sft", "supervised fine-tuning on prompt -> response pairs (verl SFT keys)", df_cmd_sft},
    {"eval", "accuracy of a model on a dataset (greedy or sampled)", df_cmd_eval},
    {"generate", "a model's responses to one prompt, as text or JSON (chat template, sampling)",
     df_cmd_generate},
    {"init-model", "random-init a Hugging Face model directory from a config.json", df_cmd_init_model},
    {"tokenize", "print token ids of a text as a JSON array", df_cmd_tokenize},
    {"score", "log-probabilities of a response given a prompt, as JSON", df_cmd_score},
    {"data", "prepare datasets and tokenizers (gsm8k, math, synth, tokenizer)", df_cmd_data},
    {"config", "show the resolved config or the documented keys", df_cmd_config},
    {"plot", "draw a run's metrics.jsonl as PNG curves (score, lengths, losses, KL, ...)", df_cmd_plot},
    {"embodied", "control episodes: task rows, grid_place demonstrations, a policy's success rate", df_cmd_embodied},
    {"env", "build options, CPU features, kernel variant, MPI, OpenMP, oneDNN (for bug reports)",
     df_cmd_env},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f)
{
    fprintf(f, "distflow %s — distributed RL post-training for LLMs\n\n", df_version());
    fprintf(f, "usage: distflow <command> [options]   (distflow <command> --help for details)\n\n");
    fprintf(f, "commands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
}

int main(int argc, char **argv)
{
    /* A fixed mmap threshold: glibc otherwise raises it to the largest buffer freed, so a step's
     * large transient buffers come from the heap, which fragments and never shrinks (the peak RSS
     * of a GRPO run grew ~6 MB a step; docs/performance.md "Host memory"). */
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("distflow %s\nbuild: %s\n", df_version(), df_build_summary());
        return 0;
    }
#ifdef DF_HAVE_CUDA
    df_backend_register("cuda", df_cli_cuda_backend_open); /* trainer.device=cuda */
#endif
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(argv[1], commands[i].name)) {
            /* A bad DF_CPU_VARIANT stops every command but env, which shows it. */
            if (df_kernels_init() && strcmp(argv[1], "env")) {
                fprintf(stderr, "distflow: error: %s\n", df_last_error());
                return 2;
            }
            return commands[i].run(argc - 1, argv + 1);
        }
    fprintf(stderr, "distflow: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
