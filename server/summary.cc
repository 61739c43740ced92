#include "server/summary.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/reflection.h"
#include "kernels/common/types.h"
#include "proto/posenc/v1/vocabulary.h"

namespace posenc::server {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Strings longer than this are summarized by their length.
constexpr size_t kMaxStringChars = 64;

// Appends " name=value" (no leading space when `out` is empty).
void Add(std::string* out, absl::string_view name, absl::string_view value) {
  absl::StrAppend(out, out->empty() ? "" : " ", name, "=", value);
}

std::string PositionsSummary(const v1::Positions& positions) {
  switch (positions.kind_case()) {
    case v1::Positions::kRange:
      return absl::StrCat("range[", positions.range().start(), ",+", positions.range().count(),
                          ")");
    case v1::Positions::kOffsets:
      return absl::StrCat("offsets[", positions.offsets().offsets_size(), "]");
    case v1::Positions::kIds: return absl::StrCat("ids:", TensorSummary(positions.ids()));
    case v1::Positions::kCuSeqlens:
      return absl::StrCat("cu_seqlens[", positions.cu_seqlens().cu_seqlens_size(), "]");
    case v1::Positions::kAttentionMask:
      return absl::StrCat("mask:", TensorSummary(positions.attention_mask()));
    case v1::Positions::KIND_NOT_SET: break;
  }
  return "default";
}

std::string ScalarValue(const Message& message, const FieldDescriptor* field) {
  const Reflection* r = message.GetReflection();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32: return absl::StrCat(r->GetInt32(message, field));
    case FieldDescriptor::CPPTYPE_INT64: return absl::StrCat(r->GetInt64(message, field));
    case FieldDescriptor::CPPTYPE_UINT32: return absl::StrCat(r->GetUInt32(message, field));
    case FieldDescriptor::CPPTYPE_UINT64: return absl::StrCat(r->GetUInt64(message, field));
    case FieldDescriptor::CPPTYPE_DOUBLE: return absl::StrCat(r->GetDouble(message, field));
    case FieldDescriptor::CPPTYPE_FLOAT: return absl::StrCat(r->GetFloat(message, field));
    case FieldDescriptor::CPPTYPE_BOOL: return r->GetBool(message, field) ? "true" : "false";
    case FieldDescriptor::CPPTYPE_ENUM: {
      const int number = r->GetEnumValue(message, field);
      const std::string_view name = v1::vocabulary_internal::WireName(field->enum_type(), number);
      return name.empty() ? absl::StrCat(number) : std::string(name);
    }
    case FieldDescriptor::CPPTYPE_STRING:
    case FieldDescriptor::CPPTYPE_MESSAGE: break;
  }
  return "";
}

// Appends every set field of `message`, names prefixed by `prefix`; nested messages recursed
// into when `nested`.
void AddFields(std::string* out, const Message& message, const std::string& prefix, bool nested) {
  const Reflection* r = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(message, &fields);  // the set ones, in field-number order
  for (const FieldDescriptor* field : fields) {
    const std::string name = prefix + field->name();
    if (field->is_repeated()) {
      Add(out, name, absl::StrCat("[", r->FieldSize(message, field), "]"));
      continue;
    }
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
      const std::string value = r->GetString(message, field);
      if (field->type() == FieldDescriptor::TYPE_BYTES || value.size() > kMaxStringChars) {
        Add(out, name + "_bytes", absl::StrCat(value.size()));
      } else {
        Add(out, name, absl::StrCat("\"", kernels::Abbreviate(value), "\""));
      }
      continue;
    }
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
      Add(out, name, ScalarValue(message, field));
      continue;
    }
    const Message& sub = r->GetMessage(message, field);
    if (field->message_type() == v1::Tensor::descriptor()) {
      Add(out, name, TensorSummary(static_cast<const v1::Tensor&>(sub)));
    } else if (field->message_type() == v1::Positions::descriptor()) {
      Add(out, name, PositionsSummary(static_cast<const v1::Positions&>(sub)));
    } else if (nested) {
      AddFields(out, sub, name + ".", nested);
    }
  }
}

}  // namespace

std::string TensorSummary(const v1::Tensor& tensor) {
  const std::string_view dtype = v1::WireName(tensor.dtype());
  return absl::StrCat(dtype.empty() ? absl::StrCat("DTYPE_", tensor.dtype()) : std::string(dtype),
                      "[", absl::StrJoin(tensor.shape(), ","), "]");
}

std::string SummarizeRequest(const Message& request) {
  std::string out;
  AddFields(&out, request, "", /*nested=*/true);
  return out;
}

std::string SummarizeResponse(const Message& response) {
  std::string out;
  AddFields(&out, response, "", /*nested=*/false);
  return out;
}

}  // namespace posenc::server
