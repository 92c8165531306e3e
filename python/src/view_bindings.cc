// attnlab._attnlab.AttentionView: the attention view's builder (src/report/attention_view.h) for
// attnlab.show_attention (python/attnlab/attention_view.py), so that Python and `analyze` write
// the same page from the same code.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "report/attention_view.h"

namespace attnlab::python {
namespace {

using Dense = py::array_t<float, py::array::c_style | py::array::forcecast>;

report::AttentionViewBuilder MakeView(std::vector<std::string> tokens, int64_t heads,
                                      int64_t top_k) {
  auto b = report::AttentionViewBuilder::Create(std::move(tokens), heads, top_k);
  ThrowIfError(b.status());
  return std::move(b).value();
}

void AddLayer(report::AttentionViewBuilder& b, int64_t layer, const Dense& p) {
  const int64_t n = b.tokens();
  if (p.ndim() != 3 || p.shape(1) != n || p.shape(2) != n) {
    std::string shape;
    for (py::ssize_t i = 0; i < p.ndim(); ++i) shape += (i ? ", " : "") + std::to_string(p.shape(i));
    throw py::value_error("show_attention: layer " + std::to_string(layer) +
                          "'s pattern must be [heads, " + std::to_string(n) + ", " +
                          std::to_string(n) + "], got [" + shape + "]");
  }
  ThrowIfError(b.AddLayer(layer, std::span<const float>(p.data(), p.size())));
}

}  // namespace

void BindView(py::module_& m) {
  py::class_<report::AttentionViewBuilder>(m, "AttentionView",
                                           "The attention view's builder (attnlab.show_attention)")
      .def(py::init(&MakeView), py::arg("tokens"), py::arg("heads"), py::arg("top_k"))
      .def("add_layer", &AddLayer, py::arg("layer"), py::arg("pattern"),
           "One layer's patterns, [heads, N, N] (float32; other dtypes are converted)")
      .def("data_json", [](const report::AttentionViewBuilder& b) { return b.Data().dump(); })
      .def("render", [](const report::AttentionViewBuilder& b, const std::string& title,
                        int64_t page) {
        auto r = b.Render(title, page);
        ThrowIfError(r.status());
        return std::move(r).value();
      }, py::arg("title"), py::arg("page"));
}

}  // namespace attnlab::python
