/* tests/fuzz/fuzz_checkpoint_crc.c: mutations of a checkpoint that still pass the
 * header checks: before loading, the magic and version are set, the size field is set to
 * the input's size and the CRC-32 at the end recomputed, so every mutation reaches the
 * section parser, the vocabulary and label decoders and the stored config (a crafted file,
 * not a damaged one). Seeds: real tiny checkpoints (tests/fuzz/corpus/checkpoint_crc). */
#include "fuzz_checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 28) return fuzz_checkpoint_file(data, size);
    uint8_t *b = malloc(size);
    if (!b) return 0;
    memcpy(b, data, size);
    memcpy(b, "MHACKPT\n", 8);
    uint32_t version = CHECKPOINT_VERSION;
    for (int i = 0; i < 4; i++) b[8 + i] = (uint8_t)(version >> (8 * i));
    for (int i = 0; i < 8; i++) b[16 + i] = (uint8_t)((uint64_t)size >> (8 * i));
    uint32_t crc = crc32_update(0, b, size - 4);
    for (int i = 0; i < 4; i++) b[size - 4 + i] = (uint8_t)(crc >> (8 * i));
    fuzz_checkpoint_file(b, size);
    free(b);
    return 0;
}
