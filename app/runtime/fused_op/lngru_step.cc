// One step of the lngru / rlngru cells' pointwise part as one onnxruntime custom op (domain ai.lnserve).
//
// The plain Scan body runs, after its two recurrent GEMMs, LayerNormalization x2, Add, Sigmoid, Split, Mul,
// Add, Tanh, Sub, Mul and Add: ten passes over (B, d..2d) tensors. This op does all of them in one pass per
// row, leaving the one recurrent GEMM hu = h @ [U_ru | U_c] to onnxruntime (MLAS, prepacked weights); the op
// reads the gates' and the candidate's columns of hu in place, so the joint GEMM needs no Split copy:
//
//   LnGruStep(hu (B,3d), a (B,2d), c (B,d), h (B,d), s_ru (2d), s_c (d), b_c (d)) -> h' (B,d)
//   RmsGruStep(the same without b_c)
//
//   hu_ru, hu_c = hu[:, :2d], hu[:, 2d:]
//   pre = norm(hu_ru) * s_ru + a;  r, u = sigmoid(pre[:d]), sigmoid(pre[d:])
//   hh = tanh(r * (norm(hu_c) * s_c + b_c) + c);  h' = hh + u * (h - hh)
//
// norm is LayerNorm (two-pass mean and population variance, eps inside the root) or RMSNorm. Statistics are
// summed in float over four vector accumulators; sigmoid and tanh use a branch-free exp that the compiler vectorises. The row loop is
// compiled for AVX-512, AVX2+FMA and the x86-64 baseline and picked at load time (GCC target_clones), so
// the library stays portable between machines. Rows are split over onnxruntime's intra-op thread pool
// (KernelContext_ParallelFor) in chunks of at least kChunkElements outputs.
#include <math.h>
#include <string.h>

#include "ort_abi.h"

namespace {

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

LNSERVE_CLONES void ln_rows(const Step& s) { step_rows<false, true>(s); }
LNSERVE_CLONES void rms_rows(const Step& s) { step_rows<true, false>(s); }

// --- the onnxruntime side ----------------------------------------------------------------------------

struct Kernel {
  OrtApiSlots ort;
  bool rms;
  OrtParallelFor parallel_for;  // nullptr: onnxruntime < 1.17, rows run on the calling thread
};

constexpr int64_t kChunkElements = 4096;  // rows per pool task: at least this many outputs (measured)

struct Chunks {
  const Step* step;
  int64_t rows_per_chunk;
  bool rms;
};

// Rows [b0, b0 + n) of a step.
Step rows_of(const Step& s, int64_t b0, int64_t n) {
  const int64_t d = s.d;
  return Step{s.hu + b0 * 3 * d, s.a + b0 * 2 * d, s.c + b0 * d, s.h + b0 * d, s.s_ru, s.s_c, s.b_c,
              s.out + b0 * d,   n,                d};
}

void run_rows(const Step& s, bool rms) {
  if (rms) {
    rms_rows(s);
  } else {
    ln_rows(s);
  }
}

void run_chunk(void* data, size_t i) {
  const Chunks& c = *static_cast<const Chunks*>(data);
  const int64_t b0 = static_cast<int64_t>(i) * c.rows_per_chunk;
  const int64_t n = c.step->rows - b0 < c.rows_per_chunk ? c.step->rows - b0 : c.rows_per_chunk;
  run_rows(rows_of(*c.step, b0, n), c.rms);
}

Kernel g_kernels[2];  // [LnGruStep, RmsGruStep]; stateless apart from the API table, so never freed

constexpr size_t kMaxRank = 2;

// The dims of a tensor of rank <= 2, or false.
bool dims_of(const OrtApiSlots& ort, const OrtValue* v, int64_t* dims, size_t* rank) {
  OrtTensorTypeAndShapeInfo* info = nullptr;
  if (OrtStatus* st = ort.GetTensorTypeAndShape(v, &info)) {
    ort.ReleaseStatus(st);
    return false;
  }
  bool ok = true;
  if (OrtStatus* st = ort.GetDimensionsCount(info, rank)) {
    ort.ReleaseStatus(st);
    ok = false;
  } else if (*rank > kMaxRank) {
    ok = false;
  } else if (OrtStatus* st2 = ort.GetDimensions(info, dims, *rank)) {
    ort.ReleaseStatus(st2);
    ok = false;
  }
  ort.ReleaseTensorTypeAndShapeInfo(info);
  return ok;
}

bool input(const Kernel& k, OrtKernelContext* ctx, size_t i, const float** data, int64_t* dims,
           size_t* rank) {
  const OrtValue* v = nullptr;
  if (OrtStatus* st = k.ort.KernelContextGetInput(ctx, i, &v)) {
    k.ort.ReleaseStatus(st);
    return false;
  }
  void* p = nullptr;
  if (OrtStatus* st = k.ort.GetTensorMutableData(const_cast<OrtValue*>(v), &p)) {
    k.ort.ReleaseStatus(st);
    return false;
  }
  *data = static_cast<const float*>(p);
  return dims_of(k.ort, v, dims, rank);
}

bool shape_is(const int64_t* dims, size_t rank, int64_t d0, int64_t d1) {
  return d1 < 0 ? (rank == 1 && dims[0] == d0) : (rank == 2 && dims[0] == d0 && dims[1] == d1);
}

void compute(void* op_kernel, OrtKernelContext* ctx) {
  const Kernel& k = *static_cast<const Kernel*>(op_kernel);
  const size_t n_in = k.rms ? 6 : 7;
  const float* data[7] = {};
  int64_t dims[7][kMaxRank] = {};
  size_t ranks[7] = {};
  bool ok = true;
  for (size_t i = 0; i < n_in; ++i) ok = ok && input(k, ctx, i, &data[i], dims[i], &ranks[i]);
  // h (input 3) fixes B and d; the graph builder wires every other shape from them.
  const bool h_ok = ok && ranks[3] == 2;
  const int64_t rows = h_ok ? dims[3][0] : 0;
  const int64_t d = h_ok ? dims[3][1] : 0;
  const int64_t want[7][2] = {{rows, 3 * d}, {rows, 2 * d}, {rows, d}, {rows, d},
                              {2 * d, -1},   {d, -1},       {d, -1}};
  for (size_t i = 0; ok && i < n_in; ++i) ok = shape_is(dims[i], ranks[i], want[i][0], want[i][1]);
  const int64_t out_dims[2] = {rows, d};
  OrtValue* out = nullptr;
  if (OrtStatus* st = k.ort.KernelContextGetOutput(ctx, 0, out_dims, 2, &out)) {
    k.ort.ReleaseStatus(st);
    return;  // onnxruntime reports the missing output
  }
  void* p = nullptr;
  if (OrtStatus* st = k.ort.GetTensorMutableData(out, &p)) {
    k.ort.ReleaseStatus(st);
    return;
  }
  float* y = static_cast<float*>(p);
  if (!ok) {  // cannot happen with graphs from onnx_graph.fused; NaN rows make the engine refuse the batch
    for (int64_t i = 0; i < rows * d; ++i) y[i] = NAN;
    return;
  }
  const Step s{data[0], data[1], data[2], data[3], data[4], data[5], k.rms ? nullptr : data[6], y, rows, d};
  const int64_t per_chunk = d >= kChunkElements ? 1 : kChunkElements / (d > 0 ? d : 1);
  const int64_t n_chunks = (rows + per_chunk - 1) / per_chunk;
  if (k.parallel_for == nullptr || n_chunks < 2) {
    run_rows(s, k.rms);
    return;
  }
  Chunks chunks{&s, per_chunk, k.rms};
  if (OrtStatus* st = k.parallel_for(ctx, run_chunk, static_cast<size_t>(n_chunks), 0, &chunks)) {
    k.ort.ReleaseStatus(st);
    run_rows(s, k.rms);  // the pool refused: the whole step on this thread
  }
}

const char* ln_name(const OrtCustomOp*) { return "LnGruStep"; }
const char* rms_name(const OrtCustomOp*) { return "RmsGruStep"; }
const char* cpu_provider(const OrtCustomOp*) { return nullptr; }  // nullptr: the CPU provider
OrtElementTypeAbi float_type(const OrtCustomOp*, size_t) { return kOrtFloat; }
size_t ln_inputs(const OrtCustomOp*) { return 7; }
size_t rms_inputs(const OrtCustomOp*) { return 6; }
size_t one_output(const OrtCustomOp*) { return 1; }
void* ln_kernel(const OrtCustomOp*, const OrtApi*, const OrtKernelInfo*) { return &g_kernels[0]; }
void* rms_kernel(const OrtCustomOp*, const OrtApi*, const OrtKernelInfo*) { return &g_kernels[1]; }
void destroy(void*) {}
OrtIoCharacteristicAbi required(const OrtCustomOp*, size_t) { return kOrtRequired; }
OrtMemTypeAbi default_mem(const OrtCustomOp*, size_t) { return kOrtMemTypeDefault; }

const OrtCustomOp kLnOp = {kOrtApiVersion, ln_kernel,  ln_name,  cpu_provider, float_type, ln_inputs,
                           float_type,     one_output, compute,  destroy,      required,   required,
                           default_mem};
const OrtCustomOp kRmsOp = {kOrtApiVersion, rms_kernel, rms_name, cpu_provider, float_type, rms_inputs,
                            float_type,     one_output, compute,  destroy,      required,   required,
                            default_mem};

// The status slots answer as the ABI says: a cheap guard against a table this file misreads.
bool ort_abi_sane(const OrtApiSlots& ort) {
  const char* probe = "lnserve abi probe";
  OrtStatus* st = ort.CreateStatus(kOrtInvalidArgument, probe);
  if (st == nullptr) return false;
  const bool ok = ort.GetErrorCode(st) == kOrtInvalidArgument && strcmp(ort.GetErrorMessage(st), probe) == 0;
  ort.ReleaseStatus(st);
  return ok;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) OrtStatus* RegisterCustomOps(OrtSessionOptions* options,
                                                                               const OrtApiBase* base) {
  const OrtApi* api = base->GetApi(kOrtApiVersion);
  if (api == nullptr) return nullptr;  // cannot even report it; the session then fails on the unknown op
  const OrtApiSlots ort{api};
  if (!ort_abi_sane(ort)) return ort.CreateStatus(kOrtFail, "lnserve fused op: unexpected onnxruntime C ABI");
  // Once per process (thread-safe): later registrations must not rewrite kernels that sessions are running.
  static const bool kernels_set = [base, ort] {
    const OrtApi* api17 = base->GetApi(kOrtParallelForApiVersion);
    const OrtParallelFor pf = api17 ? OrtApiSlots{api17}.at<OrtParallelFor>(kKernelContextParallelFor) : nullptr;
    g_kernels[0] = Kernel{ort, false, pf};
    g_kernels[1] = Kernel{ort, true, pf};
    return true;
  }();
  (void)kernels_set;
  OrtCustomOpDomain* domain = nullptr;  // kept for the life of the process: sessions hold on to it
  if (OrtStatus* st = ort.CreateCustomOpDomain("ai.lnserve", &domain)) return st;
  if (OrtStatus* st = ort.CustomOpDomainAdd(domain, &kLnOp)) return st;
  if (OrtStatus* st = ort.CustomOpDomainAdd(domain, &kRmsOp)) return st;
  return ort.AddCustomOpDomain(options, domain);
}

// Which clone of the row loop the loader picks on this CPU (GCC's target_clones resolver checks the same
// levels in the same order), for benchmarks and `lnserve info` to say which code path ran.
extern "C" __attribute__((visibility("default"))) const char* LnserveFusedStepCodePath() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("x86-64-v4")) return "x86-64-v4 (AVX-512)";
  if (__builtin_cpu_supports("x86-64-v3")) return "x86-64-v3 (AVX2, FMA)";
  return "x86-64 baseline (SSE2)";
#else
  return "portable (no target clones)";
#endif
}
