/* kernels/cpu/layers_f64.c: instantiates layers_impl.h for double (test reference):
 * cblas_dgemm/dgemv and libm's double functions. */
#include <math.h>
#include "kernels/cpu/layers_f64.h"
#include "kernels/cpu/cpu_common.h"

#define REAL double
#define FN(name) mha_##name##_f64
#define GEMM cblas_dgemm
#define GEMV cblas_dgemv
#define R_EXP(x) exp(x)
#define R_LOG(x) log(x)
#define R_SQRT(x) sqrt(x)
#define R_ERF(x) erf(x)
#include "kernels/cpu/layers_impl.h"
