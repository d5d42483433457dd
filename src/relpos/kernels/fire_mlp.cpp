// relpos kernels: FIRE's MLP on the offsets of a Toeplitz bias, forward and backward in one call each.
//
// Below its threshold FIRE's bias is a function of the offset d = j - i alone (relpos.encodings.fire). For
// offsets delta (P,), c = softplus(c_raw) and L = init_L softplus(l_raw) / ln 2:
//   x[p] = log1p(c |delta[p]|) / (log1p(c L) + eps),   hid[p, w] = relu(w1[w] x[p] + b1[w]),
//   out[h, p] = b2[h] + sum_w w2[h, w] hid[p, w].
// With query positions qpos (P,) (int64; empty: every query below the threshold) the normaliser is FIRE's own,
// log1p(c max(L, qpos[p])) + eps, so rows at or past the threshold go through the same call, pair by pair
// (torch.maximum's gradient: to L where L > i, half of it where L == i).
// fire_mlp_forward returns out (H, P); fire_mlp_backward returns the gradients of sum(g * out) with respect
// to c_raw, l_raw, w1, b1, w2 and b2 (their shapes and dtype), recomputing the hidden layer. Sums run in
// double. softplus is torch's (threshold 20). At training lengths P is small (2N - 1 offsets, a hidden layer
// of 32), so the ~20 separate tensor operations of the PyTorch path and their autograd nodes cost more than
// the arithmetic; one call each way removes that overhead. Built by relpos.kernels (see its docstring).
#include <torch/extension.h>

#include <cmath>
#include <vector>

namespace {

double softplus(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }
double softplus_grad(double x) { return x > 20.0 ? 1.0 : 1.0 / (1.0 + std::exp(-x)); }

struct MlpShape {
  int64_t P, W, H;
};

MlpShape check_mlp(const torch::Tensor& delta, const torch::Tensor& c_raw, const torch::Tensor& l_raw,
                   const torch::Tensor& w1, const torch::Tensor& b1, const torch::Tensor& w2, const torch::Tensor& b2) {
  TORCH_CHECK(delta.dim() == 1 && delta.scalar_type() == torch::kInt64 && delta.is_contiguous() && delta.device().is_cpu(),
              "fire_mlp: delta must be a contiguous CPU int64 tensor (P,)");
  const auto dt = w2.scalar_type();
  TORCH_CHECK(dt == torch::kFloat || dt == torch::kDouble, "fire_mlp: the parameters must be float32 or float64");
  for (const auto* t : {&c_raw, &l_raw, &w1, &b1, &w2, &b2}) {
    TORCH_CHECK(t->is_contiguous() && t->device().is_cpu() && t->scalar_type() == dt,
                "fire_mlp: c_raw, l_raw, w1, b1, w2 and b2 must be contiguous CPU tensors of one dtype");
  }
  TORCH_CHECK(c_raw.numel() == 1 && l_raw.numel() == 1, "fire_mlp: c_raw and l_raw must be scalars");
  const int64_t W = b1.numel(), H = b2.numel();
  TORCH_CHECK(w1.numel() == W && w2.dim() == 2 && w2.size(0) == H && w2.size(1) == W,
              "fire_mlp: w1 (W, 1), b1 (W,), w2 (H, W), b2 (H,)");
  return {delta.size(0), W, H};
}

// The scalars both passes share.
struct Scalars {
  double c, L, eps, den;
  const int64_t* q;  // query positions, or nullptr: every query below the threshold
  // the normaliser's argument m = max(L, i) for pair p, and d m / d L (torch.maximum: 1, 1/2 at a tie, 0)
  double m(int64_t p) const { return q == nullptr ? L : std::max(L, static_cast<double>(q[p])); }
  double dm_dL(int64_t p) const {
    if (q == nullptr) return 1.0;
    const double i = static_cast<double>(q[p]);
    return L > i ? 1.0 : (L == i ? 0.5 : 0.0);
  }
  double den_at(int64_t p) const { return q == nullptr ? den : std::log1p(c * m(p)) + eps; }
};

Scalars scalars(double c_raw, double l_raw, double init_L, double eps, const torch::Tensor& qpos, int64_t P) {
  const double c = softplus(c_raw), L = init_L * softplus(l_raw) / std::log(2.0);
  const int64_t* q = nullptr;
  if (qpos.numel()) {
    TORCH_CHECK(qpos.dim() == 1 && qpos.size(0) == P && qpos.scalar_type() == torch::kInt64 && qpos.is_contiguous() &&
                    qpos.device().is_cpu(),
                "fire_mlp: qpos must be empty or a contiguous CPU int64 tensor (P,) beside delta");
    q = qpos.data_ptr<int64_t>();
  }
  return {c, L, eps, std::log1p(c * L) + eps, q};
}

template <typename T>
void forward_impl(const int64_t* d, const MlpShape& s, const Scalars& k, const T* w1, const T* b1, const T* w2,
                  const T* b2, T* out) {
  std::vector<double> hid(s.W);
  for (int64_t p = 0; p < s.P; ++p) {
    const double x = std::log1p(k.c * std::abs(static_cast<double>(d[p]))) / k.den_at(p);
    for (int64_t w = 0; w < s.W; ++w) hid[w] = std::max(0.0, static_cast<double>(w1[w]) * x + b1[w]);
    for (int64_t h = 0; h < s.H; ++h) {
      double acc = b2[h];
      const T* row = w2 + h * s.W;
      for (int64_t w = 0; w < s.W; ++w) acc += static_cast<double>(row[w]) * hid[w];
      out[h * s.P + p] = static_cast<T>(acc);
    }
  }
}

template <typename T>
void backward_impl(const T* g, const int64_t* d, const MlpShape& s, const Scalars& k, const T* w1, const T* b1,
                   const T* w2, double* gw1, double* gb1, double* gw2, double* gb2, double* gc, double* gL) {
  std::vector<double> hid(s.W);
  for (int64_t p = 0; p < s.P; ++p) {
    const double a = std::abs(static_cast<double>(d[p]));
    const double den = k.den_at(p), m = k.m(p);
    const double x = std::log1p(k.c * a) / den;
    for (int64_t w = 0; w < s.W; ++w) hid[w] = static_cast<double>(w1[w]) * x + b1[w];  // pre-activation
    for (int64_t h = 0; h < s.H; ++h) {
      const double gh = g[h * s.P + p];
      gb2[h] += gh;
      for (int64_t w = 0; w < s.W; ++w) gw2[h * s.W + w] += gh * std::max(0.0, hid[w]);
    }
    double gx = 0.0;
    for (int64_t w = 0; w < s.W; ++w) {
      if (!(hid[w] > 0.0)) continue;  // relu passes the gradient where its output is positive
      double gpre = 0.0;
      for (int64_t h = 0; h < s.H; ++h) gpre += static_cast<double>(g[h * s.P + p]) * w2[h * s.W + w];
      gw1[w] += gpre * x;
      gb1[w] += gpre;
      gx += gpre * w1[w];
    }
    // x = log1p(c a) / den, den = log1p(c m) + eps, m = max(L, i)
    *gc += gx * (a / (1.0 + k.c * a) / den - x / den * m / (1.0 + k.c * m));
    *gL += gx * (-x / den * k.c / (1.0 + k.c * m)) * k.dm_dL(p);
  }
}

}  // namespace

torch::Tensor fire_mlp_forward(torch::Tensor delta, torch::Tensor qpos, torch::Tensor c_raw, torch::Tensor l_raw, double init_L, double eps,
                               torch::Tensor w1, torch::Tensor b1, torch::Tensor w2, torch::Tensor b2) {
  const MlpShape s = check_mlp(delta, c_raw, l_raw, w1, b1, w2, b2);
  auto out = torch::empty({s.H, s.P}, w2.options());
  AT_DISPATCH_FLOATING_TYPES(w2.scalar_type(), "fire_mlp_forward", [&] {
    const Scalars k = scalars(static_cast<double>(*c_raw.data_ptr<scalar_t>()),
                              static_cast<double>(*l_raw.data_ptr<scalar_t>()), init_L, eps, qpos, s.P);
    forward_impl<scalar_t>(delta.data_ptr<int64_t>(), s, k, w1.data_ptr<scalar_t>(), b1.data_ptr<scalar_t>(),
                           w2.data_ptr<scalar_t>(), b2.data_ptr<scalar_t>(), out.data_ptr<scalar_t>());
  });
  return out;
}

std::vector<torch::Tensor> fire_mlp_backward(torch::Tensor g, torch::Tensor delta, torch::Tensor qpos, torch::Tensor c_raw,
                                             torch::Tensor l_raw, double init_L, double eps, torch::Tensor w1,
                                             torch::Tensor b1, torch::Tensor w2, torch::Tensor b2) {
  const MlpShape s = check_mlp(delta, c_raw, l_raw, w1, b1, w2, b2);
  TORCH_CHECK(g.is_contiguous() && g.device().is_cpu() && g.scalar_type() == w2.scalar_type() && g.dim() == 2 &&
                  g.size(0) == s.H && g.size(1) == s.P,
              "fire_mlp: g must be a contiguous CPU tensor (H, P) of the parameters' dtype");
  auto dd = torch::TensorOptions().dtype(torch::kDouble);
  auto gw1 = torch::zeros({s.W}, dd), gb1 = torch::zeros({s.W}, dd), gw2 = torch::zeros({s.H, s.W}, dd),
       gb2 = torch::zeros({s.H}, dd);
  double gc = 0.0, gL = 0.0, c_in = 0.0, l_in = 0.0;
  AT_DISPATCH_FLOATING_TYPES(w2.scalar_type(), "fire_mlp_backward", [&] {
    c_in = static_cast<double>(*c_raw.data_ptr<scalar_t>());
    l_in = static_cast<double>(*l_raw.data_ptr<scalar_t>());
    const Scalars k = scalars(c_in, l_in, init_L, eps, qpos, s.P);
    backward_impl<scalar_t>(g.data_ptr<scalar_t>(), delta.data_ptr<int64_t>(), s, k, w1.data_ptr<scalar_t>(),
                            b1.data_ptr<scalar_t>(), w2.data_ptr<scalar_t>(), gw1.data_ptr<double>(),
                            gb1.data_ptr<double>(), gw2.data_ptr<double>(), gb2.data_ptr<double>(), &gc, &gL);
  });
  const double g_c_raw = gc * softplus_grad(c_in), g_l_raw = gL * init_L / std::log(2.0) * softplus_grad(l_in);
  auto opt = w2.options();
  return {torch::full(c_raw.sizes(), g_c_raw, opt), torch::full(l_raw.sizes(), g_l_raw, opt),
          gw1.to(w2.scalar_type()).view(w1.sizes()), gb1.to(w2.scalar_type()).view(b1.sizes()),
          gw2.to(w2.scalar_type()), gb2.to(w2.scalar_type())};
}
