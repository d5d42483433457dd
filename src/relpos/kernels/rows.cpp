// relpos kernels: gather and scatter of per-row position states through a distance table.
//
// A score term of the form  out[b,h,a,j] = C[b,h,a,t] + P[b,h,t,j]  with the table row
// t = table[qpos[a] - kpos[j] - rlo]  depends on the pair only through its distance, so for
// keys at unit steps t is constant over runs of keys (DeBERTa's log buckets, clipped offsets).
// The kernels walk those runs (short runs key by key): the forward writes each run as one contiguous loop, the backward
// sums a run of the row state's gradient in a register and adds a run of the column state's
// gradient with one contiguous loop. No N x N index is built. Arbitrary positions take a
// per-pair loop. Built by relpos.kernels (torch.utils.cpp_extension); see its docstring.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <vector>

namespace {

// Runs shorter than this are walked key by key (one table read per key) rather than run by run: a
// bidirectional DeBERTa row crosses about 500 runs of 1-6 keys (its exact and log buckets on both
// sides), where the per-run work cost more than the keys.
constexpr int64_t kMinRun = 8;

// The sum of d[j0 .. j1): eight independent partial sums, so a long run is not bound by the latency of one
// chain of additions (a sequential float sum cannot be reordered by the compiler).
template <typename T>
inline T run_sum(const T* d, int64_t j0, int64_t j1) {
  T a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = j0;
  for (; j + 8 <= j1; j += 8)
    for (int u = 0; u < 8; ++u) a[u] += d[j + u];
  for (; j < j1; ++j) a[0] += d[j];
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

struct Rows {
  // distance table and its segments (seg: starts, seg_const: a run of one row, or short runs read key by
  // key), positions, and whether each batch row of keys steps by 1
  const int64_t* td; std::vector<int64_t> seg; std::vector<char> seg_const;
  const int64_t* qd; const int64_t* kd; int64_t bq, bk, Nq, Nk;
  std::vector<char> unit;
};

Rows prepare(const torch::Tensor& qpos, const torch::Tensor& kpos, const torch::Tensor& table,
             int64_t rlo, int64_t n_rows) {
  TORCH_CHECK(qpos.dim() == 2 && kpos.dim() == 2, "qpos and kpos must be (B|1, N)");
  TORCH_CHECK(qpos.scalar_type() == torch::kLong && kpos.scalar_type() == torch::kLong &&
              table.scalar_type() == torch::kLong, "qpos, kpos and table must be int64");
  TORCH_CHECK(qpos.is_contiguous() && kpos.is_contiguous() && table.is_contiguous() && table.dim() == 1,
              "qpos, kpos and table must be contiguous; table 1-D");
  TORCH_CHECK(qpos.device().is_cpu() && kpos.device().is_cpu() && table.device().is_cpu(), "CPU tensors only");
  Rows r;
  r.td = table.data_ptr<int64_t>(); r.qd = qpos.data_ptr<int64_t>(); r.kd = kpos.data_ptr<int64_t>();
  r.bq = qpos.size(0); r.bk = kpos.size(0); r.Nq = qpos.size(1); r.Nk = kpos.size(1);
  const int64_t T = table.numel();
  for (int64_t i = 0; i < T; ++i) TORCH_CHECK(r.td[i] >= 0 && r.td[i] < n_rows, "table row out of range");
  if (r.Nq > 0 && r.Nk > 0) {  // every distance index qpos - kpos - rlo must lie in [0, T)
    auto qmm = std::minmax_element(r.qd, r.qd + r.bq * r.Nq);
    auto kmm = std::minmax_element(r.kd, r.kd + r.bk * r.Nk);
    TORCH_CHECK(*qmm.first - *kmm.second - rlo >= 0 && *qmm.second - *kmm.first - rlo < T,
                "positions reach distances outside the table");
  }
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < T; ++i) if (i == 0 || r.td[i] != r.td[i - 1]) starts.push_back(i);
  starts.push_back(T);
  for (size_t i = 0; i + 1 < starts.size(); ++i) {
    const bool cst = starts[i + 1] - starts[i] >= kMinRun;
    if (cst || r.seg_const.empty() || r.seg_const.back()) { r.seg.push_back(starts[i]); r.seg_const.push_back(cst); }
  }
  r.seg.push_back(T);
  r.unit.resize(r.bk);
  for (int64_t b = 0; b < r.bk; ++b) {
    const int64_t* k = r.kd + b * r.Nk; bool u = true;
    for (int64_t j = 1; j < r.Nk && u; ++j) u = k[j] == k[0] + j;
    r.unit[b] = u;
  }
  return r;
}

// f(cst, j0, j1) for each segment of keys [j0, j1) of one query row: one run of a single table row
// (cst) or short runs read key by key. The key's distance index is A - j (A = qpos - rlo - kpos[0]),
// which falls as j grows.
template <typename F>
inline void for_segments(const Rows& r, int64_t A, int64_t Nk, F f) {
  const int64_t lo = A - Nk + 1, hi = A;
  auto it = std::upper_bound(r.seg.begin(), r.seg.end() - 1, hi) - 1;
  while (true) {
    const int64_t s0 = std::max(*it, lo), s1 = std::min(*(it + 1) - 1, hi);
    if (s0 <= s1) f(bool(r.seg_const[it - r.seg.begin()]), A - s1, A - s0 + 1);
    if (*it <= lo || it == r.seg.begin()) break;
    --it;
  }
}

struct View4 {  // a strided 4-D view's pointer and strides (or absent)
  bool on = false; int64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  template <typename T> T* ptr(const torch::Tensor& t) const { return on ? t.data_ptr<T>() : nullptr; }
};

View4 view_of(const torch::Tensor& t, const torch::Tensor& out, bool rows_on_dim3, int64_t n_rows) {
  View4 v;
  if (!t.defined() || t.numel() == 0) return v;
  TORCH_CHECK(t.dim() == 4 && t.scalar_type() == out.scalar_type() && t.device().is_cpu(),
              "state tensors must be 4-D CPU tensors of the output's dtype");
  TORCH_CHECK(t.size(0) == out.size(0) && t.size(1) == out.size(1), "state batch and heads must match");
  if (rows_on_dim3) {
    TORCH_CHECK(t.size(2) == out.size(2) && t.size(3) == n_rows, "row state must be (B, H, Nq, rows)");
  } else {
    TORCH_CHECK(t.size(2) == n_rows && t.size(3) == out.size(3), "column state must be (B, H, rows, Nk)");
  }
  v.on = true; v.s0 = t.stride(0); v.s1 = t.stride(1); v.s2 = t.stride(2); v.s3 = t.stride(3);
  return v;
}

// prepare() plus the checks of the (B, H, Nq, Nk) pair tensor both kernels walk (the output or its gradient)
Rows prepare_pairs(const torch::Tensor& t, const char* name, const torch::Tensor& qpos, const torch::Tensor& kpos,
                   const torch::Tensor& table, int64_t rlo, int64_t n_rows) {
  TORCH_CHECK(t.dim() == 4 && t.is_contiguous() && t.device().is_cpu(), name, " must be a contiguous 4-D CPU tensor");
  Rows r = prepare(qpos, kpos, table, rlo, n_rows);
  TORCH_CHECK(t.size(2) == r.Nq && t.size(3) == r.Nk, name, " must be (B, H, Nq, Nk)");
  TORCH_CHECK(r.bq == 1 || r.bq == t.size(0), "qpos batch must be 1 or B");
  TORCH_CHECK(r.bk == 1 || r.bk == t.size(0), "kpos batch must be 1 or B");
  return r;
}

}  // namespace

// out[b,h,a,j] (+)= C[b,h,a,t] + P[b,h,t,j],  t = table[qpos[a] - kpos[j] - rlo]
void gather_rows(torch::Tensor out, torch::Tensor C, torch::Tensor P, torch::Tensor qpos, torch::Tensor kpos,
                 torch::Tensor table, int64_t rlo, int64_t n_rows, bool accumulate) {
  Rows r = prepare_pairs(out, "out", qpos, kpos, table, rlo, n_rows);
  const View4 vc = view_of(C, out, true, n_rows), vp = view_of(P, out, false, n_rows);
  const int64_t B = out.size(0), H = out.size(1), Nq = r.Nq, Nk = r.Nk;
  AT_DISPATCH_FLOATING_TYPES(out.scalar_type(), "gather_rows", [&] {
    scalar_t* o = out.data_ptr<scalar_t>();
    const scalar_t* cd = vc.ptr<scalar_t>(C);
    const scalar_t* pd = vp.ptr<scalar_t>(P);
    at::parallel_for(0, B * H, 1, [&](int64_t s, int64_t e) {
      for (int64_t bh = s; bh < e; ++bh) {
        const int64_t b = bh / H, h = bh % H;
        const int64_t* q = r.qd + (r.bq == 1 ? 0 : b) * Nq;
        const int64_t* k = r.kd + (r.bk == 1 ? 0 : b) * Nk;
        const bool runs = r.unit[r.bk == 1 ? 0 : b] && (!vp.on || vp.s3 == 1) && Nk > 0;
        const scalar_t* pb = vp.on ? pd + b * vp.s0 + h * vp.s1 : nullptr;
        for (int64_t a = 0; a < Nq; ++a) {
          scalar_t* orow = o + (bh * Nq + a) * Nk;
          const scalar_t* crow = vc.on ? cd + b * vc.s0 + h * vc.s1 + a * vc.s2 : nullptr;
          const int64_t base = q[a] - rlo;
          if (runs) {  // keys at unit steps: the distance index is A - j
            const int64_t A = base - k[0];
            for_segments(r, A, Nk, [&](bool cst, int64_t j0, int64_t j1) {
              if (cst) {
                const int64_t t = r.td[A - j0];
                const scalar_t c = vc.on ? crow[t * vc.s3] : scalar_t(0);
                if (vp.on) {
                  const scalar_t* pr = pb + t * vp.s2;
                  if (accumulate) for (int64_t j = j0; j < j1; ++j) orow[j] += c + pr[j];
                  else for (int64_t j = j0; j < j1; ++j) orow[j] = c + pr[j];
                } else {
                  if (accumulate) for (int64_t j = j0; j < j1; ++j) orow[j] += c;
                  else for (int64_t j = j0; j < j1; ++j) orow[j] = c;
                }
                return;
              }
              const int64_t* tr = r.td + A;
              if (vc.on && vp.on) {
                if (accumulate) for (int64_t j = j0; j < j1; ++j) { const int64_t t = tr[-j]; orow[j] += crow[t * vc.s3] + pb[t * vp.s2 + j]; }
                else for (int64_t j = j0; j < j1; ++j) { const int64_t t = tr[-j]; orow[j] = crow[t * vc.s3] + pb[t * vp.s2 + j]; }
              } else if (vc.on) {
                if (accumulate) for (int64_t j = j0; j < j1; ++j) orow[j] += crow[tr[-j] * vc.s3];
                else for (int64_t j = j0; j < j1; ++j) orow[j] = crow[tr[-j] * vc.s3];
              } else {
                if (accumulate) for (int64_t j = j0; j < j1; ++j) orow[j] += pb[tr[-j] * vp.s2 + j];
                else for (int64_t j = j0; j < j1; ++j) orow[j] = pb[tr[-j] * vp.s2 + j];
              }
            });
            continue;
          }
          for (int64_t j = 0; j < Nk; ++j) {
            const int64_t t = r.td[base - k[j]];
            scalar_t v = 0;
            if (vc.on) v += crow[t * vc.s3];
            if (vp.on) v += pb[t * vp.s2 + j * vp.s3];
            orow[j] = accumulate ? orow[j] + v : v;
          }
        }
      }
    });
  });
}

// gC[b,h,a,t] += ds[b,h,a,j];  gP[b,h,t,j] += ds[b,h,a,j]
void scatter_rows(torch::Tensor gC, torch::Tensor gP, torch::Tensor ds, torch::Tensor qpos, torch::Tensor kpos,
                  torch::Tensor table, int64_t rlo, int64_t n_rows) {
  Rows r = prepare_pairs(ds, "ds", qpos, kpos, table, rlo, n_rows);
  const View4 vc = view_of(gC, ds, true, n_rows), vp = view_of(gP, ds, false, n_rows);
  const int64_t B = ds.size(0), H = ds.size(1), Nq = r.Nq, Nk = r.Nk;
  // each (b, h) is written by one task: an expanded gradient (stride 0) would be written by several
  for (const auto* v : {&vc, &vp})
    TORCH_CHECK(!v->on || ((B == 1 || v->s0 != 0) && (H == 1 || v->s1 != 0)),
                "gradient tensors must not be expanded along batch or heads");
  AT_DISPATCH_FLOATING_TYPES(ds.scalar_type(), "scatter_rows", [&] {
    const scalar_t* dd = ds.data_ptr<scalar_t>();
    scalar_t* cd = vc.ptr<scalar_t>(gC);
    scalar_t* pd = vp.ptr<scalar_t>(gP);
    // one (b, h) per task: the column state's gradient of a head is written by all its rows
    at::parallel_for(0, B * H, 1, [&](int64_t s, int64_t e) {
      for (int64_t bh = s; bh < e; ++bh) {
        const int64_t b = bh / H, h = bh % H;
        const int64_t* q = r.qd + (r.bq == 1 ? 0 : b) * Nq;
        const int64_t* k = r.kd + (r.bk == 1 ? 0 : b) * Nk;
        const bool runs = r.unit[r.bk == 1 ? 0 : b] && (!vp.on || vp.s3 == 1) && Nk > 0;
        scalar_t* pb = vp.on ? pd + b * vp.s0 + h * vp.s1 : nullptr;
        for (int64_t a = 0; a < Nq; ++a) {
          const scalar_t* drow = dd + (bh * Nq + a) * Nk;
          scalar_t* crow = vc.on ? cd + b * vc.s0 + h * vc.s1 + a * vc.s2 : nullptr;
          const int64_t base = q[a] - rlo;
          if (runs) {  // keys at unit steps: the distance index is A - j
            const int64_t A = base - k[0];
            for_segments(r, A, Nk, [&](bool cst, int64_t j0, int64_t j1) {
              if (cst) {
                const int64_t t = r.td[A - j0];
                if (vc.on) crow[t * vc.s3] += run_sum(drow, j0, j1);
                if (vp.on) { scalar_t* pr = pb + t * vp.s2; for (int64_t j = j0; j < j1; ++j) pr[j] += drow[j]; }
                return;
              }
              const int64_t* tr = r.td + A;
              if (vc.on) for (int64_t j = j0; j < j1; ++j) crow[tr[-j] * vc.s3] += drow[j];
              if (vp.on) for (int64_t j = j0; j < j1; ++j) pb[tr[-j] * vp.s2 + j] += drow[j];
            });
            continue;
          }
          for (int64_t j = 0; j < Nk; ++j) {
            const int64_t t = r.td[base - k[j]];
            if (vc.on) crow[t * vc.s3] += drow[j];
            if (vp.on) pb[t * vp.s2 + j * vp.s3] += drow[j];
          }
        }
      }
    });
  });
}
