/* Mixed precision per role: the key asks, the machine decides (docs/mixed_precision.md). */
#include "workers/common/precision.h"

#include "distflow/model.h"

#include <stdio.h>
#include <string.h>

bool df_role_compute_bf16(const char *key, const char *dtype, bool say)
{
    static bool noticed;
    if (strcmp(dtype, "bf16") && strcmp(dtype, "bfloat16"))
        return false;
    if (df_model_bf16_available() == DF_OK)
        return true;
    if (!noticed && say)
        fprintf(stderr, "[distflow] notice: %s=%s asks for bf16 matmuls, but %s; computing in float32 "
                "(set it to fp32 to silence this)\n", key, dtype, df_last_error());
    noticed = true;
    df_clear_error();
    return false;
}
