// Status helpers on absl::Status / absl::StatusOr.
//
// Every fallible function in deepinfer returns absl::Status or absl::StatusOr<T> with a canonical
// code chosen by its documented meaning (ARCHITECTURE.md §8, STYLE.md habit 2):
//   InvalidArgument    - the caller's input is malformed (bad flag, bad JSON, bad tensor shape)
//   NotFound           - a named thing (file, tensor, model, key) does not exist
//   FailedPrecondition - the input is well-formed but the system is not in a state to take it
//   OutOfRange         - a length/position beyond a limit (context length, file size)
//   ResourceExhausted  - capacity (KV blocks, queue, memory budget)
//   Unimplemented      - a recognised but unsupported feature (architecture, tokenizer component)
//   DataLoss           - corrupt stored bytes (checksum, truncated file)
//   Internal           - a bug; should not happen
// Callers propagate with RETURN_IF_ERROR / ASSIGN_OR_RETURN. Nothing throws across modules.
#ifndef DEEPINFER_COMMON_STATUS_H_
#define DEEPINFER_COMMON_STATUS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define DEEPINFER_STATUS_CONCAT_INNER_(a, b) a##b
#define DEEPINFER_STATUS_CONCAT_(a, b) DEEPINFER_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status); returns it from the enclosing function if not OK.
#define RETURN_IF_ERROR(expr)                                  \
  do {                                                         \
    ::absl::Status _deepinfer_status = (expr);                 \
    if (ABSL_PREDICT_FALSE(!_deepinfer_status.ok())) {         \
      return _deepinfer_status;                                \
    }                                                          \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr): evaluates `expr` (an absl::StatusOr<T>); on error returns its
// status, else moves the value into `lhs` (which may be a declaration: `auto x`).
#define ASSIGN_OR_RETURN(lhs, expr) \
  DEEPINFER_ASSIGN_OR_RETURN_IMPL_(DEEPINFER_STATUS_CONCAT_(_deepinfer_sor_, __LINE__), lhs, expr)

#define DEEPINFER_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                     \
  if (ABSL_PREDICT_FALSE(!tmp.ok())) {                   \
    return std::move(tmp).status();                      \
  }                                                      \
  lhs = std::move(tmp).value()

namespace deepinfer {

// Returns `status` with `context + ": "` prepended to its message (same code). OK stays OK.
// Used to name the file/tensor/flag an error concerns as it propagates upward.
absl::Status Annotate(const absl::Status& status, std::string_view context);

}  // namespace deepinfer

#endif  // DEEPINFER_COMMON_STATUS_H_
