// .npy bytes through read_npy: the magic, version and header length, the header dict parsed by
// hand, the dtype and shape, the declared size against the bytes present.
#include <cstdint>

#include "fuzz_util.h"
#include "tensor/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    metaop::Tensor t = metaop::read_npy(fuzz::as_file(data, size));
    if (t.numel() > 0) (void)t.f64_at(t.numel() - 1);
  } catch (const std::exception&) {
  }
  return 0;
}
