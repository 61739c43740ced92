// posenc._wirecall: the Python client's native transport for calls that carry tensors (issue #20,
// "the wire at the link's speed"). gRPC Python copies a request into a slice of its own and
// assembles a response through a bytes object per slice, a growing bytearray and a final bytes
// (perf of a 128 MiB ApplyRope from Python: memmove 16-19 % of the client, most of it there);
// here the request's parts go out as slices that reference the caller's buffers (numpy arrays,
// the message's bytes), the calling thread waits without the GIL, and the response is copied
// once, into a bytearray the client then views as its result arrays.
//
//   channel = Channel(target, options, tls, root_certificates, private_key, certificate_chain)
//   channel.unary("/posenc.v1.PositionEncoding/ApplyRope", [b"...", array, ...], 30.0)
//       -> bytearray, or raises CallError(code, details, trailing_metadata)
//   channel.close()
//
// options: (name, int | str) pairs, gRPC channel arguments as grpc.insecure_channel takes them
// (the client passes the same list to both transports). The parts are joined in order: every
// object with the buffer protocol (C-contiguous); parts from 64 KiB on are lent to gRPC, not
// copied, and the call returns only once gRPC has let go of them. Links gRPC++ alone (and the
// header-only proto/posenc/v1/borrowed_slices.h), so that `pip install client/python` can build it.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <chrono>
#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "proto/posenc/v1/borrowed_slices.h"

namespace {

// Parts from this size on are lent to gRPC (as the C++ client does, v1::kLargeFieldBytes).
constexpr Py_ssize_t kLendFrom = Py_ssize_t{64} << 10;
// Timeouts from this many seconds on (about 31 years) mean no deadline.
constexpr double kNoDeadlineFrom = 1e9;

PyObject* call_error = nullptr;  // posenc._wirecall.CallError

// The channel's stub (which keeps the channel); a call holds a reference, so that close() from
// another thread while it runs leaves the stub alive until it returns.
struct ChannelObject {
  PyObject_HEAD std::shared_ptr<grpc::GenericStub>* stub;  // null once closed
};

void Close(ChannelObject* self) {
  delete self->stub;
  self->stub = nullptr;
}

// The buffers of a call's parts, held (and released) with the GIL.
class Views {
 public:
  Views() = default;
  Views(const Views&) = delete;
  Views& operator=(const Views&) = delete;
  ~Views() {
    for (Py_buffer& view : views_) PyBuffer_Release(&view);
  }
  bool Add(PyObject* part) {
    views_.emplace_back();
    if (PyObject_GetBuffer(part, &views_.back(), PyBUF_SIMPLE) != 0) {
      views_.pop_back();
      return false;
    }
    return true;
  }
  const std::vector<Py_buffer>& views() const { return views_; }

 private:
  std::vector<Py_buffer> views_;
};

// String `key` of a channel argument, or nullptr with a TypeError set.
const char* Utf8(PyObject* value, const char* what) {
  if (!PyUnicode_Check(value)) {
    PyErr_Format(PyExc_TypeError, "%s must be a str, got %s", what, Py_TYPE(value)->tp_name);
    return nullptr;
  }
  return PyUnicode_AsUTF8(value);
}

// `value` (bytes or None) as a string; false with a TypeError set.
bool PemOrNone(PyObject* value, const char* what, std::string* out) {
  if (value == Py_None) return true;
  char* data = nullptr;
  Py_ssize_t size = 0;
  if (!PyBytes_Check(value) || PyBytes_AsStringAndSize(value, &data, &size) != 0) {
    PyErr_Format(PyExc_TypeError, "%s must be bytes or None", what);
    return false;
  }
  out->assign(data, static_cast<size_t>(size));
  return true;
}

int ChannelInit(PyObject* self_object, PyObject* args, PyObject* kwargs) {
  auto* self = reinterpret_cast<ChannelObject*>(self_object);
  static const char* keywords[] = {"target",      "options",           "tls",  "root_certificates",
                                   "private_key", "certificate_chain", nullptr};
  const char* target = nullptr;
  PyObject* options = nullptr;
  int tls = 0;
  PyObject* root = Py_None;
  PyObject* key = Py_None;
  PyObject* chain = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sO|pOOO", const_cast<char**>(keywords), &target,
                                   &options, &tls, &root, &key, &chain)) {
    return -1;
  }
  grpc::ChannelArguments arguments;
  PyObject* items = PySequence_Fast(options, "options must be a sequence of (name, value)");
  if (items == nullptr) return -1;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(items);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PySequence_Fast_GET_ITEM(items, i);
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
      Py_DECREF(items);
      PyErr_SetString(PyExc_TypeError, "options must be (name, value) pairs");
      return -1;
    }
    const char* name = Utf8(PyTuple_GET_ITEM(item, 0), "an option's name");
    if (name == nullptr) {
      Py_DECREF(items);
      return -1;
    }
    PyObject* value = PyTuple_GET_ITEM(item, 1);
    if (PyLong_Check(value)) {
      const long number = PyLong_AsLong(value);
      if ((number == -1 && PyErr_Occurred() != nullptr) || number < INT_MIN || number > INT_MAX) {
        Py_DECREF(items);
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "option %s: %R is not a 32-bit integer", name, value);
        return -1;
      }
      arguments.SetInt(name, static_cast<int>(number));
    } else if (PyUnicode_Check(value)) {
      arguments.SetString(name, PyUnicode_AsUTF8(value));
    } else {
      Py_DECREF(items);
      PyErr_Format(PyExc_TypeError, "option %s: expected an int or a str, got %s", name,
                   Py_TYPE(value)->tp_name);
      return -1;
    }
  }
  Py_DECREF(items);
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (tls != 0) {
    grpc::SslCredentialsOptions ssl;
    if (!PemOrNone(root, "root_certificates", &ssl.pem_root_certs) ||
        !PemOrNone(key, "private_key", &ssl.pem_private_key) ||
        !PemOrNone(chain, "certificate_chain", &ssl.pem_cert_chain)) {
      return -1;
    }
    credentials = grpc::SslCredentials(ssl);
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }
  Close(self);
  self->stub = new std::shared_ptr<grpc::GenericStub>(std::make_shared<grpc::GenericStub>(
      grpc::CreateCustomChannel(target, credentials, arguments)));
  return 0;
}

void ChannelDealloc(PyObject* self_object) {
  Close(reinterpret_cast<ChannelObject*>(self_object));
  Py_TYPE(self_object)->tp_free(self_object);
}

using Trailers = std::vector<std::pair<std::string, std::string>>;

// The call's failure as CallError(code, details, trailing metadata): the metadata as gRPC
// Python gives it (str values, bytes for "-bin" keys), grpc-status-details-bin included.
PyObject* RaiseCallError(const grpc::Status& status, const Trailers& trailers) {
  PyObject* list = PyList_New(0);
  if (list == nullptr) return nullptr;
  for (const auto& [name, value] : trailers) {
    const bool binary = name.size() > 4 && name.compare(name.size() - 4, 4, "-bin") == 0;
    PyObject* item = Py_BuildValue(binary ? "(sy#)" : "(ss#)", name.c_str(), value.data(),
                                   static_cast<Py_ssize_t>(value.size()));
    if (item == nullptr || PyList_Append(list, item) != 0) {
      Py_XDECREF(item);
      Py_DECREF(list);
      return nullptr;
    }
    Py_DECREF(item);
  }
  PyObject* error =
      Py_BuildValue("(is#N)", static_cast<int>(status.error_code()), status.error_message().data(),
                    static_cast<Py_ssize_t>(status.error_message().size()), list);
  if (error == nullptr) return nullptr;
  PyErr_SetObject(call_error, error);
  Py_DECREF(error);
  return nullptr;
}

// The server's trailing metadata of a failed call, with grpc-status-details-bin (which gRPC++
// moves into the status) put back.
Trailers TrailersOf(const grpc::Status& status, const grpc::ClientContext& context) {
  Trailers out;
  bool has_details = false;
  for (const auto& [key, value] : context.GetServerTrailingMetadata()) {
    out.emplace_back(std::string(key.data(), key.size()), std::string(value.data(), value.size()));
    has_details = has_details || out.back().first == "grpc-status-details-bin";
  }
  if (!has_details && !status.error_details().empty()) {
    out.emplace_back("grpc-status-details-bin", status.error_details());
  }
  return out;
}

// What a call gives back: its status, the server's trailers when it failed, the response.
struct Outcome {
  grpc::Status status;
  Trailers trailers;
  grpc::ByteBuffer response;
};

// The request: the parts joined, those from kLendFrom bytes on lent by `lent`, each run of
// smaller ones between them copied into `copied` (sized once, so that it never moves) and lent
// from there.
grpc::ByteBuffer Request(const std::vector<Py_buffer>& views, posenc::v1::BorrowedSlices* lent,
                         std::string* copied) {
  size_t small_bytes = 0;
  for (const Py_buffer& view : views) {
    if (view.len < kLendFrom) small_bytes += static_cast<size_t>(view.len);
  }
  copied->reserve(small_bytes);
  std::vector<grpc::Slice> slices;
  size_t run = 0;  // where the current run of small parts starts in `copied`
  const auto end_run = [&] {
    if (copied->size() > run)
      slices.push_back(lent->Lend(copied->data() + run, copied->size() - run));
    run = copied->size();
  };
  for (const Py_buffer& view : views) {
    const char* data = static_cast<const char*>(view.buf);
    if (view.len < kLendFrom) {
      copied->append(data, static_cast<size_t>(view.len));
    } else {
      end_run();
      slices.push_back(lent->Lend(data, static_cast<size_t>(view.len)));
    }
  }
  end_run();
  if (slices.empty()) slices.emplace_back();  // an empty message
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// One unary call, the calling thread waiting on a queue of its own (as the C++ client's calls
// do). Touches no Python object: run without the GIL. Returns once gRPC has let go of the lent
// parts.
void Call(grpc::GenericStub* stub, const std::string& path, const std::vector<Py_buffer>& views,
          double seconds, Outcome* out) {
  std::string copied;  // outlives the wait below
  posenc::v1::BorrowedSlices lent;
  grpc::ByteBuffer request = Request(views, &lent, &copied);
  {
    // The call (owned by its context) may hold the request's slices until it is destroyed,
    // e.g. one that ended before all was sent: so the context ends before the wait below.
    grpc::ClientContext context;
    if (seconds >= 0) {
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::duration_cast<std::chrono::system_clock::duration>(
                               std::chrono::duration<double>(seconds)));
    }
    grpc::CompletionQueue queue;
    void* tag = nullptr;
    bool ok = false;
    {
      const std::unique_ptr<grpc::ClientAsyncResponseReader<grpc::ByteBuffer>> rpc =
          stub->PrepareUnaryCall(&context, path, request, &queue);
      rpc->StartCall();
      rpc->Finish(&out->response, &out->status, &out->status);
      while (queue.Next(&tag, &ok) && tag != &out->status) {
      }
    }
    queue.Shutdown();
    while (queue.Next(&tag, &ok)) {
    }
    if (!out->status.ok()) out->trailers = TrailersOf(out->status, context);
  }
  request.Clear();
  lent.Wait();
}

// The response's bytes in a new bytearray (the one copy of them), the copy made without the GIL.
PyObject* CopyOut(grpc::ByteBuffer* response) {
  const size_t size = response->Length();
  if (size > static_cast<size_t>(PY_SSIZE_T_MAX)) return PyErr_NoMemory();
  PyObject* out = PyByteArray_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(size));
  if (out == nullptr) return nullptr;
  char* into = PyByteArray_AS_STRING(out);
  Py_BEGIN_ALLOW_THREADS;
  std::vector<grpc::Slice> received;
  if (response->Dump(&received).ok()) {
    for (const grpc::Slice& slice : received) {
      std::memcpy(into, slice.begin(), slice.size());
      into += slice.size();
    }
  }
  received.clear();
  response->Clear();
  Py_END_ALLOW_THREADS;
  return out;
}

// `timeout` (None or seconds >= 0) as seconds, -1 for no deadline; false with an error set.
bool Seconds(PyObject* timeout, double* seconds) {
  *seconds = -1;
  if (timeout == Py_None) return true;
  const double value = PyFloat_AsDouble(timeout);
  if (value == -1 && PyErr_Occurred() != nullptr) return false;
  if (!(value >= 0)) {
    PyErr_Format(PyExc_ValueError, "timeout must be None or >= 0, got %R", timeout);
    return false;
  }
  if (value <= kNoDeadlineFrom) *seconds = value;
  return true;
}

PyObject* ChannelUnary(PyObject* self_object, PyObject* args) {
  auto* self = reinterpret_cast<ChannelObject*>(self_object);
  const char* method = nullptr;
  PyObject* parts = nullptr;
  PyObject* timeout = nullptr;
  double seconds = -1;
  if (!PyArg_ParseTuple(args, "sOO", &method, &parts, &timeout) || !Seconds(timeout, &seconds)) {
    return nullptr;
  }
  if (self->stub == nullptr) {
    PyErr_SetString(PyExc_ValueError, "the channel is closed");
    return nullptr;
  }
  const std::shared_ptr<grpc::GenericStub> stub = *self->stub;
  PyObject* sequence = PySequence_Fast(parts, "parts must be a sequence of buffers");
  if (sequence == nullptr) return nullptr;
  Views views;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(sequence);
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!views.Add(PySequence_Fast_GET_ITEM(sequence, i))) {
      Py_DECREF(sequence);
      return nullptr;
    }
  }
  Py_DECREF(sequence);
  // The views' memory stays valid (the buffers are held) and unchanged (the caller waits).
  const std::string path(method);
  Outcome outcome;
  Py_BEGIN_ALLOW_THREADS;
  Call(stub.get(), path, views.views(), seconds, &outcome);
  Py_END_ALLOW_THREADS;
  if (!outcome.status.ok()) return RaiseCallError(outcome.status, outcome.trailers);
  return CopyOut(&outcome.response);
}

PyObject* ChannelClose(PyObject* self_object, PyObject* /*unused*/) {
  Close(reinterpret_cast<ChannelObject*>(self_object));
  Py_RETURN_NONE;
}

PyMethodDef channel_methods[] = {
    {"unary", ChannelUnary, METH_VARARGS,
     "unary(method, parts, timeout) -> bytearray: one unary call of the parts joined; raises "
     "CallError(code, details, trailing_metadata)"},
    {"close", ChannelClose, METH_NOARGS, "close(): later calls raise ValueError"},
    {nullptr, nullptr, 0, nullptr}};

PyTypeObject channel_type = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT,
                          "_wirecall",
                          "posenc's native transport for calls carrying tensors",
                          -1,
                          nullptr,
                          nullptr,
                          nullptr,
                          nullptr,
                          nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__wirecall() {
  channel_type.tp_name = "posenc._wirecall.Channel";
  channel_type.tp_basicsize = sizeof(ChannelObject);
  channel_type.tp_flags = Py_TPFLAGS_DEFAULT;
  channel_type.tp_doc =
      "Channel(target, options, tls=False, root_certificates=None, "
      "private_key=None, certificate_chain=None)";
  channel_type.tp_new = PyType_GenericNew;
  channel_type.tp_init = ChannelInit;
  channel_type.tp_dealloc = ChannelDealloc;
  channel_type.tp_methods = channel_methods;
  if (PyType_Ready(&channel_type) < 0) return nullptr;
  PyObject* module = PyModule_Create(&module_def);
  if (module == nullptr) return nullptr;
  call_error = PyErr_NewException("posenc._wirecall.CallError", nullptr, nullptr);
  if (call_error == nullptr || PyModule_AddObject(module, "CallError", call_error) != 0) {
    Py_XDECREF(call_error);
    Py_DECREF(module);
    return nullptr;
  }
  Py_INCREF(call_error);  // the module's reference and this file's
  Py_INCREF(&channel_type);
  if (PyModule_AddObject(module, "Channel", reinterpret_cast<PyObject*>(&channel_type)) != 0) {
    Py_DECREF(&channel_type);
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
