/*
 * logging/tfrecord.h (internal) — TFRecord framing, the container of TensorBoard event files.
 *
 * A record is: the payload length as uint64 little-endian, the masked CRC32C of those 8 bytes
 * (uint32 LE), the payload, the masked CRC32C of the payload (uint32 LE). The mask is
 * ((crc >> 15) | (crc << 17)) + 0xa282ead8, which TensorFlow applies so that a CRC stored inside
 * checksummed data does not checksum to a constant (tensorflow/core/lib/hash/crc32c.h, Mask()).
 */
#ifndef DF_LOGGING_TFRECORD_H
#define DF_LOGGING_TFRECORD_H

#include <stddef.h>
#include <stdint.h>

/** Bytes of framing around a payload: 8 (length) + 4 + 4 (the two CRCs). */
#define DF_TFRECORD_OVERHEAD 16

/**
 * CRC32C (Castagnoli, reflected polynomial 0x82f63b78, initial value and final xor 0xffffffff)
 * of n bytes; crc32c("123456789") = 0xe3069283 (RFC 3720, B.4).
 */
uint32_t df_crc32c(const void *data, size_t n);
/** TensorFlow's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2^32). */
uint32_t df_crc32c_mask(uint32_t crc);
/**
 * Frame `payload` (n bytes) as one record into out[n + DF_TFRECORD_OVERHEAD]; the caller sizes
 * `out`. Cannot fail.
 */
void df_tfrecord_frame(const void *payload, size_t n, uint8_t *out);

#endif
