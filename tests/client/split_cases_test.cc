// The shared split cases (tests/data/split_cases.json, format in docs/splitting.md), which the
// Python client's tests run too: each case through the C++ client against an in-process server
// with the case's --max_message_bytes (the client splits) and against one without it (one call),
// every output compared byte for byte, and the number of calls the split sent read from the
// small server's posenc_requests_total, which both clients must agree on.
//
// A case's `args` are the request in the proto's JSON mapping with tensors given by dtype and
// shape: they are filled here with deterministic values, parsed into the posenc.v1 request and
// converted to the client's options; the options must convert back to the same request, so a
// field this test forgets to convert fails the case instead of being dropped.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "client/convert.h"
#include "client_test_util.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "nlohmann/json.hpp"
#include "posenc/client.h"
#include "server/server.h"
#include "tests/server/server_process.h"

namespace posenc::client {
namespace {

using nlohmann::json;
using testing::ConnectToPort;
using testing::ExpectSameTensor;

// ---------------------------------------------------------------------------------------------
// Tensors of the cases: deterministic values for float tensors; ids and masks as given.
// ---------------------------------------------------------------------------------------------
Tensor FillTensor(const json& spec) {
  const std::optional<DType> dtype = ParseDType(spec.at("dtype").get<std::string>());
  EXPECT_TRUE(dtype.has_value()) << spec.dump();
  const auto shape = spec.at("shape").get<std::vector<int64_t>>();
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (IsFloatDType(dtype.value_or(DType::kFloat32))) {
    std::vector<double> values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      values[static_cast<size_t>(i)] = static_cast<double>((i * 7919) % 10007) / 5003.5 - 1.0;
    }
    return *Tensor::FromDoubles(values, shape, *dtype);
  }
  std::vector<int64_t> values(static_cast<size_t>(n), 0);
  if (spec.contains("values")) {
    values = spec.at("values").get<std::vector<int64_t>>();
  } else if (spec.contains("iota")) {
    for (int64_t i = 0; i < n; ++i)
      values[static_cast<size_t>(i)] = spec.at("iota").get<int64_t>() + i;
  } else if (spec.contains("left_padding")) {
    const auto padding = spec.at("left_padding").get<std::vector<int64_t>>();
    const int64_t cols = shape.back();
    for (int64_t i = 0; i < n; ++i) {
      values[static_cast<size_t>(i)] =
          i % cols >= padding.at(static_cast<size_t>(i / cols)) ? 1 : 0;
    }
  }
  return *Tensor::FromInt64s(values, shape, *dtype);
}

// Replaces every tensor spec under `node` (an object with dtype and shape, no data) by the
// proto JSON of the filled tensor.
void FillTensors(json& node) {
  if (node.is_object()) {
    if (node.contains("dtype") && node.contains("shape") && !node.contains("data")) {
      const Tensor t = FillTensor(node);
      node = json{{"dtype", "DTYPE_" + std::string(DTypeName(t.dtype))},
                  {"shape", t.shape},
                  {"data", absl::Base64Escape(t.data)}};
      return;
    }
    for (auto& [key, value] : node.items()) FillTensors(value);
  } else if (node.is_array()) {
    for (json& value : node) FillTensors(value);
  }
}

// ---------------------------------------------------------------------------------------------
// posenc.v1 requests -> the client's options (the inverse of client/convert.cc's ToRequest).
// ---------------------------------------------------------------------------------------------
template <typename T>
std::optional<T> Opt(bool has, T value) {
  return has ? std::optional<T>(value) : std::nullopt;
}

Tensor FromWire(const v1::Tensor& tensor) { return *internal::FromProto(tensor, "tensor"); }

Positions FromWire(const v1::Positions& p) {
  switch (p.kind_case()) {
    case v1::Positions::kRange: return Positions::Range(p.range().start(), p.range().count());
    case v1::Positions::kOffsets:
      return Positions::Offsets({p.offsets().offsets().begin(), p.offsets().offsets().end()});
    case v1::Positions::kIds: return Positions::Ids(FromWire(p.ids()));
    case v1::Positions::kCuSeqlens:
      return Positions::CuSeqlens(
          {p.cu_seqlens().cu_seqlens().begin(), p.cu_seqlens().cu_seqlens().end()},
          {p.cu_seqlens().offsets().begin(), p.cu_seqlens().offsets().end()});
    case v1::Positions::kAttentionMask: {
      Positions out;
      out.kind = Positions::Kind::kAttentionMask;
      out.tensor = FromWire(p.attention_mask());
      return out;
    }
    case v1::Positions::KIND_NOT_SET: break;
  }
  return Positions::Default();
}

RopeConfig FromWire(const v1::RopeConfig& c) {
  RopeConfig out;
  out.head_dim = c.head_dim();
  out.rotary_dim = Opt(c.has_rotary_dim(), c.rotary_dim());
  out.base = Opt(c.has_base(), c.base());
  out.style = static_cast<RopeStyle>(c.style());
  const v1::RopeScaling& s = c.scaling();
  RopeScaling& o = out.scaling;
  o.type = static_cast<RopeScalingType>(s.type());
  o.factor = Opt(s.has_factor(), s.factor());
  o.original_max_position_embeddings =
      Opt(s.has_original_max_position_embeddings(), s.original_max_position_embeddings());
  o.beta_fast = Opt(s.has_beta_fast(), s.beta_fast());
  o.beta_slow = Opt(s.has_beta_slow(), s.beta_slow());
  o.truncate = Opt(s.has_truncate(), s.truncate());
  o.mscale = Opt(s.has_mscale(), s.mscale());
  o.mscale_all_dim = Opt(s.has_mscale_all_dim(), s.mscale_all_dim());
  o.attention_factor = Opt(s.has_attention_factor(), s.attention_factor());
  o.low_freq_factor = Opt(s.has_low_freq_factor(), s.low_freq_factor());
  o.high_freq_factor = Opt(s.has_high_freq_factor(), s.high_freq_factor());
  o.long_factor.assign(s.long_factor().begin(), s.long_factor().end());
  o.short_factor.assign(s.short_factor().begin(), s.short_factor().end());
  o.partial_rotary_factor = Opt(s.has_partial_rotary_factor(), s.partial_rotary_factor());
  o.alpha = Opt(s.has_alpha(), s.alpha());
  out.max_position_embeddings = Opt(c.has_max_position_embeddings(), c.max_position_embeddings());
  out.mrope_section.assign(c.mrope_section().begin(), c.mrope_section().end());
  out.mrope_layout = static_cast<MropeLayout>(c.mrope_layout());
  out.inverse = c.inverse();
  out.apply_attention_factor = Opt(c.has_apply_attention_factor(), c.apply_attention_factor());
  out.seq_len = Opt(c.has_seq_len(), c.seq_len());
  out.freq_factors.assign(c.freq_factors().begin(), c.freq_factors().end());
  out.hf_config_json = c.hf_config_json();
  out.layer_type = c.layer_type();
  return out;
}

std::optional<DType> OutputDType(int dtype) {
  if (dtype == v1::DTYPE_UNSPECIFIED) return std::nullopt;
  return *internal::FromProto(static_cast<v1::DType>(dtype), "output_dtype");
}

ApplyRopeOptions FromWire(const v1::ApplyRopeRequest& r) {
  ApplyRopeOptions o;
  o.q = FromWire(r.q());
  if (r.has_k()) o.k = FromWire(r.k());
  o.positions = FromWire(r.positions());
  o.config = FromWire(r.config());
  o.layout = static_cast<TensorLayout>(r.layout());
  return o;
}

AddPositionEncodingOptions FromWire(const v1::AddPositionEncodingRequest& r) {
  AddPositionEncodingOptions o;
  o.x = FromWire(r.x());
  o.positions = FromWire(r.positions());
  if (r.has_sinusoidal()) {
    const v1::SinusoidalParams& s = r.sinusoidal();
    o.sinusoidal = SinusoidalParams{.dim = s.dim(),
                                    .base = Opt(s.has_base(), s.base()),
                                    .layout = static_cast<SinusoidalLayout>(s.layout()),
                                    .freq_scheme = static_cast<FreqScheme>(s.freq_scheme())};
  }
  if (r.has_learned()) {
    LearnedTable& table = o.learned.emplace();
    if (r.learned().has_table_inline()) table.table_inline = FromWire(r.learned().table_inline());
    table.table_name = r.learned().table_name();
    table.table_offset = r.learned().table_offset();
  }
  o.combine = static_cast<Combine>(r.combine());
  o.scale = Opt(r.has_scale(), r.scale());
  o.padding_idx = Opt(r.has_padding_idx(), r.padding_idx());
  return o;
}

// q_len, k_len and the offsets every bias-like request has.
template <typename Options, typename Request>
Options Lengths(const Request& r) {
  Options o;
  o.q_len = r.q_len();
  o.k_len = r.k_len();
  o.query_offset = Opt(r.has_query_offset(), r.query_offset());
  o.output_dtype = OutputDType(r.output_dtype());
  return o;
}

AlibiBiasOptions FromWire(const v1::AlibiBiasRequest& r) {
  auto o = Lengths<AlibiBiasOptions>(r);
  o.num_heads = r.num_heads();
  o.mode = static_cast<AlibiMode>(r.mode());
  o.future = static_cast<FutureMode>(r.future());
  o.max_bias = Opt(r.has_max_bias(), r.max_bias());
  o.form = static_cast<BiasForm>(r.form());
  if (r.has_attention_mask()) o.attention_mask = FromWire(r.attention_mask());
  return o;
}

RelativeBiasOptions FromWire(const v1::RelativeBiasRequest& r) {
  auto o = Lengths<RelativeBiasOptions>(r);
  o.key_offset = Opt(r.has_key_offset(), r.key_offset());
  o.bidirectional = Opt(r.has_bidirectional(), r.bidirectional());
  o.num_buckets = Opt(r.has_num_buckets(), r.num_buckets());
  o.max_distance = Opt(r.has_max_distance(), r.max_distance());
  if (r.has_table_inline()) o.table_inline = FromWire(r.table_inline());
  o.table_name = r.table_name();
  o.form = static_cast<BiasForm>(r.form());
  return o;
}

RelativeEmbeddingOptions FromWire(const v1::RelativeEmbeddingRequest& r) {
  auto o = Lengths<RelativeEmbeddingOptions>(r);
  o.key_offset = Opt(r.has_key_offset(), r.key_offset());
  o.max_relative = r.max_relative();
  if (r.has_table_inline()) o.table_inline = FromWire(r.table_inline());
  o.table_name = r.table_name();
  return o;
}

// ---------------------------------------------------------------------------------------------
// Servers and the request counter.
// ---------------------------------------------------------------------------------------------

// A cpu-backend server (one thread, so that both servers compute alike) with metrics, per
// --max_message_bytes (0: the default), for the whole binary.
server::PosencServer& ServerWithLimit(int64_t max_message_bytes) {
  static auto* const servers = new std::map<int64_t, std::unique_ptr<server::PosencServer>>();
  auto& server = (*servers)[max_message_bytes];
  if (server == nullptr) {
    server::ServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.metrics_address = "127.0.0.1:0";
    options.backend = "cpu";
    options.threads = 1;
    if (max_message_bytes > 0) options.max_message_bytes = max_message_bytes;
    auto started = server::PosencServer::Start(options);
    if (!started.ok()) {
      ADD_FAILURE() << started.status();
      std::abort();
    }
    server = *std::move(started);
  }
  return *server;
}

// posenc_requests_total{method=`method`, code="OK"} of `server`.
int64_t OkCalls(server::PosencServer& server, const std::string& method) {
  const std::string text = server::testing::HttpGet(server.metrics_port(), "/metrics");
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("posenc_requests_total{", 0) != 0 ||
        line.find(absl::StrCat("method=\"", method, "\"")) == std::string::npos ||
        line.find("code=\"OK\"") == std::string::npos) {
      continue;
    }
    return static_cast<int64_t>(std::stod(line.substr(line.rfind(' ') + 1)));
  }
  return 0;
}

void ExpectSame(const Tensor& split, const Tensor& whole) { ExpectSameTensor(split, whole, "y"); }
void ExpectSame(const ApplyRopeResult& split, const ApplyRopeResult& whole) {
  ExpectSameTensor(split.q, whole.q, "q");
  ASSERT_EQ(split.k.has_value(), whole.k.has_value());
  if (whole.k.has_value()) ExpectSameTensor(*split.k, *whole.k, "k");
  EXPECT_EQ(split.derived.seq_len, whole.derived.seq_len);
  EXPECT_EQ(split.derived.inv_freq, whole.derived.inv_freq);
  EXPECT_EQ(split.derived.effective_base, whole.derived.effective_base);
  EXPECT_EQ(split.derived.attention_factor, whole.derived.attention_factor);
  EXPECT_EQ(split.derived.longrope_long_factors, whole.derived.longrope_long_factors);
}
void ExpectSame(const AlibiBiasResult& split, const AlibiBiasResult& whole) {
  ExpectSameTensor(split.bias, whole.bias, "bias");
  ExpectSameTensor(split.slopes, whole.slopes, "slopes");
}

struct Case {
  std::string name;
  std::string op;
  int64_t max_message_bytes = 0;
  int64_t pieces = 0;
  json args;
};

std::vector<Case> LoadCases() {
  std::ifstream in(POSENC_SPLIT_CASES);
  EXPECT_TRUE(in.good()) << "cannot read " << POSENC_SPLIT_CASES;
  const json file = json::parse(in, nullptr, /*allow_exceptions=*/false);
  std::vector<Case> cases;
  if (!file.is_object() || !file.contains("cases")) {
    ADD_FAILURE() << POSENC_SPLIT_CASES << ": expected {\"cases\": [...]}";
    return cases;
  }
  for (const json& c : file.at("cases")) {
    cases.push_back(
        {c.at("name"), c.at("op"), c.at("max_message_bytes"), c.at("pieces"), c.at("args")});
  }
  return cases;
}

// Runs `c` with the v1 request type `Request` through `method`: the split client against the
// small server, the reference client against the unlimited one.
template <typename Request, typename Options, typename Result>
void RunCase(const Case& c, const std::string& rpc,
             absl::StatusOr<Result> (Client::*method)(const Options&, const CallOptions&) const) {
  json args = c.args;
  FillTensors(args);
  Request request;
  const auto parsed = google::protobuf::util::JsonStringToMessage(args.dump(), &request);
  ASSERT_TRUE(parsed.ok()) << parsed.ToString();
  const Options options = FromWire(request);
  const auto round_trip = internal::ToRequest(options);
  ASSERT_TRUE(round_trip.ok()) << round_trip.status();
  ASSERT_TRUE(google::protobuf::util::MessageDifferencer::Equivalent(request, *round_trip))
      << "a field of the case is lost converting it to the client's options:\n"
      << request.ShortDebugString().substr(0, 2000) << "\nvs\n"
      << round_trip->ShortDebugString().substr(0, 2000);

  server::PosencServer& small = ServerWithLimit(c.max_message_bytes);
  const auto split_client = ConnectToPort(small.port());
  const auto whole_client = ConnectToPort(ServerWithLimit(0).port());
  ASSERT_NE(split_client, nullptr);
  ASSERT_NE(whole_client, nullptr);
  const int64_t before = OkCalls(small, rpc);
  const absl::StatusOr<Result> split = ((*split_client).*method)(options, CallOptions{});
  const int64_t pieces = OkCalls(small, rpc) - before;
  const absl::StatusOr<Result> whole = ((*whole_client).*method)(options, CallOptions{});
  ASSERT_TRUE(split.ok()) << split.status();
  ASSERT_TRUE(whole.ok()) << whole.status();
  ExpectSame(*split, *whole);
  EXPECT_EQ(pieces, c.pieces) << "the calls the split sent";
  EXPECT_GT(pieces, 1) << "a case that is not split tests nothing";
}

TEST(SplitCasesTest, EveryCaseIsByteIdenticalToOneCallInTheSameNumberOfPieces) {
  const std::vector<Case> cases = LoadCases();
  EXPECT_GE(cases.size(), 20u);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    if (c.op == "apply_rope") {
      RunCase<v1::ApplyRopeRequest>(c, "ApplyRope", &Client::ApplyRope);
    } else if (c.op == "add_position_encoding") {
      RunCase<v1::AddPositionEncodingRequest>(c, "AddPositionEncoding",
                                              &Client::AddPositionEncoding);
    } else if (c.op == "alibi_bias") {
      RunCase<v1::AlibiBiasRequest>(c, "AlibiBias", &Client::AlibiBias);
    } else if (c.op == "relative_bias") {
      RunCase<v1::RelativeBiasRequest>(c, "RelativeBias", &Client::RelativeBias);
    } else if (c.op == "relative_embedding") {
      RunCase<v1::RelativeEmbeddingRequest>(c, "RelativeEmbedding", &Client::RelativeEmbedding);
    } else {
      ADD_FAILURE() << "unknown op " << c.op;
    }
  }
}

}  // namespace
}  // namespace posenc::client
