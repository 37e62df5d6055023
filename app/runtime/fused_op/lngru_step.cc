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
// The maths are in lngru_math.h, shared with the whole-sequence op (lngru_sequence.cc). The row loop is
// compiled for AVX-512, AVX2+FMA and the x86-64 baseline and picked at load time (GCC target_clones), so
// the library stays portable between machines. Rows are split over onnxruntime's intra-op thread pool
// (KernelContext_ParallelFor) in chunks of at least kChunkElements outputs.
#include <math.h>
#include <string.h>

#include "lngru_math.h"
#include "lngru_sequence.h"
#include "ort_abi.h"
#include "ort_kernel.h"

namespace {

using lnserve::cpu_provider;
using lnserve::default_mem;
using lnserve::destroy;
using lnserve::float_type;
using lnserve::input;
using lnserve::Kernel;
using lnserve::kMaxRank;
using lnserve::one_output;
using lnserve::required;
using lnserve::shape_is;
using lnserve::Step;
using lnserve::step_rows;

LNSERVE_CLONES void ln_rows(const Step& s) { step_rows<false, true>(s); }
LNSERVE_CLONES void rms_rows(const Step& s) { step_rows<true, false>(s); }

// --- the onnxruntime side ----------------------------------------------------------------------------

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
  float* y = lnserve::output_matrix(k, ctx, rows, d, ok);
  if (y == nullptr) return;  // no output (onnxruntime reports it), or NaN rows for inconsistent inputs
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
size_t ln_inputs(const OrtCustomOp*) { return 7; }
size_t rms_inputs(const OrtCustomOp*) { return 6; }
void* ln_kernel(const OrtCustomOp*, const OrtApi*, const OrtKernelInfo*) { return &g_kernels[0]; }
void* rms_kernel(const OrtCustomOp*, const OrtApi*, const OrtKernelInfo*) { return &g_kernels[1]; }

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
    lnserve::init_sequence_kernels(ort, pf);
    return true;
  }();
  (void)kernels_set;
  OrtCustomOpDomain* domain = nullptr;  // kept for the life of the process: sessions hold on to it
  if (OrtStatus* st = ort.CreateCustomOpDomain("ai.lnserve", &domain)) return st;
  if (OrtStatus* st = ort.CustomOpDomainAdd(domain, &kLnOp)) return st;
  if (OrtStatus* st = ort.CustomOpDomainAdd(domain, &kRmsOp)) return st;
  if (OrtStatus* st = ort.CustomOpDomainAdd(domain, &lnserve::kLnSequenceOp)) return st;
  if (OrtStatus* st = ort.CustomOpDomainAdd(domain, &lnserve::kRmsSequenceOp)) return st;
  return ort.AddCustomOpDomain(options, domain);
}

// The ops this library holds: 1, the step ops; 2, the whole-sequence ops as well. The loader refuses a library
// older than the graphs it builds (a stale build in a development tree).
extern "C" __attribute__((visibility("default"))) int LnserveFusedOpVersion() { return 2; }

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
