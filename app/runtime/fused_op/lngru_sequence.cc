// A whole lngru / rlngru recurrence, input side included, as one onnxruntime custom op (domain ai.lnserve),
// for small cells:
//
//   LnGruSequence(x (T,B,n_in), lengths (B) int64, W (n_in,3d), b (3d), s_ih_ru (2d), s_ih_c (d),
//                 U (d,3d), s_hh_ru (2d), s_hh_c (d), b_ih_ru + b_hh_ru (2d), b_ih_c (d), b_hh_c (d)) -> h (B,d)
//   RmsGruSequence(the first nine inputs: the RMS cells have no norm biases)
//
// W is [W_ru | W_c], b is [b_ru | b_c] and U is [U_ru | U_c] (onnx_graph.fused.gru_sequence). A step is the
// input side a = norm1(x_t W_ru + b_ru) + b3, c = norm2(x_t W_c + b_c) (onnx_graph.gru.hoisted_inputs) and
// then the step op's maths (lngru_math.h). Each row runs from a zero state for its own length (clamped to
// [0, T]); h is its state after its last valid step, as the Scan graph's gather of step length-1 gives it
// (spec §2, §11). Padding steps are never computed.
//
// Why: a Scan iteration costs onnxruntime about 10 us of its own (a subgraph frame per step). For a large
// cell that is noise beside the step's GEMM, which MLAS does best, so those keep the Scan and the step op
// (lngru_step.cc). For a small one (the demo's d = 64 at a dozen rows: ~3 us of arithmetic a step) it is
// nearly all the time, and serving pays it on every request; so are the six nodes of the input side. Here
// both GEMMs (x_t W, h U) are this file's own register-blocked loop (4 rows x 16 columns of accumulators, a
// lone row 1 x 64), summed over k in ascending order, the same order on every CPU and for every batch (a
// row's result never depends on the other rows). Compiled per x86-64 level like the step op.
//
// Rows are split into groups that each run the whole recurrence: one pool task per group, none per step,
// and a group only when it has enough work to pay for a thread's wake-up (kGroupFlops).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "lngru_math.h"
#include "lngru_sequence.h"
#include "ort_abi.h"
#include "ort_kernel.h"

namespace {

using lnserve::cpu_provider;
using lnserve::default_mem;
using lnserve::destroy;
using lnserve::float_type;
using lnserve::Kernel;
using lnserve::one_output;
using lnserve::required;
using lnserve::Step;
using lnserve::step_rows;

constexpr int kRows = 4;   // rows per register block of the GEMM
constexpr int kCols = 16;  // columns per register block: one AVX-512 or two AVX2 registers per row
constexpr int64_t kGroupFlops = 4000000;  // a pool task's least work (~40 us); fewer rows stay on one thread

struct Sequence {
  const float* x;  // (T, B, n_in)
  const int64_t* lengths;  // (B)
  const float* w;  // (n_in, 3d): [W_ru | W_c]
  const float* b;  // (3d): [b_ru | b_c]
  const float* s_in_ru;  // (2d) norm1's gain
  const float* s_in_c;  // (d) norm2's gain
  const float* u;  // (d, 3d): [U_ru | U_c]
  const float* s_ru;  // (2d) norm3's gain
  const float* s_c;  // (d) norm4's gain
  const float* b_in_ru;  // (2d) norm1's bias plus norm3's; nullptr for RmsGruSequence (no norm biases)
  const float* b_in_c;  // (d) norm2's bias
  const float* b_c;  // (d) norm4's bias
  float* out;  // (B, d)
  int64_t steps, rows, n_in, d;
};

// Columns [j0, ...) of y (R, n) = x (R, k) @ w (k, n) in blocks of C * kCols, as far as whole blocks go; each
// output is summed over k in ascending order (one FMA per k), whatever R and C. Returns the first column left.
template <int R, int C>
LNSERVE_INLINE int64_t gemm_columns(const float* x, const float* w, float* y, int64_t k_dim, int64_t n,
                                    int64_t j0) {
  constexpr int kWidth = C * kCols;
  for (; j0 + kWidth <= n; j0 += kWidth) {
    float acc[R][kWidth];
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < kWidth; ++j) acc[r][j] = 0.0f;
    for (int64_t k = 0; k < k_dim; ++k) {
      const float* wk = w + k * n + j0;
      for (int r = 0; r < R; ++r) {
        const float xk = x[r * k_dim + k];
#pragma omp simd
        for (int j = 0; j < kWidth; ++j) acc[r][j] += xk * wk[j];
      }
    }
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < kWidth; ++j) y[r * n + j0 + j] = acc[r][j];
  }
  return j0;
}

// y (R, n) = x (R, k) @ w (k, n). Four independent accumulator registers either way (an FMA's latency is
// four of its issue slots): 4 rows x 16 columns, or for a lone row 1 x 64 columns.
template <int R>
LNSERVE_INLINE void gemm_block(const float* x, const float* w, float* y, int64_t k_dim, int64_t n) {
  int64_t j0 = R == 1 ? gemm_columns<1, 4>(x, w, y, k_dim, n, 0) : 0;
  j0 = gemm_columns<R, 1>(x, w, y, k_dim, n, j0);
  for (int r = 0; r < R; ++r) {  // the last n mod kCols columns
    for (int64_t j = j0; j < n; ++j) {
      float s = 0.0f;
      for (int64_t k = 0; k < k_dim; ++k) s += x[r * k_dim + k] * w[k * n + j];
      y[r * n + j] = s;
    }
  }
}

LNSERVE_INLINE void gemm_rows(const float* x, const float* w, float* y, int64_t rows, int64_t k_dim, int64_t n) {
  int64_t b = 0;
  for (; b + kRows <= rows; b += kRows) gemm_block<kRows>(x + b * k_dim, w, y + b * n, k_dim, n);
  for (; b < rows; ++b) gemm_block<1>(x + b * k_dim, w, y + b * n, k_dim, n);
}

// The input side of a step (onnx_graph.gru.hoisted_inputs): z = x W + b in place, then
// a = norm1(z[:2d]) (+ b1 + b3) and c = norm2(z[2d:]) (+ b2).
template <bool kRms, bool kBias>
LNSERVE_INLINE void input_rows(const Sequence& q, float* z, float* a, float* c, int64_t n) {
  const int64_t d = q.d;
  for (int64_t r = 0; r < n; ++r) {
    float* zr = z + r * 3 * d;
    float* ar = a + r * 2 * d;
    float* cr = c + r * d;
#pragma omp simd
    for (int64_t j = 0; j < 3 * d; ++j) zr[j] += q.b[j];
    float m1, i1, m2, i2;
    lnserve::norm_stats<kRms>(zr, 2 * d, &m1, &i1);
    lnserve::norm_stats<kRms>(zr + 2 * d, d, &m2, &i2);
#pragma omp simd
    for (int64_t j = 0; j < 2 * d; ++j) {
      ar[j] = (zr[j] - m1) * i1 * q.s_in_ru[j];
      if (kBias) ar[j] += q.b_in_ru[j];
    }
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) {
      cr[j] = (zr[2 * d + j] - m2) * i2 * q.s_in_c[j];
      if (kBias) cr[j] += q.b_in_c[j];
    }
  }
}

constexpr int64_t kScratchPerRowD = 11;  // z, a, c, hu, h, next: 3 + 2 + 1 + 3 + 1 + 1 floats per row and d

// Rows [b0, b0 + n) through every step; scratch holds kScratchPerRowD * n * d floats.
template <bool kRms, bool kBias>
LNSERVE_INLINE void run_group(const Sequence& q, int64_t b0, int64_t n, float* scratch) {
  const int64_t d = q.d, rows = q.rows;
  float* z = scratch;
  float* a = z + n * 3 * d;
  float* c = a + n * 2 * d;
  float* hu = c + n * d;
  float* h = hu + n * 3 * d;
  float* next = h + n * d;
  memset(h, 0, sizeof(float) * n * d);
  int64_t steps = 0;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t len = q.lengths[b0 + r];
    if (len > steps) steps = len < q.steps ? len : q.steps;
  }
  for (int64_t t = 0; t < steps; ++t) {
    gemm_rows(q.x + (t * rows + b0) * q.n_in, q.w, z, n, q.n_in, 3 * d);
    input_rows<kRms, kBias>(q, z, a, c, n);
    gemm_rows(h, q.u, hu, n, d, 3 * d);
    step_rows<kRms, kBias>(Step{hu, a, c, h, q.s_ru, q.s_c, q.b_c, next, n, d});
    for (int64_t r = 0; r < n; ++r) {  // a row past its length keeps its last valid state
      if (t >= q.lengths[b0 + r]) memcpy(next + r * d, h + r * d, sizeof(float) * d);
    }
    float* done = h;
    h = next;
    next = done;
  }
  memcpy(q.out + b0 * d, h, sizeof(float) * n * d);
}

LNSERVE_CLONES void ln_group(const Sequence& q, int64_t b0, int64_t n, float* scratch) {
  run_group<false, true>(q, b0, n, scratch);
}
LNSERVE_CLONES void rms_group(const Sequence& q, int64_t b0, int64_t n, float* scratch) {
  run_group<true, false>(q, b0, n, scratch);
}

// --- the onnxruntime side ----------------------------------------------------------------------------

Kernel g_kernels[2];  // [LnGruSequence, RmsGruSequence]; set once by init_sequence_kernels

struct Groups {
  const Sequence* q;
  int64_t rows_per_group;
  bool rms;
  std::atomic<bool> failed;  // a group's scratch could not be allocated: the caller writes NaN
};

bool run_rows(const Sequence& q, int64_t b0, int64_t n, bool rms) {
  float* scratch = static_cast<float*>(malloc(sizeof(float) * kScratchPerRowD * n * q.d));
  if (scratch == nullptr) return false;
  if (rms) {
    rms_group(q, b0, n, scratch);
  } else {
    ln_group(q, b0, n, scratch);
  }
  free(scratch);
  return true;
}

void run_group_task(void* data, size_t i) {
  Groups& g = *static_cast<Groups*>(data);
  const int64_t b0 = static_cast<int64_t>(i) * g.rows_per_group;
  const int64_t n = g.q->rows - b0 < g.rows_per_group ? g.q->rows - b0 : g.rows_per_group;
  if (!run_rows(*g.q, b0, n, g.rms)) g.failed.store(true);
}

void compute(void* op_kernel, OrtKernelContext* ctx) {
  const Kernel& k = *static_cast<const Kernel*>(op_kernel);
  using lnserve::input;
  using lnserve::shape_is;
  const size_t n_in = k.rms ? 9 : 12;
  const float* data[12] = {};
  const int64_t* lengths = nullptr;
  int64_t dims[12][3] = {};
  size_t ranks[12] = {};
  bool ok = true;
  for (size_t i = 0; i < n_in; ++i) {
    ok = ok && (i == 1 ? input(k, ctx, i, &lengths, dims[i], &ranks[i], 3)
                       : input(k, ctx, i, &data[i], dims[i], &ranks[i], 3));
  }
  // x (input 0) fixes T, B and n_in, U (input 6) fixes d; the graph builder wires the rest from them.
  ok = ok && ranks[0] == 3 && ranks[6] == 2;
  const int64_t steps = ok ? dims[0][0] : 0;
  const int64_t rows = ok ? dims[0][1] : 0;
  const int64_t width = ok ? dims[0][2] : 0;
  const int64_t d = ok ? dims[6][0] : 0;
  const int64_t want[12][2] = {{0, 0},      {rows, -1},  {width, 3 * d}, {3 * d, -1}, {2 * d, -1}, {d, -1},
                               {d, 3 * d},  {2 * d, -1}, {d, -1},        {2 * d, -1}, {d, -1},     {d, -1}};
  for (size_t i = 1; ok && i < n_in; ++i) ok = shape_is(dims[i], ranks[i], want[i][0], want[i][1]);
  float* y = lnserve::output_matrix(k, ctx, rows, d, ok);
  if (y == nullptr) return;  // no output (onnxruntime reports it), or NaN rows for inconsistent inputs
  if (rows == 0 || d == 0) return;
  const bool bias = !k.rms;
  const Sequence q{data[0], lengths, data[2], data[3], data[4], data[5], data[6], data[7], data[8],
                   bias ? data[9] : nullptr, bias ? data[10] : nullptr, bias ? data[11] : nullptr,
                   y, steps, rows, width, d};
  const int64_t row_flops = 6 * d * (width + d) * (steps > 0 ? steps : 1);  // the GEMMs', per row
  int64_t per_group = (kGroupFlops + row_flops - 1) / row_flops;
  per_group = (per_group + kRows - 1) / kRows * kRows;
  const int64_t n_groups = (rows + per_group - 1) / per_group;
  Groups groups{&q, per_group, k.rms, false};
  if (k.parallel_for == nullptr || n_groups < 2) {
    groups.failed = !run_rows(q, 0, rows, k.rms);
  } else if (OrtStatus* st = k.parallel_for(ctx, run_group_task, static_cast<size_t>(n_groups), 0, &groups)) {
    k.ort.ReleaseStatus(st);
    groups.failed = !run_rows(q, 0, rows, k.rms);  // the pool refused: every row on this thread
  }
  if (groups.failed.load()) lnserve::fill_nan(y, rows * d);
}

const char* ln_name(const OrtCustomOp*) { return "LnGruSequence"; }
const char* rms_name(const OrtCustomOp*) { return "RmsGruSequence"; }
OrtElementTypeAbi input_type(const OrtCustomOp*, size_t i) { return i == 1 ? kOrtInt64 : kOrtFloat; }
size_t ln_inputs(const OrtCustomOp*) { return 12; }
size_t rms_inputs(const OrtCustomOp*) { return 9; }
void* ln_kernel(const OrtCustomOp*, const OrtApi*, const OrtKernelInfo*) { return &g_kernels[0]; }
void* rms_kernel(const OrtCustomOp*, const OrtApi*, const OrtKernelInfo*) { return &g_kernels[1]; }

}  // namespace

namespace lnserve {

const OrtCustomOp kLnSequenceOp = {kOrtApiVersion, ln_kernel,  ln_name, cpu_provider, input_type, ln_inputs,
                                   float_type,     one_output, compute, destroy,      required,   required,
                                   default_mem};
const OrtCustomOp kRmsSequenceOp = {kOrtApiVersion, rms_kernel, rms_name, cpu_provider, input_type, rms_inputs,
                                    float_type,     one_output, compute,  destroy,      required,   required,
                                    default_mem};

void init_sequence_kernels(const OrtApiSlots& ort, OrtParallelFor parallel_for) {
  g_kernels[0] = Kernel{ort, false, parallel_for};
  g_kernels[1] = Kernel{ort, true, parallel_for};
}

}  // namespace lnserve
