#pragma once
// ONNX backend-test folders (model.onnx + test_data_set_*/{input,output}_*.pb): finding them and
// reading their data sets. `conform` runs them; the node cases and `probe` read their inputs.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace metaop {

// Test folders under each path: a path that holds model.onnx is a test; otherwise each
// subfolder holding one is (sorted by name).
std::vector<std::string> find_conformance_tests(const std::vector<std::string>& paths);

struct Graph;
struct ValueInfo;
class Tensor;
// A data set's tensor file for the graph input or output `declared`: ONNX's test data stores
// bfloat16 tensors as UINT16 (NumPy has no bfloat16), so those bits are read as the bfloat16
// the model declares.
// A sequence or optional value `declared` is Unsupported here: read_test_composite reads it.
Tensor read_test_tensor(const std::string& path, const ValueInfo& declared);
struct CompositeValue;
// A data set's file for a graph input or output of sequence or optional type (a SequenceProto or
// an OptionalProto, as `declared` says): its tensors, read as read_test_tensor reads one.
CompositeValue read_test_composite(const std::string& path, const ValueInfo& declared);
// The inputs of a test's first data set (test_data_set_0), bound by position to the graph inputs.
std::map<std::string, Tensor> load_test_inputs(const Graph& g, const std::string& dir);

// The files PREFIX<i>.pb of a data set folder, by i.
std::vector<std::filesystem::path> sorted_pbs(const std::filesystem::path& dir,
                                              const std::string& prefix);

}  // namespace metaop
