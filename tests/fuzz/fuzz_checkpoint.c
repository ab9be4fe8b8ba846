/* tests/fuzz/fuzz_checkpoint.c: arbitrary bytes as a checkpoint file (see fuzz_checkpoint.h).
 * Most mutations stop at the header, size or checksum checks; fuzz_checkpoint_crc goes deeper. */
#include "fuzz_checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_checkpoint_file(data, size); }
