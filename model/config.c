/* model/config.c: placeholder until written */
