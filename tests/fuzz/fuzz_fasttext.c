/* tests/fuzz/fuzz_fasttext.c: the fasttext reader on arbitrary bytes (see fuzz_dataset.h). */
#include "fuzz_dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_dataset(data, size, FORMAT_FASTTEXT); }
