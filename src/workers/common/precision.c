/* Mixed precision per role: the key asks, the machine decides (docs/mixed_precision.md). */
#include "workers/common/precision.h"

#include "distflow/backend.h"
#include "distflow/model.h"

#include <stdio.h>
#include <string.h>

int df_device_bf16(const char *device)
{
    if (!strcmp(device, "cpu"))
        return df_model_bf16_available();
    df_backend be;
    int rc = df_backend_open(device, &be);
    if (rc) /* the trainer reports it when it opens the backend */
        return rc;
    return be.ops->gemm_w16 && be.ops->embedding_fwd_w16 && be.ops->gemm_bf16
               ? DF_OK
               : df_error(DF_EUNSUPPORTED, "trainer.device=%s has no bf16 matmuls yet", device);
}

bool df_role_compute_bf16(const char *key, const char *dtype, const char *device, bool say)
{
    static bool noticed;
    if (strcmp(dtype, "bf16") && strcmp(dtype, "bfloat16"))
        return false;
    if (df_device_bf16(device) == DF_OK)
        return true;
    if (!noticed && say)
        fprintf(stderr, "[distflow] notice: %s=%s asks for bf16 matmuls, but %s; computing in float32 "
                "(set it to fp32 to silence this)\n", key, dtype, df_last_error());
    noticed = true;
    df_clear_error();
    return false;
}
