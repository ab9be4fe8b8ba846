/* tests/fuzz/fuzz_jsonl.c: the jsonl reader on arbitrary bytes (see fuzz_dataset.h). */
#include "fuzz_dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return fuzz_dataset(data, size, FORMAT_JSONL); }
