/* bigint.h (internal) — non-negative big integers in base 10^9 for the calculator tool
 * (calculator.c): exact + - * / on numbers of any length, decimal in and out. */
#ifndef DF_AGENT_BIGINT_H
#define DF_AGENT_BIGINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BIG_BASE 1000000000u
#define BIG_DIGITS 9

/* Little-endian limbs, each < BIG_BASE; n == 0 is zero; no leading zero limbs. */
typedef struct big {
    uint32_t *d;
    size_t n, cap;
} big;

void big_free(big *a);
bool big_is_zero(const big *a);
int big_cmp(const big *a, const big *b);
/* Each returns 0, or -1 when an allocation failed (out is then unusable but freeable). */
int big_set_u32(big *out, uint32_t v);
int big_copy(big *out, const big *a);
int big_from_dec(big *out, const char *s, size_t len); /* s: len decimal digits */
int big_add(big *out, const big *a, const big *b);
int big_sub(big *out, const big *a, const big *b); /* a >= b */
int big_mul(big *out, const big *a, const big *b);
int big_divmod(big *q, big *r, const big *a, const big *b); /* b != 0; q or r may be NULL */
int big_gcd(big *out, const big *a, const big *b);
/* Decimal text (malloc'd), or NULL when an allocation failed. */
char *big_to_dec(const big *a);
size_t big_dec_len(const big *a); /* digits of a (1 for zero) */

#endif
