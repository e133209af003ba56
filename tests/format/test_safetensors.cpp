// safetensors reader: round trip through the writer, sharded directories, hostile files.
#include <gmock/gmock.h>

#include "slake/error.h"
#include "slake/format/safetensors.h"
#include "slake/format/writers.h"
#include "test_util.h"

namespace slake {
namespace {

using ::testing::HasSubstr;

std::vector<SafetensorsEntry> sample() {
  std::vector<uint8_t> f32(2 * 3 * 4), f16(4 * 2), bf16(3 * 2);
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = static_cast<uint8_t>(i);
  return {{"w", "F32", {2, 3}, f32}, {"h", "F16", {4}, f16}, {"b", "BF16", {3, 1}, bf16}};
}

SafetensorsFile parse(const std::vector<uint8_t>& b) { return SafetensorsFile::parse(buffer_from_bytes(b), "t.safetensors"); }

std::string parse_error(const std::vector<uint8_t>& b) { return test::error_of([&] { parse(b); }); }

// A file whose JSON header is `header` followed by `data_bytes` zero bytes.
std::vector<uint8_t> raw(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> b(8);
  const uint64_t n = header.size();
  std::memcpy(b.data(), &n, 8);
  b.insert(b.end(), header.begin(), header.end());
  b.resize(b.size() + data_bytes, 0);
  return b;
}

TEST(Safetensors, RoundTrip) {
  SafetensorsFile f = parse(safetensors_bytes(sample(), {{"format", "pt"}}));
  ASSERT_EQ(f.tensors().size(), 3u);
  const TensorView* w = f.find_tensor("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->type, DType::F32);
  EXPECT_EQ(w->ne, (std::vector<int64_t>{3, 2}));  // ggml order
  EXPECT_EQ(w->row(1)[0], 12);
  EXPECT_EQ(f.find_tensor("b")->ne, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(f.metadata().at("format"), "pt");
}

TEST(Safetensors, EveryTruncationIsAnError) {
  const std::vector<uint8_t> full = safetensors_bytes(sample());
  for (size_t n = 0; n < full.size(); ++n) {
    const std::string err = parse_error(std::vector<uint8_t>(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n)));
    ASSERT_FALSE(err.empty()) << n;
    ASSERT_THAT(err, HasSubstr("t.safetensors: "));
  }
}

TEST(Safetensors, HostileHeaders) {
  EXPECT_THAT(parse_error(raw("{\"w\": {\"dtype\": \"F32\"", 0)), HasSubstr("malformed JSON"));
  EXPECT_THAT(parse_error(raw("[1, 2]", 0)), HasSubstr("not a JSON object"));
  std::vector<uint8_t> huge = raw("{}", 0);
  const uint64_t n = 1ull << 40;
  std::memcpy(huge.data(), &n, 8);
  EXPECT_THAT(parse_error(huge), HasSubstr("absurd"));
  EXPECT_THAT(parse_error(raw(R"({"w": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})", 8)),
              HasSubstr("dtype I64 is not supported"));
  EXPECT_THAT(parse_error(raw(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4)),
              HasSubstr("outside"));
  EXPECT_THAT(parse_error(raw(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8)),
              HasSubstr("needs 12 bytes but data_offsets span 8"));
  EXPECT_THAT(parse_error(raw(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", 8)),
              HasSubstr("end before"));
  EXPECT_THAT(parse_error(raw(R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8)),
              HasSubstr("non-negative"));
  EXPECT_THAT(parse_error(raw(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]}})", 8)),
              HasSubstr("too large"));
  EXPECT_THAT(parse_error(raw(R"({"w": {"dtype": "F32", "shape": [2]}})", 8)), HasSubstr("needs dtype, shape and data_offsets"));
  EXPECT_THAT(parse_error(raw(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                  "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12)),
              HasSubstr("overlap"));
}

TEST(Safetensors, ShardedDirectory) {
  test::TempDir dir;
  auto s = sample();
  write_file(dir.file("a.safetensors"), safetensors_bytes({s[0], s[1]}));
  write_file(dir.file("b.safetensors"), safetensors_bytes({s[2]}));
  write_file(dir.file("model.safetensors.index.json"),
             std::string(R"({"metadata": {}, "weight_map": {"w": "a.safetensors", "h": "a.safetensors", "b": "b.safetensors"}})"));
  SafetensorsSet set = SafetensorsSet::open_dir(dir.path());
  ASSERT_NE(set.find_tensor("b"), nullptr);
  EXPECT_EQ(set.find_tensor("w")->row(1)[0], 12);
  EXPECT_EQ(set.tensor_names().size(), 3u);

  write_file(dir.file("model.safetensors.index.json"), std::string(R"({"weight_map": {"w": "b.safetensors"}})"));
  try {
    SafetensorsSet::open_dir(dir.path());
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("tensor w is listed in the index but not in the shard"));
  }
  write_file(dir.file("model.safetensors.index.json"), std::string(R"({"weight_map": {"w": "../etc/passwd"}})"));
  EXPECT_THROW(SafetensorsSet::open_dir(dir.path()), Error);
  write_file(dir.file("model.safetensors.index.json"), std::string(R"({"weight_map": {"w": "missing.safetensors"}})"));
  EXPECT_THROW(SafetensorsSet::open_dir(dir.path()), Error);
  write_file(dir.file("model.safetensors.index.json"), std::string("{\"weight_map\": "));
  EXPECT_THROW(SafetensorsSet::open_dir(dir.path()), Error);
}

}  // namespace
}  // namespace slake
