// The wire's vocabulary, from posenc.proto's generated descriptors: the one table of every enum's
// names in C++. The server's messages, the client's name functions, the CLI's flag choices and
// the access log's summaries all read names here; nothing else spells them.
//
//   WireName(v1::ROPE_STYLE_GPTJ)            -> "GPTJ"   (the value's name less the enum prefix)
//   LowerName(v1::ROPE_STYLE_GPTJ)           -> "gptj"   (the CLI's and Python's spelling)
//   ParseEnum<v1::RopeStyle>("gptj")         -> ROPE_STYLE_GPTJ ("GPTJ", "ROPE_STYLE_GPTJ" too)
//   SpecifiedValues<v1::RopeStyle>()         -> {NEOX, GPTJ, DEEPSEEK}  (UNSPECIFIED left out)
//   Choices<v1::RopeStyle>()                 -> "neox|gptj|deepseek"
//
// The enum prefix is the name of the enum's value 0 less "UNSPECIFIED" ("ROPE_STYLE_"; value 0 of
// every posenc enum is *_UNSPECIFIED, posenc.proto's convention).
//
// Mirrors of the wire enums elsewhere follow one numbering convention, checked where they are
// converted: a mirror that keeps UNSPECIFIED carries the wire numbers (the client's option enums,
// kUnspecified = 0); a mirror without it lists the wire's specified values in the wire's order
// from 0 (kernel = wire - 1: every kernels' enum, whose parameters are resolved, and the
// client's DType, since a tensor always has one). KernelFromWire/WireFromKernel convert the
// latter; tests/server/vocabulary_test.cc walks every descriptor value through every mirror,
// and the client's static_asserts pin each last value to the wire's _MAX.
//
// Thread-safety: pure functions over the immutable generated descriptors.
#ifndef POSENC_PROTO_POSENC_V1_VOCABULARY_H_
#define POSENC_PROTO_POSENC_V1_VOCABULARY_H_

#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/generated_enum_reflection.h"

namespace posenc::v1 {
namespace vocabulary_internal {

// The value's name less the enum's prefix; "" for a number the enum does not define.
std::string_view WireName(const google::protobuf::EnumDescriptor* descriptor, int number);
std::optional<int> Parse(const google::protobuf::EnumDescriptor* descriptor, std::string_view name);
std::vector<int> SpecifiedNumbers(const google::protobuf::EnumDescriptor* descriptor);
std::string Lower(std::string_view name);

}  // namespace vocabulary_internal

template <typename E>
const google::protobuf::EnumDescriptor* Descriptor() {
  static_assert(google::protobuf::is_proto_enum<E>::value, "a posenc.v1 enum");
  return google::protobuf::GetEnumDescriptor<E>();
}

// "GPTJ" for ROPE_STYLE_GPTJ; "" for a number the wire does not define.
template <typename E>
std::string_view WireName(E value) {
  return vocabulary_internal::WireName(Descriptor<E>(), static_cast<int>(value));
}

// "gptj" for ROPE_STYLE_GPTJ; "" for a number the wire does not define.
template <typename E>
std::string LowerName(E value) {
  return vocabulary_internal::Lower(WireName(value));
}

// A specified value by any of its spellings, case-insensitive: "gptj", "GPTJ", "ROPE_STYLE_GPTJ".
// nullopt for an unknown name and for UNSPECIFIED.
template <typename E>
std::optional<E> ParseEnum(std::string_view name) {
  const std::optional<int> number = vocabulary_internal::Parse(Descriptor<E>(), name);
  if (!number.has_value()) return std::nullopt;
  return static_cast<E>(*number);
}

// Every value but UNSPECIFIED, in declaration order.
template <typename E>
std::vector<E> SpecifiedValues() {
  std::vector<E> out;
  for (int number : vocabulary_internal::SpecifiedNumbers(Descriptor<E>())) {
    out.push_back(static_cast<E>(number));
  }
  return out;
}

// The lowercase names of SpecifiedValues joined by `separator`: "neox|gptj|deepseek".
template <typename E>
std::string Choices(std::string_view separator = "|") {
  std::string out;
  for (E value : SpecifiedValues<E>()) {
    if (!out.empty()) out += separator;
    out += LowerName(value);
  }
  return out;
}

// The kernels' mirror of a wire enum (kernel = wire - 1, see above). `value` must be a specified
// value (callers check with WireName or the descriptor first).
template <typename Kernel, typename E>
Kernel KernelFromWire(E value) {
  static_assert(std::is_enum_v<Kernel>);
  return static_cast<Kernel>(static_cast<int>(value) - 1);
}

template <typename E, typename Kernel>
E WireFromKernel(Kernel value) {
  static_assert(std::is_enum_v<Kernel>);
  return static_cast<E>(static_cast<int>(value) + 1);
}

}  // namespace posenc::v1

#endif  // POSENC_PROTO_POSENC_V1_VOCABULARY_H_
