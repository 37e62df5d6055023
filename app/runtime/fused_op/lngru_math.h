// The row maths of the lngru / rlngru step, shared by the step op (lngru_step.cc) and the whole-sequence op
// (lngru_sequence.cc): everything here is inlined into each caller's target clones.
//
//   hu_ru, hu_c = hu[:, :2d], hu[:, 2d:]
//   pre = norm(hu_ru) * s_ru + a;  r, u = sigmoid(pre[:d]), sigmoid(pre[d:])
//   hh = tanh(r * (norm(hu_c) * s_c + b_c) + c);  h' = hh + u * (h - hh)
//
// norm is LayerNorm (two-pass mean and population variance, eps inside the root) or RMSNorm. Statistics are
// summed in float over four vector accumulators; sigmoid and tanh use a branch-free exp that the compiler
// vectorises.
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>

namespace lnserve {

#define LNSERVE_INLINE inline __attribute__((always_inline))  // inlined into each target clone

constexpr float kEps = 1e-5f;  // NORM_EPS of models/cell_types.py (spec §3)

struct Step {
  const float* hu;  // (rows, 3d): [hu_ru | hu_c] per row
  const float* a;
  const float* c;
  const float* h;
  const float* s_ru;
  const float* s_c;
  const float* b_c;  // nullptr for RmsGruStep
  float* out;
  int64_t rows;
  int64_t d;
};

// exp(x) to ~2 ulp for finite x, clamped to the normal range; NaN stays NaN (the engine reports it).
LNSERVE_INLINE float exp_clamped(float x) {
  x = x > 88.3f ? 88.3f : x;
  x = x < -87.3f ? -87.3f : x;
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer in the low mantissa bits
  float t = x * 1.44269504088896341f + magic;
  int32_t bits;
  memcpy(&bits, &t, sizeof bits);
  const float n = t - magic;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;  // ln 2 split in two for an exact n*ln2
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  int32_t scale_bits = (bits - 0x4B400000 + 127) << 23;  // 2^n
  float scale;
  memcpy(&scale, &scale_bits, sizeof scale);
  return y * scale;
}

LNSERVE_INLINE float sigmoid(float x) { return 1.0f / (1.0f + exp_clamped(-x)); }

LNSERVE_INLINE float tanh_approx(float x) { return 1.0f - 2.0f / (exp_clamped(2.0f * x) + 1.0f); }

// Sum of f(z[i]) over n floats with four independent vector accumulators (one chain is add-latency bound).
template <typename F>
LNSERVE_INLINE float sum4(const float* z, int64_t n, F f) {
  const int64_t q = n / 4;
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
  for (int64_t i = 0; i < q; ++i) {
    s0 += f(z[i]);
    s1 += f(z[q + i]);
    s2 += f(z[2 * q + i]);
    s3 += f(z[3 * q + i]);
  }
  for (int64_t i = 4 * q; i < n; ++i) s0 += f(z[i]);
  return (s0 + s1) + (s2 + s3);
}

// (shift, 1 / sqrt(mean((z - shift)^2) + eps)): shift is the mean (two passes) for LayerNorm, 0 for RMSNorm.
template <bool kRms>
LNSERVE_INLINE void norm_stats(const float* z, int64_t n, float* shift, float* inv) {
  const float mean = kRms ? 0.0f : sum4(z, n, [](float v) { return v; }) / static_cast<float>(n);
  const float var = sum4(z, n, [mean](float v) { return (v - mean) * (v - mean); }) / static_cast<float>(n);
  *shift = mean;
  *inv = 1.0f / sqrtf(var + kEps);
}

template <bool kRms, bool kBias>
LNSERVE_INLINE void step_rows(const Step& s) {
  const int64_t d = s.d;
  for (int64_t b = 0; b < s.rows; ++b) {
    const float* hu_ru = s.hu + b * 3 * d;
    const float* hu_c = hu_ru + 2 * d;
    const float* a = s.a + b * 2 * d;
    const float* c = s.c + b * d;
    const float* h = s.h + b * d;
    float* out = s.out + b * d;
    float m1, i1, m2, i2;
    norm_stats<kRms>(hu_ru, 2 * d, &m1, &i1);
    norm_stats<kRms>(hu_c, d, &m2, &i2);
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) {
      const float r = sigmoid((hu_ru[j] - m1) * i1 * s.s_ru[j] + a[j]);
      const float u = sigmoid((hu_ru[d + j] - m1) * i1 * s.s_ru[d + j] + a[d + j]);
      float cand = (hu_c[j] - m2) * i2 * s.s_c[j];
      if (kBias) cand += s.b_c[j];
      const float hh = tanh_approx(r * cand + c[j]);
      out[j] = hh + u * (h[j] - hh);
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LNSERVE_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LNSERVE_CLONES
#endif

}  // namespace lnserve
