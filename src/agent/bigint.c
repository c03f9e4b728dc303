/* Non-negative big integers (bigint.h): schoolbook arithmetic in base 10^9, long division with
 * each quotient limb found by bisection. Quadratic, which is plenty for the calculator's numbers
 * (its expressions are short: calculator.c bounds their length). */
#include "agent/bigint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void big_free(big *a)
{
    free(a->d);
    *a = (big){0};
}

static int reserve(big *a, size_t n)
{
    if (n <= a->cap)
        return 0;
    uint32_t *p = realloc(a->d, n * sizeof *p);
    if (!p)
        return -1;
    a->d = p;
    a->cap = n;
    return 0;
}

static void trim(big *a)
{
    while (a->n && !a->d[a->n - 1])
        a->n--;
}

bool big_is_zero(const big *a) { return a->n == 0; }

int big_cmp(const big *a, const big *b)
{
    if (a->n != b->n)
        return a->n < b->n ? -1 : 1;
    for (size_t i = a->n; i-- > 0;)
        if (a->d[i] != b->d[i])
            return a->d[i] < b->d[i] ? -1 : 1;
    return 0;
}

int big_set_u32(big *out, uint32_t v)
{
    if (reserve(out, 2))
        return -1;
    out->d[0] = v % BIG_BASE;
    out->d[1] = v / BIG_BASE;
    out->n = 2;
    trim(out);
    return 0;
}

int big_copy(big *out, const big *a)
{
    if (out == a)
        return 0;
    if (reserve(out, a->n ? a->n : 1))
        return -1;
    if (a->n)
        memcpy(out->d, a->d, a->n * sizeof *a->d);
    out->n = a->n;
    return 0;
}

int big_from_dec(big *out, const char *s, size_t len)
{
    size_t limbs = (len + BIG_DIGITS - 1) / BIG_DIGITS;
    if (reserve(out, limbs ? limbs : 1))
        return -1;
    out->n = 0;
    for (size_t end = len; end > 0;) { /* the last 9 digits first */
        size_t start = end > BIG_DIGITS ? end - BIG_DIGITS : 0;
        uint32_t v = 0;
        for (size_t i = start; i < end; i++)
            v = v * 10 + (uint32_t)(s[i] - '0');
        out->d[out->n++] = v;
        end = start;
    }
    trim(out);
    return 0;
}

/* out may alias a or b: results are built in a temporary and moved. */
static void take(big *out, big *tmp)
{
    free(out->d);
    *out = *tmp;
    trim(out);
}

int big_add(big *out, const big *a, const big *b)
{
    size_t n = (a->n > b->n ? a->n : b->n) + 1;
    big t = {0};
    if (reserve(&t, n))
        return -1;
    uint32_t carry = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t s = carry + (i < a->n ? a->d[i] : 0) + (i < b->n ? b->d[i] : 0);
        carry = s >= BIG_BASE;
        t.d[i] = carry ? s - BIG_BASE : s;
    }
    t.n = n;
    take(out, &t);
    return 0;
}

int big_sub(big *out, const big *a, const big *b)
{
    big t = {0};
    if (reserve(&t, a->n ? a->n : 1))
        return -1;
    int64_t borrow = 0;
    for (size_t i = 0; i < a->n; i++) {
        int64_t s = (int64_t)a->d[i] - borrow - (i < b->n ? b->d[i] : 0);
        borrow = s < 0;
        t.d[i] = (uint32_t)(borrow ? s + BIG_BASE : s);
    }
    t.n = a->n;
    take(out, &t);
    return 0;
}

int big_mul(big *out, const big *a, const big *b)
{
    big t = {0};
    size_t n = a->n + b->n;
    if (reserve(&t, n ? n : 1))
        return -1;
    memset(t.d, 0, (n ? n : 1) * sizeof *t.d);
    for (size_t i = 0; i < a->n; i++) {
        uint64_t carry = 0;
        for (size_t j = 0; j < b->n; j++) {
            uint64_t cur = t.d[i + j] + (uint64_t)a->d[i] * b->d[j] + carry;
            t.d[i + j] = (uint32_t)(cur % BIG_BASE);
            carry = cur / BIG_BASE;
        }
        for (size_t k = i + b->n; carry; k++) {
            uint64_t cur = t.d[k] + carry;
            t.d[k] = (uint32_t)(cur % BIG_BASE);
            carry = cur / BIG_BASE;
        }
    }
    t.n = n;
    take(out, &t);
    return 0;
}

/* out = a * m (m < BIG_BASE) */
static int mul_small(big *out, const big *a, uint32_t m)
{
    big t = {0};
    if (reserve(&t, a->n + 1))
        return -1;
    uint64_t carry = 0;
    for (size_t i = 0; i < a->n; i++) {
        uint64_t cur = (uint64_t)a->d[i] * m + carry;
        t.d[i] = (uint32_t)(cur % BIG_BASE);
        carry = cur / BIG_BASE;
    }
    t.d[a->n] = (uint32_t)carry;
    t.n = a->n + 1;
    take(out, &t);
    return 0;
}

int big_divmod(big *q, big *r, const big *a, const big *b)
{
    big quo = {0}, rem = {0}, prod = {0};
    int rc = reserve(&quo, a->n ? a->n : 1);
    if (!rc)
        memset(quo.d, 0, (a->n ? a->n : 1) * sizeof *quo.d);
    for (size_t i = a->n; !rc && i-- > 0;) {
        /* rem = rem * BASE + a[i] */
        if ((rc = reserve(&rem, rem.n + 1)))
            break;
        memmove(rem.d + 1, rem.d, rem.n * sizeof *rem.d);
        rem.d[0] = a->d[i];
        rem.n++;
        trim(&rem);
        if (big_cmp(&rem, b) < 0) { /* the common case in gcd's steps: no bisection */
            quo.d[i] = 0;
            continue;
        }
        /* the largest x < BASE with b * x <= rem */
        uint32_t lo = 0, hi = BIG_BASE - 1;
        while (!rc && lo < hi) {
            uint32_t mid = lo + (hi - lo + 1) / 2;
            if ((rc = mul_small(&prod, b, mid)))
                break;
            if (big_cmp(&prod, &rem) <= 0)
                lo = mid;
            else
                hi = mid - 1;
        }
        if (!rc && lo && !(rc = mul_small(&prod, b, lo)))
            rc = big_sub(&rem, &rem, &prod);
        quo.d[i] = lo;
    }
    quo.n = a->n;
    trim(&quo);
    if (!rc && q)
        rc = big_copy(q, &quo);
    if (!rc && r)
        rc = big_copy(r, &rem);
    big_free(&quo);
    big_free(&rem);
    big_free(&prod);
    return rc;
}

int big_gcd(big *out, const big *a, const big *b)
{
    big x = {0}, y = {0}, r = {0};
    int rc = big_copy(&x, a) || big_copy(&y, b) ? -1 : 0;
    while (!rc && !big_is_zero(&y)) {
        rc = big_divmod(NULL, &r, &x, &y);
        if (!rc) {
            big t = x;
            x = y;
            y = r;
            r = t;
        }
    }
    if (!rc)
        rc = big_copy(out, &x);
    big_free(&x);
    big_free(&y);
    big_free(&r);
    return rc;
}

size_t big_dec_len(const big *a)
{
    if (!a->n)
        return 1;
    size_t n = (a->n - 1) * BIG_DIGITS;
    for (uint32_t top = a->d[a->n - 1]; top; top /= 10)
        n++;
    return n;
}

char *big_to_dec(const big *a)
{
    size_t cap = big_dec_len(a) + 1;
    char *s = malloc(cap);
    if (!s)
        return NULL;
    if (!a->n) {
        strcpy(s, "0");
        return s;
    }
    int w = snprintf(s, cap, "%u", (unsigned)a->d[a->n - 1]);
    for (size_t i = a->n - 1; i-- > 0;)
        w += snprintf(s + w, cap - (size_t)w, "%09u", (unsigned)a->d[i]);
    return s;
}
