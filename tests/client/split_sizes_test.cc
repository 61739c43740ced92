// The client's output sizes (client/split.h OutputShape: what it splits by) against the kernels'
// plans: a server sizes every response tensor from its plan's OutputSpec (AllocateOutput), so for
// a broad table of requests (every op the client sizes, every dtype, layout, form and table
// source) the client's dtype and shape must equal those of the server's answer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/split.h"
#include "kernels/common/npy.h"
#include "posenc/client.h"
#include "server/server.h"

namespace posenc::client {
namespace {

namespace fs = std::filesystem;
using internal::OutputShape;

Tensor Ramp(std::vector<int64_t> shape, DType dtype = DType::kFloat32) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<double> values(static_cast<size_t>(n));
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.01 * static_cast<double>(i % 101);
  return *Tensor::FromDoubles(values, std::move(shape), dtype);
}

void WriteTable(const fs::path& path, const std::vector<int64_t>& shape) {
  const Tensor t = Ramp(shape);
  ASSERT_TRUE(kernels::WriteNpyFile(path.string(), kernels::DType::kFloat32, shape, t.data).ok());
}

class OutputSizesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / absl::StrCat("posenc_sizes_", ::getpid()));
    fs::create_directories(*dir_);
    WriteTable(*dir_ / "wide.npy", {64, 12});   // a learned table for CONCAT
    WriteTable(*dir_ / "narrow.npy", {64, 8});  // for ADD to x [.., 8]
    WriteTable(*dir_ / "t5.npy", {32, 5});      // [num_buckets, H]
    WriteTable(*dir_ / "shaw.npy", {9, 6});     // [2K+1, D], K = 4
    server::ServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.backend = "cpu";
    options.threads = 1;
    options.tables_dir = dir_->string();
    auto started = server::PosencServer::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = started->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    fs::remove_all(*dir_);
    delete dir_;
  }

  void SetUp() override {
    ClientOptions options;
    options.compact_biases = false;  // every form as asked
    options.split_requests = false;
    auto client = Client::Connect(absl::StrCat("127.0.0.1:", server_->port()), options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
    const auto info = client_->GetServerInfo();
    ASSERT_TRUE(info.ok()) << info.status();
    for (const ServerInfo::Table& table : info->tables) tables_[table.name] = table.shape;
  }

  std::vector<int64_t> Table(const std::string& name) {
    return name.empty() ? std::vector<int64_t>() : tables_.at(name);
  }

  static void ExpectShape(const std::optional<OutputShape>& client,
                          const absl::StatusOr<Tensor>& served, const std::string& what) {
    ASSERT_TRUE(client.has_value()) << what;
    ASSERT_TRUE(served.ok()) << what << ": " << served.status();
    EXPECT_EQ(DTypeName(client->dtype), DTypeName(served->dtype)) << what;
    EXPECT_EQ(client->shape, served->shape) << what;
    EXPECT_EQ(client->Bytes(), static_cast<int64_t>(served->data.size())) << what;
  }

  static fs::path* dir_;
  static server::PosencServer* server_;
  std::unique_ptr<Client> client_;
  std::map<std::string, std::vector<int64_t>> tables_;
};

fs::path* OutputSizesTest::dir_ = nullptr;
server::PosencServer* OutputSizesTest::server_ = nullptr;

TEST_F(OutputSizesTest, AddPositionEncoding) {
  int cases = 0;
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat64}) {
    for (const std::vector<int64_t>& shape :
         {std::vector<int64_t>{3, 5, 8}, std::vector<int64_t>{5, 8}}) {
      std::vector<AddPositionEncodingOptions> requests;
      for (Combine combine : {Combine::kUnspecified, Combine::kAdd, Combine::kConcat}) {
        for (int64_t dim : {0, 8, 16}) {
          if (combine != Combine::kConcat && dim == 16) continue;
          AddPositionEncodingOptions o;
          o.sinusoidal = SinusoidalParams{.dim = dim};
          o.combine = combine;
          requests.push_back(o);
        }
        for (const std::string name : {"", "wide", "narrow"}) {
          if (combine != Combine::kConcat && name == "wide") continue;
          AddPositionEncodingOptions o;
          o.learned = name.empty() ? LearnedTable{.table_inline = Ramp({64, 8}, DType::kFloat16)}
                                   : LearnedTable{.table_name = name};
          o.combine = combine;
          requests.push_back(o);
        }
      }
      for (AddPositionEncodingOptions& o : requests) {
        o.x = Ramp(shape, dtype);
        const std::string name = o.learned.has_value() ? o.learned->table_name : "";
        const std::optional<OutputShape> y = internal::AddPositionEncodingOutput(o, Table(name));
        ExpectShape(y, client_->AddPositionEncoding(o),
                    absl::StrCat(std::string(DTypeName(dtype)), " rank ", shape.size(), " combine ",
                                 static_cast<int>(o.combine), " table '", name, "'"));
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 2 * 4 * (4 + 4 + 6));  // shapes x dtypes x (unspecified, ADD, CONCAT)
}

TEST_F(OutputSizesTest, AlibiBias) {
  for (AlibiMode mode :
       {AlibiMode::kUnspecified, AlibiMode::kCausal, AlibiMode::kSymmetric, AlibiMode::kBloom}) {
    for (BiasForm form : {BiasForm::kUnspecified, BiasForm::kFull, BiasForm::kCompact}) {
      for (std::optional<DType> dtype :
           {std::optional<DType>(), std::optional(DType::kFloat16), std::optional(DType::kBFloat16),
            std::optional(DType::kFloat64)}) {
        for (bool masked : {false, true}) {
          if (masked && mode != AlibiMode::kBloom) continue;
          AlibiBiasOptions o;
          o.num_heads = 5;
          o.q_len = 3;
          o.k_len = 7;
          o.mode = mode;
          o.form = form;
          o.output_dtype = dtype;
          if (masked) o.attention_mask = *Tensor::FromInt64s(std::vector<int64_t>(14, 1), {2, 7});
          const std::string what = absl::StrCat("mode ", static_cast<int>(mode), " form ",
                                                static_cast<int>(form), " masked ", masked);
          const std::vector<OutputShape> outputs = internal::AlibiBiasOutputs(o);
          const auto served = client_->AlibiBias(o);
          ASSERT_TRUE(served.ok()) << what << ": " << served.status();
          ExpectShape(outputs[0], served->bias, what);
          ExpectShape(outputs[1], served->slopes, what);
        }
      }
    }
  }
}

TEST_F(OutputSizesTest, RelativeBiasAndEmbedding) {
  for (BiasForm form :
       {BiasForm::kUnspecified, BiasForm::kFull, BiasForm::kCompact, BiasForm::kBuckets}) {
    for (const std::string name : {"", "t5"}) {
      for (std::optional<DType> dtype : {std::optional<DType>(), std::optional(DType::kFloat16),
                                         std::optional(DType::kFloat64)}) {
        if (form == BiasForm::kBuckets && dtype.has_value()) continue;  // INT32 only
        RelativeBiasOptions o;
        o.q_len = 4;
        o.k_len = 9;
        o.form = form;
        o.output_dtype = dtype;
        if (name.empty()) {
          o.table_inline = Ramp({32, 3});
        } else {
          o.table_name = name;
        }
        ExpectShape(internal::RelativeBiasOutput(o, Table(name)), client_->RelativeBias(o),
                    absl::StrCat("form ", static_cast<int>(form), " table '", name, "'"));
      }
    }
  }
  for (const std::string name : {"", "shaw"}) {
    for (std::optional<DType> dtype : {std::optional<DType>(), std::optional(DType::kBFloat16),
                                       std::optional(DType::kFloat64)}) {
      RelativeEmbeddingOptions o;
      o.q_len = 4;
      o.k_len = 6;
      o.max_relative = 4;
      o.output_dtype = dtype;
      if (name.empty()) {
        o.table_inline = Ramp({9, 2});
      } else {
        o.table_name = name;
      }
      ExpectShape(internal::RelativeEmbeddingOutput(o, Table(name)), client_->RelativeEmbedding(o),
                  absl::StrCat("table '", name, "'"));
    }
  }
}

// A table the server does not report: no shape (the request goes whole, for the server's
// error), as for a table that is no [rows, columns] matrix.
TEST_F(OutputSizesTest, UnknownTablesHaveNoShape) {
  RelativeBiasOptions t5;
  t5.q_len = 4;
  t5.k_len = 4;
  t5.table_name = "missing";
  EXPECT_FALSE(internal::RelativeBiasOutput(t5, {}).has_value());
  t5.form = BiasForm::kBuckets;  // needs no table
  EXPECT_TRUE(internal::RelativeBiasOutput(t5, {}).has_value());
  RelativeEmbeddingOptions shaw;
  shaw.table_inline = Ramp({9});
  EXPECT_FALSE(internal::RelativeEmbeddingOutput(shaw, {}).has_value());
  AddPositionEncodingOptions add;
  add.x = Ramp({4, 8});
  add.learned = LearnedTable{.table_name = "missing"};
  EXPECT_FALSE(internal::AddPositionEncodingOutput(add, {}).has_value());
}

// ApplyRope answers q and k as they came (the split's byte model counts the request only).
TEST_F(OutputSizesTest, ApplyRopeAnswersQAndKAsTheyCame) {
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat64}) {
    for (TensorLayout layout : {TensorLayout::kBSHD, TensorLayout::kBHSD, TensorLayout::kTHD}) {
      ApplyRopeOptions o;
      o.layout = layout;
      o.q = Ramp(layout == TensorLayout::kTHD ? std::vector<int64_t>{6, 4, 8}
                                              : std::vector<int64_t>{2, 3, 4, 8},
                 dtype);
      o.k = Ramp(layout == TensorLayout::kTHD    ? std::vector<int64_t>{6, 1, 8}
                 : layout == TensorLayout::kBHSD ? std::vector<int64_t>{2, 1, 4, 8}
                                                 : std::vector<int64_t>{2, 3, 1, 8},
                 dtype);
      const auto served = client_->ApplyRope(o);
      ASSERT_TRUE(served.ok()) << served.status();
      ExpectShape(OutputShape{o.q.dtype, o.q.shape}, served->q, "q");
      ExpectShape(OutputShape{o.k->dtype, o.k->shape}, *served->k, "k");
    }
  }
}

// A request naming a server's table is sized by that table's width (from GetServerInfo): a
// T5 bias of 5 heads and a CONCAT of a 12-wide table split to fit a 1 MiB server.
TEST_F(OutputSizesTest, NamedTablesSplitByTheirServerWidth) {
  server::ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.backend = "cpu";
  options.threads = 1;
  options.tables_dir = dir_->string();
  options.max_message_bytes = int64_t{1} << 20;
  auto small = server::PosencServer::Start(options);
  ASSERT_TRUE(small.ok()) << small.status();
  auto split = Client::Connect(absl::StrCat("127.0.0.1:", (*small)->port()));
  ASSERT_TRUE(split.ok()) << split.status();

  RelativeBiasOptions t5;
  t5.q_len = 400;
  t5.k_len = 400;
  t5.table_name = "t5";
  t5.form = BiasForm::kFull;  // 3.2 MB
  const auto whole_bias = client_->RelativeBias(t5);
  const auto split_bias = (*split)->RelativeBias(t5);
  ASSERT_TRUE(whole_bias.ok()) << whole_bias.status();
  ASSERT_TRUE(split_bias.ok()) << split_bias.status();
  EXPECT_EQ(split_bias->shape, whole_bias->shape);
  EXPECT_TRUE(split_bias->data == whole_bias->data);

  AddPositionEncodingOptions add;
  add.x = Ramp({16, 64, 256});  // 1 MiB in; y 1.2 MiB
  add.learned = LearnedTable{.table_name = "wide"};
  add.combine = Combine::kConcat;
  const auto whole_y = client_->AddPositionEncoding(add);
  const auto split_y = (*split)->AddPositionEncoding(add);
  ASSERT_TRUE(whole_y.ok()) << whole_y.status();
  ASSERT_TRUE(split_y.ok()) << split_y.status();
  EXPECT_EQ(split_y->shape, (std::vector<int64_t>{16, 64, 268}));
  EXPECT_TRUE(split_y->data == whole_y->data);
}

}  // namespace
}  // namespace posenc::client
