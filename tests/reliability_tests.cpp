// Unit tests of what keeps MetaOp standing on hostile input: names as data, confined paths,
// regular files only, checked sizes and the memory budget, the .npy header parser, integer
// division refused, the reproducer manifest, and kernels isolated in worker processes.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>

#include "bindings/factory.h"
#include "bindings/isolate.h"
#include "engine/executor.h"
#include "report/core/format.h"
#include "report/core/repro.h"
#include "tensor/files.h"
#include "tensor/heap.h"
#include "tensor/npy.h"
#include "tensor/text.h"

using namespace metaop;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("metaop-rel-" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Text, PrintableEscapesControlsAndStrayBytes) {
  EXPECT_EQ(printable("conv1"), "conv1");
  EXPECT_EQ(printable("a\nb\tc"), "a\\nb\\tc");
  EXPECT_EQ(printable("\x1b[31mred"), "\\x1b[31mred");
  EXPECT_EQ(printable("relu\xff\xfe"), "relu\\xff\\xfe");
  EXPECT_EQ(printable("caf\xc3\xa9"), "caf\xc3\xa9");  // UTF-8 stays
  EXPECT_EQ(printable("\xc2\x9b"), "\\u009b");         // a C1 control (CSI)
  std::string long_name(1000, 'n');
  EXPECT_EQ(printable(long_name, 10), "nnnnnnnnnn... (1000 bytes)");
}

TEST(Text, ShellQuoteKeepsOneArgumentOnOneLine) {
  EXPECT_EQ(shell_quote("model.onnx"), "model.onnx");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote("a\nmetaop run evil"), "$'a\\x0ametaop run evil'");
  EXPECT_EQ(shell_quote(""), "''");
  EXPECT_EQ(shell_quote("x\xff"), "$'x\\xff'");
}

TEST(Text, SafeFileNamesNeverCollide) {
  EXPECT_EQ(safe_file_name("conv1_output.npy"), "conv1_output.npy");
  EXPECT_NE(safe_file_name("a/b"), safe_file_name("a_b"));
  EXPECT_NE(safe_file_name("a/b"), safe_file_name("a:b"));
  std::string a(10000, 'n'), b = a;
  b.back() = 'm';
  EXPECT_NE(safe_file_name(a), safe_file_name(b));
  EXPECT_LT(safe_file_name(a).size(), 120u);
  EXPECT_NE(safe_file_name(".."), "..");
  EXPECT_EQ(safe_file_name("..").find('/'), std::string::npos);
}

TEST(Files, ConfinedPathsStayInTheirFolder) {
  fs::path d = scratch("confined");
  write_bytes(d / "w.bin", "1234");
  fs::create_directories(d / "sub");
  write_bytes(d / "sub" / "x.bin", "1234");
  fs::create_symlink("/etc/passwd", d / "out.bin");
  fs::create_symlink(d / "w.bin", d / "in.bin");
  EXPECT_EQ(confined_path(d.string(), "w.bin", "t"), (fs::canonical(d) / "w.bin").string());
  EXPECT_NO_THROW(confined_path(d.string(), "sub/x.bin", "t"));
  EXPECT_NO_THROW(confined_path(d.string(), "in.bin", "t"));  // a symlink that stays inside
  EXPECT_NE(message_of([&] { confined_path(d.string(), "/etc/passwd", "t"); }).find("absolute"),
            std::string::npos);
  EXPECT_NE(message_of([&] { confined_path(d.string(), "sub/../../x", "t"); }).find("climbs out"),
            std::string::npos);
  EXPECT_NE(message_of([&] { confined_path(d.string(), "out.bin", "t"); }).find("outside"),
            std::string::npos);
  EXPECT_THROW(confined_path(d.string(), "", "t"), Error);
}

TEST(Files, OnlyRegularFilesAreRead) {
  fs::path d = scratch("regular");
  ASSERT_EQ(::mkfifo((d / "fifo").c_str(), 0600), 0);
  EXPECT_NE(message_of([&] { InputFile f((d / "fifo").string()); }).find("FIFO"),
            std::string::npos);  // and no wait for a writer
  EXPECT_NE(message_of([&] { InputFile f(d.string()); }).find("directory"), std::string::npos);
  EXPECT_NE(message_of([&] { InputFile f((d / "none").string()); }).find("no such file"),
            std::string::npos);
  write_bytes(d / "f", "abc");
  InputFile f((d / "f").string());
  char buf[4];
  EXPECT_THROW(f.read_at(1, buf, 4), Error);  // past the end: an error, not a short read
}

TEST(Sizes, EveryProductOfDimsIsChecked) {
  EXPECT_EQ(shape_numel({4, 3}), 12);
  EXPECT_THROW(shape_numel({4, (std::int64_t{1} << 62) + 1}), Error);
  EXPECT_THROW(shape_numel({std::int64_t{1} << 32, std::int64_t{1} << 32}), Error);
  EXPECT_EQ(shape_numel({std::int64_t{1} << 32, std::int64_t{1} << 32, 0}), 0);  // empty
  EXPECT_THROW(shape_nbytes({std::int64_t{1} << 62}, DType::Float64), Error);
  EXPECT_THROW(Tensor(DType::Float32, {std::int64_t{1} << 40, std::int64_t{1} << 30}), Error);
}

TEST(Sizes, TensorsPastTheBudgetAreRefusedBeforeAllocation) {
  set_memory_budget(std::int64_t{64} << 20);
  std::string msg = message_of([] { Tensor t(DType::Float32, {1000, 1000, 100}); });
  set_memory_budget(0);
  EXPECT_NE(msg.find("needs 400 MB, past the memory budget of 67.1 MB"), std::string::npos) << msg;
  EXPECT_NO_THROW(Tensor(DType::Float32, {1000, 1000}));
}

TEST(Npy, HeaderParsedWithBounds) {
  fs::path d = scratch("npy");
  auto npy = [&](const std::string& header, const std::string& data = "") {
    std::string h = header;
    h.append((64 - (10 + h.size() + 1) % 64) % 64, ' ');
    h += '\n';
    std::string b = std::string("\x93NUMPY\x01\x00", 8);
    b += static_cast<char>(h.size() & 0xff);
    b += static_cast<char>(h.size() >> 8);
    write_bytes(d / "t.npy", b + h + data);
    return (d / "t.npy").string();
  };
  Tensor t = read_npy(
      npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", std::string(8, '\0')));
  EXPECT_EQ(t.shape(), (Shape{2}));
  t = read_npy(npy("{\"descr\": \"|b1\", \"fortran_order\": False, \"shape\": (2, 1)}",
                   std::string("\x00\x07", 2)));
  EXPECT_EQ(t.f64_at(1), 1.0);  // a bool byte of 7 reads as true
  auto err = [&](const std::string& header, const std::string& data = "") {
    return message_of([&] { read_npy(npy(header, data)); });
  };
  EXPECT_NE(err("{'descr': '<" + std::string(5000, 'f') +
                "', 'fortran_order': False, "
                "'shape': (1,), }")
                .find("longer than 64"),
            std::string::npos);
  std::string many = "(";
  for (int i = 0; i < 100; ++i) many += "1, ";
  EXPECT_NE(err("{'descr': '<f4', 'fortran_order': False, 'shape': " + many + "), }")
                .find("more than 64 dimensions"),
            std::string::npos);
  EXPECT_NE(err("{'descr': '<f4', 'fortran_order': False, 'shape': (200000000,), }", "12345678")
                .find("truncated data: expected 800000000 bytes"),
            std::string::npos);
  EXPECT_NE(err("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", "1234").find("Fortran"),
            std::string::npos);
  EXPECT_NE(err("{'descr': '<f4', 'shape': (1,), }", "1234").find("no 'fortran_order'"),
            std::string::npos);
  EXPECT_NE(
      err("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }").find("structured"),
      std::string::npos);
}

TEST(IntegerDivision, UndefinedInputsAreRefused) {
  Node div;
  div.name = "div";
  div.op_type = "Div";
  div.inputs = {"a", "b"};
  div.outputs = {"y"};
  auto ints = [](const std::vector<std::int64_t>& v, const Shape& s) {
    return Tensor::from_i64(v, s);
  };
  const std::int64_t lowest = std::numeric_limits<std::int64_t>::min();
  EXPECT_NO_THROW(refuse_undefined_inputs(div, {ints({7, 8}, {2}), ints({2, 3}, {2})}));
  EXPECT_NE(message_of([&] {
              refuse_undefined_inputs(div, {ints({7, 8}, {2}), ints({1, 0}, {2})});
            }).find("integer division by zero (divisor 'b' is 0 at [1])"),
            std::string::npos);
  // lowest / -1 only where the two meet under broadcasting.
  EXPECT_THROW(refuse_undefined_inputs(div, {ints({lowest, 1}, {2, 1}), ints({-1}, {1})}), Error);
  EXPECT_NO_THROW(refuse_undefined_inputs(div, {ints({lowest, 1}, {2}), ints({1, -1}, {2})}));
  Node mod = div;
  mod.op_type = "Mod";
  EXPECT_THROW(refuse_undefined_inputs(mod, {ints({7}, {1}), ints({0}, {1})}), Error);
  EXPECT_NO_THROW(refuse_undefined_inputs(mod, {ints({lowest}, {1}), ints({-1}, {1})}));
  EXPECT_NE(crashing_inputs(mod, {ints({lowest}, {1}), ints({-1}, {1})}), "");
  EXPECT_EQ(crashing_inputs(mod, {ints({lowest}, {1}), ints({3}, {1})}), "");
  // Every integer type, uint64 too (its values past int64 included).
  Tensor u64 = Tensor::empty(DType::UInt64, {2});
  u64.data<std::uint64_t>()[0] = ~std::uint64_t{0};
  u64.data<std::uint64_t>()[1] = 0;
  EXPECT_THROW(refuse_undefined_inputs(div, {u64, u64}), Error);
  EXPECT_THROW(refuse_undefined_inputs(div, {Tensor::from_f64({1}, {1}, DType::UInt16),
                                             Tensor::from_f64({0}, {1}, DType::UInt16)}),
               Error);
  // Floating division by zero is defined (inf).
  EXPECT_NO_THROW(refuse_undefined_inputs(
      div, {Tensor::scalar(1, DType::Float32), Tensor::scalar(0, DType::Float32)}));
}

TEST(ReproManifest, FieldsCheckedAndFilesConfined) {
  fs::path d = scratch("manifest");
  write_bytes(d / "x.npy", "");
  auto err = [&](const std::string& text) {
    return message_of([&] { parse_repro_manifest(text, d.string(), "repro.json"); });
  };
  ReproManifest m = parse_repro_manifest(
      R"({"schema": "metaop-repro/1", "phase": "forward", "binding": "torch",
          "files": {"inputs": ["x.npy", null]}})",
      d.string(), "repro.json");
  ASSERT_EQ(m.files["inputs"].size(), 2u);
  const auto& first = m.files["inputs"][0];
  if (!first) {
    FAIL() << "the first input has no file";
  }
  EXPECT_EQ(first->path, (fs::canonical(d) / "x.npy").string());
  EXPECT_FALSE(m.files["inputs"][1]);
  EXPECT_NE(err("[1, 2").find("not valid JSON"), std::string::npos);
  EXPECT_NE(err(R"({"schema": "metaop-repro/1", "phase": 5})").find("'phase' is number"),
            std::string::npos);
  EXPECT_NE(err(R"({"schema": "metaop-repro/1", "phase": "forward", "binding": "torch",
                    "files": {"inputs": ["../x.npy"]}})")
                .find("climbs out"),
            std::string::npos);
  EXPECT_NE(err(R"({"schema": "metaop-repro/1", "phase": "update", "binding": "torch",
                    "node": "w"})")
                .find("'step'"),
            std::string::npos);
  EXPECT_EQ(m.phase, Phase::Forward);
  EXPECT_FALSE(m.kind);
  EXPECT_NE(err(R"({"schema": "metaop-repro/1", "phase": "sideways", "binding": "torch"})")
                .find("repro.json: phase 'sideways' (expected forward, backward or update)"),
            std::string::npos);
  EXPECT_NE(err(R"({"schema": "metaop-repro/1", "phase": "backward", "binding": "torch",
                    "kind": "Crash"})")
                .find("repro.json: kind 'Crash' (expected accuracy,"),
            std::string::npos);
}

// Kinds and phases are words in files and enums in memory; the common fields' JSON is what
// check, probe and train --check write.
TEST(Finding, WordsReadBackAndCommonJson) {
  for (auto k : {FindingKind::Accuracy, FindingKind::Nonfinite, FindingKind::Crash,
                 FindingKind::Hang, FindingKind::Unsupported, FindingKind::Hazard})
    EXPECT_EQ(parse_finding_kind(to_string(k), "t"), k);
  for (auto p : {Phase::Forward, Phase::Backward, Phase::Update})
    EXPECT_EQ(parse_phase(to_string(p), "t"), p);
  EXPECT_EQ(message_of([] { parse_phase("", "journal line 3"); }),
            "journal line 3: phase '' (expected forward, backward or update)");
  EXPECT_THROW(parse_finding_kind("accuracy ", "t"), Error);
  EXPECT_EQ(fmt::format("{:<9}|{}", Phase::Update, FindingKind::Nonfinite), "update   |nonfinite");
  FindingCore f;
  f.op_type = "Relu";
  f.binding = "torch";
  f.kind = FindingKind::Nonfinite;
  f.score = INFINITY;
  f.detail = "y[0]";
  // The framework's version beside the binding ("binding_version"; the reference's is always
  // there); a name that is no binding has none.
  EXPECT_EQ(finding_json(f).dump(),
            fmt::format(R"({{"binding":"torch",{}"detail":"y[0]","kind":"nonfinite",)"
                        R"("op_type":"Relu","phase":"forward","score":"inf"}})",
                        binding_version("torch").empty()
                            ? ""
                            : fmt::format(R"("binding_version":"{}",)", binding_version("torch"))));
  f.binding = "reference";
  EXPECT_EQ(finding_json(f).at("binding_version"), "float64 reference");
  f.binding = "no-such-binding";
  EXPECT_FALSE(finding_json(f).contains("binding_version"));
  f.binding = "torch";
  nlohmann::json v = verified_finding_json(f);
  EXPECT_TRUE(v.at("repro").is_null());
  EXPECT_EQ(v.at("verified"), false);
  f.repro = "dir";
  EXPECT_EQ(verified_finding_json(f).at("repro"), "dir");
  EXPECT_TRUE(std::isinf(number_from_json(json_number(-INFINITY))));
  EXPECT_TRUE(f.defect() && f.numerical());
  f.kind = FindingKind::Unsupported;
  EXPECT_FALSE(f.defect() || f.numerical());
}

// --- isolation

namespace {

// A binding whose kernels misbehave on request: the op type says how.
class Misbehaving final : public Binding {
 public:
  std::string name() const override { return "test-misbehaving"; }
  Support supports(const std::string&) const override { return {true, false, {}, ""}; }
  Tensors forward(const Node& node, std::int64_t, const Tensors& in) override {
    if (node.op_type == "Segv") std::raise(SIGSEGV);
    if (node.op_type == "Abort") std::abort();
    if (node.op_type == "Hang")
      for (;;) ::pause();
    if (node.op_type == "Refuse") throw Unsupported("refused here");
    if (node.op_type == "Throw") throw std::runtime_error("a framework error");
    if (node.op_type == "Big") return {Tensor(DType::Float32, {1 << 20})};  // grows the region
    ++calls_;  // in the worker: MetaOp's copy never counts
    Tensor y = in[0].clone();
    y.data<float>()[0] = static_cast<float>(calls_);
    return {y};
  }

 private:
  int calls_ = 0;
};

Node node_of(const std::string& op) {
  Node n;
  n.name = "n_" + op;
  n.op_type = op;
  n.inputs = {"x"};
  n.outputs = {"y"};
  n.attrs["t"].kind = Attribute::Kind::Tensor;
  n.attrs["t"].t = Tensor::scalar(3, DType::Int64);
  n.attrs["s"].kind = Attribute::Kind::Strings;
  n.attrs["s"].strings = {"a", "b\nc"};
  return n;
}

}  // namespace

TEST(Isolation, CrashesAndHangsAreFindingsAndTheWorkerComesBack) {
  double timeout = kernel_timeout();
  set_kernel_timeout(1);
  IsolatedBinding b(std::make_unique<Misbehaving>());
  Tensors x{Tensor::from_f64({1, 2, 3}, {3}, DType::Float32)};
  Tensors y = b.forward(node_of("Echo"), 13, x);
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(y[0].f64_at(0), 1.0);
  EXPECT_EQ(y[0].f64_at(2), 3.0);
  EXPECT_EQ(b.forward(node_of("Echo"), 13, x)[0].f64_at(0), 2.0);  // the same worker, its state
  auto starts = worker_starts("test-misbehaving");
  std::string segv = message_of([&] { b.forward(node_of("Segv"), 13, x); });
  EXPECT_NE(segv.find("node 'n_Segv' (Segv): test-misbehaving: the kernel crashed (Segmentation "
                      "fault) in its worker process"),
            std::string::npos)
      << segv;
  EXPECT_THROW(b.forward(node_of("Abort"), 13, x), Crash);
  EXPECT_THROW(b.forward(node_of("Hang"), 13, x), Hang);
  EXPECT_THROW(b.forward(node_of("Refuse"), 13, x), Unsupported);
  EXPECT_NE(message_of([&] { b.forward(node_of("Throw"), 13, x); }).find("a framework error"),
            std::string::npos);
  EXPECT_EQ(b.forward(node_of("Big"), 13, x)[0].numel(), 1 << 20);
  // A fresh worker after each death: state starts over.
  EXPECT_EQ(b.forward(node_of("Echo"), 13, x)[0].f64_at(0), 1.0);
  EXPECT_EQ(worker_starts("test-misbehaving"), starts + 3);
  // Planted faults commit where the kernel would run.
  EXPECT_THROW(b.forward_with_fault("segv", node_of("Echo"), 13, x), Crash);
  EXPECT_THROW(b.forward_with_fault("hang", node_of("Echo"), 13, x), Hang);
  set_kernel_timeout(timeout);
}

namespace {

// Sums each input and doubles the first: enough to tell whether the worker used the right bytes.
class SumAndDouble final : public Binding {
 public:
  std::string name() const override { return "test-sum"; }
  Support supports(const std::string&) const override { return {true, false, {}, ""}; }
  Tensors forward(const Node&, std::int64_t, const Tensors& in) override {
    Tensors out;
    for (const auto& t : in) {
      double sum = 0;
      for (double v : t.to_f64()) sum += v;
      out.push_back(Tensor::from_f64({sum}, {}, DType::Float64));
    }
    auto v = in[0].to_f64();
    for (auto& e : v) e *= 2;
    out.push_back(Tensor::from_f64(v, in[0].shape(), in[0].dtype()));
    return out;
  }
};

Tensor ramp(std::int64_t n, double start) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<double>(i % 1000);
  return Tensor::from_f64(v, {n}, DType::Float32);
}

double ramp_sum(std::int64_t n, double start) {
  double s = 0;
  for (double v : ramp(n, start).to_f64()) s += v;
  return s;
}

}  // namespace

// Large tensors cross to the worker once while MetaOp holds them; a tensor that died and a new
// one at the same address, a reshaped view of a kept tensor, an output the worker made and a
// fresh worker all give the right bytes.
TEST(Isolation, LargeTensorsCrossOnceAndStayRight) {
  IsolatedBinding b(std::make_unique<SumAndDouble>());
  Node n = node_of("Sum");
  const std::int64_t big = 1 << 16;  // 256 kB of float32
  Tensor w = ramp(big, 0);
  Tensor small = ramp(10, 5);
  auto sum_of = [&](const Tensors& in, std::size_t k) {
    return b.forward(n, 13, in).at(k).f64_at(0);
  };
  EXPECT_EQ(sum_of({w, small}, 0), ramp_sum(big, 0));
  auto sent = worker_sent_bytes("test-sum");
  EXPECT_EQ(sum_of({w, small}, 0), ramp_sum(big, 0));
  EXPECT_EQ(worker_sent_bytes("test-sum") - sent, small.nbytes());  // w was kept
  Tensor flat = w.reshaped({256, 256});
  Tensors out = b.forward(n, 13, {flat});
  EXPECT_EQ(out.at(0).f64_at(0), ramp_sum(big, 0));
  EXPECT_EQ(out.at(1).shape(), (Shape{256, 256}));
  EXPECT_EQ(worker_sent_bytes("test-sum") - sent, small.nbytes());
  // The worker's own output (2w), kept by it, read back as an input.
  sent = worker_sent_bytes("test-sum");
  EXPECT_EQ(sum_of({out.at(1)}, 0), 2 * ramp_sum(big, 0));
  EXPECT_EQ(worker_sent_bytes("test-sum"), sent);
  // New tensors, often at the address of the one that died just before.
  for (int k = 1; k <= 8; ++k) {
    w = ramp(big, k);
    EXPECT_EQ(sum_of({w}, 0), ramp_sum(big, k)) << k;
  }
  stop_workers();  // a fresh worker keeps nothing
  EXPECT_EQ(sum_of({w}, 0), ramp_sum(big, 8));
  EXPECT_EQ(sum_of({out.at(1), w}, 1), ramp_sum(big, 8));
}

namespace {

// Doubles its input, or crashes on request ("Segv").
class Doubling final : public Binding {
 public:
  std::string name() const override { return "test-in-place"; }
  Support supports(const std::string&) const override { return {true, false, {}, ""}; }
  Tensors forward(const Node& node, std::int64_t, const Tensors& in) override {
    if (node.op_type == "Segv") std::raise(SIGSEGV);
    auto v = in[0].to_f64();
    for (auto& e : v) e *= 2;
    return {Tensor::from_f64(v, in[0].shape(), in[0].dtype())};
  }
};

}  // namespace

// Large outputs are read in place in the worker's arena: one MetaOp holds keeps its bytes while
// the worker makes many more outputs of its size (their blocks freed and taken again), after the
// worker crashed and a fresh one took over, and sent back to a worker.
TEST(Isolation, OutputsReadInPlaceStayRight) {
  IsolatedBinding b(std::make_unique<Doubling>());
  Node n = node_of("Double");
  const std::int64_t big = 1 << 16;  // 256 kB of float32
  auto in_place = worker_in_place_bytes("test-in-place");
  Tensor held = b.forward(n, 13, {ramp(big, 1)}).at(0);
  EXPECT_EQ(worker_in_place_bytes("test-in-place") - in_place, held.nbytes());
  const double want = 2 * ramp_sum(big, 1);
  auto sum = [](const Tensor& t) {
    double s = 0;
    for (double v : t.to_f64()) s += v;
    return s;
  };
  for (int k = 0; k < 40; ++k)
    EXPECT_EQ(sum(b.forward(n, 13, {ramp(big, 100 + k)}).at(0)), 2 * ramp_sum(big, 100 + k)) << k;
  EXPECT_EQ(sum(held), want);
  // Read back by the worker (kept there): 4 times the ramp.
  EXPECT_EQ(sum(b.forward(n, 13, {held}).at(0)), 2 * want);
  auto starts = worker_starts("test-in-place");
  EXPECT_THROW(b.forward(node_of("Segv"), 13, {ramp(big, 0)}), Crash);
  for (int k = 0; k < 40; ++k)
    EXPECT_EQ(sum(b.forward(n, 13, {ramp(big, 200 + k)}).at(0)), 2 * ramp_sum(big, 200 + k)) << k;
  EXPECT_EQ(worker_starts("test-in-place"), starts + 1);
  EXPECT_EQ(sum(held), want);
  EXPECT_EQ(sum(b.forward(n, 13, {held}).at(0)), 2 * want);  // crosses to the fresh worker
  stop_workers();
  Tensor again = b.forward(n, 13, {ramp(big, 1)}).at(0);
  EXPECT_EQ(sum(held), want);
  EXPECT_EQ(sum(again), want);
}

// Train's update kernels run in their binding's worker: the same steps as in process; a planted
// crash is a Crash of that step, and a fresh worker starts the next one from the state before it.
TEST(Isolation, UpdateKernelsRunInTheWorker) {
  OptimizerConfig c;
  c.kind = "adam";
  c.lr = 0.01;
  // The torch plugin's optimizer, in a worker and in this process.
  IsolatedUpdate isolated_update(plugin_binding(binding_info("torch")), c);
  auto in_process_kernel = make_update_kernel_in_process("torch", c);
  UpdateKernel& in_process = *in_process_kernel;
  const std::int64_t n = 1 << 15;  // 128 kB: weight and state read in place
  Tensor w_iso = ramp(n, 1), w_in = w_iso;
  std::uint64_t starts = 0;
  for (long t = 1; t <= 4; ++t) {
    Tensor g = ramp(n, static_cast<double>(t) - 500);
    if (t == 2) {
      starts = worker_starts("torch");
      EXPECT_THROW(isolated_update.step_with_fault("segv", "w", t, w_iso, g), Crash);
    }
    w_iso = isolated_update.step("w", t, w_iso, g);
    w_in = in_process.step("w", t, w_in, g);
    EXPECT_EQ(w_iso.to_f64(), w_in.to_f64()) << t;
    Tensors s_iso = isolated_update.state("w"), s_in = in_process.state("w");
    ASSERT_EQ(s_iso.size(), 2u);
    ASSERT_EQ(s_in.size(), 2u);
    for (std::size_t k = 0; k < 2; ++k) EXPECT_EQ(s_iso[k].to_f64(), s_in[k].to_f64()) << t;
  }
  EXPECT_EQ(worker_starts("torch"), starts + 1);
}

TEST(Isolation, TheRunGoesOnAfterACrash) {
  Graph g;
  g.path = "test";
  g.opset = 13;
  for (const char* op : {"Relu", "Neg"}) {
    Node n;
    n.name = op;
    n.op_type = op;
    n.inputs = {std::string(op) == "Relu" ? "x" : "r"};
    n.outputs = {std::string(op) == "Relu" ? "r" : "y"};
    g.nodes.push_back(n);
  }
  ValueInfo in;
  in.name = "x";
  in.dtype = DType::Float32;
  g.inputs = {in};
  ValueInfo out = in;
  out.name = "y";
  g.outputs = {out};
  struct SegvOnRelu final : Binding {
    std::string name() const override { return "test-segv-relu"; }
    Support supports(const std::string&) const override { return {true, false, {}, ""}; }
    Tensors forward(const Node& n, std::int64_t, const Tensors& in) override {
      if (n.op_type == "Relu") std::raise(SIGSEGV);
      auto v = in[0].to_f64();
      for (auto& e : v) e = -e;
      return {Tensor::from_f64(v, in[0].shape(), in[0].dtype())};
    }
  };
  Plan plan;
  plan.add_binding(std::make_unique<IsolatedBinding>(std::make_unique<SegvOnRelu>()));
  plan.set_default("test-segv-relu");
  RunResult r =
      run_graph(g, {{"x", Tensor::from_f64({-1, 2}, {2}, DType::Float32)}}, plan, RunOptions{});
  ASSERT_EQ(r.records.size(), 2u);
  EXPECT_NE(r.records[0].crash.find("Segmentation fault"), std::string::npos);
  EXPECT_EQ(r.records[0].binding, "reference");
  EXPECT_EQ(r.records[1].binding, "test-segv-relu");
  EXPECT_EQ(r.outputs.at("y").f64_at(0), 0.0);
  EXPECT_EQ(r.outputs.at("y").f64_at(1), -2.0);
}
