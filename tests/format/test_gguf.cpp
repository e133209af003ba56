// GGUF reader: a round trip through the writer for every value type, and hostile files.
#include <gmock/gmock.h>

#include "slake/error.h"
#include "slake/format/gguf.h"
#include "slake/format/writers.h"
#include "test_util.h"

namespace slake {
namespace {

using ::testing::HasSubstr;

GgufValue num(GgufType t, int64_t i, uint64_t u, double f) {
  GgufValue v;
  v.type = t;
  v.i = i;
  v.u = u;
  v.f = f;
  return v;
}

GgufWriter sample_writer(uint32_t version = 3, uint32_t alignment = 32) {
  GgufWriter w(version, alignment);
  w.set("u8", num(GgufType::UINT8, 0, 200, 0));
  w.set("i8", num(GgufType::INT8, -100, 0, 0));
  w.set("u16", num(GgufType::UINT16, 0, 60000, 0));
  w.set("i16", num(GgufType::INT16, -30000, 0, 0));
  w.set_u32("u32", 4000000000u);
  w.set_i32("i32", -2000000000);
  w.set("u64", num(GgufType::UINT64, 0, 1ull << 60, 0));
  w.set("i64", num(GgufType::INT64, -(1ll << 60), 0, 0));
  w.set_f32("f32", 1.5f);
  w.set("f64", num(GgufType::FLOAT64, 0, 0, 2.25));
  w.set_bool("bool", true);
  w.set_str("str", "h\xC3\xA9llo");
  w.set_str_array("strs", {"a", "", "ccc"});
  // A nested array: [[1, 2], [3]] of int32.
  GgufValue outer;
  outer.type = GgufType::ARRAY;
  outer.elem_type = GgufType::ARRAY;
  for (std::vector<int32_t> inner : {std::vector<int32_t>{1, 2}, std::vector<int32_t>{3}}) {
    GgufValue a;
    a.type = GgufType::ARRAY;
    a.elem_type = GgufType::INT32;
    for (int32_t x : inner) a.arr.push_back(num(GgufType::INT32, x, 0, 0));
    outer.arr.push_back(a);
  }
  w.set("nested", outer);
  std::vector<float> f(8 * 3);
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(i) * 0.5f;
  w.add_f32_tensor("a.weight", {8, 3}, f.data());
  w.add_tensor("q.weight", DType::Q8_0, {32, 2}, std::vector<uint8_t>(68, 1));
  w.add_tensor("h.weight", DType::F16, {5}, std::vector<uint8_t>(10, 0));
  return w;
}

GgufFile parse(const std::vector<uint8_t>& bytes) { return GgufFile::parse(buffer_from_bytes(bytes), "test.gguf"); }

std::string parse_error(const std::vector<uint8_t>& bytes) {
  return test::error_of([&] { parse(bytes); });
}

TEST(Gguf, RoundTripsEveryValueType) {
  for (uint32_t version : {2u, 3u}) {
    for (uint32_t alignment : {32u, 64u, 8u}) {
      GgufFile g = parse(sample_writer(version, alignment).to_bytes());
      EXPECT_EQ(g.version(), version);
      EXPECT_EQ(g.alignment(), alignment);
      EXPECT_EQ(g.get_uint("u8"), 200u);
      EXPECT_EQ(g.find("i8")->i, -100);
      EXPECT_EQ(g.get_uint("u16"), 60000u);
      EXPECT_EQ(g.find("i16")->i, -30000);
      EXPECT_EQ(g.get_uint("u32"), 4000000000u);
      EXPECT_EQ(g.find("i32")->i, -2000000000);
      EXPECT_EQ(g.get_uint("u64"), 1ull << 60);
      EXPECT_EQ(g.find("i64")->i, -(1ll << 60));
      EXPECT_EQ(g.get_float("f32"), 1.5);
      EXPECT_EQ(g.get_float("f64"), 2.25);
      EXPECT_TRUE(g.get_bool("bool", false));
      EXPECT_EQ(g.get_string("str"), "h\xC3\xA9llo");
      const GgufValue& s = g.get_array("strs", GgufType::STRING);
      ASSERT_EQ(s.arr.size(), 3u);
      EXPECT_EQ(s.arr[2].str, "ccc");
      const GgufValue* n = g.find("nested");
      ASSERT_NE(n, nullptr);
      ASSERT_EQ(n->arr.size(), 2u);
      EXPECT_EQ(n->arr[0].arr[1].i, 2);
      EXPECT_EQ(n->arr[1].arr[0].i, 3);
      ASSERT_EQ(g.tensors().size(), 3u);
      const TensorView* a = g.find_tensor("a.weight");
      ASSERT_NE(a, nullptr);
      EXPECT_EQ(a->ne, (std::vector<int64_t>{8, 3}));
      EXPECT_EQ((a->data - g.buffer()->data()) % alignment, 0);
      float x;
      std::memcpy(&x, a->row(2) + 4 * 3, 4);
      EXPECT_EQ(x, 9.5f);
      EXPECT_EQ(g.find_tensor("q.weight")->nbytes, 68u);
    }
  }
}

TEST(Gguf, TypedGettersRejectWrongTypes) {
  GgufFile g = parse(sample_writer().to_bytes());
  EXPECT_THROW(g.get_string("u32"), Error);
  EXPECT_THROW(g.get_uint("str"), Error);
  EXPECT_THROW(g.get_uint("i8"), Error);  // negative
  EXPECT_THROW(g.get_uint("missing"), Error);
  EXPECT_THROW(g.get_array("strs", GgufType::INT32), Error);
  EXPECT_EQ(g.get_uint("missing", 7), 7u);
}

TEST(Gguf, EveryTruncationIsAnError) {
  const std::vector<uint8_t> full = sample_writer().to_bytes();
  for (size_t n = 0; n < full.size(); ++n) {
    const std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    const std::string err = parse_error(cut);
    ASSERT_FALSE(err.empty()) << "prefix of " << n << " bytes parsed";
    ASSERT_THAT(err, HasSubstr("test.gguf: "));
  }
}

// Byte offset of the first tensor info (just after the metadata) in a file made by sample_writer.
size_t offset_of(const std::vector<uint8_t>& bytes, const std::string& needle) {
  auto it = std::search(bytes.begin(), bytes.end(), needle.begin(), needle.end());
  return static_cast<size_t>(it - bytes.begin());
}

template <typename T>
void poke(std::vector<uint8_t>& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof(T));
}

TEST(Gguf, HostileHeaders) {
  std::vector<uint8_t> b = sample_writer().to_bytes();
  auto with = [&](size_t at, auto v) {
    std::vector<uint8_t> c = b;
    poke(c, at, v);
    return parse_error(c);
  };
  EXPECT_THAT(with(0, uint32_t{0x12345678}), HasSubstr("bad magic"));         // "GGUF" reversed
  EXPECT_THAT(with(4, uint32_t{1}), HasSubstr("unsupported GGUF version 1"));
  EXPECT_THAT(with(8, uint64_t{1} << 60), HasSubstr("tensor count"));
  EXPECT_THAT(with(16, uint64_t{1} << 60), HasSubstr("metadata count"));
  // First key's string length.
  EXPECT_THAT(with(24, uint64_t{1} << 40), HasSubstr("absurd"));
}

TEST(Gguf, HostileMetadata) {
  const std::vector<uint8_t> b = sample_writer().to_bytes();
  // The value type of key "u8" follows its 8-byte length and 2 characters.
  const size_t type_at = offset_of(b, "u8") + 2;
  std::vector<uint8_t> c = b;
  poke(c, type_at, uint32_t{13});
  EXPECT_THAT(parse_error(c), HasSubstr("unknown value type 13"));
  // The string array's length.
  const size_t strs_len_at = offset_of(b, "strs") + 4 + 4 + 4;
  c = b;
  poke(c, strs_len_at, uint64_t{1} << 50);
  EXPECT_THAT(parse_error(c), HasSubstr("cannot fit"));
  // A bool that is neither 0 nor 1.
  c = b;
  c[offset_of(b, "bool") + 4 + 4] = 7;
  EXPECT_THAT(parse_error(c), HasSubstr("bool value 7"));
  // Duplicate keys.
  GgufWriter w = sample_writer();
  w.set_u32("u32", 1);
  EXPECT_THAT(parse_error(w.to_bytes()), HasSubstr("duplicate metadata key u32"));
  // Alignment not a power of two, or of the wrong type.
  GgufWriter wa = sample_writer();
  wa.set_u32("general.alignment", 48);
  EXPECT_THAT(parse_error(wa.to_bytes()), HasSubstr("not a power of two"));
  GgufWriter wb = sample_writer();
  wb.set_str("general.alignment", "32");
  EXPECT_THAT(parse_error(wb.to_bytes()), HasSubstr("must be uint32"));
}

TEST(Gguf, DeeplyNestedArraysAreRefused) {
  GgufValue v;
  v.type = GgufType::INT32;
  for (int d = 0; d < 12; ++d) {
    GgufValue a;
    a.type = GgufType::ARRAY;
    a.elem_type = v.type;
    a.arr.push_back(v);
    v = a;
  }
  GgufWriter w;
  w.set("deep", v);
  EXPECT_THAT(parse_error(w.to_bytes()), HasSubstr("nested deeper"));
}

TEST(Gguf, HostileTensorInfos) {
  const std::vector<uint8_t> b = sample_writer().to_bytes();
  const size_t info = offset_of(b, "a.weight") + 8;  // n_dims of a.weight
  auto with = [&](size_t at, auto v) {
    std::vector<uint8_t> c = b;
    poke(c, at, v);
    return parse_error(c);
  };
  EXPECT_THAT(with(info, uint32_t{0}), HasSubstr("0 dimensions"));
  EXPECT_THAT(with(info, uint32_t{5}), HasSubstr("5 dimensions"));
  EXPECT_THAT(with(info + 4, uint64_t{0}), HasSubstr("has size 0"));
  EXPECT_THAT(with(info + 4, uint64_t{1} << 40), HasSubstr("outside the file"));
  EXPECT_THAT(with(info + 4 + 8, uint64_t{1} << 62), HasSubstr("too large"));
  EXPECT_THAT(with(info + 4 + 8, uint64_t{1ull << 63} - 1), HasSubstr("too large"));
  EXPECT_THAT(with(info + 4 + 16, uint32_t{99}), HasSubstr("unknown tensor type 99"));
  EXPECT_THAT(with(info + 4 + 16, uint32_t{16}), HasSubstr("tensor a.weight: tensor type IQ2_XXS is not supported"));
  EXPECT_THAT(with(info + 4 + 20, uint64_t{4}), HasSubstr("not aligned"));
  EXPECT_THAT(with(info + 4 + 20, uint64_t{1} << 40), HasSubstr("outside the file"));
  // Q8_0 rows must be whole blocks.
  const size_t qinfo = offset_of(b, "q.weight") + 8;
  EXPECT_THAT(with(qinfo + 4, uint64_t{33}), HasSubstr("not a multiple of the Q8_0 block size"));
  // Two tensors at the same offset overlap.
  EXPECT_THAT(with(qinfo + 4 + 16 + 4, uint64_t{0}), HasSubstr("overlap"));
}

TEST(Gguf, DuplicateTensorNamesAreRefused) {
  GgufWriter w;
  std::vector<float> f(4, 1.0f);
  w.add_f32_tensor("t", {4}, f.data());
  w.add_f32_tensor("t", {4}, f.data());
  EXPECT_THAT(parse_error(w.to_bytes()), HasSubstr("duplicate tensor name t"));
}

TEST(Gguf, OpenNamesTheFile) {
  try {
    GgufFile::open("/nonexistent/model.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/model.gguf: cannot open"));
  }
}

}  // namespace
}  // namespace slake
