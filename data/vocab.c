/* data/vocab.c: placeholder until written */
