// TensorProto bytes (the conformance data's input_*.pb) through read_tensor_pb: protobuf
// parsing, dims and sizes, raw and typed data, external data resolved in a scratch folder.
#include <onnx/onnx_pb.h>

#include <cstdint>

#include "fuzz_util.h"
#include "tensor/tensor_proto.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    metaop::Tensor t = metaop::read_tensor_pb(fuzz::as_file(data, size));
    if (t.numel() > 0) (void)t.f64_at(t.numel() - 1);
  } catch (const std::exception&) {
  }
  try {  // the same proto with external data resolved against a folder that has files
    onnx::TensorProto p;
    if (p.ParseFromArray(data, static_cast<int>(size)))
      (void)metaop::tensor_from_proto(p, fuzz::scratch(), "fuzz");
  } catch (const std::exception&) {
  }
  return 0;
}
