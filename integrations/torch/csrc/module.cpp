// kizuna_torch._C: the compiled half of the kizuna_torch package.
//
//   create_process_group(store, rank, size, timeout)  the backend creator
//                                                    (process_group_kizuna.cpp)
//   _StoreAdapter(c10d_store)   the adapter kizuna rendezvous through, bound
//                               so tests can drive every kizuna::Store method
//                               against each kind of c10d store
#include "process_group_kizuna.hpp"
#include "store_adapter.hpp"

#include <torch/csrc/utils/pybind.h>

#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace {

namespace py = pybind11;
using kizuna_torch::C10dStoreAdapter;

kizuna::Bytes bytes_of(const py::bytes& b) {
  const std::string s = b;
  return kizuna::Bytes(s.begin(), s.end());
}

py::bytes to_py(const kizuna::Bytes& b) {
  return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
}

void bind_store_adapter(py::module_& m) {
  using ms = std::chrono::milliseconds;
  py::class_<C10dStoreAdapter, std::shared_ptr<C10dStoreAdapter>>(
      m, "_StoreAdapter", "A c10d store seen through kizuna::Store (timeouts in milliseconds).")
      .def(py::init<c10::intrusive_ptr<c10d::Store>>(), py::arg("store"))
      .def("set", [](C10dStoreAdapter& s, const std::string& k, const py::bytes& v) {
        const kizuna::Bytes value = bytes_of(v);
        py::gil_scoped_release release;
        s.set(k, value);
      })
      .def("get", [](C10dStoreAdapter& s, const std::string& k, int64_t timeout) {
        kizuna::Bytes value;
        {
          py::gil_scoped_release release;
          value = s.get(k, ms(timeout));
        }
        return to_py(value);
      })
      .def("add", &C10dStoreAdapter::add, py::call_guard<py::gil_scoped_release>())
      .def("compare_set",
           [](C10dStoreAdapter& s, const std::string& k, const py::bytes& expected, const py::bytes& desired) {
             const kizuna::Bytes e = bytes_of(expected), d = bytes_of(desired);
             kizuna::Bytes value;
             {
               py::gil_scoped_release release;
               value = s.compare_set(k, e, d);
             }
             return to_py(value);
           })
      .def("wait",
           [](C10dStoreAdapter& s, const std::vector<std::string>& keys, int64_t timeout) {
             s.wait(keys, ms(timeout));
           },
           py::call_guard<py::gil_scoped_release>())
      .def("check", &C10dStoreAdapter::check, py::call_guard<py::gil_scoped_release>())
      .def("delete_key", &C10dStoreAdapter::delete_key, py::call_guard<py::gil_scoped_release>())
      .def("num_keys", &C10dStoreAdapter::num_keys, py::call_guard<py::gil_scoped_release>())
      .def("multi_get",
           [](C10dStoreAdapter& s, const std::vector<std::string>& keys, int64_t timeout) {
             std::vector<kizuna::Bytes> values;
             {
               py::gil_scoped_release release;
               values = s.multi_get(keys, ms(timeout));
             }
             py::list out;
             for (const auto& v : values) out.append(to_py(v));
             return out;
           })
      .def("multi_set",
           [](C10dStoreAdapter& s, const std::vector<std::string>& keys, const std::vector<py::bytes>& values) {
             std::vector<kizuna::Bytes> v;
             for (const auto& b : values) v.push_back(bytes_of(b));
             py::gil_scoped_release release;
             s.multi_set(keys, v);
           })
      .def("append", [](C10dStoreAdapter& s, const std::string& k, const py::bytes& v) {
        const kizuna::Bytes value = bytes_of(v);
        py::gil_scoped_release release;
        s.append(k, value);
      });
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "kizuna's torch.distributed backend (import kizuna_torch to register it)";
  kizuna_torch::bind_process_group(m);
  bind_store_adapter(m);
}
