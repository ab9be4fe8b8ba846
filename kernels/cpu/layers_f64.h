/* kernels/cpu/layers_f64.h: the double instantiation of the layer kernels (layers_impl.h),
 * named mha_<op>_f64, compiled from the same source as the float backend. Used only by
 * tests (finite-difference gradient checks and as the reference for the float backend). */
#ifndef MHA_KERNELS_CPU_LAYERS_F64_H
#define MHA_KERNELS_CPU_LAYERS_F64_H
#include <stddef.h>
#include <stdint.h>

#define REAL double
#define FN(name) mha_##name##_f64
#include "kernels/cpu/layers_api.h"
#undef FN
#undef REAL

#endif
