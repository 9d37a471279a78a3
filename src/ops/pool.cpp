// Pooling meta operators: MaxPool (with indices), AveragePool, LpPool and the global pools.
#include <cmath>
#include <limits>

#include "ops/vjp_util.h"
#include "ops/window.h"

namespace metaop {

namespace {

enum class PoolKind { Max, Avg, Lp };

// With `gout`, also accumulates the VJP into `gin` (the input's gradient): Max sends each
// output's gradient to the element it took, Avg spreads it over the window's counted elements,
// Lp weights it by |x|^(p-1) sign(x) / y^(p-1).
// With `ties` (and `gout`), Max pooling also collects each window's candidates for the
// subgradient set: the elements equal to its maximum.
Tensors pool(const KernelContext& c, const Tensors& in, PoolKind kind,
             const std::vector<double>* gout = nullptr, std::vector<double>* gin = nullptr,
             TieCollector* ties = nullptr) {
  const Tensor& x = input(c, in, 0);
  const Node& node = c.node;
  auto kernel = node.attr_ints("kernel_shape");
  bool ceil_mode = node.attr_i("ceil_mode", 0) != 0;
  Window w = window_geometry(c, x.shape(), kernel, ceil_mode);
  bool include_pad = node.attr_i("count_include_pad", 0) != 0;
  double p = kind == PoolKind::Lp ? static_cast<double>(node.attr_i("p", 2)) : 0.0;
  bool col_major = node.attr_i("storage_order", 0) == 1;
  std::int64_t N = x.dim(0), C = x.dim(1), P = w.out_size();
  auto vx = x.to_f64();
  std::vector<double> out(static_cast<std::size_t>(N * C * P));
  std::vector<std::int64_t> idx(kind == PoolKind::Max ? out.size() : 0);
  for (std::int64_t nc = 0; nc < N * C; ++nc) {
    const double* xc = vx.data() + nc * w.in_size();
    for (std::int64_t o0 = 0; o0 < w.out[0]; ++o0)
      for (std::int64_t o1 = 0; o1 < w.out[1]; ++o1)
        for (std::int64_t o2 = 0; o2 < w.out[2]; ++o2) {
          double acc = kind == PoolKind::Max ? -std::numeric_limits<double>::infinity() : 0.0;
          std::int64_t arg = -1, valid = 0, padded = 0;
          bool nan = false;
          std::vector<std::int64_t> taps;  // the window's elements inside the input
          for (std::int64_t k0 = 0; k0 < w.k[0]; ++k0)
            for (std::int64_t k1 = 0; k1 < w.k[1]; ++k1)
              for (std::int64_t k2 = 0; k2 < w.k[2]; ++k2) {
                std::int64_t i[3] = {o0 * w.s[0] - w.pb[0] + k0 * w.d[0],
                                     o1 * w.s[1] - w.pb[1] + k1 * w.d[1],
                                     o2 * w.s[2] - w.pb[2] + k2 * w.d[2]};
                bool inside = true, in_pads = true;
                for (int d = 0; d < 3; ++d) {
                  inside &= i[d] >= 0 && i[d] < w.in[d];
                  in_pads &= i[d] >= -w.pb[d] && i[d] < w.in[d] + w.pe[d];
                }
                padded += in_pads;
                if (!inside) continue;
                ++valid;
                std::int64_t flat = (i[0] * w.in[1] + i[1]) * w.in[2] + i[2];
                if (gout) taps.push_back(flat);
                double v = xc[flat];
                if (kind == PoolKind::Max) {
                  // The first NaN of the window gives the index (numpy's argmax).
                  if (std::isnan(v) ? !nan : (!nan && (v > acc || arg < 0))) {
                    nan = nan || std::isnan(v);
                    acc = v;
                    arg = flat;
                  }
                } else if (kind == PoolKind::Avg) {
                  acc += v;
                } else {
                  acc += std::pow(std::fabs(v), p);
                }
              }
          std::int64_t o = nc * P + (o0 * w.out[1] + o1) * w.out[2] + o2;
          if (kind == PoolKind::Max) {
            out[o] = nan ? NAN : acc;
            std::int64_t flat = arg < 0 ? 0 : arg;
            if (col_major) {
              // Column-major index within the image: reverse the order of the spatial dims.
              std::int64_t i2 = flat % w.in[2], i1 = (flat / w.in[2]) % w.in[1],
                           i0 = flat / (w.in[1] * w.in[2]);
              std::int64_t cm = 0;
              if (w.nsp == 1)
                cm = i2;
              else if (w.nsp == 2)
                cm = i2 * w.in[1] + i1;
              else
                cm = (i2 * w.in[1] + i1) * w.in[0] + i0;
              flat = cm;
            }
            idx[o] = nc * w.in_size() + flat;
          } else if (kind == PoolKind::Avg) {
            out[o] = acc / static_cast<double>(include_pad ? padded : valid);
          } else {
            out[o] = std::pow(acc, 1.0 / p);
          }
          if (gout) {
            double g = (*gout)[o];
            double* gi = gin->data() + nc * w.in_size();
            if (kind == PoolKind::Max) {
              if (arg >= 0) gi[arg] += g;
              if (ties && !nan) {
                std::vector<std::int64_t> cand;
                for (auto t : taps)
                  if (xc[t] == acc) cand.push_back(nc * w.in_size() + t);
                ties->add(cand, g);
              }
            } else if (kind == PoolKind::Avg) {
              for (auto t : taps) gi[t] += g / static_cast<double>(include_pad ? padded : valid);
            } else if (out[o] > 0) {
              for (auto t : taps)
                gi[t] += g * std::pow(std::fabs(xc[t]), p - 1) * (xc[t] < 0 ? -1 : 1) /
                         std::pow(out[o], p - 1);
            }
          }
        }
  }
  Shape os = w.out_shape(N, C);
  Tensors res{Tensor::from_f64(out, os, x.dtype())};
  if (kind == PoolKind::Max && node.outputs.size() > 1) res.push_back(Tensor::from_i64(idx, os));
  return res;
}

Tensors global_pool(const KernelContext& c, const Tensors& in, PoolKind kind,
                    const std::vector<double>* gout = nullptr, std::vector<double>* gin = nullptr,
                    TieCollector* ties = nullptr) {
  const Tensor& x = input(c, in, 0);
  if (x.rank() < 3)
    fail("{}: input must be [N, C, spatial...], got {}", c.node.label(), shape_str(x.shape()));
  std::int64_t NC = x.dim(0) * x.dim(1), S = x.numel() / std::max<std::int64_t>(NC, 1);
  double p = kind == PoolKind::Lp ? static_cast<double>(c.node.attr_i("p", 2)) : 0.0;
  auto vx = x.to_f64();
  std::vector<double> out(static_cast<std::size_t>(NC));
  for (std::int64_t i = 0; i < NC; ++i) {
    const double* xc = vx.data() + i * S;
    double acc = kind == PoolKind::Max ? -std::numeric_limits<double>::infinity() : 0.0;
    for (std::int64_t j = 0; j < S; ++j) {
      if (kind == PoolKind::Max)
        acc = (std::isnan(xc[j]) || std::isnan(acc)) ? NAN : std::max(acc, xc[j]);
      else if (kind == PoolKind::Avg)
        acc += xc[j];
      else
        acc += std::pow(std::fabs(xc[j]), p);
    }
    out[i] = kind == PoolKind::Avg  ? acc / static_cast<double>(S)
             : kind == PoolKind::Lp ? std::pow(acc, 1.0 / p)
                                    : acc;
    if (gout) {
      double g = (*gout)[i];
      double* gi = gin->data() + i * S;
      bool taken = false;
      std::vector<std::int64_t> cand;
      for (std::int64_t j = 0; j < S; ++j) {
        if (kind == PoolKind::Avg) {
          gi[j] += g / static_cast<double>(S);
        } else if (kind == PoolKind::Max) {
          bool hit = xc[j] == out[i] || (std::isnan(xc[j]) && std::isnan(out[i]));
          if (hit && !taken) gi[j] += g;
          taken = taken || hit;
          if (ties && hit && !std::isnan(xc[j])) cand.push_back(i * S + j);
        } else if (out[i] > 0) {
          gi[j] += g * std::pow(std::fabs(xc[j]), p - 1) * (xc[j] < 0 ? -1 : 1) /
                   std::pow(out[i], p - 1);
        }
      }
      if (ties) ties->add(cand, g);
    }
  }
  Shape os(x.shape().begin(), x.shape().begin() + 2);
  os.resize(x.shape().size(), 1);
  return {Tensor::from_f64(out, os, x.dtype())};
}

template <typename F>
ReferenceVjp pool_vjp(F run) {
  return
      [run](const KernelContext& c, const Tensors& in, const Tensors& out, const Tensors& grads) {
        std::vector<double> gout = grad_of(grads, out, 0);
        std::vector<double> gin(static_cast<std::size_t>(in[0].numel()), 0.0);
        run(c, in, &gout, &gin);
        Tensors r(in.size());
        r[0] = grad_like(gin, in[0]);
        return r;
      };
}

}  // namespace

void register_pool_ops(OpRegistry& r) {
  r.add({"MaxPool", "pool",
         [](const KernelContext& c, const Tensors& in) { return pool(c, in, PoolKind::Max); }});
  r.add({"AveragePool", "pool",
         [](const KernelContext& c, const Tensors& in) { return pool(c, in, PoolKind::Avg); }});
  r.add({"LpPool", "pool",
         [](const KernelContext& c, const Tensors& in) { return pool(c, in, PoolKind::Lp); }});
  r.add({"GlobalMaxPool", "pool", [](const KernelContext& c, const Tensors& in) {
           return global_pool(c, in, PoolKind::Max);
         }});
  r.add({"GlobalAveragePool", "pool", [](const KernelContext& c, const Tensors& in) {
           return global_pool(c, in, PoolKind::Avg);
         }});
  r.add({"GlobalLpPool", "pool", [](const KernelContext& c, const Tensors& in) {
           return global_pool(c, in, PoolKind::Lp);
         }});

  for (auto [type, kind] :
       {std::pair{"MaxPool", PoolKind::Max}, std::pair{"AveragePool", PoolKind::Avg},
        std::pair{"LpPool", PoolKind::Lp}}) {
    r.set_vjp(type, pool_vjp([kind](const KernelContext& c, const Tensors& in,
                                    const std::vector<double>* g,
                                    std::vector<double>* gi) { return pool(c, in, kind, g, gi); }));
  }
  for (auto [type, kind] :
       {std::pair{"GlobalMaxPool", PoolKind::Max}, std::pair{"GlobalAveragePool", PoolKind::Avg},
        std::pair{"GlobalLpPool", PoolKind::Lp}}) {
    r.set_vjp(type, pool_vjp([kind](const KernelContext& c, const Tensors& in,
                                    const std::vector<double>* g, std::vector<double>* gi) {
                return global_pool(c, in, kind, g, gi);
              }));
  }

  // At a tie for a window's maximum, its gradient may go to any of the tied elements.
  r.set_subgradient("MaxPool", [](const KernelContext& c, const Tensors& in, const Tensors& out,
                                  const Tensors& grads) {
    std::vector<GradientSet> sets(in.size());
    std::vector<double> gout = grad_of(grads, out, 0);
    std::vector<double> gin(static_cast<std::size_t>(in[0].numel()), 0.0);
    TieCollector ties(gin.size());
    pool(c, in, PoolKind::Max, &gout, &gin, &ties);
    sets[0] = ties.finish();
    return sets;
  });
  r.set_subgradient("GlobalMaxPool", [](const KernelContext& c, const Tensors& in,
                                        const Tensors& out, const Tensors& grads) {
    std::vector<GradientSet> sets(in.size());
    std::vector<double> gout = grad_of(grads, out, 0);
    std::vector<double> gin(static_cast<std::size_t>(in[0].numel()), 0.0);
    TieCollector ties(gin.size());
    global_pool(c, in, PoolKind::Max, &gout, &gin, &ties);
    sets[0] = ties.finish();
    return sets;
  });

  using namespace error_models;
  r.set_error_model("MaxPool", exact());
  r.set_error_model("GlobalMaxPool", exact());
  auto window = [](const KernelContext& c, const Tensors&) {
    double n = 1;
    for (auto k : c.node.attr_ints("kernel_shape", {})) n *= static_cast<double>(k);
    return n;
  };
  auto spatial = [](const KernelContext&, const Tensors& in) {
    const Tensor& x = in[0];
    return static_cast<double>(x.numel()) /
           static_cast<double>(std::max<std::int64_t>(1, x.dim(0) * x.dim(1)));
  };
  r.set_error_model("AveragePool", accumulation(window, "kappa(prod(kernel)) * avg(|x|), 2 ulp"));
  r.set_error_model("GlobalAveragePool",
                    accumulation(spatial, "kappa(spatial size) * mean(|x|), 2 ulp"));
  // (sum |x|^p)^(1/p): positive terms, so the sum's relative error carries to |y| (/p), plus
  // the powers' few ULPs.
  auto lp = [](TermCount terms) {
    return [terms](const KernelContext& c, const Tensors& in, const Tensors& ref,
                   const AccumulationBound& bound) {
      double k = bound.kappa(terms(c, in)) + 8;
      auto y = ref[0].to_f64();
      for (auto& v : y) v = k * std::fabs(v);
      return Magnitudes{y};
    };
  };
  r.set_error_model("LpPool", condition(lp(window), "(kappa(prod(kernel)) + 8) * |y|, 4 ulp"));
  r.set_error_model("GlobalLpPool", condition(lp(spatial), "(kappa(spatial) + 8) * |y|, 4 ulp"));
  for (const char* t : {"LpPool", "GlobalLpPool"}) r.set_danger(t, {danger::output_overflow()});
}

}  // namespace metaop
