/* Emulation build of kernels/cuda/gemm_bf16.cu (see cuda_emu.h, cuda_emu_bf16.h). */
#include "kernels/cuda/gemm_bf16.cu"
