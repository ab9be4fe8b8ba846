/* data/batcher.c: placeholder until written */
