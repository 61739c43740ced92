// Named tables: .npy and .safetensors files written here byte by byte, loaded by
// LoadTableDirectory and by a server started with tables_dir, used by name in
// AddPositionEncoding, RelativeBias and RelativeEmbedding, and rejected when malformed.
#include "server/table_loader.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "posenc/v1/posenc.grpc.pb.h"
#include "server/server.h"
#include "server/tables.h"
#include "tests/common/npy.h"
#include "tests/server/server_test_util.h"

namespace posenc::server {
namespace {

namespace fs = std::filesystem;
using kernels::DType;
using posenc::testing::NpyDict;
using testing::Bytes;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------------------------
// File builders
// ---------------------------------------------------------------------------------------------

std::string LittleEndian(uint64_t value, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  return out;
}

// A .npy file by hand (tests/common/npy.h).
std::string Npy(const std::string& dict, const std::string& data, int major = 1) {
  return posenc::testing::NpyFileBytes(dict, data, major);
}

// A .safetensors file: 8-byte little-endian header length, the JSON header, the data section.
std::string Safetensors(const std::string& header, const std::string& data) {
  return LittleEndian(header.size(), 8) + header + data;
}

// Deterministic finite values of every float dtype, as raw little-endian bytes.
std::string F32Bytes(int64_t n, float seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = seed + 0.125f * static_cast<float>(i % 13) - 0.5f * static_cast<float>(i % 5);
  }
  return Bytes(v);
}
std::string F64Bytes(int64_t n, double seed) {
  std::vector<double> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = seed + 0.3 * static_cast<double>(i % 11) - 0.7 * static_cast<double>(i % 3);
  }
  return Bytes(v);
}
std::string F16Bytes(int64_t n) {  // exponents of 0.125 .. 1, mixed signs
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<uint16_t>(0x3000 + (i * 37) % 0x0c00 + (i % 3 == 0 ? 0x8000 : 0));
  }
  return Bytes(v);
}
std::string BF16Bytes(int64_t n) {  // the upper halves of float32 values
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) {
    const float f = 0.5f + 0.01f * static_cast<float>(i) - (i % 4 == 0 ? 2.0f : 0.0f);
    uint32_t bits = 0;
    std::memcpy(&bits, &f, sizeof(bits));
    v[i] = static_cast<uint16_t>(bits >> 16);
  }
  return Bytes(v);
}

v1::Tensor WireTensor(v1::DType dtype, const std::vector<int64_t>& shape,
                      const std::string& bytes) {
  v1::Tensor t;
  t.set_dtype(dtype);
  for (int64_t d : shape) t.add_shape(d);
  t.set_data(bytes);
  return t;
}

// ---------------------------------------------------------------------------------------------
// The tables of the end-to-end tests
// ---------------------------------------------------------------------------------------------

// wpe.npy: a learned position table FLOAT32 [16, 4].
const std::string& WpeBytes() {
  static const std::string* bytes = new std::string(F32Bytes(16 * 4, 0.25f));
  return *bytes;
}
// pos16.npy: FLOAT16 [16, 4] (format 2.0).
const std::string& Pos16Bytes() {
  static const std::string* bytes = new std::string(F16Bytes(16 * 4));
  return *bytes;
}
// rel.npy: a Shaw table FLOAT64 [2K+1 = 5, 3] (format 3.0).
const std::string& RelBytes() {
  static const std::string* bytes = new std::string(F64Bytes(5 * 3, -0.4));
  return *bytes;
}
// t5.safetensors: relative_attention_bias F32 [32, 2], bias_bf16 BF16 [32, 3],
// emb_f16 F16 [5, 2], emb_f64 F64 [3, 2], plus __metadata__.
const std::string& T5BiasBytes() {
  static const std::string* bytes = new std::string(F32Bytes(32 * 2, -1.5f));
  return *bytes;
}
const std::string& T5Bf16Bytes() {
  static const std::string* bytes = new std::string(BF16Bytes(32 * 3));
  return *bytes;
}
const std::string& T5F16Bytes() {
  static const std::string* bytes = new std::string(F16Bytes(5 * 2));
  return *bytes;
}
const std::string& T5F64Bytes() {
  static const std::string* bytes = new std::string(F64Bytes(3 * 2, 2.0));
  return *bytes;
}

std::string T5File() {
  // Data in a different order than the header's keys, to exercise the offsets.
  const std::string data = T5F64Bytes() + T5BiasBytes() + T5Bf16Bytes() + T5F16Bytes();
  const size_t f64 = T5F64Bytes().size();
  const size_t f32 = T5BiasBytes().size();
  const size_t bf16 = T5Bf16Bytes().size();
  const size_t f16 = T5F16Bytes().size();
  const std::string header = absl::StrCat(
      R"({"__metadata__": {"format": "pt"},)",
      R"( "relative_attention_bias": {"dtype": "F32", "shape": [32, 2], "data_offsets": [)", f64,
      ", ", f64 + f32, "]},",
      R"( "bias_bf16": {"dtype": "BF16", "shape": [32, 3], "data_offsets": [)", f64 + f32, ", ",
      f64 + f32 + bf16, "]},", R"( "emb_f16": {"dtype": "F16", "shape": [5, 2], "data_offsets": [)",
      f64 + f32 + bf16, ", ", f64 + f32 + bf16 + f16, "]},",
      R"( "emb_f64": {"dtype": "F64", "shape": [3, 2], "data_offsets": [0, )", f64, "]}}   ");
  return Safetensors(header, data);
}

class TableLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           absl::StrCat("posenc_tables_", info->name(), "_", ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  static void Write(const fs::path& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good()) << path;
  }

  // The files of the end-to-end tests, plus one that is ignored.
  void WriteGoodTables() {
    Write(dir_ / "wpe.npy", Npy(NpyDict("<f4", "(16, 4)"), WpeBytes()));
    Write(dir_ / "pos16.npy", Npy(NpyDict("<f2", "(16, 4)"), Pos16Bytes(), /*major=*/2));
    Write(dir_ / "rel.npy", Npy(NpyDict("<f8", "(5, 3)"), RelBytes(), /*major=*/3));
    Write(dir_ / "t5.safetensors", T5File());
    Write(dir_ / "README.txt", "not a table");
  }

  std::unique_ptr<PosencServer> StartWithTables() {
    ServerOptions options = testing::LocalServerOptions("reference");
    options.tables_dir = dir_.string();
    auto server = PosencServer::Start(options);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? std::move(server).value() : nullptr;
  }

  fs::path dir_;
};

// ---------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------

TEST_F(TableLoaderTest, LoadsEveryDtypeFromNpyAndSafetensors) {
  WriteGoodTables();
  TableRegistry registry;
  ASSERT_TRUE(LoadTableDirectory(dir_.string(), &registry).ok());

  struct Expected {
    DType dtype;
    kernels::Shape shape;
    std::string bytes;
  };
  const std::map<std::string, Expected> expected = {
      {"pos16", {DType::kFloat16, {16, 4}, Pos16Bytes()}},
      {"rel", {DType::kFloat64, {5, 3}, RelBytes()}},
      {"t5/bias_bf16", {DType::kBFloat16, {32, 3}, T5Bf16Bytes()}},
      {"t5/emb_f16", {DType::kFloat16, {5, 2}, T5F16Bytes()}},
      {"t5/emb_f64", {DType::kFloat64, {3, 2}, T5F64Bytes()}},
      {"t5/relative_attention_bias", {DType::kFloat32, {32, 2}, T5BiasBytes()}},
      {"wpe", {DType::kFloat32, {16, 4}, WpeBytes()}},
  };
  const std::vector<const TableRegistry::Entry*> tables = registry.List();
  ASSERT_EQ(tables.size(), expected.size());
  for (const TableRegistry::Entry* entry : tables) {
    SCOPED_TRACE(entry->name);
    auto it = expected.find(entry->name);
    ASSERT_NE(it, expected.end());
    EXPECT_EQ(entry->dtype, it->second.dtype);
    EXPECT_EQ(entry->shape, it->second.shape);
    EXPECT_EQ(entry->bytes, it->second.bytes);
  }
}

TEST_F(TableLoaderTest, AcceptsHeaderVariantsNumpyWrites) {
  // Python 2 longs, no trailing comma, double quotes, keys in another order, format 2.0.
  const std::string data = F32Bytes(6, 1.0f);
  ASSERT_TRUE(
      ParseNpy(Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3L, 2L), }", data), "a")
          .ok());
  ASSERT_TRUE(
      ParseNpy(Npy(R"({"shape": (3, 2), "fortran_order": False, "descr": "<f4"})", data, 2), "b")
          .ok());
  auto table = ParseNpy(Npy("{'descr':'<f4','fortran_order':False,'shape':(3,2)}", data), "c");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->name, "c");
  EXPECT_EQ(table->shape, (kernels::Shape{3, 2}));
  EXPECT_EQ(table->bytes, data);
  // A safetensors file with only metadata holds no tables.
  auto none = ParseSafetensors(Safetensors(R"({"__metadata__": {}})", ""), "m");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
}

TEST_F(TableLoaderTest, BigEndianNpyLoadsByteSwapped) {
  // The same float32 and float64 tables written big-endian ('>f4', '>f8') load as the
  // little-endian ones.
  const std::string f32 = F32Bytes(6, 1.0f);
  const std::string f64 = F64Bytes(6, -2.0);
  const auto swapped = [](const std::string& little, size_t item) {
    std::string big = little;
    for (size_t i = 0; i < big.size(); i += item)
      std::reverse(big.begin() + i, big.begin() + i + item);
    return big;
  };
  auto table32 = ParseNpy(Npy(NpyDict(">f4", "(2, 3)"), swapped(f32, 4)), "be32");
  ASSERT_TRUE(table32.ok()) << table32.status();
  EXPECT_EQ(table32->dtype, DType::kFloat32);
  EXPECT_EQ(table32->shape, (kernels::Shape{2, 3}));
  EXPECT_EQ(table32->bytes, f32);
  auto table64 = ParseNpy(Npy(NpyDict(">f8", "(3, 2)"), swapped(f64, 8), /*major=*/2), "be64");
  ASSERT_TRUE(table64.ok()) << table64.status();
  EXPECT_EQ(table64->dtype, DType::kFloat64);
  EXPECT_EQ(table64->bytes, f64);
}

TEST_F(TableLoaderTest, EmptyDirectoryLoadsNothingMissingDirectoryIsAnError) {
  Write(dir_ / "notes.md", "ignored");
  fs::create_directories(dir_ / "sub");
  Write(dir_ / "sub" / "deeper.npy", "not searched, not even parsed");
  TableRegistry registry;
  ASSERT_TRUE(LoadTableDirectory(dir_.string(), &registry).ok());
  EXPECT_TRUE(registry.List().empty());

  const std::string missing = (dir_ / "missing").string();
  absl::Status status = LoadTableDirectory(missing, &registry);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr(missing + ": no such directory"));

  ServerOptions options = testing::LocalServerOptions();
  options.tables_dir = missing;
  auto server = PosencServer::Start(options);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.status().message(), HasSubstr("--tables: " + missing));

  const std::string file = (dir_ / "notes.md").string();
  status = LoadTableDirectory(file, &registry);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("not a directory"));
}

TEST_F(TableLoaderTest, NameAlreadyInTheRegistryIsAnError) {
  Write(dir_ / "wpe.npy", Npy(NpyDict("<f4", "(16, 4)"), WpeBytes()));
  TableRegistry registry;
  ASSERT_TRUE(registry.Add("wpe", DType::kFloat32, {1, 1}, std::string(4, '\0')).ok());
  const absl::Status status = LoadTableDirectory(dir_.string(), &registry);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr((dir_ / "wpe.npy").string() + ": table \"wpe\""));
  EXPECT_THAT(status.message(), HasSubstr("already loaded"));
}

// ---------------------------------------------------------------------------------------------
// End to end through an in-process server
// ---------------------------------------------------------------------------------------------

class TableServerTest : public TableLoaderTest {
 protected:
  void SetUp() override {
    TableLoaderTest::SetUp();
    WriteGoodTables();
    server_ = StartWithTables();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::PositionEncoding::NewStub(server_->InProcessChannel());
  }

  template <typename Request, typename Response>
  grpc::Status Call(grpc::Status (v1::PositionEncoding::Stub::*method)(grpc::ClientContext*,
                                                                       const Request&, Response*),
                    const Request& request, Response* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return (stub_.get()->*method)(&context, request, response);
  }

  // Calls `method` with `request`, whose table is given by name, then again with `inline_table`
  // where `inline_slot(&request)` points (which clears the name); expects both calls to succeed
  // with byte-identical responses and returns the response.
  template <typename Request, typename Response, typename InlineSlot>
  Response ByNameEqualsInline(grpc::Status (v1::PositionEncoding::Stub::*method)(
                                  grpc::ClientContext*, const Request&, Response*),
                              Request request, const v1::Tensor& inline_table,
                              InlineSlot inline_slot) {
    Response by_name;
    grpc::Status status = Call(method, request, &by_name);
    EXPECT_TRUE(status.ok()) << status.error_message();
    *inline_slot(&request) = inline_table;
    Response inline_response;
    status = Call(method, request, &inline_response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(by_name.SerializeAsString(), inline_response.SerializeAsString());
    return by_name;
  }

  std::unique_ptr<PosencServer> server_;
  std::unique_ptr<v1::PositionEncoding::Stub> stub_;
};

TEST_F(TableServerTest, GetServerInfoListsTheTables) {
  v1::GetServerInfoResponse info;
  ASSERT_TRUE(
      Call(&v1::PositionEncoding::Stub::GetServerInfo, v1::GetServerInfoRequest(), &info).ok());
  std::map<std::string, std::pair<v1::DType, std::vector<int64_t>>> listed;
  for (const v1::TableInfo& table : info.tables()) {
    listed[table.name()] = {table.dtype(), {table.shape().begin(), table.shape().end()}};
  }
  const std::map<std::string, std::pair<v1::DType, std::vector<int64_t>>> expected = {
      {"pos16", {v1::DTYPE_FLOAT16, {16, 4}}},
      {"rel", {v1::DTYPE_FLOAT64, {5, 3}}},
      {"t5/bias_bf16", {v1::DTYPE_BFLOAT16, {32, 3}}},
      {"t5/emb_f16", {v1::DTYPE_FLOAT16, {5, 2}}},
      {"t5/emb_f64", {v1::DTYPE_FLOAT64, {3, 2}}},
      {"t5/relative_attention_bias", {v1::DTYPE_FLOAT32, {32, 2}}},
      {"wpe", {v1::DTYPE_FLOAT32, {16, 4}}},
  };
  EXPECT_EQ(listed, expected);
  EXPECT_EQ(info.tables_size(), 7);
}

TEST_F(TableServerTest, AddPositionEncodingByNameEqualsInline) {
  struct Case {
    std::string name;
    v1::Tensor inline_table;
  };
  for (const Case& c : {Case{"wpe", WireTensor(v1::DTYPE_FLOAT32, {16, 4}, WpeBytes())},
                        Case{"pos16", WireTensor(v1::DTYPE_FLOAT16, {16, 4}, Pos16Bytes())}}) {
    SCOPED_TRACE(c.name);
    v1::AddPositionEncodingRequest request;
    *request.mutable_x() = testing::FloatTensor({2, 5, 4});
    request.mutable_positions()->mutable_range()->set_start(3);
    request.set_scale(2.0);
    request.mutable_learned()->set_table_offset(2);
    request.mutable_learned()->set_table_name(c.name);
    const v1::AddPositionEncodingResponse response =
        ByNameEqualsInline(&v1::PositionEncoding::Stub::AddPositionEncoding, request,
                           c.inline_table, [](v1::AddPositionEncodingRequest* r) {
                             return r->mutable_learned()->mutable_table_inline();
                           });
    EXPECT_EQ(response.y().shape_size(), 3);
  }
}

TEST_F(TableServerTest, RelativeBiasByNameEqualsInline) {
  struct Case {
    std::string name;
    v1::Tensor inline_table;
    v1::BiasForm form;
  };
  const v1::Tensor f32 = WireTensor(v1::DTYPE_FLOAT32, {32, 2}, T5BiasBytes());
  const v1::Tensor bf16 = WireTensor(v1::DTYPE_BFLOAT16, {32, 3}, T5Bf16Bytes());
  for (const Case& c : {Case{"t5/relative_attention_bias", f32, v1::BIAS_FORM_FULL},
                        Case{"t5/relative_attention_bias", f32, v1::BIAS_FORM_COMPACT},
                        Case{"t5/bias_bf16", bf16, v1::BIAS_FORM_FULL}}) {
    SCOPED_TRACE(c.name);
    v1::RelativeBiasRequest request;
    request.set_q_len(7);
    request.set_k_len(9);
    request.set_form(c.form);
    request.set_table_name(c.name);
    const v1::RelativeBiasResponse response =
        ByNameEqualsInline(&v1::PositionEncoding::Stub::RelativeBias, request, c.inline_table,
                           [](v1::RelativeBiasRequest* r) { return r->mutable_table_inline(); });
    EXPECT_GT(response.bias().data().size(), 0u);
  }
}

TEST_F(TableServerTest, RelativeEmbeddingByNameEqualsInline) {
  struct Case {
    std::string name;
    v1::Tensor inline_table;
    int64_t max_relative;
  };
  for (const Case& c :
       {Case{"rel", WireTensor(v1::DTYPE_FLOAT64, {5, 3}, RelBytes()), 2},
        Case{"t5/emb_f16", WireTensor(v1::DTYPE_FLOAT16, {5, 2}, T5F16Bytes()), 2},
        Case{"t5/emb_f64", WireTensor(v1::DTYPE_FLOAT64, {3, 2}, T5F64Bytes()), 1}}) {
    SCOPED_TRACE(c.name);
    v1::RelativeEmbeddingRequest request;
    request.set_q_len(4);
    request.set_k_len(6);
    request.set_max_relative(c.max_relative);
    request.set_output_dtype(v1::DTYPE_FLOAT64);
    request.set_table_name(c.name);
    const v1::RelativeEmbeddingResponse response = ByNameEqualsInline(
        &v1::PositionEncoding::Stub::RelativeEmbedding, request, c.inline_table,
        [](v1::RelativeEmbeddingRequest* r) { return r->mutable_table_inline(); });
    EXPECT_EQ(response.embeddings().shape_size(), 3);
  }
}

TEST_F(TableServerTest, UnknownNameIsInvalidArgumentListingTheLoadedTables) {
  const std::string loaded =
      "(loaded: pos16, rel, t5/bias_bf16, t5/emb_f16, t5/emb_f64, t5/relative_attention_bias, "
      "wpe)";
  v1::RelativeBiasRequest bias;
  bias.set_q_len(2);
  bias.set_k_len(2);
  bias.set_table_name("t5/nope");
  v1::RelativeBiasResponse bias_response;
  grpc::Status status = Call(&v1::PositionEncoding::Stub::RelativeBias, bias, &bias_response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("table_name: no table named \"t5/nope\""));
  EXPECT_THAT(status.error_message(), HasSubstr(loaded));

  v1::AddPositionEncodingRequest add;
  *add.mutable_x() = testing::FloatTensor({1, 3, 4});
  add.mutable_learned()->set_table_name("wpe.npy");
  v1::AddPositionEncodingResponse add_response;
  status = Call(&v1::PositionEncoding::Stub::AddPositionEncoding, add, &add_response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("learned.table_name: no table named \"wpe.npy\""));
  EXPECT_THAT(status.error_message(), HasSubstr(loaded));

  v1::RelativeEmbeddingRequest embedding;
  embedding.set_q_len(2);
  embedding.set_k_len(2);
  embedding.set_max_relative(1);
  embedding.set_table_name("");
  v1::RelativeEmbeddingResponse embedding_response;
  status = Call(&v1::PositionEncoding::Stub::RelativeEmbedding, embedding, &embedding_response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("table_name: no table named \"\""));
}

TEST_F(TableServerTest, PositionPastANamedTableIsOutOfRange) {
  v1::AddPositionEncodingRequest request;
  *request.mutable_x() = testing::FloatTensor({1, 4, 4});
  request.mutable_positions()->mutable_range()->set_start(14);  // rows 14..17 of 16
  request.mutable_learned()->set_table_name("wpe");
  v1::AddPositionEncodingResponse response;
  const grpc::Status status =
      Call(&v1::PositionEncoding::Stub::AddPositionEncoding, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::OUT_OF_RANGE) << status.error_message();
}

// ---------------------------------------------------------------------------------------------
// Malformed files: Start fails, naming the file and the problem
// ---------------------------------------------------------------------------------------------

struct BadFile {
  std::string file;
  std::string bytes;  // ignored when `directory` is set
  std::string problem;
  bool directory = false;
};

std::string Entry(const std::string& name, const std::string& body) {
  return absl::StrCat("{\"", name, "\": ", body, "}");
}

// A .safetensors case of tensor "x" whose entry is XEntry(key, value).
struct BadXKey {
  const char* file;
  const char* key;
  const char* value;
  const char* problem;
};

// The header entry of a good tensor of 24 bytes,
//   {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
// but for `key`: set to `value` (JSON text), or left out where `value` is null.
std::string XEntry(const std::string& key, const char* value) {
  std::vector<std::string> fields;
  for (auto [k, v] : {std::pair<std::string, const char*>{"dtype", "\"F32\""},
                      {"shape", "[2, 3]"},
                      {"data_offsets", "[0, 24]"}}) {
    if (k == key) v = value;
    if (v != nullptr) fields.push_back(absl::StrCat("\"", k, "\": ", v));
  }
  return absl::StrCat("{", absl::StrJoin(fields, ", "), "}");
}

std::vector<BadFile> BadFiles() {
  const std::string f32x6 = F32Bytes(6, 0.5f);
  const std::string ok_npy_header = NpyDict("<f4", "(2, 3)");
  std::string version4 = Npy(ok_npy_header, f32x6);
  version4[6] = 4;
  std::vector<BadFile> cases = {
      // .npy
      {"magic.npy", "NOTNUMPY" + std::string(100, ' '), "bad magic"},
      {"short.npy", std::string("\x93NUMPY\x01", 7), "truncated: 7 bytes"},
      {"headlen.npy", std::string("\x93NUMPY\x01\x00\xe8\x03{'descr'", 17),
       "header length 1000 runs past the end of the file (7 bytes follow the preamble)"},
      {"version.npy", version4, "unsupported .npy format version 4.0"},
      {"dict.npy", Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3", f32x6),
       ".npy header: shape: expected ',' or ')'"},
      {"key.npy", Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", f32x6),
       "unexpected key 'x'"},
      {"nokey.npy", Npy("{'descr': '<f4', 'shape': (2, 3)}", f32x6),
       "expected the keys descr, fortran_order and shape"},
      {"fortran.npy", Npy(NpyDict("<f4", "(2, 3)", /*fortran=*/true), f32x6),
       "fortran_order is True"},
      {"int.npy", Npy(NpyDict("<i4", "(2, 3)"), f32x6), "dtype '<i4' is not a float dtype"},
      {"int64.npy", Npy(NpyDict("<i8", "(2, 3)"), f32x6 + f32x6),
       "dtype '<i8' is not a float dtype"},
      {"bool.npy", Npy(NpyDict("|b1", "(2, 3)"), std::string(6, '\1')),
       "dtype '|b1' is not a float dtype"},
      {"complex.npy", Npy(NpyDict("<c8", "(2, 3)"), f32x6 + f32x6),
       "npy dtype '<c8' is not supported"},
      {"bf16.npy", Npy(NpyDict("<V2", "(2, 3)"), std::string(12, '\0')),
       "bfloat16 has no .npy dtype code"},
      {"structured.npy",
       Npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2, 3), }", f32x6),
       "structured (record) dtypes are not supported"},
      {"rank1.npy", Npy(NpyDict("<f4", "(6,)"), f32x6), "shape (6,): expected rank 2"},
      {"rank3.npy", Npy(NpyDict("<f4", "(1, 2, 3)"), f32x6), "got rank 3"},
      {"zero.npy", Npy(NpyDict("<f4", "(0, 3)"), ""), "every dimension must be >= 1"},
      {"overflow.npy", Npy(NpyDict("<f8", "(4611686018427387904, 4)"), f32x6),
       "smaller than 2^63 bytes"},
      {"toolong.npy", Npy(NpyDict("<f4", "(99999999999999999999, 4)"), f32x6),
       "dimension too large"},
      {"data.npy", Npy(ok_npy_header, f32x6.substr(0, 20)),
       "data holds 20 bytes, expected 24 ('<f4' (2, 3))"},
      {"trailing.npy", Npy(ok_npy_header, f32x6 + "x"), "data holds 25 bytes, expected 24"},
      {"dir.npy", "", "not a regular file", /*directory=*/true},
      // .safetensors
      {"tiny.safetensors", "abcd", "truncated: 4 bytes"},
      {"headlen.safetensors", LittleEndian(1000, 8) + "{}",
       "header length 1000 runs past the end of the file (2 bytes follow the length)"},
      {"huge.safetensors", LittleEndian(uint64_t{1} << 63, 8) + "{}",
       "header length 9223372036854775808 exceeds the limit"},
      {"json.safetensors", Safetensors(R"({"x": {"dtype": "F32",)", ""),
       "header is not valid JSON"},
      {"array.safetensors", Safetensors("[1, 2]", ""), "header: expected a JSON object, got array"},
      {"dtype.safetensors",
       Safetensors(Entry("x", R"({"dtype": "Q8", "shape": [2, 3], "data_offsets": [0, 6]})"),
                   std::string(6, '\0')),
       "tensor \"x\": unsupported dtype \"Q8\": expected F32, F16, BF16 or F64"},
      {"overflow.safetensors",
       Safetensors(Entry("x", R"({"dtype": "F64", "shape": [4611686018427387904, 2],)"
                              R"( "data_offsets": [0, 24]})"),
                   f32x6),
       "smaller than 2^63 bytes"},
      {"size.safetensors",
       Safetensors(Entry("x", R"({"dtype": "F32", "shape": [4, 8], "data_offsets": [0, 100]})"),
                   std::string(100, '\0')),
       "tensor \"x\": data_offsets [0, 100] hold 100 bytes, expected 128 (F32 [4, 8])"},
      {"duplicate.safetensors",
       Safetensors(R"({"x": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},)"
                   R"( "x": {"dtype": "F32", "shape": [3, 2], "data_offsets": [0, 24]}})",
                   f32x6),
       "tensor \"x\": listed twice in the header"},
      {"emptyname.safetensors",
       Safetensors(Entry("", R"({"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]})"),
                   f32x6),
       "expected a non-empty tensor name"},
      {"notobject.safetensors", Safetensors(Entry("x", "[1, 2]"), ""),
       "tensor \"x\": expected a JSON object, got array"},
      {"metadata.safetensors", Safetensors(R"({"__metadata__": 5})", ""),
       "__metadata__: expected a JSON object, got number"},
  };
  // .safetensors files of one tensor "x" over the 24 bytes of f32x6 whose entry is broken in one
  // key: {file, the key, its JSON value (null: left out), the problem}.
  const BadXKey bad_x[] = {
      {"intdtype.safetensors", "dtype", "\"I32\"", "tensor \"x\": dtype I32 is not a float dtype"},
      {"nodtype.safetensors", "dtype", nullptr, "tensor \"x\": dtype: expected a string"},
      {"rank1.safetensors", "shape", "[6]", "tensor \"x\": shape [6]: expected rank 2"},
      {"rank3.safetensors", "shape", "[1, 2, 3]",
       "tensor \"x\": shape [1, 2, 3]: expected rank 2 ([rows, cols]), got rank 3"},
      {"negative.safetensors", "shape", "[-2, 3]",
       "tensor \"x\": shape [-2,3]: expected non-negative integers"},
      {"fraction.safetensors", "shape", "[2.5, 3]", "expected non-negative integers"},
      {"range.safetensors", "data_offsets", "[8, 32]",
       "tensor \"x\": data_offsets [8, 32] out of range: the data section holds 24 bytes"},
      {"hugeoffset.safetensors", "data_offsets", "[0, 18446744073709551615]",
       "data_offsets: expected [begin, end], two non-negative integers"},
      {"reversed.safetensors", "data_offsets", "[24, 0]",
       "data_offsets [24, 0]: begin is after end"},
      {"nooffsets.safetensors", "data_offsets", nullptr,
       "data_offsets: expected [begin, end], two non-negative integers, got nothing"},
  };
  for (const BadXKey& c : bad_x) {
    cases.push_back({c.file, Safetensors(Entry("x", XEntry(c.key, c.value)), f32x6), c.problem});
  }
  return cases;
}

TEST_F(TableLoaderTest, MalformedFileStopsStartNamingTheFileAndTheProblem) {
  const std::vector<BadFile> cases = BadFiles();
  ASSERT_GE(cases.size(), 12u);
  for (size_t i = 0; i < cases.size(); ++i) {
    const BadFile& c = cases[i];
    SCOPED_TRACE(c.file);
    // A good table beside the bad one: the bad one still stops start-up.
    const fs::path dir = dir_ / absl::StrCat("case", i);
    fs::create_directories(dir);
    Write(dir / "good.npy", Npy(NpyDict("<f4", "(16, 4)"), WpeBytes()));
    const fs::path bad = dir / c.file;
    if (c.directory) {
      fs::create_directories(bad);
    } else {
      Write(bad, c.bytes);
    }
    ServerOptions options = testing::LocalServerOptions();
    options.tables_dir = dir.string();
    auto server = PosencServer::Start(options);
    ASSERT_FALSE(server.ok());
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(server.status().message(), HasSubstr("--tables: " + bad.string() + ": "));
    EXPECT_THAT(server.status().message(), HasSubstr(c.problem));
  }
}

// Every prefix and many one-byte corruptions of valid files parse or fail cleanly.
TEST(TableParserTest, TruncatedAndCorruptedFilesNeverCrash) {
  const std::vector<std::string> files = {
      Npy(NpyDict("<f4", "(16, 4)"), WpeBytes()),
      Npy(NpyDict("<f8", "(5, 3)"), RelBytes(), 3),
      T5File(),
  };
  const char replacements[] = {'\0', '\xff', '9', '[', '{', '"', '\'', ')', ','};
  for (size_t f = 0; f < files.size(); ++f) {
    const std::string& file = files[f];
    const bool npy = f < 2;
    auto parse = [npy](absl::string_view bytes) {
      return npy ? ParseNpy(bytes, "t").status() : ParseSafetensors(bytes, "t").status();
    };
    ASSERT_TRUE(parse(file).ok()) << parse(file);
    for (size_t n = 0; n < file.size(); ++n) {
      EXPECT_FALSE(parse(absl::string_view(file).substr(0, n)).ok()) << "prefix " << n;
    }
    const size_t header_end = std::min<size_t>(file.size(), npy ? 128 : 600);
    for (size_t i = 0; i < header_end; ++i) {
      for (char r : replacements) {
        std::string corrupt = file;
        corrupt[i] = r;
        const absl::Status status = parse(corrupt);
        if (!status.ok()) {
          EXPECT_FALSE(status.message().empty());
        }
      }
    }
  }
}

TEST(TableParserTest, DeeplyNestedJsonFailsCleanly) {
  const std::string header = std::string(200000, '[') + std::string(200000, ']');
  const absl::Status status = ParseSafetensors(Safetensors(header, ""), "t").status();
  EXPECT_THAT(status.message(), HasSubstr("expected a JSON object, got array"));
}

}  // namespace
}  // namespace posenc::server
