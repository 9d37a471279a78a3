#include "tensor/npy.h"

#include <cctype>
#include <cstring>
#include <fstream>

#include "tensor/files.h"

namespace metaop {

namespace {

std::string descr_of(DType t) {
  switch (t) {
    case DType::Float32:
      return "<f4";
    case DType::Float64:
      return "<f8";
    case DType::Float16:
      return "<f2";
    case DType::Int64:
      return "<i8";
    case DType::Int32:
      return "<i4";
    case DType::Int8:
      return "|i1";
    case DType::UInt8:
      return "|u1";
    case DType::Bool:
      return "|b1";
    case DType::Int16:
      return "<i2";
    case DType::UInt16:
      return "<u2";
    case DType::UInt32:
      return "<u4";
    case DType::UInt64:
      return "<u8";
    case DType::BFloat16:
      break;
  }
  fail("bfloat16 has no .npy dtype");
}

DType dtype_of_descr(const std::string& d, const std::string& path) {
  static const std::pair<const char*, DType> table[] = {
      {"<f4", DType::Float32}, {"<f8", DType::Float64}, {"<f2", DType::Float16},
      {"<i8", DType::Int64},   {"<i4", DType::Int32},   {"|i1", DType::Int8},
      {"|u1", DType::UInt8},   {"|b1", DType::Bool},    {"<i1", DType::Int8},
      {"<u1", DType::UInt8},   {"|f2", DType::Float16}, {"<i2", DType::Int16},
      {"<u2", DType::UInt16},  {"<u4", DType::UInt32},  {"<u8", DType::UInt64}};
  for (auto& [name, t] : table)
    if (d == name) return t;
  if (!d.empty() && d[0] == '>') fail("{}: big-endian dtype '{}' is not supported", path, d);
  fail(
      "{}: unsupported .npy dtype '{}' (supported: float16/32/64, int8/16/32/64, uint8/16/32/64, "
      "bool)",
      path, d);
}

// The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }.
// Parsed by hand, in one pass and with bounds (a regex over a 30 kB dtype string overflows the
// stack; a header may claim 100,000 dims): keys and strings are quoted without escapes, values
// are strings, True/False or a tuple of non-negative integers.
class HeaderParser {
 public:
  HeaderParser(const std::string& h, const std::string& path) : h_(h), path_(path) {}

  void parse(std::string& descr, bool& fortran, Shape& shape) {
    bool seen_descr = false, seen_order = false, seen_shape = false;
    skip();
    expect('{');
    for (;;) {
      skip();
      if (peek() == '}') break;
      std::string key = string_value("key");
      skip();
      expect(':');
      skip();
      if (key == "descr") {
        if (peek() != '\'' && peek() != '"')
          fail("{}: .npy dtype is not a plain type string (structured dtypes are not supported)",
               path_);
        descr = string_value("'descr'");
        seen_descr = true;
      } else if (key == "fortran_order") {
        fortran = bool_value();
        seen_order = true;
      } else if (key == "shape") {
        shape = tuple_value();
        seen_shape = true;
      } else {
        fail("{}: unexpected key '{}' in the .npy header", path_, printable_key(key));
      }
      skip();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      skip();
      expect('}');
      --pos_;
      break;
    }
    expect('}');
    if (!seen_descr) fail("{}: .npy header has no 'descr'", path_);
    if (!seen_order) fail("{}: .npy header has no 'fortran_order'", path_);
    if (!seen_shape) fail("{}: .npy header has no 'shape'", path_);
  }

 private:
  static constexpr std::size_t kMaxString = 64;
  static constexpr std::size_t kMaxDims = kMaxRank;

  char peek() const { return pos_ < h_.size() ? h_[pos_] : '\0'; }
  void skip() {
    while (pos_ < h_.size() && (h_[pos_] == ' ' || h_[pos_] == '\t' || h_[pos_] == '\n')) ++pos_;
  }
  void expect(char c) {
    if (peek() != c) fail("{}: malformed .npy header: expected '{}' at byte {}", path_, c, pos_);
    ++pos_;
  }
  std::string printable_key(const std::string& k) const {
    std::string out;
    for (char c : k) out += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
    return out;
  }
  std::string string_value(const char* what) {
    char q = peek();
    if (q != '\'' && q != '"')
      fail("{}: malformed .npy header: expected a quoted {} at byte {}", path_, what, pos_);
    ++pos_;
    std::size_t start = pos_;
    while (pos_ < h_.size() && h_[pos_] != q) {
      if (h_[pos_] == '\\') fail("{}: malformed .npy header: escape in a string", path_);
      if (pos_ - start >= kMaxString)
        fail("{}: .npy header {} is longer than {} characters", path_, what, kMaxString);
      ++pos_;
    }
    std::string s = h_.substr(start, pos_ - start);
    expect(q);
    return s;
  }
  bool bool_value() {
    if (h_.compare(pos_, 4, "True") == 0) {
      pos_ += 4;
      return true;
    }
    if (h_.compare(pos_, 5, "False") == 0) {
      pos_ += 5;
      return false;
    }
    fail("{}: malformed .npy header: 'fortran_order' is neither True nor False", path_);
  }
  Shape tuple_value() {
    expect('(');
    Shape shape;
    for (;;) {
      skip();
      if (peek() == ')') break;
      if (!std::isdigit(static_cast<unsigned char>(peek())))
        fail("{}: bad dimension in .npy shape at byte {} (expected a non-negative integer)", path_,
             pos_);
      std::int64_t d = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        if (__builtin_mul_overflow(d, 10, &d) || __builtin_add_overflow(d, peek() - '0', &d))
          fail("{}: dimension in .npy shape is larger than 2^63", path_);
        ++pos_;
      }
      if (peek() == 'L') ++pos_;  // Python 2 longs
      if (shape.size() == kMaxDims)
        fail("{}: .npy shape has more than {} dimensions", path_, kMaxDims);
      shape.push_back(d);
      skip();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      skip();
      if (peek() != ')') fail("{}: malformed .npy shape at byte {}", path_, pos_);
    }
    expect(')');
    return shape;
  }

  const std::string& h_;
  const std::string& path_;
  std::size_t pos_ = 0;
};

}  // namespace

Tensor read_npy(const std::string& path) {
  InputFile in(path);
  unsigned char magic[8];
  if (in.size() < 10) fail("{}: not a .npy file (too short: {} bytes)", path, in.size());
  in.read_at(0, magic, 8);
  if (std::memcmp(magic, "\x93NUMPY", 6) != 0) fail("{}: not a .npy file (bad magic)", path);
  int major = magic[6];
  std::int64_t header_len = 0, pos = 8;
  if (major == 1) {
    unsigned char b[2];
    in.read_at(pos, b, 2);
    header_len = b[0] | (b[1] << 8);
    pos += 2;
  } else if (major == 2 || major == 3) {
    unsigned char b[4];
    if (in.size() < 12) fail("{}: truncated .npy header", path);
    in.read_at(pos, b, 4);
    header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<std::int64_t>(b[3]) << 24);
    pos += 4;
  } else {
    fail("{}: unsupported .npy format version {}", path, major);
  }
  // The declared header length against the bytes present, before anything is allocated.
  if (header_len > in.size() - pos)
    fail("{}: truncated .npy header: it declares {} bytes, the file has {} after the preamble",
         path, header_len, in.size() - pos);
  if (header_len > (1 << 20))
    fail("{}: .npy header of {} bytes (more than 1 MB)", path, header_len);
  std::string header(static_cast<std::size_t>(header_len), '\0');
  in.read_at(pos, header.data(), header_len);
  pos += header_len;

  std::string descr;
  bool fortran = false;
  Shape shape;
  HeaderParser(header, path).parse(descr, fortran, shape);
  DType dtype = dtype_of_descr(descr, path);
  if (fortran) fail("{}: Fortran-order arrays are not supported; save in C order", path);
  std::int64_t nbytes = 0;
  try {
    nbytes = shape_nbytes(shape, dtype);
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
  if (nbytes > in.size() - pos)
    fail("{}: truncated data: expected {} bytes for {} {}, the file has {}", path, nbytes,
         dtype_name(dtype), shape_str(shape), in.size() - pos);
  Tensor t = Tensor::empty(dtype, shape);
  if (nbytes) in.read_at(pos, t.raw(), nbytes);
  if (dtype == DType::Bool) normalize_bools(t);
  return t;
}

void write_npy(const std::string& path, const Tensor& t) {
  std::string shape;  // "()", "(4,)", "(2, 3)"
  for (std::size_t i = 0; i < t.shape().size(); ++i)
    shape += (i ? ", " : "") + std::to_string(t.shape()[i]);
  if (t.rank() == 1) shape += ",";
  std::string header = "{'descr': '" + descr_of(t.dtype()) +
                       "', 'fortran_order': False, 'shape': (" + shape + "), }";
  // Pad so that data starts on a 64-byte boundary (10 bytes of magic, version and length).
  std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  if (!out) fail("{}: cannot open for writing", path);
  out.write("\x93NUMPY\x01\x00", 8);
  unsigned char len[2] = {static_cast<unsigned char>(header.size() & 0xff),
                          static_cast<unsigned char>(header.size() >> 8)};
  out.write(reinterpret_cast<const char*>(len), 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(t.raw()), static_cast<std::streamsize>(t.nbytes()));
  if (!out) fail("{}: write failed", path);
}

}  // namespace metaop
