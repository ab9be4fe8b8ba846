/* data/tokenizer.c: placeholder until written */
