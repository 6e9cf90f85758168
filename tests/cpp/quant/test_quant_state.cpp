// QuantState serialization: golden keys, dtypes, shapes and the
// packed JSON byte for byte as bitsandbytes writes it; round trips in both
// forms; "<weight>." prefixes; one case per malformed input; and
// quantize_4bit -> packed dict -> from_dict -> dequantize_4bit bit-exact.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "harness/harness.h"
#include "lowbit/code_maps.h"
#include "lowbit/ops/quant.h"
#include "lowbit/quant_state.h"

namespace lowbit {
namespace {

using test::host_tensor;

Tensor table_tensor(const char* name) {
  const auto t = get_4bit_type(name);
  return host_tensor(std::vector<float>(t.begin(), t.end()));
}

Tensor bytes(const std::string& s) {
  Tensor t = Tensor::empty({static_cast<int64_t>(s.size())}, DType::u8);
  std::memcpy(t.data(), s.data(), s.size());
  return t;
}

std::string text_of(const QuantStateValue& v) {
  const Tensor& t = std::get<Tensor>(v);
  return std::string(t.ptr<const char>(), t.nbytes());
}

// A 4-bit state built by hand (no kernels involved): `shape` split in
// blocks of `blocksize`; when nested, absmax is uint8 and state2 holds
// nested_blocksize 256 and the dynamic map.
QuantState hand_state(const std::string& type, bool nested, DType dtype, std::vector<int64_t> shape,
                      int64_t blocksize = 64, float offset = 0.1f) {
  QuantState s;
  s.quant_type = type;
  s.blocksize = blocksize;
  s.dtype = dtype;
  s.shape = std::move(shape);
  s.code = table_tensor(type.c_str());
  const int64_t nblocks = (s.numel() + blocksize - 1) / blocksize;
  if (!nested) {
    std::vector<float> a(static_cast<size_t>(nblocks));
    for (size_t i = 0; i < a.size(); ++i) a[i] = 0.5f + 0.25f * static_cast<float>(i);
    s.absmax = host_tensor(a);
    return s;
  }
  s.absmax = Tensor::empty({nblocks}, DType::u8);
  for (int64_t i = 0; i < nblocks; ++i) s.absmax.ptr<uint8_t>()[i] = static_cast<uint8_t>(i * 37);
  s.offset = host_tensor({offset});
  auto s2 = std::make_shared<QuantState>();
  s2->blocksize = 256;
  s2->dtype = DType::f32;
  s2->shape = {nblocks};
  s2->code = host_tensor(create_dynamic_map());
  std::vector<float> a2(static_cast<size_t>((nblocks + 255) / 256), 0.75f);
  s2->absmax = host_tensor(a2);
  s.state2 = s2;
  return s;
}

std::set<std::string> keys_of(const QuantStateDict& d) {
  std::set<std::string> k;
  for (const auto& [key, value] : d) k.insert(key);
  return k;
}

void expect_same_tensor(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(std::vector<int64_t>(a.sizes().begin(), a.sizes().end()),
            std::vector<int64_t>(b.sizes().begin(), b.sizes().end()))
      << what;
  const Tensor ha = a.device().is_cpu() ? a : a.to(Device::cpu());
  const Tensor hb = b.device().is_cpu() ? b : b.to(Device::cpu());
  EXPECT_EQ(std::memcmp(ha.data(), hb.data(), ha.nbytes()), 0) << what;
}

void expect_same_dict(const QuantStateDict& a, const QuantStateDict& b) {
  ASSERT_EQ(keys_of(a), keys_of(b));
  for (const auto& [key, value] : a) {
    const QuantStateValue& other = b.at(key);
    ASSERT_EQ(value.index(), other.index()) << key;
    if (const auto* t = std::get_if<Tensor>(&value)) {
      expect_same_tensor(*t, std::get<Tensor>(other), key);
    } else if (const auto* i = std::get_if<int64_t>(&value)) {
      EXPECT_EQ(*i, std::get<int64_t>(other)) << key;
    } else if (const auto* f = std::get_if<double>(&value)) {
      EXPECT_EQ(*f, std::get<double>(other)) << key;
    } else if (const auto* s = std::get_if<std::string>(&value)) {
      EXPECT_EQ(*s, std::get<std::string>(other)) << key;
    } else {
      EXPECT_EQ(std::get<std::vector<int64_t>>(value), std::get<std::vector<int64_t>>(other)) << key;
    }
  }
}

// from_dict must throw format_error whose message holds every part.
void expect_format_error(const QuantStateDict& d, std::initializer_list<const char*> parts) {
  try {
    quant_state_from_dict(d);
    ADD_FAILURE() << "no error; expected one mentioning " << *parts.begin();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::format_error) << e.what();
    const std::string msg = e.what();
    EXPECT_NE(msg.find("quant_state_from_dict"), std::string::npos) << msg;
    for (const char* p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

QuantStateDict with_prefix(const QuantStateDict& d, const std::string& prefix) {
  QuantStateDict out;
  for (const auto& [k, v] : d) out[prefix + k] = v;
  return out;
}

// ----------------------------------------------------------------- golden

TEST(QuantState, Numel) {
  QuantState s;
  s.shape = {3, 5, 7};
  EXPECT_EQ(s.numel(), 105);
  s.shape = {4, 0};
  EXPECT_EQ(s.numel(), 0);
  s.shape = {};
  EXPECT_EQ(s.numel(), 1);  // a scalar, as torch.Size([]).numel()
}

TEST(QuantState, UnpackedKeysAndValues) {
  const QuantStateDict d = quant_state_as_dict(hand_state("nf4", false, DType::bf16, {4, 40}));
  EXPECT_EQ(keys_of(d), (std::set<std::string>{"absmax", "blocksize", "dtype", "quant_map", "quant_type", "shape"}));
  EXPECT_EQ(std::get<std::string>(d.at("quant_type")), "nf4");
  EXPECT_EQ(std::get<int64_t>(d.at("blocksize")), 64);
  EXPECT_EQ(std::get<std::string>(d.at("dtype")), "bfloat16");
  EXPECT_EQ(std::get<std::vector<int64_t>>(d.at("shape")), (std::vector<int64_t>{4, 40}));
  const Tensor& absmax = std::get<Tensor>(d.at("absmax"));
  EXPECT_EQ(absmax.dtype(), DType::f32);
  EXPECT_EQ(absmax.numel(), 3);
  EXPECT_TRUE(absmax.device().is_cpu());
  expect_same_tensor(std::get<Tensor>(d.at("quant_map")), table_tensor("nf4"), "quant_map");
}

TEST(QuantState, UnpackedNestedKeysAndValues) {
  const QuantStateDict d = quant_state_as_dict(hand_state("fp4", true, DType::f16, {300}, 128, 0.1f));
  EXPECT_EQ(keys_of(d),
            (std::set<std::string>{"absmax", "blocksize", "dtype", "nested_absmax", "nested_blocksize", "nested_dtype",
                                   "nested_offset", "nested_quant_map", "quant_map", "quant_type", "shape"}));
  EXPECT_EQ(std::get<Tensor>(d.at("absmax")).dtype(), DType::u8);
  EXPECT_EQ(std::get<Tensor>(d.at("absmax")).numel(), 3);
  EXPECT_EQ(std::get<Tensor>(d.at("nested_absmax")).dtype(), DType::f32);
  EXPECT_EQ(std::get<Tensor>(d.at("nested_absmax")).numel(), 1);
  EXPECT_EQ(std::get<Tensor>(d.at("nested_quant_map")).numel(), 256);
  EXPECT_EQ(std::get<int64_t>(d.at("nested_blocksize")), 256);
  EXPECT_EQ(std::get<std::string>(d.at("nested_dtype")), "float32");
  // Python's offset.item(): the float32 value, widened exactly.
  EXPECT_EQ(std::get<double>(d.at("nested_offset")), static_cast<double>(0.1f));
  EXPECT_EQ(std::get<std::string>(d.at("dtype")), "float16");
}

TEST(QuantState, PackedKeysAndJsonAsBitsandbytesWritesThem) {
  const QuantStateDict d = quant_state_as_dict(hand_state("nf4", false, DType::bf16, {4, 40}), true);
  EXPECT_EQ(keys_of(d), (std::set<std::string>{"absmax", "quant_map", "quant_state.bitsandbytes__nf4"}));
  const Tensor& blob = std::get<Tensor>(d.at("quant_state.bitsandbytes__nf4"));
  EXPECT_EQ(blob.dtype(), DType::u8);
  EXPECT_EQ(blob.ndim(), 1);
  // python3 -c 'import json; print(json.dumps({"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": (4,
  // 40)}))'
  EXPECT_EQ(text_of(blob), R"({"quant_type": "nf4", "blocksize": 64, "dtype": "bfloat16", "shape": [4, 40]})");
}

TEST(QuantState, PackedNestedJson) {
  const QuantStateDict d = quant_state_as_dict(hand_state("fp4", true, DType::f16, {300}, 128, 0.1f), true);
  EXPECT_EQ(keys_of(d), (std::set<std::string>{"absmax", "nested_absmax", "nested_quant_map", "quant_map",
                                               "quant_state.bitsandbytes__fp4"}));
  EXPECT_EQ(text_of(d.at("quant_state.bitsandbytes__fp4")),
            R"({"quant_type": "fp4", "blocksize": 128, "dtype": "float16", "shape": [300], )"
            R"("nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": 0.10000000149011612})");
}

// nested_offset as Python's json.dumps(float(np.float32(v))) prints it.
TEST(QuantState, PackedOffsetFormattedAsPythonRepr) {
  const std::pair<float, const char*> cases[] = {
      {0.0f, "0.0"},
      {-0.0f, "-0.0"},
      {3.0f, "3.0"},
      {1234.5f, "1234.5"},
      {1e-5f, "9.999999747378752e-06"},
      {1e-4f, "9.999999747378752e-05"},
      {0.00123f, "0.001230000052601099"},
      {123456789.0f, "123456792.0"},
      {1e15f, "999999986991104.0"},
      {1e16f, "1.0000000272564224e+16"},
      {-7.5e20f, "-7.49999997438472e+20"},
      {5e-39f, "4.999999675228202e-39"},
  };
  for (const auto& [value, text] : cases) {
    const QuantStateDict d = quant_state_as_dict(hand_state("nf4", true, DType::f32, {64}, 64, value), true);
    const std::string json = text_of(d.at("quant_state.bitsandbytes__nf4"));
    EXPECT_NE(json.find(std::string("\"nested_offset\": ") + text + "}"), std::string::npos) << value << " -> " << json;
  }
}

// Non-finite offsets (weights holding Inf) are written as Python's json does
// and read back as Python's json reads them; such words inside strings stay text.
TEST(QuantState, NonFiniteOffsetsRoundTripAsPythonJson) {
  const std::pair<float, const char*> cases[] = {{std::numeric_limits<float>::infinity(), "Infinity"},
                                                 {-std::numeric_limits<float>::infinity(), "-Infinity"},
                                                 {std::numeric_limits<float>::quiet_NaN(), "NaN"}};
  for (const auto& [value, text] : cases) {
    const QuantStateDict d = quant_state_as_dict(hand_state("nf4", true, DType::f32, {64}, 64, value), true);
    const std::string json = text_of(d.at("quant_state.bitsandbytes__nf4"));
    EXPECT_NE(json.find(std::string("\"nested_offset\": ") + text + "}"), std::string::npos) << json;
    const QuantState s = quant_state_from_dict(d);
    const float got = s.offset.ptr<float>()[0];
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(got)) << text;
    } else {
      EXPECT_EQ(got, value) << text;
    }
  }
  // The packed JSON with one field's text replaced is refused, naming `needle`.
  const auto expect_refused = [](const std::string& field, const std::string& needle) {
    std::string json = R"({"quant_type": "nf4", "blocksize": 64, "dtype": "float32", "shape": [64], )"
                       R"("nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": -Infinity})";
    const size_t at = json.find(field.substr(0, field.find(':') + 1));
    json.replace(at, json.find(',', at) - at, field);
    QuantStateDict d = quant_state_as_dict(hand_state("nf4", true, DType::f32, {64}), true);
    d["quant_state.bitsandbytes__nf4"] = bytes(json);
    try {
      quant_state_from_dict(d);
      ADD_FAILURE() << json << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_refused(R"("quant_type": "NaN")", "'NaN'");  // the word inside a string stays text
  expect_refused(R"("blocksize": Infinity)", "blocksize");
}

TEST(QuantState, AsDictRejectsStatesThatAreNot4bit) {
  QuantState s = hand_state("nf4", false, DType::f32, {64});
  s.quant_type = "";
  try {
    quant_state_as_dict(s);
    ADD_FAILURE() << "8-bit state serialized";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("quant_type"), std::string::npos) << e.what();
  }
}

// ------------------------------------------------------------- round trip

TEST(QuantState, RoundTripBothForms) {
  for (const char* type : {"nf4", "fp4"}) {
    for (bool nested : {false, true}) {
      for (bool packed : {false, true}) {
        SCOPED_TRACE(testing::Message() << type << " nested=" << nested << " packed=" << packed);
        const QuantState s0 = hand_state(type, nested, DType::bf16, {7, 300}, 128, -0.37f);
        const QuantStateDict d0 = quant_state_as_dict(s0, packed);
        const QuantState s1 = quant_state_from_dict(d0);
        EXPECT_EQ(s1.quant_type, type);
        EXPECT_EQ(s1.blocksize, 128);
        EXPECT_EQ(s1.dtype, DType::bf16);
        EXPECT_EQ(s1.shape, (std::vector<int64_t>{7, 300}));
        ASSERT_EQ(s1.nested(), nested);
        expect_same_tensor(s1.absmax, s0.absmax, "absmax");
        expect_same_tensor(s1.code, s0.code, "code");
        if (nested) {
          expect_same_tensor(s1.offset, s0.offset, "offset");
          expect_same_tensor(s1.state2->absmax, s0.state2->absmax, "state2.absmax");
          expect_same_tensor(s1.state2->code, s0.state2->code, "state2.code");
          EXPECT_EQ(s1.state2->blocksize, 256);
          EXPECT_EQ(s1.state2->dtype, DType::f32);
          EXPECT_EQ(s1.state2->shape, (std::vector<int64_t>{s0.absmax.numel()}));
        }
        expect_same_dict(quant_state_as_dict(s1, packed), d0);
        // And across forms: packed in, unpacked out equals unpacked directly.
        expect_same_dict(quant_state_as_dict(s1, !packed), quant_state_as_dict(s0, !packed));
      }
    }
  }
}

TEST(QuantState, PrefixedKeysAndTheWeightItself) {
  const std::string prefix = "model.layers.0.mlp.down_proj.weight.";
  for (bool packed : {false, true}) {
    const QuantState s0 = hand_state("nf4", true, DType::bf16, {64, 64});
    QuantStateDict d = with_prefix(quant_state_as_dict(s0, packed), prefix);
    d["model.layers.0.mlp.down_proj.weight"] = Tensor::empty({2048, 1}, DType::u8);  // comes along, ignored
    const QuantState s1 = quant_state_from_dict(d);
    expect_same_dict(quant_state_as_dict(s1, packed), quant_state_as_dict(s0, packed));
  }
}

// -------------------------------------------------------------- malformed

QuantStateDict packed_nf4() {
  return with_prefix(quant_state_as_dict(hand_state("nf4", true, DType::f16, {256}), true), "W.");
}
QuantStateDict unpacked_nf4() {
  return with_prefix(quant_state_as_dict(hand_state("nf4", true, DType::f16, {256})), "W.");
}

TEST(QuantStateMalformed, MissingTensorKey) {
  QuantStateDict d = packed_nf4();
  d.erase("W.absmax");
  expect_format_error(d, {"missing key 'W.absmax'"});
  d = unpacked_nf4();
  d.erase("W.nested_quant_map");
  expect_format_error(d, {"missing key 'W.nested_quant_map'"});
}

TEST(QuantStateMalformed, MissingJsonField) {
  QuantStateDict d = packed_nf4();
  d["W.quant_state.bitsandbytes__nf4"] = bytes(R"({"quant_type": "nf4", "dtype": "float16", "shape": [256]})");
  expect_format_error(d, {"missing field 'blocksize'", "'W.quant_state.bitsandbytes__nf4'"});
}

TEST(QuantStateMalformed, MissingUnpackedField) {
  QuantStateDict d = unpacked_nf4();
  d.erase("W.shape");
  expect_format_error(d, {"missing key 'W.shape'"});
}

TEST(QuantStateMalformed, NeitherForm) {
  expect_format_error({}, {"neither"});
  QuantStateDict d;
  d["W.weight_format"] = int64_t{0};
  expect_format_error(d, {"neither"});
}

TEST(QuantStateMalformed, BadJson) {
  QuantStateDict d = packed_nf4();
  d["W.quant_state.bitsandbytes__nf4"] = bytes(R"({"quant_type": "nf4", "blocksize": 6)");
  expect_format_error(d, {"'W.quant_state.bitsandbytes__nf4'", "not valid JSON"});
  d["W.quant_state.bitsandbytes__nf4"] = bytes("[1, 2]");
  expect_format_error(d, {"JSON object", "array"});
  // Refused before parsing: copying and serializing JSON recurse per level.
  d["W.quant_state.bitsandbytes__nf4"] =
      bytes("{\"quant_type\": " + std::string(100000, '[') + std::string(100000, ']') + "}");
  expect_format_error(d, {"'W.quant_state.bitsandbytes__nf4'", "more than 128 levels deep"});
}

TEST(QuantStateMalformed, WrongTensorDtype) {
  QuantStateDict d = packed_nf4();
  d["W.absmax"] = host_tensor({1.0f, 2.0f, 3.0f, 4.0f});  // f32 in a nested state
  expect_format_error(d, {"'W.absmax'", "dtype must be uint8", "got float32"});
  d = packed_nf4();
  d["W.quant_map"] = Tensor::empty({16}, DType::f16);
  expect_format_error(d, {"'W.quant_map'", "dtype must be float32", "got float16"});
  d = packed_nf4();
  d["W.quant_state.bitsandbytes__nf4"] = host_tensor({1.0f});
  expect_format_error(d, {"'W.quant_state.bitsandbytes__nf4'", "dtype must be uint8", "got float32"});
}

TEST(QuantStateMalformed, WrongTensorSize) {
  QuantStateDict d = unpacked_nf4();
  d["W.quant_map"] = host_tensor(std::vector<float>(15, 0.0f));
  expect_format_error(d, {"'W.quant_map'", "16 elements", "got 15"});
  d = unpacked_nf4();
  d["W.shape"] = std::vector<int64_t>{1000};  // 16 blocks of 64, but absmax has 4
  expect_format_error(d, {"'W.absmax'", "16 elements", "got 4"});
}

TEST(QuantStateMalformed, UnknownQuantType) {
  QuantStateDict d = packed_nf4();
  d["W.quant_state.bitsandbytes__int4"] = d.at("W.quant_state.bitsandbytes__nf4");
  d.erase("W.quant_state.bitsandbytes__nf4");
  expect_format_error(d, {"'W.quant_state.bitsandbytes__int4'", "'int4'"});
  d = unpacked_nf4();
  d["W.quant_type"] = std::string("int4");
  expect_format_error(d, {"'W.quant_type'", "nf4 or fp4", "'int4'"});
  d = packed_nf4();
  d["W.quant_state.bitsandbytes__nf4"] = bytes(R"({"quant_type": "fp4", "blocksize": 64, "dtype": "float16", )"
                                               R"("shape": [256], "nested_blocksize": 256, "nested_dtype": )"
                                               R"("float32", "nested_offset": 0.5})");
  expect_format_error(d, {"field 'quant_type'", "'fp4'", "nf4"});
}

TEST(QuantStateMalformed, WrongValueTypes) {
  QuantStateDict d = unpacked_nf4();
  d["W.blocksize"] = std::string("64");
  expect_format_error(d, {"'W.blocksize'", "must be an integer", "got a string"});
  d = packed_nf4();
  d["W.quant_state.bitsandbytes__nf4"] =
      bytes(R"({"quant_type": "nf4", "blocksize": 64, "dtype": "float16", "shape": null})");
  expect_format_error(d, {"field 'shape'", "list of integers", "got null"});
  d = unpacked_nf4();
  d["W.dtype"] = std::string("int8");
  expect_format_error(d, {"'W.dtype'", "float32, float16, bfloat16", "'int8'"});
  d = unpacked_nf4();
  d["W.blocksize"] = int64_t{48};
  expect_format_error(d, {"'W.blocksize'", "power of two", "48"});
  d = unpacked_nf4();
  d["W.nested_offset"] = std::string("0.5");
  expect_format_error(d, {"'W.nested_offset'", "a float", "got a string"});
}

TEST(QuantStateMalformed, InconsistentKeys) {
  QuantStateDict d = unpacked_nf4();
  d["W.bias"] = host_tensor({0.0f});
  expect_format_error(d, {"unexpected key 'W.bias'"});
  d = unpacked_nf4();
  d["V.absmax"] = d.at("W.absmax");
  d.erase("W.absmax");
  expect_format_error(d, {"one prefix", "'V.absmax'"});
  d = packed_nf4();
  d["W.blocksize"] = int64_t{64};
  expect_format_error(d, {"'blocksize' is given twice"});
  d = packed_nf4();
  d["W.quant_state.bitsandbytes__fp4"] = d.at("W.quant_state.bitsandbytes__nf4");
  expect_format_error(d, {"more than one packed state"});
  d = with_prefix(quant_state_as_dict(hand_state("nf4", false, DType::f16, {256})), "W.");
  d["W.nested_offset"] = 0.5;
  expect_format_error(d, {"'W.nested_offset'", "'W.nested_absmax' is missing"});
}

// ------------------------------------------------- with the real kernels

TEST(QuantState, Quantize4bitThroughPackedDictDequantizesIdentically) {
  for (Quant4Type type : {Quant4Type::nf4, Quant4Type::fp4}) {
    for (bool compress : {false, true}) {
      for (DType dtype : {DType::f32, DType::bf16}) {
        SCOPED_TRACE(testing::Message() << "type " << static_cast<int>(type) << " compress=" << compress << " dtype "
                                        << dtype_name(dtype));
        const Tensor x = test::random_floats({37, 51}, dtype);  // odd element count, partial last block
        const auto [packed, state] = quantize_4bit(x, 64, type, compress);
        ASSERT_EQ(state.nested(), compress);
        const QuantStateDict d = with_prefix(quant_state_as_dict(state, true), "layer.weight.");
        const QuantState back = quant_state_from_dict(d);
        EXPECT_EQ(back.dtype, dtype);
        EXPECT_EQ(back.shape, (std::vector<int64_t>{37, 51}));
        expect_same_tensor(dequantize_4bit(packed, back), dequantize_4bit(packed, state), "dequantized");
      }
    }
  }
}

TEST(QuantState, FromDictPlacesTensorsOnTheDevice) {
  if (!test::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const QuantState s0 = hand_state("fp4", true, DType::bf16, {4096});
  const QuantStateDict d = quant_state_as_dict(s0, true);
  const QuantState s1 = quant_state_from_dict(d, Device::cuda(0));
  const std::vector<const Tensor*> placed = {&s1.absmax, &s1.code, &s1.offset, &s1.state2->absmax, &s1.state2->code};
  for (const Tensor* t : placed) {
    EXPECT_EQ(t->device(), Device::cuda(0));
  }
  // as_dict brings them back to the host unchanged.
  expect_same_dict(quant_state_as_dict(s1, true), d);
}

}  // namespace
}  // namespace lowbit
