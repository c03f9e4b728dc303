/* TFRecord framing and CRC32C (logging/tfrecord.h). */
#include "logging/tfrecord.h"

#include "util/le.h"

#include <pthread.h>
#include <string.h>

/* One table of the reflected polynomial, built once; a byte at a time is ample for a few kB of
   metrics per step. */
static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void build_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t df_crc32c(const void *data, size_t n)
{
    pthread_once(&crc_once, build_table);
    const uint8_t *p = data;
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++)
        c = crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

uint32_t df_crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

void df_tfrecord_frame(const void *payload, size_t n, uint8_t *out)
{
    df_le_put64(out, (uint64_t)n);
    df_le_put32(out + 8, df_crc32c_mask(df_crc32c(out, 8)));
    if (n)
        memcpy(out + 12, payload, n);
    df_le_put32(out + 12 + n, df_crc32c_mask(df_crc32c(payload, n)));
}
