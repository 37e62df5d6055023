// The onnxruntime side shared by the custom ops: a kernel's API table and reading an input's data and dims.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "ort_abi.h"

namespace lnserve {

struct Kernel {
  OrtApiSlots ort;
  bool rms;
  OrtParallelFor parallel_for;  // nullptr: onnxruntime < 1.17, rows run on the calling thread
};

constexpr size_t kMaxRank = 2;

// The dims of a tensor of rank <= max_rank (dims holds that many), or false.
inline bool dims_of(const OrtApiSlots& ort, const OrtValue* v, int64_t* dims, size_t* rank,
                    size_t max_rank = kMaxRank) {
  OrtTensorTypeAndShapeInfo* info = nullptr;
  if (OrtStatus* st = ort.GetTensorTypeAndShape(v, &info)) {
    ort.ReleaseStatus(st);
    return false;
  }
  bool ok = true;
  if (OrtStatus* st = ort.GetDimensionsCount(info, rank)) {
    ort.ReleaseStatus(st);
    ok = false;
  } else if (*rank > max_rank) {
    ok = false;
  } else if (OrtStatus* st2 = ort.GetDimensions(info, dims, *rank)) {
    ort.ReleaseStatus(st2);
    ok = false;
  }
  ort.ReleaseTensorTypeAndShapeInfo(info);
  return ok;
}

// Input i's data (of the element type the op declared for it, which onnxruntime checks) and dims.
template <typename T>
inline bool input(const Kernel& k, OrtKernelContext* ctx, size_t i, const T** data, int64_t* dims, size_t* rank,
                  size_t max_rank = kMaxRank) {
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
  *data = static_cast<const T*>(p);
  return dims_of(k.ort, v, dims, rank, max_rank);
}

inline bool shape_is(const int64_t* dims, size_t rank, int64_t d0, int64_t d1) {
  return d1 < 0 ? (rank == 1 && dims[0] == d0) : (rank == 2 && dims[0] == d0 && dims[1] == d1);
}

// An op cannot raise through the C ABI: inconsistent inputs or a failed allocation give NaN rows.
inline void fill_nan(float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = __builtin_nanf("");
}

// Output 0 as a (rows, d) float tensor to write, or nullptr: when it cannot be had (onnxruntime then reports
// the missing output), or when the inputs were not ``consistent`` (never with graphs from onnx_graph.fused),
// after filling it with NaN rows, which make the engine refuse the batch.
inline float* output_matrix(const Kernel& k, OrtKernelContext* ctx, int64_t rows, int64_t d, bool consistent) {
  const int64_t out_dims[2] = {rows, d};
  OrtValue* out = nullptr;
  if (OrtStatus* st = k.ort.KernelContextGetOutput(ctx, 0, out_dims, 2, &out)) {
    k.ort.ReleaseStatus(st);
    return nullptr;
  }
  void* p = nullptr;
  if (OrtStatus* st = k.ort.GetTensorMutableData(out, &p)) {
    k.ort.ReleaseStatus(st);
    return nullptr;
  }
  float* y = static_cast<float*>(p);
  if (!consistent) {
    fill_nan(y, rows * d);
    return nullptr;
  }
  return y;
}


// The OrtCustomOp slots that every op here answers alike.
inline const char* cpu_provider(const OrtCustomOp*) { return nullptr; }  // nullptr: the CPU provider
inline OrtElementTypeAbi float_type(const OrtCustomOp*, size_t) { return kOrtFloat; }
inline size_t one_output(const OrtCustomOp*) { return 1; }
inline void destroy(void*) {}
inline OrtIoCharacteristicAbi required(const OrtCustomOp*, size_t) { return kOrtRequired; }
inline OrtMemTypeAbi default_mem(const OrtCustomOp*, size_t) { return kOrtMemTypeDefault; }

}  // namespace lnserve
