// The wire's vocabulary (proto/posenc/v1/vocabulary.h) and every mirror of a wire enum: each
// value of each posenc.v1 enum is walked through the mirrors, so adding a value to the .proto
// fails here until every mirror has it.
#include "proto/posenc/v1/vocabulary.h"

#include <string>

#include "gtest/gtest.h"
#include "kernels/absolute/add_position_encoding.h"
#include "kernels/absolute/sinusoidal.h"
#include "kernels/analysis/analysis.h"
#include "kernels/bias/alibi.h"
#include "kernels/common/types.h"
#include "kernels/multimodal/multimodal_positions.h"
#include "kernels/multimodal/vision_positions.h"
#include "kernels/rope/apply_rope.h"
#include "kernels/rope/config.h"
#include "kernels/rope/rope_cache.h"
#include "posenc/v1/posenc.pb.h"
#include "proto/posenc/v1/wire_dtype.h"

namespace posenc::v1 {
namespace {

TEST(VocabularyTest, NamesComeFromTheDescriptorsLessTheEnumPrefix) {
  EXPECT_EQ(WireName(ROPE_STYLE_GPTJ), "GPTJ");
  EXPECT_EQ(LowerName(ROPE_SCALING_LLAMA3), "llama3");
  EXPECT_EQ(WireName(DTYPE_BFLOAT16), "BFLOAT16");
  EXPECT_EQ(WireName(TENSOR_LAYOUT_BHSD), "BHSD");
  EXPECT_EQ(WireName(static_cast<RopeStyle>(99)), "");
  EXPECT_EQ(WireName(ROPE_STYLE_UNSPECIFIED), "UNSPECIFIED");
}

TEST(VocabularyTest, ParseTakesEverySpellingButUnspecified) {
  EXPECT_EQ(ParseEnum<RopeStyle>("gptj"), ROPE_STYLE_GPTJ);
  EXPECT_EQ(ParseEnum<RopeStyle>("GPTJ"), ROPE_STYLE_GPTJ);
  EXPECT_EQ(ParseEnum<RopeStyle>("ROPE_STYLE_GPTJ"), ROPE_STYLE_GPTJ);
  EXPECT_EQ(ParseEnum<RopeStyle>("unspecified"), std::nullopt);
  EXPECT_EQ(ParseEnum<RopeStyle>("ROPE_STYLE_UNSPECIFIED"), std::nullopt);
  EXPECT_EQ(ParseEnum<RopeStyle>("gpt-j"), std::nullopt);
  EXPECT_EQ(ParseEnum<DType>("float16"), DTYPE_FLOAT16);
}

TEST(VocabularyTest, ChoicesListTheSpecifiedValuesInOrder) {
  EXPECT_EQ(Choices<RopeStyle>(), "neox|gptj|deepseek");
  EXPECT_EQ(Choices<Combine>(", "), "add, concat");
  EXPECT_EQ(SpecifiedValues<BiasForm>().size(), 3u);
}

// Every enum: each specified value parses back from its lower name, and the prefix rule holds
// (value 0 is *_UNSPECIFIED and every other value starts with the same prefix).
template <typename E>
void ExpectRoundTrip() {
  const google::protobuf::EnumDescriptor* d = Descriptor<E>();
  ASSERT_EQ(d->FindValueByNumber(0)->name().substr(d->FindValueByNumber(0)->name().size() - 11),
            "UNSPECIFIED")
      << d->name();
  for (E value : SpecifiedValues<E>()) {
    const std::string lower = LowerName(value);
    EXPECT_FALSE(lower.empty()) << d->name();
    EXPECT_EQ(ParseEnum<E>(lower), value) << d->name() << " " << lower;
    EXPECT_EQ(std::string(d->FindValueByNumber(static_cast<int>(value))->name()),
              std::string(d->FindValueByNumber(0)->name())
                      .substr(0, d->FindValueByNumber(0)->name().size() - 11) +
                  std::string(WireName(value)))
        << d->name();
  }
}

TEST(VocabularyTest, EveryEnumRoundTrips) {
  ExpectRoundTrip<DType>();
  ExpectRoundTrip<SinusoidalLayout>();
  ExpectRoundTrip<FreqScheme>();
  ExpectRoundTrip<Combine>();
  ExpectRoundTrip<RopeStyle>();
  ExpectRoundTrip<RopeScalingType>();
  ExpectRoundTrip<MropeLayout>();
  ExpectRoundTrip<RopeCacheLayout>();
  ExpectRoundTrip<TensorLayout>();
  ExpectRoundTrip<AlibiMode>();
  ExpectRoundTrip<FutureMode>();
  ExpectRoundTrip<BiasForm>();
  ExpectRoundTrip<MultimodalFamily>();
  ExpectRoundTrip<VisionTower>();
  ExpectRoundTrip<SharedMemoryKind>();
}

// The kernels' own names (used in the kernels' messages, which cannot link protobuf) are the
// wire's: dtypes by WireName, scaling types and styles by LowerName (the config.json normalizer,
// kernels/hf, reports pairings by RopeStyleName).
TEST(VocabularyTest, KernelNamesAreTheWireNames) {
  for (DType wire : SpecifiedValues<DType>()) {
    const std::optional<kernels::DType> kernel = FromWireDType(wire);
    ASSERT_TRUE(kernel.has_value()) << WireName(wire);
    EXPECT_EQ(std::string(kernels::DTypeName(*kernel)), std::string(WireName(wire)));
    EXPECT_EQ(ToWireDType(*kernel), wire);
  }
  for (RopeScalingType wire : SpecifiedValues<RopeScalingType>()) {
    const auto kernel = KernelFromWire<kernels::RopeScalingType>(wire);
    EXPECT_EQ(std::string(kernels::RopeScalingTypeName(kernel)), LowerName(wire));
    EXPECT_EQ(WireFromKernel<RopeScalingType>(kernel), wire);
  }
  for (RopeStyle wire : SpecifiedValues<RopeStyle>()) {
    const auto kernel = KernelFromWire<kernels::RopeStyle>(wire);
    EXPECT_EQ(std::string(kernels::RopeStyleName(kernel)), LowerName(wire));
    EXPECT_EQ(WireFromKernel<RopeStyle>(kernel), wire);
  }
}

// Each kernels' mirror has exactly the wire's specified values (kernel = wire - 1): `last` is the
// mirror's last enumerator. A value added to the .proto fails here until the kernels have it.
template <typename E, typename Kernel>
void ExpectKernelMirror(Kernel last) {
  const std::vector<E> values = SpecifiedValues<E>();
  EXPECT_EQ(static_cast<size_t>(last) + 1, values.size()) << Descriptor<E>()->name();
  for (E value : values) {
    EXPECT_EQ(WireFromKernel<E>(KernelFromWire<Kernel>(value)), value) << WireName(value);
  }
  EXPECT_EQ(WireFromKernel<E>(last), values.back()) << Descriptor<E>()->name();
}

TEST(VocabularyTest, EveryKernelMirrorHasEveryWireValue) {
  ExpectKernelMirror<SinusoidalLayout>(kernels::SinusoidalLayout::kConcat);
  ExpectKernelMirror<FreqScheme>(kernels::FreqScheme::kT2t);
  ExpectKernelMirror<Combine>(kernels::Combine::kConcat);
  ExpectKernelMirror<RopeStyle>(kernels::RopeStyle::kDeepseek);
  ExpectKernelMirror<RopeScalingType>(kernels::RopeScalingType::kProportional);
  ExpectKernelMirror<MropeLayout>(kernels::MropeLayout::kVision2dEvenOdd);
  ExpectKernelMirror<RopeCacheLayout>(kernels::RopeCacheLayout::kComplex);
  ExpectKernelMirror<MultimodalFamily>(kernels::MultimodalFamily::kErnie45Vl);
  ExpectKernelMirror<VisionTower>(kernels::VisionTower::kLlama4);
  ExpectKernelMirror<TensorLayout>(kernels::TensorLayout::kTHD);
  ExpectKernelMirror<AlibiMode>(kernels::AlibiMode::kBloom);
  ExpectKernelMirror<FutureMode>(kernels::FutureMode::kLinear);
  ExpectKernelMirror<BiasForm>(kernels::BiasForm::kBuckets);
  ExpectKernelMirror<AnalysisProperty>(kernels::AnalysisProperty::kSimilarity);
}

}  // namespace
}  // namespace posenc::v1
