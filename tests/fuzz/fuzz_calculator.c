/*
 * Fuzz target: an expression through the calculator tool's evaluator (src/agent/calculator.c:
 * exact + - * / ( ) on numbers of any length). Properties: an expression is evaluated or refused
 * with a "calculator: ..." message — never a crash or a hang (its length is bounded) —, and a
 * result is a number: an optional '-', digits, then nothing, ".digits", or "/digits (about ...)".
 * df_fuzz_status is the evaluator's status: ok-* seeds must evaluate, bad-* seeds must not.
 */
#include "fuzz.h"

#include "agent/agent_internal.h"
#include "distflow/common.h"

int df_fuzz_status;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    df_clear_error();
    char *expr = df_fuzz_cstr(data, size);
    char *out = NULL;
    df_fuzz_status = agent_calculate(expr, &out);
    if (df_fuzz_status) {
        DF_FUZZ_CHECK(!out && (df_fuzz_status == DF_ENOMEM || !strncmp(df_last_error(), "calculator: ", 12)));
    } else {
        const char *p = out + (out[0] == '-');
        DF_FUZZ_CHECK(*p >= '0' && *p <= '9');
        while (*p >= '0' && *p <= '9')
            p++;
        DF_FUZZ_CHECK(!*p || *p == '.' || !strncmp(p, "/", 1));
    }
    free(out);
    free(expr);
    return 0;
}
