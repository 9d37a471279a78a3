#include "tensor/npy.h"

#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

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
      {"<u1", DType::UInt8},   {"|f2", DType::Float16}};
  for (auto& [name, t] : table)
    if (d == name) return t;
  if (!d.empty() && d[0] == '>') fail("{}: big-endian dtype '{}' is not supported", path, d);
  fail("{}: unsupported .npy dtype '{}' (supported: float16/32/64, int8/32/64, uint8, bool)", path,
       d);
}

}  // namespace

Tensor read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open file", path);
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    fail("{}: not a .npy file (bad magic)", path);
  int major = static_cast<unsigned char>(magic[6]);
  std::uint32_t header_len = 0;
  if (major == 1) {
    unsigned char b[2];
    if (!in.read(reinterpret_cast<char*>(b), 2)) fail("{}: truncated .npy header", path);
    header_len = b[0] | (b[1] << 8);
  } else if (major == 2 || major == 3) {
    unsigned char b[4];
    if (!in.read(reinterpret_cast<char*>(b), 4)) fail("{}: truncated .npy header", path);
    header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<std::uint32_t>(b[3]) << 24);
  } else {
    fail("{}: unsupported .npy format version {}", path, major);
  }
  std::string header(header_len, '\0');
  if (!in.read(header.data(), header_len)) fail("{}: truncated .npy header", path);

  std::smatch m;
  static const std::regex descr_re(R"('descr'\s*:\s*'([^']*)')");
  static const std::regex order_re(R"('fortran_order'\s*:\s*(True|False))");
  static const std::regex shape_re(R"('shape'\s*:\s*\(([^)]*)\))");
  if (!std::regex_search(header, m, descr_re)) fail("{}: .npy header has no 'descr'", path);
  DType dtype = dtype_of_descr(m[1], path);
  if (!std::regex_search(header, m, order_re)) fail("{}: .npy header has no 'fortran_order'", path);
  if (m[1] == "True") fail("{}: Fortran-order arrays are not supported; save in C order", path);
  if (!std::regex_search(header, m, shape_re)) fail("{}: .npy header has no 'shape'", path);
  Shape shape;
  std::stringstream ss(m[1].str());
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto first = item.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    try {
      shape.push_back(std::stoll(item.substr(first)));
    } catch (const std::exception&) {
      fail("{}: bad dimension '{}' in .npy shape", path, item);
    }
  }
  Tensor t(dtype, shape);
  if (t.nbytes() && !in.read(reinterpret_cast<char*>(t.raw()), t.nbytes()))
    fail("{}: truncated data: expected {} bytes for {} {}", path, t.nbytes(), dtype_name(dtype),
         shape_str(shape));
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
