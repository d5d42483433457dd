// relpos kernels: the gradient of a Toeplitz expansion, the sums of a gradient along its diagonals.
//
// A Toeplitz term out[l, t, j] = v[l, j - t + R - 1] (R query rows, C keys) has the gradient
// dv[l, m] = sum over t of g[l, t, m - R + 1 + t]. One pass over g: row t of g adds into the output row from
// column R - 1 - t, a contiguous loop on both sides, with the L x (R + C - 1) output hot in cache. PyTorch's own
// form writes g through a skewed view into an L x R x (R + C - 1) zero buffer and sums its rows: three passes,
// two of them over a buffer twice the size of g.
#include <torch/extension.h>
#include <ATen/Parallel.h>

// dv[l, j - t + R - 1] += g[l, t, j]; g is (L, R, C) with unit stride along keys.
torch::Tensor toeplitz_grad(torch::Tensor g) {
  TORCH_CHECK(g.dim() == 3 && g.device().is_cpu() && (g.size(2) <= 1 || g.stride(2) == 1),
              "g must be a 3-D CPU tensor (L, R, C) with unit stride along its last dim");
  const int64_t L = g.size(0), R = g.size(1), C = g.size(2), W = R + C - 1;
  TORCH_CHECK(R > 0 && C > 0, "g must have at least one row and one key");
  auto out = torch::zeros({L, W}, g.options());
  AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "toeplitz_grad", [&] {
    const scalar_t* gd = g.data_ptr<scalar_t>();
    scalar_t* od = out.data_ptr<scalar_t>();
    const int64_t s0 = g.stride(0), s1 = g.stride(1);
    at::parallel_for(0, L, 1, [&](int64_t b, int64_t e) {
      for (int64_t l = b; l < e; ++l) {
        for (int64_t t = 0; t < R; ++t) {
          const scalar_t* row = gd + l * s0 + t * s1;
          scalar_t* o = od + l * W + (R - 1 - t);
          for (int64_t j = 0; j < C; ++j) o[j] += row[j];
        }
      }
    });
  });
  return out;
}
