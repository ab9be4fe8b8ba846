/* tests/cuda/emu/cuda_emu_bf16.h: the mixed-precision slice of the host emulation (included by
 * cuda_emu.h): the bf16 type and its conversions, cublasGemmEx with bf16 operands, and
 * nvcuda::wmma for 16x16x16 bf16 and 16x16x8 tf32 fragments with fp32 accumulators.
 *
 * WMMA: every thread holds the whole tile of each fragment (row-major: 16x16, or 16x8 and 8x16
 * for tf32 operands), so loads, stores and mma_sync are done redundantly by the 32 threads of
 * a warp; the result is the same as on the hardware as long as the kernel uses fragments only
 * through these calls, or applies one operation to every element x[t] (the tf32 split), as the
 * CUDA guide allows (the thread mapping of elements is unspecified). The checks the
 * hardware makes silently are made loudly here: ldm a multiple of 16 bytes, pointers 32-byte
 * aligned. A store writes only the storing lane's share of the tile, so a missing
 * __syncwarp() between a warp's store and other lanes' reads of it shows as stale data; a
 * missing one between lanes' writes and a WMMA load shows too (each emulated thread loads the
 * whole tile when it runs, before the lanes after it wrote). mma_sync is a warp-level barrier
 * here (see there).
 */
#ifndef MHA_TESTS_CUDA_EMU_BF16_H
#define MHA_TESTS_CUDA_EMU_BF16_H

#include <cstdint>
#include <cstring>
#include <type_traits>

/* ------------------------------------------------------------------ bf16 */

struct __nv_bfloat16 {
    uint16_t bits;
};

/* Round to nearest even, as __float2bfloat16_rn; NaN stays a (quiet) NaN. */
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return __nv_bfloat16{(uint16_t)((u >> 16) | 0x40u)};
    u += 0x7fffu + ((u >> 16) & 1u);
    return __nv_bfloat16{(uint16_t)(u >> 16)};
}

inline float __bfloat162float(__nv_bfloat16 h) {
    uint32_t u = (uint32_t)h.bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

namespace mha_emu {
inline float to_float(float x) { return x; }
inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
}  // namespace mha_emu

/* ------------------------------------------------------------------ cublasGemmEx */

enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16BF = 14 };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68 };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1 };

namespace mha_emu {
/* Column-major reference as mha_emu::gemm, on A, B of type TA, TB (float accumulation in
 * double, as there: the products of bf16 values are exact in fp32 anyway). */
template <class TA, class TB>
inline cublasStatus_t gemm_ex(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              float alpha, const TA *A, int lda, const TB *B, int ldb, float beta,
                              float *C, int ldc) {
    flush_copies();
    if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (lda < std::max(1, ta == CUBLAS_OP_N ? m : k)) return CUBLAS_STATUS_INVALID_VALUE;
    if (ldb < std::max(1, tb == CUBLAS_OP_N ? k : n)) return CUBLAS_STATUS_INVALID_VALUE;
    if (ldc < std::max(1, m)) return CUBLAS_STATUS_INVALID_VALUE;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int l = 0; l < k; l++) {
                double a = to_float(ta == CUBLAS_OP_N ? A[i + (size_t)l * lda] : A[l + (size_t)i * lda]);
                double b = to_float(tb == CUBLAS_OP_N ? B[l + (size_t)j * ldb] : B[j + (size_t)l * ldb]);
                s += a * b;
            }
            float *c = &C[i + (size_t)j * ldc];
            *c = beta == 0.0f ? (float)(alpha * s) : (float)(alpha * s + (double)beta * *c);
        }
    return CUBLAS_STATUS_SUCCESS;
}
}  // namespace mha_emu

/* The combinations the backend uses: bf16 A and B, fp32 C, fp32 compute (and all-fp32). */
inline cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m,
                                   int n, int k, const void *alpha, const void *A, cudaDataType_t at,
                                   int lda, const void *B, cudaDataType_t bt, int ldb,
                                   const void *beta, void *C, cudaDataType_t ct, int ldc,
                                   cublasComputeType_t comp, cublasGemmAlgo_t) {
    if (ct != CUDA_R_32F || comp != CUBLAS_COMPUTE_32F || at != bt) return CUBLAS_STATUS_INVALID_VALUE;
    const float al = *(const float *)alpha, be = *(const float *)beta;
    if (at == CUDA_R_16BF)
        return mha_emu::gemm_ex(ta, tb, m, n, k, al, (const __nv_bfloat16 *)A, lda,
                                (const __nv_bfloat16 *)B, ldb, be, (float *)C, ldc);
    if (at == CUDA_R_32F)
        return mha_emu::gemm_ex(ta, tb, m, n, k, al, (const float *)A, lda, (const float *)B, ldb, be,
                                (float *)C, ldc);
    return CUBLAS_STATUS_INVALID_VALUE;
}

/* ------------------------------------------------------------------ nvcuda::wmma */

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision {
struct tf32 {};   /* stored as float; the tensor cores read only its top 19 bits */
}  // namespace precision

/* tf32 of x, rounded to nearest with ties away from zero (cvt.rna.tf32.f32). */
inline float __float_to_tf32(float x) { return mha_emu::tf32_rna(x); }

namespace detail {
template <class T> struct storage { typedef T type; };
template <> struct storage<precision::tf32> { typedef float type; };
/* The shapes the kernels use: 16x16x16 (bf16) and 16x16x8 (tf32); a fragment is the tile its
 * role covers: matrix_a M x K, matrix_b K x N, accumulator M x N. */
template <class Use, int M, int N, int K> struct dims {
    static constexpr int rows = std::is_same<Use, matrix_b>::value ? K : M;
    static constexpr int cols = std::is_same<Use, matrix_a>::value ? K : N;
};
}  // namespace detail

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
    static_assert(M == 16 && N == 16 && (K == 16 || K == 8), "cuda_emu: only 16x16x16 and 16x16x8 fragments");
    typedef typename detail::storage<T>::type element_type;
    static constexpr int rows = detail::dims<Use, M, N, K>::rows, cols = detail::dims<Use, M, N, K>::cols;
    /* the whole tile, row-major (row r, column c at x[cols r + c]); a kernel may apply one
     * operation to every element (as the hardware allows: the same op on each x[t]) */
    static constexpr int num_elements = rows * cols;
    element_type x[rows * cols];
};

namespace detail {
template <class T>
inline void check(const T *p, unsigned ldm, const char *what) {
    if ((ldm * sizeof(T)) % 16 != 0) {
        fprintf(stderr, "cuda_emu: wmma %s: ldm %u is not a multiple of 16 bytes\n", what, ldm);
        abort();
    }
    if ((uintptr_t)p % 32 != 0) {
        fprintf(stderr, "cuda_emu: wmma %s: pointer %p is not 32-byte aligned\n", what, (const void *)p);
        abort();
    }
}
template <class T>
inline void load(T *x, int rows, int cols, const T *p, unsigned ldm, bool row_major_mem) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            x[cols * r + c] = row_major_mem ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}
template <class L>
constexpr bool is_row_major() { return std::is_same<L, row_major>::value; }
/* An operand as the tensor cores read it: bf16 exactly; tf32 truncated to its 19 bits (the
 * hardware leaves the use of the low 13 bits of an unconverted float unspecified: truncating
 * them here makes a kernel that skips __float_to_tf32 lose accuracy visibly). */
template <class T> inline float operand(typename storage<T>::type v);
template <> inline float operand<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> inline float operand<precision::tf32>(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    u &= 0xffffe000u;
    memcpy(&v, &u, 4);
    return v;
}
/* t (16 x 16) += fa (16 x K) fb (K x 16), each sum over k in order. Fixed-size local arrays
 * only, so not instrumented: the sanitizers' checks would keep it from vectorizing, and it is
 * most of an emulated tensor-core kernel's time. */
template <int K>
__attribute__((no_sanitize("address", "undefined"))) inline void mma_tile(float *t, const float *fa,
                                                                            const float *fb) {
    for (int m = 0; m < 16; m++)
        for (int k = 0; k < K; k++)
            for (int n = 0; n < 16; n++) t[16 * m + n] += fa[K * m + k] * fb[16 * k + n];
}

/* x rounded toward zero to fp32 */
inline float round_toward_zero(double x) {
    float f = (float)x;
    if (std::fabs((double)f) > std::fabs(x)) f = std::nextafter(f, 0.0f);
    return f;
}

/* The tensor cores do not round to nearest when they accumulate: Fasi, Higham, Mikaitis and
 * Pranesh ("Numerical behavior of NVIDIA tensor cores", PeerJ CS 2021) found on V100, T4 and
 * A100 exact products, summed a few at a time with the accumulator after alignment to the
 * largest, the bits shifted out truncated; Khattak and Mikaitis (arXiv:2512.07004) model H100
 * and B200 in the same terms, with other block sizes. MHA_EMU_MMA=truncate is a simple model of
 * that: each block of 4 products summed with the accumulator (in double), then rounded toward
 * zero to fp32. Not bit-exact for any GPU (the hardware truncates each aligned addend, which
 * can lose more, and in either direction for mixed signs); it makes a long chain of
 * accumulations drift as truncation does, so that the tensor-core kernels' tolerances are seen
 * to hold under it too (MHA_EMU_MMA=nearest, the default: mma_tile). */
inline bool mma_truncates(void) {
    static const int mode = [] {
        const char *e = getenv("MHA_EMU_MMA");
        if (!e || !*e || strcmp(e, "nearest") == 0) return 0;
        if (strcmp(e, "truncate") == 0) return 1;
        fprintf(stderr, "cuda_emu: MHA_EMU_MMA=%s: expected nearest or truncate\n", e);
        exit(2);
    }();
    return mode == 1;
}
template <int K>
inline void mma_tile_truncating(float *t, const float *fa, const float *fb) {
    static_assert(K % 4 == 0, "blocks of 4");
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            float acc = t[16 * m + n];
            for (int k0 = 0; k0 < K; k0 += 4) {
                /* bf16 and tf32 products are exact in double; their sum with acc is too unless
                 * the terms span more than ~29 binades, where double's own rounding (before
                 * the truncation) is far below what this models */
                double s = acc;
                for (int k = k0; k < k0 + 4; k++) s += (double)fa[K * m + k] * (double)fb[16 * k + n];
                acc = round_toward_zero(s);
            }
            t[16 * m + n] = acc;
        }
}
}  // namespace detail

template <class Use, int K, class T, class L>
inline void load_matrix_sync(fragment<Use, 16, 16, K, T, L> &f, const typename detail::storage<T>::type *p,
                             unsigned ldm) {
    static_assert(!std::is_same<Use, accumulator>::value, "accumulator loads take a layout");
    detail::check(p, ldm, "load_matrix_sync");
    detail::load(f.x, f.rows, f.cols, p, ldm, detail::is_row_major<L>());
}

template <int K, class T>
inline void load_matrix_sync(fragment<accumulator, 16, 16, K, T> &f, const T *p, unsigned ldm,
                             layout_t layout) {
    detail::check(p, ldm, "load_matrix_sync (accumulator)");
    detail::load(f.x, 16, 16, p, ldm, layout == mem_row_major);
}

/* Each lane writes only its share of the tile (elements 16 r + c = lane mod 32), as on the
 * hardware, where a lane's stores cover only the elements its registers hold: a lane that
 * reads the stored tile without a __syncwarp() (or another barrier) after the store sees the
 * elements of the lanes that have not run yet still holding their old contents. */
template <int K, class T>
inline void store_matrix_sync(T *p, const fragment<accumulator, 16, 16, K, T> &f, unsigned ldm,
                              layout_t layout) {
    detail::check(p, ldm, "store_matrix_sync");
    const int lane = mha_emu::linear_tid() & 31;
    for (int e = lane; e < 256; e += 32) {
        const int r = e / 16, c = e % 16;
        T *q = layout == mem_row_major ? &p[(size_t)r * ldm + c] : &p[(size_t)c * ldm + r];
        *q = f.x[e];
    }
}

template <class Use, int K, class T, class L, class V>
inline void fill_fragment(fragment<Use, 16, 16, K, T, L> &f, V v) {
    for (int e = 0; e < f.num_elements; e++) f.x[e] = v;
}

/* d = a b + c with fp32 accumulation (d may be c). Warp-synchronous on the hardware: no lane
 * passes it before every lane has loaded its operands, so a warp may load an accumulator
 * from shared memory, mma, and store it back in place. Emulated by a warp-level barrier. */
template <int K, class TA, class LA, class TB, class LB>
inline void mma_sync(fragment<accumulator, 16, 16, K, float> &d,
                     const fragment<matrix_a, 16, 16, K, TA, LA> &a,
                     const fragment<matrix_b, 16, 16, K, TB, LB> &b,
                     const fragment<accumulator, 16, 16, K, float> &c) {
    static_assert(std::is_same<TA, TB>::value, "cuda_emu: mma_sync operands of one type");
    mha_emu::barrier(mha_emu::kWarpSync, "wmma::mma_sync", 0);
    float fa[16 * K], fb[K * 16], t[256];   /* the operands as read */
    for (int e = 0; e < 16 * K; e++) {
        fa[e] = detail::operand<TA>(a.x[e]);
        fb[e] = detail::operand<TB>(b.x[e]);
    }
    memcpy(t, c.x, sizeof t);
    if (detail::mma_truncates()) detail::mma_tile_truncating<K>(t, fa, fb);
    else detail::mma_tile<K>(t, fa, fb);
    memcpy(d.x, t, sizeof t);
}
}  // namespace wmma
}  // namespace nvcuda

#endif
