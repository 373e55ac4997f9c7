/* The calibration histogram's counting loop (trtlab.quantization.native_counting compiles and loads it).

   Bins are those of TensorHistogram's numpy update: bin = trunc(float32(|x| * scale)), computed in float32 (no FMA,
   no fast-math: the product is rounded once, as numpy's float32 multiply rounds it), and a value whose product is at
   or past `bins` is counted in the last bin. The max |x| comes back as float32 bits: for non-negative floats the
   integer order of the bits is the float order, and NaN/Inf sort above every finite value, so one integer max also
   answers "is anything non-finite" and vectorizes without fast-math.

   Per block of values, a vector pass computes the bins; then a scalar loop increments the counters, spread over
   LANES sub-histograms. The increments are the cost, so on CPUs with AVX2 the vector pass also drops the zeros
   (a third of a ReLU network's activations) from the block, and they are counted by number instead. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK 512
#ifndef TRTLAB_LANE_FLUSH /* values after which the uint32 lanes are emptied into counts (tests set it low) */
#define TRTLAB_LANE_FLUSH 0x7fff0000LL
#endif
#define LANES 4 /* sub-histograms: a run of equal values would make each increment wait for the previous one */

#if defined(__x86_64__) && defined(__GNUC__) && !defined(TRTLAB_NO_AVX2)
#define TRTLAB_AVX2 1
#include <immintrin.h>
#endif

/* bins of x[0..m) into bin[0..m); returns the max |x| as bits */
static uint32_t block_bins(const float *x, int64_t m, float scale, float cap, int32_t *bin)
{
    uint32_t top = 0;
    for (int64_t i = 0; i < m; i++) {
        uint32_t bits;
        float magnitude;
        memcpy(&bits, x + i, 4);
        bits &= 0x7fffffffu;
        top = bits > top ? bits : top;
        memcpy(&magnitude, &bits, 4);
        float product = magnitude * scale;
        product = product < cap ? product : cap; /* NaN compares false: it lands at cap, and top reports it */
        bin[i] = (int32_t)product;
    }
    return top;
}

#ifdef TRTLAB_AVX2
static int32_t keep_order[256][8]; /* for an 8-bit mask of non-zeros: their positions, first to last */

__attribute__((constructor)) static void fill_keep_order(void)
{
    for (int mask = 0; mask < 256; mask++) {
        int kept = 0;
        for (int lane = 0; lane < 8; lane++)
            if (mask & (1 << lane)) keep_order[mask][kept++] = lane;
        while (kept < 8) keep_order[mask][kept++] = 0;
    }
}

/* as block_bins, but only the bins of non-zero values are written (bin needs 8 spare entries); *kept says how many */
__attribute__((target("avx2,popcnt")))
static uint32_t block_bins_nonzero(const float *x, int64_t m, float scale, float cap, int32_t *bin, int64_t *kept)
{
    const __m256i magnitude_bits = _mm256_set1_epi32(0x7fffffff);
    const __m256 vscale = _mm256_set1_ps(scale), vcap = _mm256_set1_ps(cap);
    __m256i vtop = _mm256_setzero_si256();
    int64_t k = 0, i = 0;
    for (; i + 8 <= m; i += 8) {
        __m256i bits = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i)), magnitude_bits);
        vtop = _mm256_max_epu32(vtop, bits);
        /* min(product, cap) with minps' operand order: a NaN product yields cap, as in block_bins */
        __m256 product = _mm256_min_ps(_mm256_mul_ps(_mm256_castsi256_ps(bits), vscale), vcap);
        __m256i index = _mm256_cvttps_epi32(product);
        int mask = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(bits, _mm256_setzero_si256())));
        __m256i order = _mm256_loadu_si256((const __m256i *)keep_order[mask]);
        _mm256_storeu_si256((__m256i *)(bin + k), _mm256_permutevar8x32_epi32(index, order));
        k += __builtin_popcount((unsigned)mask);
    }
    uint32_t lanes_top[8], top = 0;
    _mm256_storeu_si256((__m256i *)lanes_top, vtop);
    for (int lane = 0; lane < 8; lane++) top = lanes_top[lane] > top ? lanes_top[lane] : top;
    for (; i < m; i++) {
        int32_t one;
        uint32_t bits = block_bins(x + i, 1, scale, cap, &one);
        top = bits > top ? bits : top;
        if (bits) bin[k++] = one;
    }
    *kept = k;
    return top;
}
#endif

/* Adds the histogram of x[0..n) to counts[0..bins) and stores max |x| in *top (float32).
   Returns 0, 1 when x holds NaN or Inf (counts are then meaningless), 2 when out of memory. */
int trtlab_histogram_count(const float *x, int64_t n, float scale, int64_t bins, int64_t *counts, float *top)
{
    if (bins < 1 || bins > (1 << 24)) return 2;
    const int64_t stride = bins + 24; /* lanes a multiple of 4 KiB apart would alias in the store buffer (Intel) */
    uint32_t *lanes = calloc((size_t)LANES * (size_t)stride, sizeof(uint32_t));
    if (!lanes) return 2;
    float cap = (float)bins; /* exact: bins <= 2^24 */
    uint32_t cap_bits;
    memcpy(&cap_bits, &cap, 4);
    cap_bits -= 1; /* the largest float below bins: it truncates to bins - 1 */
    memcpy(&cap, &cap_bits, 4);
#ifdef TRTLAB_AVX2
    const int drop_zeros = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt");
#else
    const int drop_zeros = 0;
#endif
    uint32_t top_bits = 0;
    int32_t bin[BLOCK + 8];
    int64_t pending = 0, zeros = 0;
    for (int64_t begin = 0; begin < n; begin += BLOCK) {
        int64_t m = n - begin < BLOCK ? n - begin : BLOCK, kept = m;
        uint32_t block_top;
#ifdef TRTLAB_AVX2
        if (drop_zeros) {
            block_top = block_bins_nonzero(x + begin, m, scale, cap, bin, &kept);
            zeros += m - kept;
        } else
#endif
            block_top = block_bins(x + begin, m, scale, cap, bin);
        top_bits = block_top > top_bits ? block_top : top_bits;
        int64_t i = 0;
        for (; i + LANES <= kept; i += LANES) {
            lanes[bin[i]]++;
            lanes[stride + bin[i + 1]]++;
            lanes[2 * stride + bin[i + 2]]++;
            lanes[3 * stride + bin[i + 3]]++;
        }
        for (; i < kept; i++) lanes[bin[i]]++;
        pending += kept;
        if (pending >= TRTLAB_LANE_FLUSH) { /* before a uint32 lane could overflow */
            for (int lane = 0; lane < LANES; lane++)
                for (int64_t b = 0; b < bins; b++) {
                    counts[b] += lanes[lane * stride + b];
                    lanes[lane * stride + b] = 0;
                }
            pending = 0;
        }
    }
    for (int64_t b = 0; b < bins; b++)
        counts[b] += (int64_t)lanes[b] + lanes[stride + b] + lanes[2 * stride + b] + lanes[3 * stride + b];
    counts[0] += zeros;
    free(lanes);
    memcpy(top, &top_bits, 4);
    return top_bits >= 0x7f800000u;
}
