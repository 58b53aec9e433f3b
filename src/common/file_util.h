// Whole-file reads for small text inputs (config.json, tokenizer.json, schema files).
// Large weight files are memory-mapped by model/checkpoint instead.
#ifndef DEEPINFER_COMMON_FILE_UTIL_H_
#define DEEPINFER_COMMON_FILE_UTIL_H_

#include <string>

#include "absl/status/statusor.h"

namespace deepinfer {

// Returns the bytes of the file at `path`. Errors: NotFound "cannot open PATH" when it cannot
// be opened (missing, a directory, no permission), DataLoss "error reading PATH" on a read error.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace deepinfer

#endif  // DEEPINFER_COMMON_FILE_UTIL_H_
