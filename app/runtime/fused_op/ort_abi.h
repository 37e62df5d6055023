// The few parts of the onnxruntime C ABI that the fused LN-GRU step uses, declared here because the
// onnxruntime wheels ship no C headers.
//
// onnxruntime's C API is a table of function pointers (struct OrtApi) that only ever grows at the end, and a
// library asks for the table of one API version; so a slot's position never changes. The positions below are
// those of the public header onnxruntime_c_api.h (MIT licence, Microsoft), API version 13 (onnxruntime
// 1.13), counted from the top of struct OrtApi; any runtime >= 1.13 serves that table. RegisterCustomOps
// checks the status slots against the runtime before anything else uses the table (ort_abi_sane).
#pragma once
#include <stddef.h>
#include <stdint.h>

extern "C" {

constexpr uint32_t kOrtApiVersion = 13;
constexpr uint32_t kOrtParallelForApiVersion = 17;  // KernelContext_ParallelFor arrived in onnxruntime 1.17

struct OrtStatus;
struct OrtApi;  // opaque here: reached through OrtApiSlots
struct OrtValue;
struct OrtKernelInfo;
struct OrtKernelContext;
struct OrtSessionOptions;
struct OrtCustomOpDomain;
struct OrtTensorTypeAndShapeInfo;

enum OrtErrorCodeAbi : int { kOrtOk = 0, kOrtFail = 1, kOrtInvalidArgument = 2 };
enum OrtElementTypeAbi : int { kOrtFloat = 1, kOrtInt64 = 7 };  // ONNXTensorElementDataType
enum OrtIoCharacteristicAbi : int { kOrtRequired = 0 };
enum OrtMemTypeAbi : int { kOrtMemTypeDefault = 0 };

struct OrtApiBase {
  const OrtApi* (*GetApi)(uint32_t version);
  const char* (*GetVersionString)();
};

// Slot numbers in struct OrtApi (API version 13 layout).
enum OrtApiSlot : size_t {
  kCreateStatus = 0,
  kGetErrorCode = 1,
  kGetErrorMessage = 2,
  kCreateCustomOpDomain = 26,
  kCustomOpDomainAdd = 27,
  kAddCustomOpDomain = 28,
  kGetTensorMutableData = 51,
  kGetDimensionsCount = 61,
  kGetDimensions = 62,
  kGetTensorTypeAndShape = 65,
  kKernelContextGetInput = 90,
  kKernelContextGetOutput = 91,
  kReleaseStatus = 93,
  kReleaseTensorTypeAndShapeInfo = 99,
  kKernelContextParallelFor = 274,  // in the table of API version >= 17
};

// KernelContext_ParallelFor: fn(usr_data, i) for i < total on the session's intra-op thread pool.
using OrtParallelFor = OrtStatus* (*)(const OrtKernelContext* ctx, void (*fn)(void*, size_t), size_t total,
                                      size_t num_batch, void* usr_data);

// The OrtCustomOp struct of API version 13: ORT reads the fields a custom op's `version` declares.
struct OrtCustomOp {
  uint32_t version;
  void* (*CreateKernel)(const OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo* info);
  const char* (*GetName)(const OrtCustomOp* op);
  const char* (*GetExecutionProviderType)(const OrtCustomOp* op);
  OrtElementTypeAbi (*GetInputType)(const OrtCustomOp* op, size_t index);
  size_t (*GetInputTypeCount)(const OrtCustomOp* op);
  OrtElementTypeAbi (*GetOutputType)(const OrtCustomOp* op, size_t index);
  size_t (*GetOutputTypeCount)(const OrtCustomOp* op);
  void (*KernelCompute)(void* op_kernel, OrtKernelContext* context);
  void (*KernelDestroy)(void* op_kernel);
  OrtIoCharacteristicAbi (*GetInputCharacteristic)(const OrtCustomOp* op, size_t index);
  OrtIoCharacteristicAbi (*GetOutputCharacteristic)(const OrtCustomOp* op, size_t index);
  OrtMemTypeAbi (*GetInputMemoryType)(const OrtCustomOp* op, size_t index);
};

}  // extern "C"

// Typed access to one slot of the table.
struct OrtApiSlots {
  const OrtApi* api;

  template <typename Fn>
  Fn at(OrtApiSlot slot) const {
    return reinterpret_cast<Fn const*>(api)[slot];
  }

  OrtStatus* CreateStatus(OrtErrorCodeAbi code, const char* msg) const {
    return at<OrtStatus* (*)(OrtErrorCodeAbi, const char*)>(kCreateStatus)(code, msg);
  }
  OrtErrorCodeAbi GetErrorCode(const OrtStatus* s) const {
    return at<OrtErrorCodeAbi (*)(const OrtStatus*)>(kGetErrorCode)(s);
  }
  const char* GetErrorMessage(const OrtStatus* s) const {
    return at<const char* (*)(const OrtStatus*)>(kGetErrorMessage)(s);
  }
  void ReleaseStatus(OrtStatus* s) const { at<void (*)(OrtStatus*)>(kReleaseStatus)(s); }
  OrtStatus* CreateCustomOpDomain(const char* domain, OrtCustomOpDomain** out) const {
    return at<OrtStatus* (*)(const char*, OrtCustomOpDomain**)>(kCreateCustomOpDomain)(domain, out);
  }
  OrtStatus* CustomOpDomainAdd(OrtCustomOpDomain* domain, const OrtCustomOp* op) const {
    return at<OrtStatus* (*)(OrtCustomOpDomain*, const OrtCustomOp*)>(kCustomOpDomainAdd)(domain, op);
  }
  OrtStatus* AddCustomOpDomain(OrtSessionOptions* options, OrtCustomOpDomain* domain) const {
    return at<OrtStatus* (*)(OrtSessionOptions*, OrtCustomOpDomain*)>(kAddCustomOpDomain)(options, domain);
  }
  OrtStatus* GetTensorMutableData(OrtValue* value, void** out) const {
    return at<OrtStatus* (*)(OrtValue*, void**)>(kGetTensorMutableData)(value, out);
  }
  OrtStatus* GetTensorTypeAndShape(const OrtValue* value, OrtTensorTypeAndShapeInfo** out) const {
    return at<OrtStatus* (*)(const OrtValue*, OrtTensorTypeAndShapeInfo**)>(kGetTensorTypeAndShape)(value, out);
  }
  OrtStatus* GetDimensionsCount(const OrtTensorTypeAndShapeInfo* info, size_t* out) const {
    return at<OrtStatus* (*)(const OrtTensorTypeAndShapeInfo*, size_t*)>(kGetDimensionsCount)(info, out);
  }
  OrtStatus* GetDimensions(const OrtTensorTypeAndShapeInfo* info, int64_t* dims, size_t n) const {
    return at<OrtStatus* (*)(const OrtTensorTypeAndShapeInfo*, int64_t*, size_t)>(kGetDimensions)(info, dims, n);
  }
  void ReleaseTensorTypeAndShapeInfo(OrtTensorTypeAndShapeInfo* info) const {
    at<void (*)(OrtTensorTypeAndShapeInfo*)>(kReleaseTensorTypeAndShapeInfo)(info);
  }
  OrtStatus* KernelContextGetInput(const OrtKernelContext* ctx, size_t i, const OrtValue** out) const {
    return at<OrtStatus* (*)(const OrtKernelContext*, size_t, const OrtValue**)>(kKernelContextGetInput)(ctx, i, out);
  }
  OrtStatus* KernelContextGetOutput(OrtKernelContext* ctx, size_t i, const int64_t* dims, size_t n,
                                    OrtValue** out) const {
    return at<OrtStatus* (*)(OrtKernelContext*, size_t, const int64_t*, size_t, OrtValue**)>(
        kKernelContextGetOutput)(ctx, i, dims, n, out);
  }
};
