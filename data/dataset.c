/* data/dataset.c: placeholder until written */
