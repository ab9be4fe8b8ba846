/* Emulation build of kernels/cuda/attention_flash_tc.cu (see cuda_emu.h, cuda_emu_bf16.h). */
#include "kernels/cuda/attention_flash_tc.cu"
