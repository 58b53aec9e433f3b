// deepinfer._deepinfer: the pybind11 extension under the `deepinfer` Python package (issue #28).
// Thin by design: it converts Python values to the C++ types of src/python/*.h and back, maps
// absl::Status codes to Python exceptions (InvalidArgument / OutOfRange -> ValueError,
// NotFound -> FileNotFoundError, FailedPrecondition -> RuntimeError, ...; the message is the
// Status message) and releases the GIL around everything that waits on the engine. Argument
// types are checked by the pure-Python layer (python/deepinfer/), which raises TypeError.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/status.h"
#include "protocol/output_parser.h"
#include "python/offline_llm.h"
#include "python/request_encoder.h"
#include "python/sampling_spec.h"

#ifndef DEEPINFER_BINARY_DIR
#define DEEPINFER_BINARY_DIR ""
#endif
#ifndef DEEPINFER_SOURCE_DIR
#define DEEPINFER_SOURCE_DIR ""
#endif

namespace py = pybind11;

namespace deepinfer::python {
namespace {

// Raises the Python exception for a non-OK status (the message is the Status message).
[[noreturn]] void Raise(const absl::Status& s) {
  const std::string m(s.message());
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      throw py::value_error(m);
    case absl::StatusCode::kNotFound:
      PyErr_SetString(PyExc_FileNotFoundError, m.c_str());
      throw py::error_already_set();
    case absl::StatusCode::kResourceExhausted:
      PyErr_SetString(PyExc_MemoryError, m.c_str());
      throw py::error_already_set();
    case absl::StatusCode::kDeadlineExceeded:
      PyErr_SetString(PyExc_TimeoutError, m.c_str());
      throw py::error_already_set();
    case absl::StatusCode::kUnimplemented:
      PyErr_SetString(PyExc_NotImplementedError, m.c_str());
      throw py::error_already_set();
    default:
      throw std::runtime_error(m);
  }
}

template <typename T>
T Unwrap(absl::StatusOr<T> v) {
  if (!v.ok()) Raise(v.status());
  return *std::move(v);
}

py::dict LogprobDict(const engine::TokenLogprob& t) {
  py::dict d;
  d["token_id"] = t.token_id;
  d["logprob"] = t.logprob;
  d["rank"] = t.rank;
  py::list top;
  for (const auto& [id, lp] : t.top) top.append(py::make_tuple(id, lp));
  d["top"] = top;
  return d;
}

py::dict RequestDict(const RequestState& r, const OfflineBatch& batch, bool want_logprobs,
                     bool want_prompt_logprobs) {
  py::dict d;
  d["request_id"] = r.request_id;
  d["prompt"] = r.prompt.has_value() ? py::object(py::str(*r.prompt)) : py::object(py::none());
  d["prompt_token_ids"] = r.prompt_token_ids;
  d["num_cached_tokens"] = r.num_cached_tokens;
  d["finished"] = r.finished;
  if (want_prompt_logprobs) {
    py::list pl;
    for (const auto& t : r.prompt_logprobs) pl.append(LogprobDict(t));
    d["prompt_logprobs"] = pl;
  } else {
    d["prompt_logprobs"] = py::none();
  }
  py::list outs;
  for (const CompletionState& c : r.outputs) {
    py::dict o;
    o["index"] = c.index;
    o["text"] = py::bytes(c.text).attr("decode")("utf-8", "replace");
    o["token_ids"] = c.token_ids;
    if (want_logprobs) {
      py::list lps;
      for (const auto& t : c.logprobs) lps.append(LogprobDict(t));
      o["logprobs"] = lps;
      o["cumulative_logprob"] = c.cumulative_logprob;
    } else {
      o["logprobs"] = py::none();
      o["cumulative_logprob"] = py::none();
    }
    o["finish_reason"] =
        c.finish_reason.empty() ? py::object(py::none()) : py::object(py::str(c.finish_reason));
    o["stop_reason"] =
        c.stop_reason.empty() ? py::object(py::none()) : py::object(py::str(c.stop_reason));
    o["reasoning_content"] = py::bytes(c.reasoning).attr("decode")("utf-8", "replace");
    py::list calls;
    for (const protocol::ParsedToolCall& t : c.tool_calls) {
      py::dict tc;
      tc["id"] = t.id;
      tc["name"] = t.name;
      tc["arguments"] = t.arguments;
      tc["valid"] = t.valid;
      tc["error"] = t.error;
      calls.append(tc);
    }
    o["tool_calls"] = calls;
    o["error"] = c.error;
    outs.append(o);
  }
  d["outputs"] = outs;
  return d;
}

// Batch wrapper that knows which optional fields its requests asked for.
struct PyBatch {
  std::unique_ptr<OfflineBatch> batch;
  std::vector<bool> logprobs;
  std::vector<bool> prompt_logprobs;
};

PyBatch MakeBatch(absl::StatusOr<std::unique_ptr<OfflineBatch>> b,
                  const std::vector<ResolvedParams>& params, size_t n) {
  PyBatch pb;
  pb.batch = Unwrap(std::move(b));
  for (size_t i = 0; i < n; ++i) {
    const ResolvedParams& p = params.size() == 1 ? params[0] : params[i];
    pb.logprobs.push_back(p.engine.logprobs >= 0);
    pb.prompt_logprobs.push_back(p.engine.prompt_logprobs >= 0);
  }
  return pb;
}

py::dict EventDict(const protocol::OutputEvent& e) {
  using Type = protocol::OutputEvent::Type;
  py::dict d;
  switch (e.type) {
    case Type::kReasoningDelta:
      d["type"] = "reasoning";
      d["text"] = e.text;
      break;
    case Type::kContentDelta:
      d["type"] = "content";
      d["text"] = e.text;
      break;
    case Type::kToolCallStart:
      d["type"] = "tool_call_start";
      d["index"] = e.tool_index;
      d["id"] = e.tool_call_id;
      d["name"] = e.tool_name;
      break;
    case Type::kToolCallArguments:
      d["type"] = "tool_call_arguments";
      d["index"] = e.tool_index;
      d["text"] = e.text;
      break;
    case Type::kToolCallEnd:
      d["type"] = "tool_call_end";
      d["index"] = e.tool_index;
      d["valid"] = e.valid;
      d["error"] = e.error;
      break;
    case Type::kFinish:
      d["type"] = "finish";
      d["finish_reason"] = std::string(protocol::FinishReasonName(e.finish_reason));
      d["stop_sequence"] = e.stop_sequence;
      d["error"] = e.error;
      break;
  }
  return d;
}

py::list EventList(const std::vector<protocol::OutputEvent>& events) {
  py::list l;
  for (const auto& e : events) l.append(EventDict(e));
  return l;
}

const char* StartName(protocol::ParserStart s) {
  switch (s) {
    case protocol::ParserStart::kReasoning:
      return "reasoning";
    case protocol::ParserStart::kAnswer:
      return "answer";
    case protocol::ParserStart::kToolCalls:
      return "tool_calls";
    case protocol::ParserStart::kToolArguments:
      return "tool_arguments";
  }
  return "answer";
}

protocol::ParserStart ParseStart(const std::string& s) {
  if (s == "reasoning") return protocol::ParserStart::kReasoning;
  if (s == "answer") return protocol::ParserStart::kAnswer;
  if (s == "tool_calls") return protocol::ParserStart::kToolCalls;
  if (s == "tool_arguments") return protocol::ParserStart::kToolArguments;
  throw py::value_error(
      "start must be 'reasoning', 'answer', 'tool_calls' or 'tool_arguments', got '" + s + "'");
}

// Owns the encoder (and through it the tokenizer) a parser reads.
struct PyEncoder {
  std::shared_ptr<RequestEncoder> encoder;
};

struct PyParser {
  std::shared_ptr<RequestEncoder> encoder;  // keeps the tokenizer alive
  std::unique_ptr<protocol::OutputParser> parser;
};

}  // namespace
}  // namespace deepinfer::python

// At global scope: the module's init function must have C linkage and no namespace.
PYBIND11_MODULE(_deepinfer, m) {
  using namespace deepinfer;          // NOLINT: the binding table names many types
  using namespace deepinfer::python;  // NOLINT
  m.doc() = "deepinfer C++ bindings (use the `deepinfer` package, not this module directly)";
  m.attr("binary_dir") = DEEPINFER_BINARY_DIR;
  m.attr("source_dir") = DEEPINFER_SOURCE_DIR;

  py::class_<SamplingSpec>(m, "SamplingSpec")
      .def(py::init<>())
      .def_readwrite("temperature", &SamplingSpec::temperature)
      .def_readwrite("top_p", &SamplingSpec::top_p)
      .def_readwrite("top_k", &SamplingSpec::top_k)
      .def_readwrite("min_p", &SamplingSpec::min_p)
      .def_readwrite("max_tokens", &SamplingSpec::max_tokens)
      .def_readwrite("min_tokens", &SamplingSpec::min_tokens)
      .def_readwrite("presence_penalty", &SamplingSpec::presence_penalty)
      .def_readwrite("frequency_penalty", &SamplingSpec::frequency_penalty)
      .def_readwrite("repetition_penalty", &SamplingSpec::repetition_penalty)
      .def_readwrite("n", &SamplingSpec::n)
      .def_readwrite("logprobs", &SamplingSpec::logprobs)
      .def_readwrite("prompt_logprobs", &SamplingSpec::prompt_logprobs)
      .def_readwrite("seed", &SamplingSpec::seed)
      .def_readwrite("seq_seed", &SamplingSpec::seq_seed)
      .def_readwrite("ignore_eos", &SamplingSpec::ignore_eos)
      .def_readwrite("skip_special_tokens", &SamplingSpec::skip_special_tokens)
      .def_readwrite("stop", &SamplingSpec::stop)
      .def_readwrite("stop_token_ids", &SamplingSpec::stop_token_ids)
      .def_readwrite("so_schema_type", &SamplingSpec::so_schema_type)
      .def_readwrite("so_schema", &SamplingSpec::so_schema)
      .def_readwrite("so_flexible_whitespace", &SamplingSpec::so_flexible_whitespace);

  py::class_<ResolvedParams>(m, "ResolvedParams")
      .def_property_readonly("temperature",
                             [](const ResolvedParams& p) { return p.engine.temperature; })
      .def_property_readonly("top_p", [](const ResolvedParams& p) { return p.engine.top_p; })
      .def_property_readonly("top_k", [](const ResolvedParams& p) { return p.engine.top_k; })
      .def_property_readonly("max_tokens",
                             [](const ResolvedParams& p) { return p.engine.max_tokens; })
      .def_property_readonly("seed", [](const ResolvedParams& p) { return p.engine.seed; });

  py::class_<GenerationDefaults>(m, "GenerationDefaults")
      .def_readonly("temperature", &GenerationDefaults::temperature)
      .def_readonly("top_p", &GenerationDefaults::top_p)
      .def_readonly("top_k", &GenerationDefaults::top_k)
      .def_readonly("min_p", &GenerationDefaults::min_p)
      .def_readonly("repetition_penalty", &GenerationDefaults::repetition_penalty)
      .def_readonly("max_tokens", &GenerationDefaults::max_tokens);

  // Validates and resolves a spec (ValueError naming the argument).
  m.def(
      "resolve_sampling",
      [](const SamplingSpec& spec, const GenerationDefaults* defaults) {
        return Unwrap(ResolveSamplingSpec(spec, defaults ? *defaults : GenerationDefaults{}));
      },
      py::arg("spec"), py::arg("defaults") = nullptr);

  py::class_<OfflineLLMOptions>(m, "LLMOptions")
      .def(py::init<>())
      .def_readwrite("model", &OfflineLLMOptions::model)
      .def_readwrite("kv_memory_bytes", &OfflineLLMOptions::kv_memory_bytes)
      .def_readwrite("max_num_seqs", &OfflineLLMOptions::max_num_seqs)
      .def_readwrite("max_num_batched_tokens", &OfflineLLMOptions::max_num_batched_tokens)
      .def_readwrite("enable_prefix_caching", &OfflineLLMOptions::enable_prefix_caching)
      .def_readwrite("async_scheduling", &OfflineLLMOptions::async_scheduling)
      .def_readwrite("compile_threads", &OfflineLLMOptions::compile_threads)
      .def_readwrite("fp32_activations", &OfflineLLMOptions::fp32_activations);

  py::class_<PyBatch>(m, "Batch")
      .def(
          "poll",
          [](PyBatch& b, double timeout_s) {
            absl::StatusOr<std::vector<int>> r;
            {
              py::gil_scoped_release release;
              r = b.batch->Poll(std::chrono::nanoseconds(static_cast<int64_t>(timeout_s * 1e9)));
            }
            return Unwrap(std::move(r));
          },
          py::arg("timeout_s"),
          "Waits up to timeout_s for outputs; returns changed request indices.")
      .def("abort",
           [](PyBatch& b) {
             py::gil_scoped_release release;
             b.batch->Abort();
           })
      .def("finished", [](const PyBatch& b) { return b.batch->finished(); })
      .def("size", [](const PyBatch& b) { return b.batch->requests().size(); })
      .def("request", [](const PyBatch& b, size_t i) {
        if (i >= b.batch->requests().size()) throw py::index_error("request index out of range");
        return RequestDict(b.batch->requests()[i], *b.batch, b.logprobs[i], b.prompt_logprobs[i]);
      });

  py::class_<OfflineLLM, std::shared_ptr<OfflineLLM>>(m, "LLM")
      .def(py::init([](const OfflineLLMOptions& o) {
        absl::StatusOr<std::shared_ptr<OfflineLLM>> llm;
        {
          py::gil_scoped_release release;
          llm = OfflineLLM::Create(o);
        }
        return Unwrap(std::move(llm));
      }))
      .def_property_readonly("generation_defaults", &OfflineLLM::generation_defaults)
      .def_property_readonly("model_type",
                             [](const OfflineLLM& l) { return l.model_info().model_type; })
      .def_property_readonly("vocab_size",
                             [](const OfflineLLM& l) { return l.model_info().vocab_size; })
      .def_property_readonly("max_model_len",
                             [](const OfflineLLM& l) { return l.model_info().max_context; })
      .def_property_readonly("has_chat_template",
                             [](const OfflineLLM& l) { return l.chat_encoder() != nullptr; })
      .def("encode",
           [](const OfflineLLM& l, const std::string& text) {
             return Unwrap(l.PromptIds(PromptInput{text, {}}));
           })
      .def(
          "decode",
          [](const OfflineLLM& l, const std::vector<int32_t>& ids, bool skip_special) {
            for (int32_t id : ids) {
              if (id < 0 || id >= l.tokenizer().vocab_size()) {
                throw py::value_error("token_ids: id " + std::to_string(id) +
                                      " is outside the vocabulary");
              }
            }
            return py::bytes(l.tokenizer().Decode(ids, skip_special))
                .attr("decode")("utf-8", "replace");
          },
          py::arg("token_ids"), py::arg("skip_special_tokens") = true)
      .def("stats",
           [](const OfflineLLM& l) {
             const engine::EngineStats s = l.Stats();
             py::dict d;
             d["num_running"] = s.num_running;
             d["num_waiting"] = s.num_waiting;
             d["kv_blocks_used"] = s.kv_blocks_used;
             d["kv_blocks_total"] = s.kv_blocks_total;
             d["state_slots_used"] = s.state_slots_used;
             d["state_slots_total"] = s.state_slots_total;
             d["prefix_cache_blocks"] = s.prefix_cache_blocks;
             d["num_finished_requests"] = s.num_finished_requests;
             d["num_preemptions"] = s.num_preemptions;
             d["total_prompt_tokens"] = s.total_prompt_tokens;
             d["total_output_tokens"] = s.total_output_tokens;
             return d;
           })
      .def("start",
           [](OfflineLLM& l, const std::vector<py::object>& prompts,
              const std::vector<ResolvedParams>& params) {
             std::vector<PromptInput> in;
             for (const py::object& p : prompts) {
               PromptInput pi;
               if (py::isinstance<py::str>(p)) {
                 pi.text = p.cast<std::string>();
               } else {
                 pi.token_ids = p.cast<std::vector<int32_t>>();
               }
               in.push_back(std::move(pi));
             }
             absl::StatusOr<std::unique_ptr<OfflineBatch>> b;
             {
               py::gil_scoped_release release;
               b = l.Start(in, params);
             }
             return MakeBatch(std::move(b), params, in.size());
           })
      .def("start_chat",
           [](OfflineLLM& l, const std::vector<std::string>& bodies,
              const std::vector<ResolvedParams>& params) {
             absl::StatusOr<std::unique_ptr<OfflineBatch>> b;
             {
               py::gil_scoped_release release;
               b = l.StartChat(bodies, params);
             }
             return MakeBatch(std::move(b), params, bodies.size());
           })
      .def("protocol_encoder", [](std::shared_ptr<OfflineLLM> l) {
        if (l->chat_encoder() == nullptr) {
          throw std::runtime_error("this model has no DeepSeek chat template");
        }
        // Aliasing shared_ptr: the encoder lives as long as the LLM that owns it.
        return PyEncoder{
            std::shared_ptr<RequestEncoder>(l, const_cast<RequestEncoder*>(l->chat_encoder()))};
      });

  py::class_<PyEncoder>(m, "RequestEncoder")
      .def(py::init([](const std::string& dir) {
             absl::StatusOr<std::unique_ptr<RequestEncoder>> e;
             {
               py::gil_scoped_release release;
               e = RequestEncoder::FromDirectory(dir);
             }
             return PyEncoder{std::shared_ptr<RequestEncoder>(Unwrap(std::move(e)))};
           }),
           py::arg("model_dir"))
      .def(
          "encode",
          [](const PyEncoder& e, const std::string& api, const std::string& body) {
            const RequestApi a = Unwrap(ParseRequestApi(api));
            absl::StatusOr<EncodedRequest> r;
            {
              py::gil_scoped_release release;
              r = e.encoder->Encode(a, body);
            }
            EncodedRequest enc = Unwrap(std::move(r));
            py::dict d;
            d["prompt_token_ids"] = enc.prompt_token_ids;
            d["prompt_text"] = enc.prompt.Text();
            d["thinking"] = enc.thinking;
            d["start"] = StartName(enc.prompt.start);
            d["forced_tool_name"] = enc.prompt.forced_tool_name;
            d["stop"] = enc.parser_options.stop;
            d["declared_tools"] =
                enc.parser_options.declared_tools.value_or(std::vector<std::string>{});
            d["constraint"] =
                enc.constraint.has_value()
                    ? py::object(py::str(enc.constraint->kind ==
                                                 structured::ConstraintSpec::Kind::kToolCalls
                                             ? "tool_calls"
                                             : "response_format"))
                    : py::object(py::none());
            return d;
          },
          py::arg("api"), py::arg("body"))
      .def("encode_text",
           [](const PyEncoder& e, const std::string& text) {
             return e.encoder->tokenizer().EncodeText(text);
           })
      .def("token_id",
           [](const PyEncoder& e, const std::string& token) -> py::object {
             std::optional<int32_t> id = e.encoder->tokenizer().TokenId(token);
             if (!id.has_value()) return py::none();
             return py::int_(*id);
           })
      .def_property_readonly("markers",
                             [](const PyEncoder& e) {
                               py::dict d;
                               d["think_begin"] = e.encoder->markers().think_begin;
                               d["think_end"] = e.encoder->markers().think_end;
                               d["dsml"] = e.encoder->markers().dsml;
                               d["eos"] = e.encoder->markers().eos;
                               return d;
                             })
      .def_property_readonly("family",
                             [](const PyEncoder& e) {
                               return e.encoder->family() == protocol::ModelFamily::kDeepSeekV41
                                          ? "deepseek_v41"
                                          : "deepseek_v4";
                             })
      .def_property_readonly(
          "vocab_size", [](const PyEncoder& e) { return e.encoder->tokenizer().vocab_size(); });

  py::class_<PyParser>(m, "OutputParser")
      .def(py::init([](const PyEncoder& e, const std::string& start,
                       const std::string& forced_tool_name, const std::vector<std::string>& stop,
                       std::optional<std::vector<std::string>> declared_tools,
                       py::object make_tool_call_id) {
             protocol::OutputParserOptions o;
             o.start = ParseStart(start);
             if (o.start == protocol::ParserStart::kToolArguments && forced_tool_name.empty()) {
               throw py::value_error("forced_tool_name: required with start='tool_arguments'");
             }
             o.forced_tool_name = forced_tool_name;
             o.stop = stop;
             o.declared_tools = std::move(declared_tools);
             if (!make_tool_call_id.is_none()) {
               // Called from feed()/finish(), which hold the GIL.
               o.make_tool_call_id = [f = make_tool_call_id](int index) {
                 return f(index).cast<std::string>();
               };
             }
             PyParser p;
             p.encoder = e.encoder;
             p.parser = std::make_unique<protocol::OutputParser>(&e.encoder->tokenizer(),
                                                                 e.encoder->markers(), o);
             return p;
           }),
           py::arg("encoder"), py::arg("start") = "answer", py::arg("forced_tool_name") = "",
           py::arg("stop") = std::vector<std::string>{}, py::arg("declared_tools") = py::none(),
           py::arg("make_tool_call_id") = py::none())
      .def(
          "feed",
          [](PyParser& p, const std::vector<int32_t>& ids) {
            const int32_t vocab = p.encoder->tokenizer().vocab_size();
            for (int32_t id : ids) {
              if (id < 0 || id >= vocab) {
                throw py::value_error("token_ids: id " + std::to_string(id) +
                                      " is outside the vocabulary (size " + std::to_string(vocab) +
                                      ")");
              }
            }
            return EventList(p.parser->Feed(ids));
          },
          py::arg("token_ids"))
      .def(
          "finish",
          [](PyParser& p, const std::string& end) {
            protocol::StreamEnd e;
            if (end == "eos" || end == "stop") {
              e = protocol::StreamEnd::kEndOfSequence;
            } else if (end == "length") {
              e = protocol::StreamEnd::kLength;
            } else if (end == "cancelled" || end == "abort") {
              e = protocol::StreamEnd::kCancelled;
            } else {
              throw py::value_error("end must be 'eos', 'length' or 'cancelled', got '" + end +
                                    "'");
            }
            return EventList(p.parser->Finish(e));
          },
          py::arg("end") = "eos")
      .def_property_readonly("finished", [](const PyParser& p) { return p.parser->finished(); });
}
