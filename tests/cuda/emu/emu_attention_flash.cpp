/* Emulation build of kernels/cuda/attention_flash.cu (see cuda_emu.h). */
#include "kernels/cuda/attention_flash.cu"
