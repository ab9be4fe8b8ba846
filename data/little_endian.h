/* data/little_endian.h: 32-bit unsigned integers stored little-endian in byte buffers,
 * whatever the host's order: the vocabulary's serialisation (data/vocab.c) and the
 * checkpoint file's integers (model/checkpoint.c). */
#ifndef MHA_DATA_LITTLE_ENDIAN_H
#define MHA_DATA_LITTLE_ENDIAN_H

#include <stdint.h>

static inline void put_u32(unsigned char *p, uint32_t x) {
    p[0] = (unsigned char)x;
    p[1] = (unsigned char)(x >> 8);
    p[2] = (unsigned char)(x >> 16);
    p[3] = (unsigned char)(x >> 24);
}

static inline uint32_t get_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

#endif
