// LoadModel(): the architecture registry (model.h). config.json "architectures"[0] picks the
// factory; each factory parses its own typed config and checkpoint.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "model/deepseek_v4.h"
#include "model/deepseek_v41.h"
#include "model/hf_config.h"
#include "model/llama.h"
#include "model/model.h"

namespace deepinfer::model {
namespace {

using Factory = absl::StatusOr<std::unique_ptr<CausalLM>> (*)(const std::string& dir,
                                                              const LoadOptions& options);

struct Architecture {
  const char* name;  // config.json "architectures" entry
  Factory factory;
};

const Architecture kArchitectures[] = {
    {"LlamaForCausalLM", LoadLlama},
    {"DeepseekV4ForCausalLM", LoadDeepseekV4},
    {"DeepseekV41ForCausalLM", LoadDeepseekV41},
};

std::string SupportedList() {
  std::vector<std::string> names;
  for (const Architecture& a : kArchitectures) names.emplace_back(a.name);
  return absl::StrJoin(names, ", ");
}

}  // namespace

absl::StatusOr<std::unique_ptr<CausalLM>> LoadModel(const std::string& dir,
                                                    const LoadOptions& options) {
  ASSIGN_OR_RETURN(HfConfig config, HfConfig::Load(dir));
  ASSIGN_OR_RETURN(std::string arch, config.Architecture());
  for (const Architecture& a : kArchitectures) {
    if (arch == a.name) return a.factory(dir, options);
  }
  return absl::UnimplementedError(absl::StrCat(config.source(), ": unsupported architecture '",
                                               arch, "' (supported: ", SupportedList(), ")"));
}

}  // namespace deepinfer::model
