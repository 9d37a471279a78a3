#pragma once
// NumPy .npy files, format versions 1.0 to 3.0, little-endian, C order. Written by hand: Debian
// has no maintained C++ .npy library, and the format is a short header plus raw data.
#include <string>

#include "tensor/tensor.h"

namespace metaop {

Tensor read_npy(const std::string& path);
void write_npy(const std::string& path, const Tensor& t);

}  // namespace metaop
