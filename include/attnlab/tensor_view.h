// attnlab/tensor_view.h: a strided 4-D view [batch, heads, len, head_dim] used by the kernels.
#ifndef ATTNLAB_TENSOR_VIEW_H_
#define ATTNLAB_TENSOR_VIEW_H_

#include <cstdint>

namespace attnlab {

// A view of a [batch, heads, len, head_dim] tensor. Strides are in elements; the innermost
// (head_dim) dimension is contiguous. `size` is the number of elements addressable from `data`:
// validation rejects strides that would read or write past it.
//
// Two common layouts of the same logical tensor:
//   [B, H, T, D] contiguous: stride_batch = H*T*D, stride_head = T*D, stride_token = D
//   [B, T, H, D] (a model's projection output): stride_batch = T*H*D, stride_head = D,
//                                              stride_token = H*D
template <typename T>
struct TensorView4 {
  T* data = nullptr;
  int64_t size = 0;
  int64_t stride_batch = 0;
  int64_t stride_head = 0;
  int64_t stride_token = 0;

  T* at(int64_t b, int64_t h, int64_t t) const {
    return data + b * stride_batch + h * stride_head + t * stride_token;
  }
};

// A contiguous [batch, heads, len, head_dim] view.
template <typename T>
TensorView4<T> ContiguousView(T* data, int64_t batch, int64_t heads, int64_t len,
                              int64_t head_dim) {
  TensorView4<T> v;
  v.data = data;
  v.size = batch * heads * len * head_dim;
  v.stride_token = head_dim;
  v.stride_head = len * head_dim;
  v.stride_batch = heads * len * head_dim;
  return v;
}

// A contiguous [batch, len, heads, head_dim] buffer viewed as [batch, heads, len, head_dim].
template <typename T>
TensorView4<T> TokenMajorView(T* data, int64_t batch, int64_t heads, int64_t len,
                              int64_t head_dim) {
  TensorView4<T> v;
  v.data = data;
  v.size = batch * heads * len * head_dim;
  v.stride_head = head_dim;
  v.stride_token = heads * head_dim;
  v.stride_batch = len * heads * head_dim;
  return v;
}

}  // namespace attnlab

#endif  // ATTNLAB_TENSOR_VIEW_H_
