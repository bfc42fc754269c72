// Deterministic corruption tests: every malformed file is refused with a kBadInput (or
// kUnsupported) error that names the file and, where one is at fault, the tensor.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "io/safetensors.h"

using namespace mlxcel;
namespace fs = std::filesystem;

namespace {

std::vector<std::uint8_t> make_file(const std::string& header, std::size_t data_bytes, std::uint64_t len_override = 0) {
  std::vector<std::uint8_t> f(8 + header.size() + data_bytes, 0);
  const std::uint64_t n = len_override ? len_override : header.size();
  for (int i = 0; i < 8; ++i) f[i] = static_cast<std::uint8_t>(n >> (8 * i));
  std::memcpy(f.data() + 8, header.data(), header.size());
  for (std::size_t i = 0; i < data_bytes; ++i) f[8 + header.size() + i] = static_cast<std::uint8_t>(i * 7 + 1);
  return f;
}

// Expects rejection; returns the message.
std::string rejected(const std::vector<std::uint8_t>& bytes, ErrorCategory cat = ErrorCategory::kBadInput) {
  try {
    SafetensorsFile::from_bytes(bytes, "bad.safetensors");
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), cat) << e.what();
    const std::string m = e.what();
    EXPECT_NE(m.find("bad.safetensors"), std::string::npos) << m;
    return m;
  }
  ADD_FAILURE() << "file was accepted";
  return "";
}

const char* kOne = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("mlxcel_io_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

}  // namespace

TEST(SafetensorsCorrupt, TooShortAndHeaderLength) {
  EXPECT_NE(rejected({}).find("too short"), std::string::npos);
  EXPECT_NE(rejected({1, 2, 3}).find("too short"), std::string::npos);
  EXPECT_NE(rejected(make_file(kOne, 8, 100000)).find("past the end"), std::string::npos);
  EXPECT_NE(rejected(make_file(kOne, 8, 100000001)).find("100000000"), std::string::npos);
  EXPECT_NE(rejected(make_file(kOne, 8, ~0ull)).find("limit"), std::string::npos);
  EXPECT_NE(rejected(make_file("{", 0)).find("cannot hold"), std::string::npos);
}

TEST(SafetensorsCorrupt, TruncatedAtEveryLength) {
  const auto good = make_file(kOne, 8);
  EXPECT_NO_THROW(SafetensorsFile::from_bytes(good, "good"));
  for (std::size_t n = 0; n < good.size(); ++n) {
    std::vector<std::uint8_t> t(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(SafetensorsFile::from_bytes(t, "bad.safetensors"), Error) << n;
  }
}

TEST(SafetensorsCorrupt, BadJsonAndUtf8) {
  EXPECT_NE(rejected(make_file(R"(["a"])", 0)).find("start with '{'"), std::string::npos);
  EXPECT_NE(rejected(make_file(R"({"a":{"dtype":"F32")", 0)).find("not valid JSON"), std::string::npos);
  EXPECT_NE(rejected(make_file("{\"\xff\":1}", 0)).find("UTF-8"), std::string::npos);
  EXPECT_NE(rejected(make_file("{\"\xc0\x80\":1}", 0)).find("UTF-8"), std::string::npos);      // overlong
  EXPECT_NE(rejected(make_file("{\"\xed\xa0\x80\":1}", 0)).find("UTF-8"), std::string::npos);  // surrogate
  EXPECT_NE(rejected(make_file(R"({"a":[[[[[[[[[[[[1]]]]]]]]]]]]})", 0)).find("nesting"), std::string::npos);
  EXPECT_NE(rejected(make_file(R"(17)", 0)).find("'{'"), std::string::npos);
}

TEST(SafetensorsCorrupt, DuplicateKeys) {
  std::string h = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})";
  EXPECT_NE(rejected(make_file(h, 2)).find("duplicate key \"a\""), std::string::npos);
  h = R"({"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  EXPECT_NE(rejected(make_file(h, 1)).find("duplicate key \"dtype\""), std::string::npos);
}

TEST(SafetensorsCorrupt, EntryFields) {
  auto one = [](const std::string& entry, std::size_t data) { return make_file("{\"w\":" + entry + "}", data); };
  EXPECT_NE(rejected(one("3", 0)).find("tensor \"w\""), std::string::npos);
  EXPECT_NE(rejected(one(R"({"shape":[1],"data_offsets":[0,1]})", 1)).find("dtype"), std::string::npos);
  EXPECT_NE(rejected(one(R"({"dtype":"F7","shape":[1],"data_offsets":[0,1]})", 1)).find("unknown dtype \"F7\""),
            std::string::npos);
  EXPECT_NE(rejected(one(R"({"dtype":"F4","shape":[2],"data_offsets":[0,1]})", 1), ErrorCategory::kUnsupported).find("F4"),
            std::string::npos);
  EXPECT_NE(rejected(one(R"({"dtype":"U8","shape":[-1],"data_offsets":[0,1]})", 1)).find("negative"), std::string::npos);
  EXPECT_NE(rejected(one(R"({"dtype":"U8","shape":[1.5],"data_offsets":[0,1]})", 1)).find("integer"), std::string::npos);
  EXPECT_NE(rejected(one(R"({"dtype":"U8","shape":"1","data_offsets":[0,1]})", 1)).find("shape"), std::string::npos);
  EXPECT_NE(rejected(one(R"({"dtype":"U8","shape":[1],"data_offsets":[0]})", 1)).find("data_offsets"), std::string::npos);
  EXPECT_NE(rejected(one(R"({"dtype":"U8","shape":[4611686018427387904,4],"data_offsets":[0,1]})", 1)).find("overflows"),
            std::string::npos);
  EXPECT_NE(rejected(one(R"({"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,1]})", 1)).find("overflows"),
            std::string::npos);
  EXPECT_NE(rejected(one(R"({"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,1]})", 1)).find("int64"),
            std::string::npos);
  EXPECT_NE(rejected(one(R"({"dtype":"U8","shape":[1],"data_offsets":[1,0]})", 1)).find("end < begin"), std::string::npos);
  EXPECT_NE(rejected(one(R"({"dtype":"U8","shape":[1],"data_offsets":[0,-1]})", 1)).find("negative"), std::string::npos);
  EXPECT_NE(rejected(one(R"({"dtype":"U8","shape":[100],"data_offsets":[0,100]})", 1)).find("run past"), std::string::npos);
  EXPECT_NE(rejected(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4]})", 4)).find("needs 8 bytes"), std::string::npos);
  EXPECT_NE(rejected(make_file(R"({"__metadata__":{"format":1}})", 0)).find("__metadata__"), std::string::npos);
  EXPECT_NE(rejected(make_file(R"({"__metadata__":[1]})", 0)).find("__metadata__"), std::string::npos);
}

TEST(SafetensorsCorrupt, CoverageOverlapHoleTrailing) {
  std::string h = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})";
  EXPECT_NE(rejected(make_file(h, 6)).find("overlaps"), std::string::npos);
  h = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})";
  EXPECT_NE(rejected(make_file(h, 6)).find("hole"), std::string::npos);
  EXPECT_NE(rejected(make_file(kOne, 12)).find("trailing"), std::string::npos);
  h = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})";
  EXPECT_NE(rejected(make_file(h, 2)).find("overlaps"), std::string::npos);
}

TEST(Safetensors, UnalignedDataIsCopiedAndCorrect) {
  // MLX writes unpadded headers; an odd header length leaves F32 data unaligned.
  std::string h = R"({"__metadata__":{"format":"mlx"},"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  if ((8 + h.size()) % 4 == 0) h += " ";
  std::vector<std::uint8_t> f = make_file(h, 16);
  const float vals[4] = {1.5f, -2.0f, 3.25f, 1e-3f};
  std::memcpy(f.data() + 8 + h.size(), vals, 16);
  auto st = SafetensorsFile::from_bytes(f, "u");
  Tensor t = st->tensor("w");
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.raw()) % 4, 0u);
  EXPECT_EQ(t.to_f32(), std::vector<float>(vals, vals + 4));
  EXPECT_EQ(st->metadata().at("format"), "mlx");
}

TEST(Safetensors, AllDtypesRoundTripZeroCopy) {
  fs::path d = temp_dir("dtypes");
  std::vector<std::pair<std::string, Tensor>> ts;
  const DType types[] = {DType::kBF16, DType::kF16, DType::kF32, DType::kU32, DType::kU8, DType::kI32,
                         DType::kI64, DType::kF8E4M3, DType::kF8E8M0, DType::kBool, DType::kI8, DType::kU16,
                         DType::kI16, DType::kU64, DType::kF64, DType::kF8E5M2};
  std::mt19937 rng(1);
  for (DType t : types) {
    Tensor x = Tensor::empty(t, {3, 5});
    for (std::size_t i = 0; i < x.nbytes(); ++i) static_cast<std::uint8_t*>(x.raw())[i] = static_cast<std::uint8_t>(rng());
    ts.emplace_back(std::string(dtype_name(t)), x);
  }
  ts.emplace_back("scalar", Tensor::from_f32({2.5f}, {}, DType::kF32));
  ts.emplace_back("empty", Tensor::empty(DType::kF32, {0, 4}));
  write_safetensors((d / "model.safetensors").string(), ts, {{"format", "mlx"}});
  auto f = SafetensorsFile::open((d / "model.safetensors").string());
  for (const auto& [name, t] : ts) {
    Tensor r = f->tensor(name);
    EXPECT_EQ(r.dtype(), t.dtype()) << name;
    EXPECT_EQ(r.shape(), t.shape()) << name;
    EXPECT_EQ(0, std::memcmp(r.raw(), t.raw(), t.nbytes())) << name;
  }
  // Our writer pads to 8 bytes, so the first tensor is served straight from the mapping.
  EXPECT_EQ(f->tensor(ts[0].first).buffer()->bytes(), ts[0].second.nbytes());
  EXPECT_THROW(f->tensor("missing"), Error);
  fs::remove_all(d);
}

TEST(Checkpoint, ShardsIndexDuplicatesAndMissing) {
  fs::path d = temp_dir("ckpt");
  Tensor a = Tensor::from_f32({1, 2}, {2}, DType::kF32), b = Tensor::from_f32({3}, {1}, DType::kBF16);
  write_safetensors((d / "model-00001-of-00002.safetensors").string(), {{"a", a}});
  write_safetensors((d / "model-00002-of-00002.safetensors").string(), {{"b", b}});
  write_safetensors((d / "other.safetensors").string(), {{"c", b}});  // not model*: ignored by the glob
  Checkpoint c = Checkpoint::open(d.string());
  EXPECT_EQ(c.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(c.total_bytes(), 10u);
  EXPECT_EQ(c.tensor("b").to_f32()[0], 3.0f);
  {
    std::ofstream(d / "model.safetensors.index.json") << R"({"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors"}})";
  }
  try {
    Checkpoint::open(d.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("\"b\""), std::string::npos) << e.what();
  }
  {
    std::ofstream(d / "model.safetensors.index.json") << R"({"weight_map":{"a":"model-00009-of-00009.safetensors"}})";
  }
  EXPECT_THROW(Checkpoint::open(d.string()), Error);
  {
    std::ofstream(d / "model.safetensors.index.json") << R"({"weight_map":{"a":"../x.safetensors"}})";
  }
  EXPECT_THROW(Checkpoint::open(d.string()), Error);
  fs::remove(d / "model.safetensors.index.json");
  write_safetensors((d / "model-extra.safetensors").string(), {{"a", a}});
  try {
    Checkpoint::open(d.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("appears in both"), std::string::npos) << e.what();
  }
  fs::remove_all(d);
  fs::create_directories(d);
  EXPECT_THROW(Checkpoint::open(d.string()), Error);
  EXPECT_THROW(Checkpoint::open((d / "nope").string()), Error);
  fs::remove_all(d);
}

TEST(SafetensorsCorrupt, RandomByteFlipsNeverCrash) {
  // A bounded randomized corruption sweep (the libFuzzer target in fuzz/ goes further).
  std::string h = R"({"__metadata__":{"format":"mlx"},"a.weight":{"dtype":"U32","shape":[2,3],"data_offsets":[0,24]},"a.scales":{"dtype":"BF16","shape":[2,1],"data_offsets":[24,28]}})";
  const auto good = make_file(h, 28);
  std::mt19937 rng(1234);
  int accepted = 0;
  for (int it = 0; it < 20000; ++it) {
    auto f = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) f[rng() % f.size()] = static_cast<std::uint8_t>(rng());
    if (rng() % 8 == 0) f.resize(rng() % f.size());
    try {
      auto st = SafetensorsFile::from_bytes(f, "fuzz");
      for (const auto& e : st->entries()) st->tensor(e);
      ++accepted;
    } catch (const Error&) {
    }
  }
  EXPECT_GT(accepted, 0);  // data-byte flips keep the file valid
}

namespace {
std::string many_entries_header(std::size_t n) {
  std::string h = "{";
  for (std::size_t i = 0; i < n; ++i) {
    if (i) h += ',';
    h += "\"t" + std::to_string(i) + "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[" +
         std::to_string(i) + "," + std::to_string(i + 1) + "]}";
  }
  return h + "}";
}
}  // namespace

// A header with 10^5 tensors parses in about linear time; past the entry cap it is refused before
// any tensor is built.
TEST(SafetensorsCorrupt, ManyEntriesAreLinearAndCapped) {
  const auto time_of = [](std::size_t n) {
    const auto f = make_file(many_entries_header(n), n);
    double best = 1e9;  // the fastest of three: the machine may be busy
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      auto st = SafetensorsFile::from_bytes(f, "many.safetensors");
      EXPECT_EQ(st->entries().size(), n);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  const double t25 = time_of(25'000);
  const double t100 = time_of(100'000);
  EXPECT_LT(t100, 2.0);
  EXPECT_LT(t100, 8 * t25 + 0.05) << "25k entries: " << t25 << " s, 100k: " << t100 << " s";
  EXPECT_NE(
      rejected(make_file(many_entries_header(262'145), 262'145)).find("more than 262144 tensors"),
      std::string::npos);
}

TEST(SafetensorsCorrupt, FifoIsRefusedWithoutBlocking) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/fifo_shard.safetensors";
  ::unlink(path.c_str());
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  try {
    SafetensorsFile::open(path);
    ADD_FAILURE() << "a FIFO was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
  ::unlink(path.c_str());
  try {
    SafetensorsFile::open("/dev/zero");
    ADD_FAILURE() << "a device was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
}
