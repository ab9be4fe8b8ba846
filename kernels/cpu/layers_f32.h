/* kernels/cpu/layers_f32.h: the float instantiation of the layer kernels (layers_impl.h),
 * named mha_<op>_f32; backend_cpu.c puts them in the Backend table. */
#ifndef MHA_KERNELS_CPU_LAYERS_F32_H
#define MHA_KERNELS_CPU_LAYERS_F32_H
#include <stddef.h>
#include <stdint.h>

#define REAL float
#define FN(name) mha_##name##_f32
#include "kernels/cpu/layers_api.h"
#undef FN
#undef REAL

#endif
