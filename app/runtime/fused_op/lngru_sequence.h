// The whole-sequence ops of lngru_sequence.cc, registered by lngru_step.cc's RegisterCustomOps.
#pragma once
#include "ort_abi.h"

namespace lnserve {

extern const OrtCustomOp kLnSequenceOp;   // LnGruSequence
extern const OrtCustomOp kRmsSequenceOp;  // RmsGruSequence

// Called once per process, before the ops are added to a domain.
void init_sequence_kernels(const OrtApiSlots& ort, OrtParallelFor parallel_for);

}  // namespace lnserve
