#!/usr/bin/env python3
"""Reference for df_model_param_checksum (include/distflow/model.h), written from
its documented definition, for the golden values in tests/test_actor_dp.c.
Run: python3 tests/golden/param_checksum.py  (not run by CI)."""
import struct

M = (1 << 64) - 1
P1, P2 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F
BLOCK = 8 << 17  # bytes per block (1 MiB)


def rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M


def fmix64(x):
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & M
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & M
    return x ^ (x >> 33)


def block_hash(data, index):
    lanes = [((index + 1) * P1 + k * P2) & M for k in range(4)]
    for i in range(0, len(data), 8):
        w = int.from_bytes(data[i:i + 8].ljust(8, b"\0"), "little")
        k = (i // 8) % 4
        lanes[k] = (rotl((lanes[k] + w * P2) & M, 31) * P1) & M
    h = (rotl(lanes[0], 1) + rotl(lanes[1], 7) + rotl(lanes[2], 12) + rotl(lanes[3], 18)) & M
    return fmix64((h + len(data)) & M)


def checksum(data):
    s = 0
    for j in range(0, len(data), BLOCK):
        s = (s + block_hash(data[j:j + BLOCK], j // BLOCK)) & M
    return fmix64(s ^ len(data))


def params(n):
    """The test's pattern, exact in float32: p[i] = ((i % 2001) - 1000) / 1024."""
    return b"".join(struct.pack("<f", ((i % 2001) - 1000) / 1024.0) for i in range(n))


if __name__ == "__main__":
    for n in (0, 1, 5, 8, 300001):
        print(n, "0x%016X" % checksum(params(n)))
