/* Emulation build of kernels/cuda/gemm.cu (see cuda_emu.h). */
#include "kernels/cuda/gemm.cu"
