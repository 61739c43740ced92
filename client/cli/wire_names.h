// The CLI's names of the wire's enums, every one from the vocabulary of posenc.proto
// (proto/posenc/v1/vocabulary.h): the choice lists of flags, the parsing of their values and the
// names the commands print. Nothing in the CLI spells a wire enum's names itself.
//
// The client's public enums carry the wire numbers (kUnspecified = 0; client/convert.cc pins
// each to its wire enum's _MAX), so the wire value of a client value is the same number: ToWire
// is that cast, checked against the wire enum's descriptor, and WireEnum<E> names each client
// enum's wire enum (a client enum without one does not compile here).
//
// Thread-safety: pure functions over the immutable generated descriptors; ChoiceList keeps its
// strings for the program's life (FlagSpec holds views).
#ifndef POSENC_CLIENT_CLI_WIRE_NAMES_H_
#define POSENC_CLIENT_CLI_WIRE_NAMES_H_

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "client/cli/flags.h"
#include "posenc/client.h"
#include "posenc/v1/posenc.pb.h"
#include "proto/posenc/v1/vocabulary.h"

namespace posenc::cli {

// The wire enum of each client enum that mirrors one.
template <typename ClientEnum>
struct WireEnum;
template <>
struct WireEnum<client::SinusoidalLayout> {
  using type = v1::SinusoidalLayout;
};
template <>
struct WireEnum<client::FreqScheme> {
  using type = v1::FreqScheme;
};
template <>
struct WireEnum<client::Combine> {
  using type = v1::Combine;
};
template <>
struct WireEnum<client::RopeStyle> {
  using type = v1::RopeStyle;
};
template <>
struct WireEnum<client::RopeScalingType> {
  using type = v1::RopeScalingType;
};
template <>
struct WireEnum<client::MropeLayout> {
  using type = v1::MropeLayout;
};
template <>
struct WireEnum<client::RopeCacheLayout> {
  using type = v1::RopeCacheLayout;
};
template <>
struct WireEnum<client::TensorLayout> {
  using type = v1::TensorLayout;
};
template <>
struct WireEnum<client::AlibiMode> {
  using type = v1::AlibiMode;
};
template <>
struct WireEnum<client::FutureMode> {
  using type = v1::FutureMode;
};
template <>
struct WireEnum<client::BiasForm> {
  using type = v1::BiasForm;
};
template <>
struct WireEnum<client::MultimodalFamily> {
  using type = v1::MultimodalFamily;
};
template <typename ClientEnum>
using WireEnumOf = typename WireEnum<ClientEnum>::type;

// The wire value of `value` (the same number); nullopt for a number the wire does not define.
template <typename ClientEnum>
std::optional<WireEnumOf<ClientEnum>> ToWire(ClientEnum value) {
  using Wire = WireEnumOf<ClientEnum>;
  const int number = static_cast<int>(value);
  if (v1::Descriptor<Wire>()->FindValueByNumber(number) == nullptr) return std::nullopt;
  return static_cast<Wire>(number);
}

// The client value of wire value `value` (every wire value has one: client/convert.cc).
template <typename ClientEnum>
ClientEnum FromWire(WireEnumOf<ClientEnum> value) {
  return static_cast<ClientEnum>(static_cast<int>(value));
}

// "gptj": the wire's lowercase name of `value` ("unspecified" for kUnspecified, "" for a
// number the wire does not define).
template <typename ClientEnum>
std::string NameOf(ClientEnum value) {
  const std::optional<WireEnumOf<ClientEnum>> wire = ToWire(value);
  return wire.has_value() ? v1::LowerName(*wire) : std::string();
}

// `text`, kept for the program's life.
std::string_view KeepForever(std::string text);

// "neox|gptj|deepseek": the lowercase names of Wire's values but UNSPECIFIED and `except`.
template <typename Wire>
std::string_view ChoiceList(std::initializer_list<Wire> except = {}) {
  std::string out;
  for (Wire value : v1::SpecifiedValues<Wire>()) {
    if (std::find(except.begin(), except.end(), value) != except.end()) continue;
    if (!out.empty()) out += '|';
    out += v1::LowerName(value);
  }
  return KeepForever(std::move(out));
}

// A choice flag whose values are the names of ClientEnum's wire enum (but `except`).
template <typename ClientEnum>
FlagSpec EnumFlagSpec(std::string_view name, std::string_view help,
                      std::initializer_list<WireEnumOf<ClientEnum>> except = {}) {
  return {name, FlagType::kChoice, "", help, ChoiceList<WireEnumOf<ClientEnum>>(except)};
}

// The value of choice flag `name` of ClientEnum (kUnspecified when absent; the parser has
// checked the value is one of the choices).
template <typename ClientEnum>
ClientEnum EnumFlag(const ParsedFlags& flags, std::string_view name) {
  const std::optional<std::string> text = flags.String(name);
  if (!text.has_value()) return ClientEnum::kUnspecified;
  const std::optional<WireEnumOf<ClientEnum>> wire = v1::ParseEnum<WireEnumOf<ClientEnum>>(*text);
  return wire.has_value() ? FromWire<ClientEnum>(*wire) : ClientEnum::kUnspecified;
}

// The `--dtype` flag of the commands that take or make float tensors (the float names of the
// wire's DType); `help` says which.
FlagSpec FloatDTypeFlag(std::string_view help);

// --dtype; nullopt when absent (the server's default).
std::optional<client::DType> DTypeFlag(const ParsedFlags& flags);

}  // namespace posenc::cli

#endif  // POSENC_CLIENT_CLI_WIRE_NAMES_H_
