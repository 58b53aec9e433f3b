// The engine's name for the process-wide span recorder (common/step_trace.h, where the model
// layer can use it too).
#ifndef DEEPINFER_ENGINE_STEP_TRACE_H_
#define DEEPINFER_ENGINE_STEP_TRACE_H_

#include "common/step_trace.h"

namespace deepinfer::engine {
using ::deepinfer::StepTrace;
using ::deepinfer::TraceSpan;
}  // namespace deepinfer::engine

#endif  // DEEPINFER_ENGINE_STEP_TRACE_H_
