/* Emulation build of kernels/cuda/backend_cuda.cu (see cuda_emu.h). */
#include "kernels/cuda/backend_cuda.cu"
