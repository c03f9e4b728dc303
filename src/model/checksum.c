/* 64-bit checksum of a model's parameter bytes (model.h: df_model_param_checksum). */
#include "distflow/model.h"

#include <string.h>

/* 1 MiB blocks: hashed in parallel, each seeded by its index, so the result does
   not depend on the thread count. */
enum { BLOCK_WORDS = 1 << 17, LANES = 4 };

static const uint64_t P1 = 0x9E3779B185EBCA87ULL, P2 = 0xC2B2AE3D27D4EB4FULL;

static inline uint64_t rotl(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

/* MurmurHash3's 64-bit finaliser: every input bit reaches every output bit. */
static inline uint64_t fmix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDULL;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ULL;
    x ^= x >> 33;
    return x;
}

/* Four independent multiply-rotate lanes (xxHash64's round) keep the multiplier busy:
   word i of the block goes to lane i % 4. */
static uint64_t hash_block(const unsigned char *p, int64_t nbytes, uint64_t index)
{
    uint64_t lane[LANES];
    for (int k = 0; k < LANES; k++)
        lane[k] = (index + 1) * P1 + (uint64_t)k * P2;
    int64_t n_words = nbytes / 8, i = 0;
    for (; i + LANES <= n_words; i += LANES)
        for (int k = 0; k < LANES; k++) {
            uint64_t w;
            memcpy(&w, p + 8 * (i + k), 8);
            lane[k] = rotl(lane[k] + w * P2, 31) * P1;
        }
    for (; i * 8 < nbytes; i++) { /* the tail; a last partial word is zero-padded */
        uint64_t w = 0;
        int64_t left = nbytes - 8 * i;
        memcpy(&w, p + 8 * i, (size_t)(left < 8 ? left : 8));
        lane[i % LANES] = rotl(lane[i % LANES] + w * P2, 31) * P1;
    }
    uint64_t h = rotl(lane[0], 1) + rotl(lane[1], 7) + rotl(lane[2], 12) + rotl(lane[3], 18);
    return fmix64(h + (uint64_t)nbytes);
}

int df_model_param_checksum(const df_model *m, uint64_t *out)
{
    if (!m || !out || (m->n_params > 0 && !m->params))
        return df_error(DF_EINVAL, "df_model_param_checksum: NULL model, parameters or output");
    const unsigned char *p = (const unsigned char *)m->params;
    const int64_t nbytes = m->n_params * (int64_t)sizeof(float), block = 8 * (int64_t)BLOCK_WORDS;
    const int64_t n_blocks = (nbytes + block - 1) / block;
    uint64_t sum = 0; /* blocks combine by addition mod 2^64: exact in any order */
#pragma omp parallel for reduction(+ : sum) schedule(static) if (n_blocks > 1)
    for (int64_t j = 0; j < n_blocks; j++) {
        int64_t len = nbytes - j * block < block ? nbytes - j * block : block;
        sum += hash_block(p + j * block, len, (uint64_t)j);
    }
    *out = fmix64(sum ^ (uint64_t)nbytes);
    return DF_OK;
}
