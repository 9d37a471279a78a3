// Linear algebra meta operators: MatMul, Gemm, Einsum. Float64 GEMM through OpenBLAS.
#include <cblas.h>
#include <dlfcn.h>

#include <cctype>
#include <map>

#include "ops/danger.h"
#include "ops/kernel_util.h"
#include "ops/linear_util.h"
#include "ops/vjp_util.h"

namespace metaop {

namespace {

// OpenBLAS, loaded privately (RTLD_LOCAL) the first time the reference needs it. Linked as a
// dependency of MetaOp, its sgemm_, dgemm_ and the rest would be the process's: a framework
// loaded later whose own BLAS symbols resolve through the global scope (LibTorch's wheel
// exports and calls MKL's sgemm_) would get OpenBLAS's instead, in MetaOp only, and its
// matrix products would not be the ones its users get.
struct OpenBlas {
  decltype(&cblas_dgemm) dgemm = nullptr;
  decltype(&openblas_set_num_threads) set_num_threads = nullptr;
};

const OpenBlas& openblas() {
  static const OpenBlas blas = [] {
    void* h = ::dlopen(METAOP_OPENBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) fail("cannot load OpenBLAS ({}): {}", METAOP_OPENBLAS_SONAME, ::dlerror());
    OpenBlas b;
    b.dgemm = reinterpret_cast<decltype(&cblas_dgemm)>(::dlsym(h, "cblas_dgemm"));
    b.set_num_threads = reinterpret_cast<decltype(&openblas_set_num_threads)>(
        ::dlsym(h, "openblas_set_num_threads"));
    if (!b.dgemm || !b.set_num_threads)
      fail("OpenBLAS ({}) lacks cblas_dgemm or openblas_set_num_threads", METAOP_OPENBLAS_SONAME);
    return b;
  }();
  return blas;
}

}  // namespace

void set_reference_threads(int n) {
  openblas().set_num_threads(n);
}

void gemm_f64(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
              const double* a, const double* b, double beta, double* c) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (std::int64_t i = 0; i < m * n; ++i) c[i] *= beta;
    return;
  }
  openblas().dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                   static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
                   static_cast<int>(ta ? m : k), b, static_cast<int>(tb ? k : n), beta, c,
                   static_cast<int>(n));
}

namespace {

// ---- MatMul

Tensors matmul(const KernelContext& c, const Tensors& in, GemmFn gemm = gemm_f64) {
  const Tensor& a = input(c, in, 0);
  const Tensor& b = input(c, in, 1);
  if (a.dtype() != b.dtype())
    fail("{}: inputs are {} and {}", c.node.label(), dtype_name(a.dtype()), dtype_name(b.dtype()));
  if (a.rank() == 0 || b.rank() == 0) fail("{}: MatMul needs inputs of rank >= 1", c.node.label());
  // numpy.matmul: 1-D operands are promoted to matrices and the added dim removed afterwards.
  Shape sa = a.shape(), sb = b.shape();
  bool a_vec = sa.size() == 1, b_vec = sb.size() == 1;
  if (a_vec) sa.insert(sa.begin(), 1);
  if (b_vec) sb.push_back(1);
  std::int64_t m = sa[sa.size() - 2], k = sa.back(), k2 = sb[sb.size() - 2], n = sb.back();
  if (k != k2)
    fail("{}: cannot multiply {} by {}", c.node.label(), shape_str(a.shape()),
         shape_str(b.shape()));
  Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  Shape batch = broadcast_shapes(c, {ba, bb});
  std::int64_t nb = shape_numel(batch);
  auto map_a = broadcast_map(ba, batch), map_b = broadcast_map(bb, batch);
  auto va = a.to_f64(), vb = b.to_f64();
  std::vector<double> out(static_cast<std::size_t>(nb * m * n), 0.0);
  for (std::int64_t i = 0; i < nb; ++i)
    gemm(false, false, m, n, k, 1.0, va.data() + map_a[i] * m * k, vb.data() + map_b[i] * k * n,
         0.0, out.data() + i * m * n);
  Shape os = batch;
  if (!a_vec) os.push_back(m);
  if (!b_vec) os.push_back(n);
  return {Tensor::from_f64(out, os, a.dtype())};
}

// MatMul: dA = g @ B^T, dB = A^T @ g per batch entry, summed over broadcast batch dims.
Tensors matmul_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                   const Tensors& grads, GemmFn gemm = gemm_f64) {
  const Tensor &a = in[0], &b = in[1];
  Shape sa = a.shape(), sb = b.shape();
  if (sa.size() == 1) sa.insert(sa.begin(), 1);
  if (sb.size() == 1) sb.push_back(1);
  std::int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
  Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  Shape batch = broadcast_shapes(c, {ba, bb});
  std::int64_t nb = shape_numel(batch);
  auto map_a = broadcast_map(ba, batch), map_b = broadcast_map(bb, batch);
  auto va = a.to_f64(), vb = b.to_f64(), g = grad_of(grads, out, 0);
  std::vector<double> ga(va.size(), 0.0), gb(vb.size(), 0.0);
  for (std::int64_t i = 0; i < nb; ++i) {
    const double* gi = g.data() + i * m * n;
    gemm(false, true, m, k, n, 1.0, gi, vb.data() + map_b[i] * k * n, 1.0,
         ga.data() + map_a[i] * m * k);
    gemm(true, false, k, n, m, 1.0, va.data() + map_a[i] * m * k, gi, 1.0,
         gb.data() + map_b[i] * k * n);
  }
  return {grad_like(ga, a), grad_like(gb, b)};
}

void register_matmul(OpRegistry& r) {
  r.op("MatMul", Family::linear,
       [](const KernelContext& c, const Tensors& in) { return matmul(c, in); })
      .vjp([](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads) {
        return matmul_vjp(c, in, out, grads);
      })
      .domain(Domain({0, 1}))
      .danger({danger::output_overflow()})
      .error(error_models::accumulation(
          [](const KernelContext&, const Tensors& in) {
            const Tensor& a = in[0];
            return static_cast<double>(a.rank() ? a.shape().back() : 1);
          },
          "kappa(K) * (|A| @ |B|), 2 ulp"))
      .faults({"half_acc"})
      .inputs(InputRoles::combine())
      .explain({.form = ExplainForm::product});
}

// ---- Gemm

Tensors gemm_op(const KernelContext& c, const Tensors& in, GemmFn gemm = gemm_f64) {
  const Tensor& a = input(c, in, 0);
  const Tensor& b = input(c, in, 1);
  bool ta = attr_i(c, "transA"), tb = attr_i(c, "transB");
  double alpha = attr_f(c, "alpha"), beta = attr_f(c, "beta");
  if (a.rank() != 2 || b.rank() != 2)
    fail("{}: Gemm needs 2-D A and B, got {} and {}", c.node.label(), shape_str(a.shape()),
         shape_str(b.shape()));
  std::int64_t m = ta ? a.dim(1) : a.dim(0), k = ta ? a.dim(0) : a.dim(1);
  std::int64_t kb = tb ? b.dim(1) : b.dim(0), n = tb ? b.dim(0) : b.dim(1);
  if (k != kb)
    fail("{}: inner dimensions differ: A {} (transA={}), B {} (transB={})", c.node.label(),
         shape_str(a.shape()), ta, shape_str(b.shape()), tb);
  std::vector<double> out(static_cast<std::size_t>(m * n), 0.0);
  if (has_input(in, 2)) {
    const Tensor& cc = in[2];
    broadcast_shapes(c, {cc.shape(), {m, n}});
    auto map = broadcast_map(cc.shape(), {m, n});
    auto vc = cc.to_f64();
    for (std::int64_t i = 0; i < m * n; ++i) out[i] = vc[map[i]];
  } else {
    beta = 0.0;
  }
  auto va = a.to_f64(), vb = b.to_f64();
  gemm(ta, tb, m, n, k, alpha, va.data(), vb.data(), beta, out.data());
  return {Tensor::from_f64(out, {m, n}, a.dtype())};
}

// Gemm: Y = alpha op(A) op(B) + beta C.
// With a float32 `gemm` (float32: true), C's gradient is summed in float32 too.
Tensors gemm_vjp(const KernelContext& c, const Tensors& in, const Tensors& out,
                 const Tensors& grads, GemmFn gemm = gemm_f64, bool float32 = false) {
  const Tensor &a = in[0], &b = in[1];
  bool ta = attr_i(c, "transA"), tb = attr_i(c, "transB");
  double alpha = attr_f(c, "alpha"), beta = attr_f(c, "beta");
  std::int64_t m = ta ? a.dim(1) : a.dim(0), k = ta ? a.dim(0) : a.dim(1);
  std::int64_t n = tb ? b.dim(0) : b.dim(1);
  auto va = a.to_f64(), vb = b.to_f64(), g = grad_of(grads, out, 0);
  std::vector<double> ga(va.size(), 0.0), gb(vb.size(), 0.0);
  // d op(A) = alpha g op(B)^T; stored transposed when transA.
  if (!ta)
    gemm(false, !tb, m, k, n, alpha, g.data(), vb.data(), 0.0, ga.data());
  else
    gemm(tb, true, k, m, n, alpha, vb.data(), g.data(), 0.0, ga.data());
  // d op(B) = alpha op(A)^T g; stored transposed when transB.
  if (!tb)
    gemm(!ta, false, k, n, m, alpha, va.data(), g.data(), 0.0, gb.data());
  else
    gemm(true, ta, n, k, m, alpha, g.data(), va.data(), 0.0, gb.data());
  Tensors r{grad_like(ga, a), grad_like(gb, b)};
  if (has_input(in, 2)) {
    auto gc = float32 ? unbroadcast_f32(g, {m, n}, in[2].shape(), SumOrder::written)
                      : unbroadcast(g, {m, n}, in[2].shape());
    for (auto& v : gc) v = float32 ? static_cast<float>(v) * static_cast<float>(beta) : v * beta;
    r.push_back(grad_like(gc, in[2]));
  }
  return r;
}

void register_gemm(OpRegistry& r) {
  r.op("Gemm", Family::linear,
       [](const KernelContext& c, const Tensors& in) { return gemm_op(c, in); })
      .vjp([](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads) {
        return gemm_vjp(c, in, out, grads);
      })
      .domain(Domain({0, 1}))
      .danger({danger::output_overflow()})
      .error(error_models::accumulation(
          [](const KernelContext& c, const Tensors& in) {
            const Tensor& a = in[0];
            bool ta = attr_i(c, "transA") != 0;
            return static_cast<double>(a.dim(ta ? 0 : 1) + 1);
          },
          "kappa(K+1) * |alpha*|A|@|B| + beta*|C||, 2 ulp"))
      .faults({"half_acc", "drop_bias"})
      .explain({.form = ExplainForm::product});
}

// ---- Einsum

// An einsum equation checked against its operands: each operand's term, the output's, every
// index (the output's first, then the contracted ones) and each index's size.
struct EinsumSpec {
  std::vector<std::string> terms;
  std::string out_term, all;
  std::map<char, std::int64_t> dims;
  std::string ellipsis;  // the indices "..." stands for (right-aligned in each operand)
};

// Replaces "..." in every term by indices the equation does not use, as many as the operand's
// rank leaves (the most of any operand for the output): numpy's rule, the ellipsis dimensions
// right-aligned and broadcast. An implicit output puts them first.
void expand_ellipsis(const KernelContext& c, const Tensors& in, const std::string& eq,
                     EinsumSpec& e, bool& implicit_ellipsis) {
  implicit_ellipsis = false;
  if (eq.find("...") == std::string::npos) return;
  std::int64_t most = 0;
  for (std::size_t i = 0; i < e.terms.size(); ++i)
    if (auto at = e.terms[i].find("..."); at != std::string::npos)
      most =
          std::max(most, input(c, in, i).rank() - static_cast<std::int64_t>(e.terms[i].size() - 3));
  for (char ch = 'A'; static_cast<std::int64_t>(e.ellipsis.size()) < most; ++ch) {
    if (ch > 'z') fail("{}: equation '{}' leaves no letters for its ellipsis", c.node.label(), eq);
    if (std::isalpha(static_cast<unsigned char>(ch)) && eq.find(ch) == std::string::npos)
      e.ellipsis += ch;
  }
  for (std::size_t i = 0; i < e.terms.size(); ++i) {
    auto at = e.terms[i].find("...");
    if (at == std::string::npos) continue;
    const std::int64_t k =
        input(c, in, i).rank() - static_cast<std::int64_t>(e.terms[i].size() - 3);
    if (k < 0)
      fail("{}: operand {} has rank {}, below its term '{}'", c.node.label(), i,
           input(c, in, i).rank(), e.terms[i]);
    e.terms[i].replace(at, 3, e.ellipsis.substr(e.ellipsis.size() - static_cast<std::size_t>(k)));
  }
  if (auto arrow = eq.find("->"); arrow != std::string::npos) {
    if (auto at = e.out_term.find("..."); at != std::string::npos)
      e.out_term.replace(at, 3, e.ellipsis);
  } else {
    implicit_ellipsis = true;
  }
}

// The operand terms of an equation's left side: "ij,jk" gives "ij" and "jk".
std::vector<std::string> einsum_terms(const std::string& lhs) {
  std::vector<std::string> terms;
  std::size_t start = 0;
  while (true) {
    auto comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return terms;
}

// Each index's size, the same in every operand it labels; `count`: how often each occurs.
void einsum_dims(const KernelContext& c, const Tensors& in, EinsumSpec& e,
                 std::map<char, int>& count) {
  for (std::size_t i = 0; i < e.terms.size(); ++i) {
    const Tensor& t = input(c, in, i);
    const std::string& term = e.terms[i];
    if (static_cast<std::int64_t>(term.size()) != t.rank())
      fail("{}: operand {} has rank {}, equation term '{}'", c.node.label(), i, t.rank(), term);
    for (std::size_t d = 0; d < term.size(); ++d) {
      char ch = term[d];
      ++count[ch];
      auto it = e.dims.find(ch);
      const std::int64_t n = t.shape()[d];
      // An ellipsis index broadcasts: size 1 in one operand takes the other's size.
      const bool broadcast = e.ellipsis.find(ch) != std::string::npos;
      if (it != e.dims.end() && it->second != n && !(broadcast && (it->second == 1 || n == 1)))
        fail("{}: index '{}' has sizes {} and {}", c.node.label(), ch, it->second, n);
      if (it == e.dims.end() || it->second == 1) e.dims[ch] = n;
    }
  }
}

EinsumSpec einsum_spec(const KernelContext& c, const Tensors& in) {
  std::string eq = c.node.attr_s("equation");
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  auto arrow = eq.find("->");
  EinsumSpec e;
  e.terms = einsum_terms(eq.substr(0, arrow));
  if (e.terms.size() != in.size())
    fail("{}: equation '{}' has {} operands, node has {} inputs", c.node.label(), eq,
         e.terms.size(), in.size());
  if (arrow != std::string::npos) e.out_term = eq.substr(arrow + 2);
  bool implicit_ellipsis = false;
  expand_ellipsis(c, in, eq, e, implicit_ellipsis);
  for (const auto& t : e.terms)
    if (t.find('.') != std::string::npos)
      fail("{}: equation '{}': a '.' outside an ellipsis '...'", c.node.label(), eq);
  std::map<char, int> count;
  einsum_dims(c, in, e, count);
  if (arrow == std::string::npos) {
    // Implicit output: the ellipsis indices, then those that occur once, in alphabetical order.
    if (implicit_ellipsis) e.out_term = e.ellipsis;
    for (auto& [ch, n] : count)
      if (n == 1 && e.ellipsis.find(ch) == std::string::npos) e.out_term += ch;
  }
  e.all = e.out_term;
  for (auto& [ch, n] : e.dims)
    if (e.out_term.find(ch) == std::string::npos) e.all += ch;
  return e;
}

// The stride of each index of `all` in each operand (summed where an index repeats in a term:
// the diagonal).
std::vector<std::vector<std::int64_t>> einsum_strides(const EinsumSpec& e, const Tensors& in) {
  std::vector<std::vector<std::int64_t>> st;
  st.reserve(e.terms.size());
  for (std::size_t i = 0; i < e.terms.size(); ++i) {
    auto s = strides_of(in[i].shape());
    std::vector<std::int64_t> per(e.all.size(), 0);
    for (std::size_t d = 0; d < e.terms[i].size(); ++d) {
      const char ch = e.terms[i][d];
      // A broadcast ellipsis dimension (size 1 here, more in the output): stride 0.
      if (in[i].shape()[d] == 1 && e.dims.at(ch) != 1) continue;
      per[e.all.find(ch)] += s[d];
    }
    st.push_back(per);
  }
  return st;
}

// One term's gradient: operand i's factor gets g times the other factors.
void einsum_term_vjp(const std::vector<std::vector<double>>& vals,
                     const std::vector<std::int64_t>& offs, double g,
                     std::vector<std::vector<double>>& gin) {
  for (std::size_t i = 0; i < vals.size(); ++i) {
    double q = g;
    for (std::size_t k = 0; k < vals.size(); ++k)
      if (k != i) q *= vals[k][offs[k]];
    gin[i][offs[i]] += q;
  }
}

// Einsum by direct summation over every index: the plain definition, fine for the small
// contractions models use it for.
// With `gout`, also accumulates the VJP into `gin` (one vector per operand): each term's
// gradient with respect to one factor is the output gradient times the other factors. T = float:
// the float32 twin, the products and their sum in float32, in the same order.
template <typename T = double>
Tensors einsum(const KernelContext& c, const Tensors& in, const std::vector<double>* gout = nullptr,
               std::vector<std::vector<double>>* gin = nullptr) {
  EinsumSpec e = einsum_spec(c, in);
  const auto& terms = e.terms;
  Shape full;
  for (char ch : e.all) full.push_back(e.dims.at(ch));
  Shape out_shape(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(e.out_term.size()));
  std::int64_t out_n = shape_numel(out_shape),
               inner = shape_numel(full) / std::max<std::int64_t>(out_n, 1);
  std::vector<std::vector<double>> vals;
  vals.reserve(terms.size());
  for (const auto& t : in) vals.push_back(t.to_f64());
  auto st = einsum_strides(e, in);
  std::vector<double> out(static_cast<std::size_t>(out_n), 0.0);
  if (shape_numel(full) > 0) {
    IndexIter it(full);
    for (std::int64_t o = 0; o < out_n; ++o) {
      T acc = 0;
      std::vector<std::int64_t> offs(terms.size());
      for (std::int64_t j = 0; j < inner; ++j, it.next()) {
        T p = 1;
        for (std::size_t i = 0; i < terms.size(); ++i) {
          std::int64_t off = 0;
          for (std::size_t d = 0; d < e.all.size(); ++d) off += it.idx()[d] * st[i][d];
          offs[i] = off;
          p *= static_cast<T>(vals[i][off]);
        }
        acc += p;
        if (gout) einsum_term_vjp(vals, offs, (*gout)[o], *gin);
      }
      out[o] = static_cast<double>(acc);
    }
  }
  return {Tensor::from_f64(out, out_shape, in[0].dtype())};
}

void register_einsum(OpRegistry& r) {
  r.op("Einsum", Family::linear,
       [](const KernelContext& c, const Tensors& in) { return einsum(c, in); })
      .vjp([](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads) {
        auto gout = grad_of(grads, out, 0);
        std::vector<std::vector<double>> gin;
        for (const auto& t : in) gin.emplace_back(static_cast<std::size_t>(t.numel()), 0.0);
        einsum(c, in, &gout, &gin);
        Tensors r;
        for (std::size_t i = 0; i < in.size(); ++i) r.push_back(grad_like(gin[i], in[i]));
        return r;
      })
      .domain(Domain({0, 1}))
      .danger({danger::output_overflow()})
      .error(error_models::accumulation(
          [](const KernelContext& c, const Tensors& in) {
            // Terms per output element: the product of the contracted indices' sizes (implicit
            // outputs and ellipses included, as einsum_spec reads the equation).
            const EinsumSpec e = einsum_spec(c, in);
            double n = 1;
            for (char ch : e.all)
              if (e.out_term.find(ch) == std::string::npos) n *= static_cast<double>(e.dims.at(ch));
            return n;
          },
          "kappa(product of contracted sizes) * einsum(|operands|), 2 ulp"))
      .float32(
          [](const KernelContext& c, const Tensors& in, SumOrder) { return einsum<float>(c, in); },
          "the products of the operands and their sum over the contracted indices in float32",
          "none needed beyond the sum's order (a wide sum: pairwise or blocked)")
      .inputs(InputRoles::combine());
}

}  // namespace

Tensors conv_forward_with_gemm(const KernelContext& c, const Tensors& in, GemmFn gemm);  // conv.cpp
Tensors conv_vjp_with_gemm(const KernelContext& c, const Tensors& in, const Tensors& out,
                           const Tensors& grads, GemmFn gemm, bool float32);  // conv.cpp

Tensors forward_with_gemm(const KernelContext& c, const Tensors& in, GemmFn gemm) {
  const std::string& op = c.node.op_type;
  if (op == "MatMul") return matmul(c, in, gemm);
  if (op == "Gemm") return gemm_op(c, in, gemm);
  if (op == "Conv" || op == "ConvTranspose") return conv_forward_with_gemm(c, in, gemm);
  fail("{}: no GEMM in {}", c.node.label(), op);
}

Tensors vjp_with_gemm(const KernelContext& c, const Tensors& in, const Tensors& out,
                      const Tensors& grads, GemmFn gemm, bool float32) {
  const std::string& op = c.node.op_type;
  if (op == "MatMul") return matmul_vjp(c, in, out, grads, gemm);
  if (op == "Gemm") return gemm_vjp(c, in, out, grads, gemm, float32);
  if (op == "Conv" || op == "ConvTranspose")
    return conv_vjp_with_gemm(c, in, out, grads, gemm, float32);
  fail("{}: no GEMM in {}", c.node.label(), op);
}

void register_linear_ops(OpRegistry& r) {
  register_matmul(r);
  register_gemm(r);
  register_einsum(r);
}

}  // namespace metaop
