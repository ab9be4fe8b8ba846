/* kernels/cpu/backend_cpu.c: placeholder until written */
