#include "proto/posenc/v1/vocabulary.h"

#include <cctype>

namespace posenc::v1::vocabulary_internal {
namespace {

constexpr std::string_view kUnspecified = "UNSPECIFIED";

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

// "ROPE_STYLE_" for RopeStyle: the name of value 0 less "UNSPECIFIED".
std::string_view Prefix(const google::protobuf::EnumDescriptor* descriptor) {
  const google::protobuf::EnumValueDescriptor* zero = descriptor->FindValueByNumber(0);
  if (zero == nullptr) return {};
  std::string_view name = zero->name();
  if (name.size() < kUnspecified.size() ||
      name.substr(name.size() - kUnspecified.size()) != kUnspecified) {
    return {};
  }
  name.remove_suffix(kUnspecified.size());
  return name;
}

}  // namespace

std::string_view WireName(const google::protobuf::EnumDescriptor* descriptor, int number) {
  const google::protobuf::EnumValueDescriptor* value = descriptor->FindValueByNumber(number);
  if (value == nullptr) return {};
  std::string_view name = value->name();
  const std::string_view prefix = Prefix(descriptor);
  if (name.substr(0, prefix.size()) == prefix) name.remove_prefix(prefix.size());
  return name;
}

std::optional<int> Parse(const google::protobuf::EnumDescriptor* descriptor,
                         std::string_view name) {
  for (int i = 0; i < descriptor->value_count(); ++i) {
    const google::protobuf::EnumValueDescriptor* value = descriptor->value(i);
    if (value->number() == 0) continue;
    if (EqualsIgnoreCase(name, value->name()) ||
        EqualsIgnoreCase(name, WireName(descriptor, value->number()))) {
      return value->number();
    }
  }
  return std::nullopt;
}

std::vector<int> SpecifiedNumbers(const google::protobuf::EnumDescriptor* descriptor) {
  std::vector<int> out;
  for (int i = 0; i < descriptor->value_count(); ++i) {
    if (descriptor->value(i)->number() != 0) out.push_back(descriptor->value(i)->number());
  }
  return out;
}

std::string Lower(std::string_view name) {
  std::string out(name);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace posenc::v1::vocabulary_internal
