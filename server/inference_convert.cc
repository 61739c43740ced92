#include "server/inference_convert.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/reflection.h"
#include "kernels/common/status.h"
#include "kernels/common/types.h"
#include "nlohmann/json.hpp"
#include "proto/posenc/v1/vocabulary.h"

namespace posenc::server {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using inference::InferParameter;
using ParameterMap = google::protobuf::Map<std::string, InferParameter>;
using FieldChain = std::vector<const FieldDescriptor*>;

static_assert(std::endian::native == std::endian::little,
              "typed contents are copied as the wire's little-endian bytes");

constexpr std::array<std::pair<absl::string_view, v1::DType>, 6> kDatatypes = {{
    {"FP32", v1::DTYPE_FLOAT32},
    {"FP16", v1::DTYPE_FLOAT16},
    {"BF16", v1::DTYPE_BFLOAT16},
    {"FP64", v1::DTYPE_FLOAT64},
    {"INT32", v1::DTYPE_INT32},
    {"INT64", v1::DTYPE_INT64},
}};

// Parameter names longer than this are refused before they are looked up or echoed.
constexpr size_t kMaxNameBytes = 256;

// Triton's shared-memory parameters of a tensor.
constexpr absl::string_view kRegion = "shared_memory_region";
constexpr absl::string_view kOffset = "shared_memory_offset";
constexpr absl::string_view kByteSize = "shared_memory_byte_size";

template <typename... Parts>
absl::Status Invalid(absl::string_view field, const Parts&... parts) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", parts...));
}

absl::string_view ValueCase(const InferParameter& p) {
  switch (p.parameter_choice_case()) {
    case InferParameter::kBoolParam: return "bool_param";
    case InferParameter::kInt64Param: return "int64_param";
    case InferParameter::kStringParam: return "string_param";
    case InferParameter::kDoubleParam: return "double_param";
    case InferParameter::kUint64Param: return "uint64_param";
    case InferParameter::PARAMETER_CHOICE_NOT_SET: break;
  }
  return "no value";
}

bool IsTensor(const FieldDescriptor* field) {
  return field->message_type() == v1::Tensor::descriptor();
}

std::vector<std::string> SortedKeys(const ParameterMap& params) {
  std::vector<std::string> keys;
  keys.reserve(params.size());
  for (const auto& [key, value] : params) keys.push_back(key);
  std::sort(keys.begin(), keys.end());
  return keys;
}

// ----- field paths ---------------------------------------------------------------------------

// The fields along `path` ("config.scaling.factor") from `type`: every component but the last a
// singular message field. Empty when `path` names no field.
FieldChain ResolvePath(const Descriptor* type, absl::string_view path) {
  FieldChain chain;
  for (absl::string_view part : absl::StrSplit(path, '.')) {
    if (type == nullptr) return {};
    const FieldDescriptor* field = type->FindFieldByName(std::string(part));
    if (field == nullptr) return {};
    chain.push_back(field);
    const bool descend = field->type() == FieldDescriptor::TYPE_MESSAGE && !field->is_repeated();
    type = descend ? field->message_type() : nullptr;
  }
  return chain;
}

std::string ChainPath(const FieldChain& chain, size_t count) {
  std::vector<absl::string_view> names;
  for (size_t i = 0; i < count; ++i) names.push_back(chain[i]->name());
  return absl::StrJoin(names, ".");
}

// Refuses `chain[i]` when another member of its oneof is set already ("positions.ids" after
// "positions.range.start").
absl::Status CheckOneof(const Message& message, const FieldChain& chain, size_t i,
                        absl::string_view name) {
  const google::protobuf::OneofDescriptor* oneof = chain[i]->real_containing_oneof();
  if (oneof == nullptr) return absl::OkStatus();
  const FieldDescriptor* set = message.GetReflection()->GetOneofFieldDescriptor(message, oneof);
  if (set == nullptr || set == chain[i]) return absl::OkStatus();
  const std::string prefix = ChainPath(chain, i);
  return Invalid(name, "cannot be given with ", prefix, prefix.empty() ? "" : ".", set->name(),
                 " (both are one of ", prefix.empty() ? "the request" : prefix, "'s ",
                 oneof->name(), ")");
}

// The message holding `chain`'s last field, its parents created on the way.
absl::StatusOr<Message*> Walk(Message* root, const FieldChain& chain, absl::string_view name) {
  Message* message = root;
  for (size_t i = 0; i < chain.size(); ++i) {
    POSENC_RETURN_IF_ERROR(CheckOneof(*message, chain, i, name));
    if (i + 1 < chain.size()) message = message->GetReflection()->MutableMessage(message, chain[i]);
  }
  return message;
}

// ----- parameter values ----------------------------------------------------------------------

absl::StatusOr<int64_t> Int64Value(const InferParameter& p, absl::string_view name) {
  if (p.has_int64_param()) return p.int64_param();
  if (p.has_uint64_param() &&
      p.uint64_param() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return static_cast<int64_t>(p.uint64_param());
  }
  return Invalid(name, "expected an integer (int64_param), got ", ValueCase(p));
}

absl::StatusOr<double> ParseNumber(absl::string_view text, absl::string_view name) {
  double value = 0;
  if (absl::SimpleAtod(text, &value)) return value;
  return Invalid(name, "expected a number, got the string \"", kernels::Abbreviate(text), "\"");
}

absl::StatusOr<double> DoubleValue(const InferParameter& p, absl::string_view name) {
  constexpr int64_t kExact = int64_t{1} << 53;  // every integer up to here is a double
  if (p.has_double_param()) return p.double_param();
  if (p.has_int64_param() && p.int64_param() >= -kExact && p.int64_param() <= kExact) {
    return static_cast<double>(p.int64_param());
  }
  if (p.has_string_param()) return ParseNumber(p.string_param(), name);
  return Invalid(name, "expected a number (double_param, int64_param up to 2^53 or a numeric ",
                 "string_param), got ", ValueCase(p));
}

std::string EnumChoices(const google::protobuf::EnumDescriptor* type) {
  std::vector<std::string> names;
  for (int number : v1::vocabulary_internal::SpecifiedNumbers(type)) {
    names.push_back(
        v1::vocabulary_internal::Lower(v1::vocabulary_internal::WireName(type, number)));
  }
  if (type == v1::Descriptor<v1::DType>()) {
    for (const auto& [datatype, dtype] : kDatatypes) names.emplace_back(datatype);
  }
  return absl::StrJoin(names, ", ");
}

// An enum field's number: its name in any of posenc's spellings (a DType also as a datatype),
// or a number as int64_param (posenc's handlers check numbers).
absl::StatusOr<int> EnumValue(const google::protobuf::EnumDescriptor* type, const InferParameter& p,
                              absl::string_view name) {
  if (p.has_int64_param() && p.int64_param() >= std::numeric_limits<int>::min() &&
      p.int64_param() <= std::numeric_limits<int>::max()) {
    return static_cast<int>(p.int64_param());
  }
  if (!p.has_string_param()) {
    return Invalid(name, "expected a ", type->name(), " name (string_param), got ", ValueCase(p));
  }
  if (type == v1::Descriptor<v1::DType>()) {
    if (std::optional<v1::DType> dtype = DTypeOfDatatype(p.string_param())) return *dtype;
  }
  if (std::optional<int> number = v1::vocabulary_internal::Parse(type, p.string_param())) {
    return *number;
  }
  return Invalid(name, "unknown ", type->name(), " \"", kernels::Abbreviate(p.string_param()),
                 "\" (expected one of ", EnumChoices(type), ")");
}

// A repeated number field from a string_param list: "16,24,24" or "[16, 24, 24]".
absl::Status SetList(Message* message, const FieldDescriptor* field, const InferParameter& p,
                     absl::string_view name) {
  if (!p.has_string_param()) {
    return Invalid(name, "expected a list of numbers as a string_param (\"1,2,3\"), got ",
                   ValueCase(p));
  }
  absl::string_view text = absl::StripAsciiWhitespace(p.string_param());
  if (absl::ConsumePrefix(&text, "[") && !absl::ConsumeSuffix(&text, "]")) {
    return Invalid(name, "a list that opens with [ must close with ]");
  }
  const Reflection* r = message->GetReflection();
  r->ClearField(message, field);
  int index = 0;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    const std::string item_name = absl::StrCat(name, "[", index++, "]");
    POSENC_ASSIGN_OR_RETURN(const double value,
                            ParseNumber(absl::StripAsciiWhitespace(item), item_name));
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) {
      r->AddDouble(message, field, value);
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_INT64 && std::trunc(value) == value &&
               std::abs(value) <= 9.0e15) {
      r->AddInt64(message, field, static_cast<int64_t>(value));
    } else {
      return Invalid(item_name, "expected an integer (of at most 9e15), got ",
                     kernels::Abbreviate(item));
    }
  }
  return absl::OkStatus();
}

absl::Status SetInteger(Message* message, const FieldDescriptor* field, const InferParameter& p,
                        absl::string_view name) {
  POSENC_ASSIGN_OR_RETURN(const int64_t value, Int64Value(p, name));
  if (field->cpp_type() == FieldDescriptor::CPPTYPE_INT64) {
    message->GetReflection()->SetInt64(message, field, value);
    return absl::OkStatus();
  }
  if (value < std::numeric_limits<int32_t>::min() || value > std::numeric_limits<int32_t>::max()) {
    return Invalid(name, "expected a 32-bit integer, got ", value);
  }
  message->GetReflection()->SetInt32(message, field, static_cast<int32_t>(value));
  return absl::OkStatus();
}

// Sets scalar `field` of `message` from `p`.
absl::Status SetScalar(Message* message, const FieldDescriptor* field, const InferParameter& p,
                       absl::string_view name) {
  const Reflection* r = message->GetReflection();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64: return SetInteger(message, field, p, name);
    case FieldDescriptor::CPPTYPE_DOUBLE: {
      POSENC_ASSIGN_OR_RETURN(const double value, DoubleValue(p, name));
      r->SetDouble(message, field, value);
      return absl::OkStatus();
    }
    case FieldDescriptor::CPPTYPE_BOOL:
      if (!p.has_bool_param()) return Invalid(name, "expected bool_param, got ", ValueCase(p));
      r->SetBool(message, field, p.bool_param());
      return absl::OkStatus();
    case FieldDescriptor::CPPTYPE_STRING:
      if (!p.has_string_param()) return Invalid(name, "expected string_param, got ", ValueCase(p));
      r->SetString(message, field, p.string_param());
      return absl::OkStatus();
    case FieldDescriptor::CPPTYPE_ENUM: {
      POSENC_ASSIGN_OR_RETURN(const int value, EnumValue(field->enum_type(), p, name));
      r->SetEnumValue(message, field, value);
      return absl::OkStatus();
    }
    default: break;
  }
  return Invalid(name, "is not a field a parameter can set");
}

// ----- parameters ----------------------------------------------------------------------------

// The fields `name` stands for: its path on the request, else under the model's prefix.
FieldChain ParameterChain(const InferenceModel& model, const Descriptor* request,
                          absl::string_view name) {
  FieldChain chain = ResolvePath(request, name);
  if (chain.empty() && !model.parameter_prefix.empty()) {
    chain = ResolvePath(request, absl::StrCat(model.parameter_prefix, ".", name));
  }
  return chain;
}

absl::Status CheckParameterChain(const InferenceModel& model, const FieldChain& chain,
                                 absl::string_view name) {
  if (chain.empty()) {
    return Invalid(name, "not a parameter of model ", model.name, " (parameters are the fields of ",
                   "posenc.v1.", model.rpc, "Request by their paths, e.g. output_dtype",
                   model.parameter_prefix.empty() ? "" : ", or of its ", model.parameter_prefix,
                   model.parameter_prefix.empty() ? "" : " by their names", ")");
  }
  for (const FieldDescriptor* field : chain) {
    if (IsTensor(field)) return Invalid(name, field->name(), " is a tensor: send it as an input");
  }
  const FieldDescriptor* last = chain.back();
  if (last->is_map() || (last->type() == FieldDescriptor::TYPE_MESSAGE && !last->is_repeated())) {
    return Invalid(name, "is a message, not a value: give its fields (", name, ".<field>)");
  }
  if (last->is_repeated() && last->cpp_type() != FieldDescriptor::CPPTYPE_INT64 &&
      last->cpp_type() != FieldDescriptor::CPPTYPE_DOUBLE) {
    return Invalid(name, "is not a field a parameter can set");
  }
  return absl::OkStatus();
}

absl::Status SetParameter(const InferenceModel& model, absl::string_view name,
                          const InferParameter& value, Message* posenc,
                          std::map<std::string, std::string>* set_by) {
  const FieldChain chain = ParameterChain(model, posenc->GetDescriptor(), name);
  POSENC_RETURN_IF_ERROR(CheckParameterChain(model, chain, name));
  const std::string path = ChainPath(chain, chain.size());
  if (auto [it, added] = set_by->emplace(path, name); !added) {
    return Invalid(name, "sets ", path, ", which parameter ", it->second, " sets too");
  }
  POSENC_ASSIGN_OR_RETURN(Message * holder, Walk(posenc, chain, name));
  if (chain.back()->is_repeated()) return SetList(holder, chain.back(), value, name);
  return SetScalar(holder, chain.back(), value, name);
}

absl::Status ToPosencParameters(const InferenceModel& model,
                                const inference::ModelInferRequest& request, Message* posenc) {
  std::map<std::string, std::string> set_by;
  for (const std::string& name : SortedKeys(request.parameters())) {
    if (name.size() > kMaxNameBytes) {
      return Invalid(kernels::Abbreviate(name), "a parameter name of ", name.size(),
                     " bytes (no field path is longer than ", kMaxNameBytes, ")");
    }
    POSENC_RETURN_IF_ERROR(
        SetParameter(model, name, request.parameters().at(name), posenc, &set_by));
  }
  return absl::OkStatus();
}

// ----- shared memory -------------------------------------------------------------------------

absl::StatusOr<int64_t> ByteCount(const ParameterMap& params, absl::string_view key,
                                  absl::string_view field) {
  return Int64Value(params.at(std::string(key)), absl::StrCat(field, ".", key));
}

// Triton's shared-memory parameters of a tensor (`field`: "q.parameters"); nullopt without.
absl::StatusOr<std::optional<v1::SharedMemoryRef>> SharedMemoryParameters(
    const ParameterMap& params, absl::string_view field) {
  for (const std::string& key : SortedKeys(params)) {
    if (key != kRegion && key != kOffset && key != kByteSize) {
      return Invalid(absl::StrCat(field, ".", kernels::Abbreviate(key)),
                     "unknown tensor parameter (a tensor takes ", kRegion, ", ", kOffset, " and ",
                     kByteSize, ")");
    }
  }
  if (params.empty()) return std::nullopt;
  for (absl::string_view key : {kRegion, kByteSize}) {
    if (params.count(std::string(key)) == 0) {
      return Invalid(absl::StrCat(field, ".", key), "missing (a tensor in shared memory needs ",
                     kRegion, " and ", kByteSize, ")");
    }
  }
  const InferParameter& region = params.at(std::string(kRegion));
  if (!region.has_string_param()) {
    return Invalid(absl::StrCat(field, ".", kRegion), "expected string_param, got ",
                   ValueCase(region));
  }
  v1::SharedMemoryRef ref;
  ref.set_region(region.string_param());
  POSENC_ASSIGN_OR_RETURN(const int64_t byte_size, ByteCount(params, kByteSize, field));
  ref.set_byte_size(byte_size);
  if (params.count(std::string(kOffset)) != 0) {
    POSENC_ASSIGN_OR_RETURN(const int64_t offset, ByteCount(params, kOffset, field));
    ref.set_offset(offset);
  }
  return ref;
}

void SetSharedMemoryParameters(const v1::SharedMemoryRef& ref, ParameterMap* params) {
  (*params)[std::string(kRegion)].set_string_param(ref.region());
  (*params)[std::string(kOffset)].set_int64_param(ref.offset());
  (*params)[std::string(kByteSize)].set_int64_param(ref.byte_size());
}

// ----- inputs --------------------------------------------------------------------------------

const InferenceTensor* FindTensor(const std::vector<InferenceTensor>& tensors,
                                  absl::string_view name) {
  for (const InferenceTensor& tensor : tensors) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

std::string TensorNames(const std::vector<InferenceTensor>& tensors) {
  std::vector<absl::string_view> names;
  names.reserve(tensors.size());
  for (const InferenceTensor& tensor : tensors) names.push_back(tensor.name);
  return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

template <typename T>
void CopyValues(const google::protobuf::RepeatedField<T>& values, std::string* out) {
  out->resize(static_cast<size_t>(values.size()) * sizeof(T));
  if (!values.empty()) std::memcpy(out->data(), values.data(), out->size());
}

// The contents field of each datatype that has one.
absl::string_view ContentsField(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_FLOAT32: return "fp32_contents";
    case v1::DTYPE_FLOAT64: return "fp64_contents";
    case v1::DTYPE_INT32: return "int_contents";
    case v1::DTYPE_INT64: return "int64_contents";
    default: break;
  }
  return "";
}

absl::Status ContentsBytes(const inference::InferTensorContents& contents, v1::DType dtype,
                           absl::string_view name, std::string* out) {
  const std::string field = absl::StrCat(name, ".contents");
  const absl::string_view expected = ContentsField(dtype);
  if (expected.empty()) {
    return Invalid(field, DatatypeOfDType(dtype),
                   " tensors travel as raw bytes only (raw_input_contents or shared memory)");
  }
  std::vector<const FieldDescriptor*> set;
  contents.GetReflection()->ListFields(contents, &set);
  for (const FieldDescriptor* f : set) {
    if (f->name() != expected) {
      return Invalid(field, "a ", DatatypeOfDType(dtype), " tensor takes ", expected, ", got ",
                     f->name());
    }
  }
  switch (dtype) {
    case v1::DTYPE_FLOAT32: CopyValues(contents.fp32_contents(), out); break;
    case v1::DTYPE_FLOAT64: CopyValues(contents.fp64_contents(), out); break;
    case v1::DTYPE_INT32: CopyValues(contents.int_contents(), out); break;
    default: CopyValues(contents.int64_contents(), out); break;
  }
  return absl::OkStatus();
}

// Where an input's bytes come from: shared memory, typed contents, or the next raw entry.
absl::Status InputBytes(const inference::ModelInferRequest::InferInputTensor& input,
                        inference::ModelInferRequest* request, int* raw_used, v1::Tensor* out) {
  const std::string& name = input.name();
  POSENC_ASSIGN_OR_RETURN(std::optional<v1::SharedMemoryRef> ref,
                          SharedMemoryParameters(input.parameters(), name + ".parameters"));
  if (ref.has_value()) {
    if (input.has_contents()) return Invalid(name, "has both contents and shared memory");
    *out->mutable_shared_memory() = *std::move(ref);
    return absl::OkStatus();
  }
  if (input.has_contents()) {
    return ContentsBytes(input.contents(), out->dtype(), name, out->mutable_data());
  }
  if (*raw_used >= request->raw_input_contents_size()) {
    return Invalid(name, "no bytes: raw_input_contents has ", request->raw_input_contents_size(),
                   " entries, fewer than the inputs without contents or shared memory");
  }
  request->mutable_raw_input_contents(*raw_used)->swap(*out->mutable_data());
  ++*raw_used;
  return absl::OkStatus();
}

// The Tensor field of `posenc` that input `name` fills.
absl::StatusOr<v1::Tensor*> InputTensor(Message* posenc, absl::string_view name) {
  const FieldChain chain = ResolvePath(posenc->GetDescriptor(), name);
  if (chain.empty() || !IsTensor(chain.back())) {
    return absl::InternalError(absl::StrCat(name, ": the model's input is no Tensor field of ",
                                            posenc->GetDescriptor()->full_name()));
  }
  POSENC_ASSIGN_OR_RETURN(Message * holder, Walk(posenc, chain, name));
  Message* tensor = holder->GetReflection()->MutableMessage(holder, chain.back());
  return static_cast<v1::Tensor*>(tensor);  // the generated type: the descriptor is Tensor's
}

absl::Status ToPosencInput(const InferenceModel& model, int index,
                           inference::ModelInferRequest* request, Message* posenc, int* raw_used) {
  const inference::ModelInferRequest::InferInputTensor& input = request->inputs(index);
  const std::string& name = input.name();
  if (FindTensor(model.inputs, name) == nullptr) {
    return Invalid(absl::StrCat("inputs[", index, "].name"), "model ", model.name,
                   " has no input \"", kernels::Abbreviate(name),
                   "\" (inputs: ", TensorNames(model.inputs), ")");
  }
  const std::optional<v1::DType> dtype = DTypeOfDatatype(input.datatype());
  if (!dtype.has_value()) {
    return Invalid(absl::StrCat(name, ".datatype"), "\"", kernels::Abbreviate(input.datatype()),
                   "\" is not a datatype posenc takes (FP32, FP16, BF16, FP64, INT32 or INT64)");
  }
  POSENC_ASSIGN_OR_RETURN(v1::Tensor * tensor, InputTensor(posenc, name));
  tensor->set_dtype(*dtype);
  tensor->mutable_shape()->Assign(input.shape().begin(), input.shape().end());
  return InputBytes(input, request, raw_used, tensor);
}

absl::Status ToPosencInputs(const InferenceModel& model, inference::ModelInferRequest* request,
                            Message* posenc) {
  std::set<std::string, std::less<>> seen;
  int raw_used = 0;
  for (int i = 0; i < request->inputs_size(); ++i) {
    if (!seen.insert(request->inputs(i).name()).second) {
      return Invalid(absl::StrCat("inputs[", i, "].name"), "input \"",
                     kernels::Abbreviate(request->inputs(i).name()), "\" is given twice");
    }
    POSENC_RETURN_IF_ERROR(ToPosencInput(model, i, request, posenc, &raw_used));
  }
  if (raw_used != request->raw_input_contents_size()) {
    return Invalid("raw_input_contents", request->raw_input_contents_size(), " entries, but ",
                   raw_used, " inputs take raw bytes (those without contents or shared memory)");
  }
  for (const InferenceTensor& tensor : model.inputs) {
    if (tensor.required && seen.count(tensor.name) == 0) {
      return Invalid(tensor.name, "missing: model ", model.name, " needs input ", tensor.name,
                     " (inputs: ", TensorNames(model.inputs), ")");
    }
  }
  return absl::OkStatus();
}

// ----- outputs -------------------------------------------------------------------------------

void PlaceOutput(Message* posenc, absl::string_view name, const v1::SharedMemoryRef& ref) {
  const FieldDescriptor* field = posenc->GetDescriptor()->FindFieldByName("output_shared_memory");
  Message* entry = posenc->GetReflection()->AddMessage(posenc, field);
  const Descriptor* type = entry->GetDescriptor();
  entry->GetReflection()->SetString(entry, type->map_key(), std::string(name));
  entry->GetReflection()->MutableMessage(entry, type->map_value())->CopyFrom(ref);
}

absl::Status ToPosencOutputs(const InferenceModel& model,
                             const inference::ModelInferRequest& request, Message* posenc) {
  std::set<std::string, std::less<>> seen;
  for (int i = 0; i < request.outputs_size(); ++i) {
    const auto& output = request.outputs(i);
    const std::string field = absl::StrCat("outputs[", i, "].name");
    if (FindTensor(model.outputs, output.name()) == nullptr) {
      return Invalid(field, "model ", model.name, " has no output \"",
                     kernels::Abbreviate(output.name()),
                     "\" (outputs: ", TensorNames(model.outputs), ")");
    }
    if (!seen.insert(output.name()).second) {
      return Invalid(field, "output \"", output.name(), "\" is requested twice");
    }
    POSENC_ASSIGN_OR_RETURN(
        std::optional<v1::SharedMemoryRef> ref,
        SharedMemoryParameters(output.parameters(),
                               absl::StrCat("outputs.", output.name(), ".parameters")));
    if (ref.has_value()) PlaceOutput(posenc, output.name(), *ref);
  }
  return absl::OkStatus();
}

// ----- the response --------------------------------------------------------------------------

// The names of the outputs to return: those requested, else every one the call produced.
std::vector<std::string> OutputNames(const InferenceModel& model,
                                     const inference::ModelInferRequest& request,
                                     const Message& posenc) {
  std::vector<std::string> names;
  for (const auto& output : request.outputs()) names.push_back(output.name());
  if (!names.empty()) return names;
  for (const InferenceTensor& tensor : model.outputs) {
    const FieldDescriptor* field =
        posenc.GetDescriptor()->FindFieldByName(std::string(tensor.name));
    if (field != nullptr && posenc.GetReflection()->HasField(posenc, field)) {
      names.emplace_back(tensor.name);
    }
  }
  return names;
}

absl::Status AddOutput(const InferenceModel& model, const std::string& name, Message* posenc,
                       inference::ModelInferResponse* response) {
  const FieldDescriptor* field = posenc->GetDescriptor()->FindFieldByName(name);
  if (field == nullptr || !IsTensor(field) || !posenc->GetReflection()->HasField(*posenc, field)) {
    return Invalid(name, "model ", model.name, " produced no output ", name,
                   " for this call (an optional input missing?)");
  }
  auto* tensor = static_cast<v1::Tensor*>(posenc->GetReflection()->MutableMessage(posenc, field));
  inference::ModelInferResponse::InferOutputTensor* out = response->add_outputs();
  out->set_name(name);
  out->set_datatype(std::string(DatatypeOfDType(tensor->dtype())));
  out->mutable_shape()->Assign(tensor->shape().begin(), tensor->shape().end());
  std::string* raw = response->add_raw_output_contents();
  if (tensor->has_shared_memory()) {
    SetSharedMemoryParameters(tensor->shared_memory(), out->mutable_parameters());
  } else {
    raw->swap(*tensor->mutable_data());
  }
  return absl::OkStatus();
}

InferParameter ScalarParameter(const Message& message, const FieldDescriptor* field) {
  const Reflection* r = message.GetReflection();
  InferParameter p;
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: p.set_int64_param(r->GetInt32(message, field)); break;
    case FieldDescriptor::CPPTYPE_INT64: p.set_int64_param(r->GetInt64(message, field)); break;
    case FieldDescriptor::CPPTYPE_UINT32: p.set_uint64_param(r->GetUInt32(message, field)); break;
    case FieldDescriptor::CPPTYPE_UINT64: p.set_uint64_param(r->GetUInt64(message, field)); break;
    case FieldDescriptor::CPPTYPE_DOUBLE: p.set_double_param(r->GetDouble(message, field)); break;
    case FieldDescriptor::CPPTYPE_FLOAT: p.set_double_param(r->GetFloat(message, field)); break;
    case FieldDescriptor::CPPTYPE_BOOL: p.set_bool_param(r->GetBool(message, field)); break;
    case FieldDescriptor::CPPTYPE_ENUM:
      p.set_string_param(std::string(
          v1::vocabulary_internal::WireName(field->enum_type(), r->GetEnumValue(message, field))));
      break;
    case FieldDescriptor::CPPTYPE_STRING: p.set_string_param(r->GetString(message, field)); break;
    case FieldDescriptor::CPPTYPE_MESSAGE: break;
  }
  return p;
}

// A repeated number or string field as a JSON array.
std::string JsonArray(const Message& message, const FieldDescriptor* field) {
  const Reflection* r = message.GetReflection();
  nlohmann::json array = nlohmann::json::array();
  for (int i = 0; i < r->FieldSize(message, field); ++i) {
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_DOUBLE:
        array.push_back(r->GetRepeatedDouble(message, field, i));
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        array.push_back(r->GetRepeatedInt64(message, field, i));
        break;
      case FieldDescriptor::CPPTYPE_STRING:
        array.push_back(r->GetRepeatedString(message, field, i));
        break;
      default: break;
    }
  }
  return array.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Every set field of `message` as response parameters "<prefix>.<field>".
void AddParameters(const Message& message, const std::string& prefix, ParameterMap* params) {
  std::vector<const FieldDescriptor*> fields;
  message.GetReflection()->ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    const std::string name = absl::StrCat(prefix, ".", field->name());
    if (field->is_repeated()) {
      (*params)[name].set_string_param(JsonArray(message, field));
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      AddParameters(message.GetReflection()->GetMessage(message, field), name, params);
    } else {
      (*params)[name] = ScalarParameter(message, field);
    }
  }
}

void AddDerivedParameters(const Message& posenc, ParameterMap* params) {
  std::vector<const FieldDescriptor*> fields;
  posenc.GetReflection()->ListFields(posenc, &fields);
  for (const FieldDescriptor* field : fields) {
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE || IsTensor(field)) continue;
    AddParameters(posenc.GetReflection()->GetMessage(posenc, field), field->name(), params);
  }
}

// ----- summaries -----------------------------------------------------------------------------

std::string ShapeText(const google::protobuf::RepeatedField<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

std::string ParameterText(const InferParameter& p) {
  switch (p.parameter_choice_case()) {
    case InferParameter::kBoolParam: return p.bool_param() ? "true" : "false";
    case InferParameter::kInt64Param: return absl::StrCat(p.int64_param());
    case InferParameter::kDoubleParam: return absl::StrCat(p.double_param());
    case InferParameter::kUint64Param: return absl::StrCat(p.uint64_param());
    case InferParameter::kStringParam:
      return p.string_param().size() > 64 ? absl::StrCat(p.string_param().size(), "_bytes")
                                          : p.string_param();
    case InferParameter::PARAMETER_CHOICE_NOT_SET: break;
  }
  return "";
}

}  // namespace

std::optional<v1::DType> DTypeOfDatatype(absl::string_view datatype) {
  for (const auto& [name, dtype] : kDatatypes) {
    if (name == datatype) return dtype;
  }
  return std::nullopt;
}

absl::string_view DatatypeOfDType(v1::DType dtype) {
  for (const auto& [name, value] : kDatatypes) {
    if (value == dtype) return name;
  }
  return "";
}

absl::Status ToPosencRequest(const InferenceModel& model, inference::ModelInferRequest* request,
                             Message* posenc) {
  POSENC_RETURN_IF_ERROR(ToPosencParameters(model, *request, posenc));
  POSENC_RETURN_IF_ERROR(ToPosencInputs(model, request, posenc));
  return ToPosencOutputs(model, *request, posenc);
}

absl::Status FromPosencResponse(const InferenceModel& model,
                                const inference::ModelInferRequest& request, Message* posenc,
                                inference::ModelInferResponse* response) {
  response->set_model_name(std::string(model.name));
  response->set_model_version(std::string(kInferenceModelVersion));
  response->set_id(request.id());
  for (const std::string& name : OutputNames(model, request, *posenc)) {
    POSENC_RETURN_IF_ERROR(AddOutput(model, name, posenc, response));
  }
  AddDerivedParameters(*posenc, response->mutable_parameters());
  return absl::OkStatus();
}

std::string SummarizeInferRequest(const Message& message) {
  const auto& request = static_cast<const inference::ModelInferRequest&>(message);
  std::string out = absl::StrCat("model=", kernels::Abbreviate(request.model_name()));
  for (const auto& input : request.inputs()) {
    absl::StrAppend(&out, " ", kernels::Abbreviate(input.name()), "=",
                    kernels::Abbreviate(input.datatype()), ShapeText(input.shape()),
                    input.parameters().empty() ? "" : "@shm");
  }
  for (const std::string& name : SortedKeys(request.parameters())) {
    absl::StrAppend(&out, " ", kernels::Abbreviate(name), "=",
                    kernels::Abbreviate(ParameterText(request.parameters().at(name))));
  }
  return out;
}

std::string SummarizeInferResponse(const Message& message) {
  const auto& response = static_cast<const inference::ModelInferResponse&>(message);
  std::string out;
  for (const auto& output : response.outputs()) {
    absl::StrAppend(&out, out.empty() ? "" : " ", output.name(), "=", output.datatype(),
                    ShapeText(output.shape()), output.parameters().empty() ? "" : "@shm");
  }
  return out;
}

}  // namespace posenc::server
