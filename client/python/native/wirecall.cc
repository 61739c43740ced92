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
//   channel.unary(path, parts, timeout, {1: [buffer, ...], 2: [...]})
//       -> (bytearray, (1, 2)): the sinks' tensors' data written into the buffers
//   channel.close()
//
// options: (name, int | str) pairs, gRPC channel arguments as grpc.insecure_channel takes them
// (the client passes the same list to both transports). The parts are joined in order: every
// object with the buffer protocol (C-contiguous); parts from 4 KiB on are lent to gRPC, not
// copied, and the call returns only once gRPC has let go of them.
//
// sinks (a split piece's answer, written where the joined result wants it): {field number:
// writable buffers}. The data (posenc.v1.Tensor field 3) of the response's top-level Tensor field
// of that number is copied from the received bytes straight into the buffers, in order, when
// their sizes add up to it; the bytearray then holds the rest of the response (that tensor
// without its data) and the tuple names the fields written. A field whose data does not fit its
// buffers, a field given twice, or bytes that do not scan leave the response whole (the caller
// reads what the tuple does not name from the message, and judges it there). Links gRPC++ alone
// (and the header-only proto/posenc/v1/borrowed_slices.h), so that `pip install client/python` can
// build it.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "proto/posenc/v1/borrowed_slices.h"

namespace {

// Parts from this size on are lent to gRPC (as the C++ client lends the runs of a split piece's
// boxes; smaller ones are copied together).
constexpr size_t kLendFrom = size_t{4} << 10;
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

using Part = posenc::v1::BorrowedSlices::Part;

// The buffers of a call's parts (or sinks), held (and released) with the GIL, and the runs of
// bytes they give, in order: a buffer is one run; a strided part (buffer, block, shape,
// strides) is the runs of `block` bytes at buffer[sum(i[a] * strides[a])] for every index i of
// `shape` in C order (a split piece's heads of a larger tensor, without a Python object per run).
class Views {
 public:
  Views() = default;
  Views(const Views&) = delete;
  Views& operator=(const Views&) = delete;
  ~Views() {
    for (Py_buffer& view : views_) PyBuffer_Release(&view);
  }
  // `writable`: buffers the call writes into. False with an error set.
  bool Add(PyObject* part, bool writable = false) {
    PyObject* object = part;
    Py_ssize_t block = -1;
    PyObject* shape = nullptr;
    PyObject* strides = nullptr;
    if (PyTuple_Check(part) &&
        !PyArg_ParseTuple(part, "OnO!O!;a strided part is (buffer, block, shape, strides)", &object,
                          &block, &PyTuple_Type, &shape, &PyTuple_Type, &strides)) {
      return false;
    }
    views_.emplace_back();
    Py_buffer& view = views_.back();
    if (PyObject_GetBuffer(object, &view, writable ? PyBUF_CONTIG : PyBUF_SIMPLE) != 0) {
      views_.pop_back();
      return false;
    }
    auto* const data = static_cast<char*>(view.buf);
    if (shape == nullptr) {
      runs_.push_back({data, static_cast<size_t>(view.len)});
      return true;
    }
    return AddStrided(data, view.len, block, shape, strides);
  }
  const std::vector<Part>& runs() const { return runs_; }

 private:
  bool AddStrided(char* data, Py_ssize_t len, Py_ssize_t block, PyObject* shape,
                  PyObject* strides) {
    const Py_ssize_t rank = PyTuple_GET_SIZE(shape);
    std::vector<Py_ssize_t> count(static_cast<size_t>(rank)), stride(count.size());
    Py_ssize_t last = 0;  // the offset of the last run
    bool valid = rank == PyTuple_GET_SIZE(strides) && block >= 0;
    for (Py_ssize_t a = 0; valid && a < rank; ++a) {
      count[a] = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, a));
      stride[a] = PyLong_AsSsize_t(PyTuple_GET_ITEM(strides, a));
      valid = count[a] > 0 && stride[a] >= 0 && PyErr_Occurred() == nullptr &&
              (count[a] - 1) <= (PY_SSIZE_T_MAX - last) / std::max<Py_ssize_t>(stride[a], 1);
      if (valid) last += (count[a] - 1) * stride[a];
    }
    if (!valid || block > len || last > len - block) {
      if (PyErr_Occurred() == nullptr) {
        PyErr_SetString(PyExc_ValueError,
                        "a strided part's runs must lie in its buffer (shape > 0, strides >= 0)");
      }
      return false;
    }
    std::vector<Py_ssize_t> index(count.size(), 0);
    for (;;) {
      Py_ssize_t at = 0;
      for (size_t a = 0; a < index.size(); ++a) at += index[a] * stride[a];
      runs_.push_back({data + at, static_cast<size_t>(block)});
      size_t a = index.size();
      while (a > 0 && ++index[a - 1] == count[a - 1]) index[--a] = 0;
      if (a == 0) return true;
    }
  }

  std::vector<Py_buffer> views_;
  std::vector<Part> runs_;
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
// smaller ones between them copied into `copied` and lent from there (BorrowedSlices::LendJoined).
grpc::ByteBuffer Request(const std::vector<Part>& parts, posenc::v1::BorrowedSlices* lent,
                         std::string* copied) {
  std::vector<grpc::Slice> slices = lent->LendJoined(parts, kLendFrom, copied);
  if (slices.empty()) slices.emplace_back();  // an empty message
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// One unary call, the calling thread waiting on a queue of its own (as the C++ client's calls
// do). Touches no Python object: run without the GIL. Returns once gRPC has let go of the lent
// parts.
void Call(grpc::GenericStub* stub, const std::string& path, const std::vector<Part>& parts,
          double seconds, Outcome* out) {
  std::string copied;  // outlives the wait below
  posenc::v1::BorrowedSlices lent;
  grpc::ByteBuffer request = Request(parts, &lent, &copied);
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

// A received message's bytes, read in order across its slices.
class SliceReader {
 public:
  explicit SliceReader(const std::vector<grpc::Slice>& slices) : slices_(slices) {}

  size_t position() const { return position_; }

  // False at the end, or for a varint of more than 10 bytes.
  bool ReadVarint(uint64_t* value) {
    *value = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      uint8_t byte = 0;
      if (!Read(reinterpret_cast<char*>(&byte), 1)) return false;
      *value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }

  // Copies the next `n` bytes to `to` (skips them when `to` is null); false past the end.
  bool Read(char* to, size_t n) {
    while (n > 0) {
      if (slice_ == slices_.size()) return false;
      const grpc::Slice& slice = slices_[slice_];
      const size_t take = std::min(n, slice.size() - at_);
      if (to != nullptr) {
        std::memcpy(to, slice.begin() + at_, take);
        to += take;
      }
      at_ += take;
      position_ += take;
      n -= take;
      if (at_ == slice.size()) ++slice_, at_ = 0;
    }
    return true;
  }

 private:
  const std::vector<grpc::Slice>& slices_;
  size_t slice_ = 0, at_ = 0, position_ = 0;
};

// Skips a field's value of wire type `type` (its key read); false for a group or past `end`.
bool SkipValue(SliceReader* reader, uint64_t type, size_t end) {
  uint64_t n = 0;
  switch (type) {
    case 0: return reader->ReadVarint(&n) && reader->position() <= end;
    case 1: n = 8; break;
    case 2:
      if (!reader->ReadVarint(&n)) return false;
      break;
    case 5: n = 4; break;
    default: return false;  // groups (3, 4) and unknown types
  }
  return n <= end - std::min(end, reader->position()) && reader->Read(nullptr, n);
}

// Where a response's bytes go: copied into the bytearray (verbatim, or a literal), or written
// into a sink's buffers.
struct Segment {
  enum Kind { kCopy, kLiteral, kSink } kind;
  size_t from = 0, size = 0;  // kCopy, kSink: the range of the received bytes
  std::string literal;        // kLiteral
  int field = 0;              // kSink
};

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>(value | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

// The data field of a Tensor message in [begin, end) of the received bytes (the reader at
// begin): where its key starts, its value, and how many times it is given. False when the
// message does not scan.
struct TensorData {
  size_t key_at = 0, value_at = 0, size = 0;
  int count = 0;
};
bool ScanTensor(SliceReader* reader, size_t end, TensorData* data) {
  constexpr uint64_t kData = 3, kLengthDelimited = 2;
  while (reader->position() < end) {
    const size_t key_at = reader->position();
    uint64_t key = 0;
    if (!reader->ReadVarint(&key)) return false;
    if (key != (kData << 3 | kLengthDelimited)) {
      if (!SkipValue(reader, key & 7, end)) return false;
      continue;
    }
    uint64_t n = 0;
    if (!reader->ReadVarint(&n) || n > end - std::min(end, reader->position())) return false;
    data->key_at = key_at;
    data->value_at = reader->position();
    data->size = n;
    ++data->count;
    if (!reader->Read(nullptr, n)) return false;
  }
  return reader->position() == end;
}

// How to take the response of `size` bytes apart for `sinks` (field number -> the bytes its
// buffers take): the segments in order and the fields sunk. One verbatim copy of it all (no
// field sunk) when its bytes do not scan or a sink's field is given twice.
std::vector<Segment> PlanSinks(const std::vector<grpc::Slice>& received, size_t size,
                               const std::map<int, size_t>& sinks, std::set<int>* sunk) {
  const auto whole = [size] { return std::vector<Segment>{{Segment::kCopy, 0, size, {}, 0}}; };
  std::vector<Segment> out;
  std::set<int> seen, taken;  // `taken` becomes `sunk` once the whole message has scanned
  SliceReader reader(received);
  size_t copy_from = 0;  // the start of the verbatim run not yet planned
  const auto copy_to = [&](size_t end) {
    if (end > copy_from) out.push_back({Segment::kCopy, copy_from, end - copy_from, {}, 0});
  };
  while (reader.position() < size) {
    const size_t field_at = reader.position();
    uint64_t key = 0;
    if (!reader.ReadVarint(&key)) return whole();
    const auto number = static_cast<int>(std::min<uint64_t>(key >> 3, INT_MAX));
    const auto sink = sinks.find(number);
    if (sink == sinks.end() || (key & 7) != 2) {
      if (sink != sinks.end() && !seen.insert(number).second) return whole();
      if (!SkipValue(&reader, key & 7, size)) return whole();
      continue;
    }
    if (!seen.insert(number).second) return whole();  // merged by protobuf: not taken apart
    uint64_t n = 0;
    if (!reader.ReadVarint(&n) || n > size - reader.position()) return whole();
    const size_t body = reader.position(), end = body + n;
    TensorData data;
    if (!ScanTensor(&reader, end, &data)) return whole();
    if (data.count != 1 || data.size != sink->second) continue;  // left in the message
    // The tensor without its data: its key, its new length, its other fields around the data.
    copy_to(field_at);
    const size_t header = data.value_at - data.key_at;
    std::string head;
    AppendVarint(key, &head);
    AppendVarint(n - header - data.size, &head);
    out.push_back({Segment::kLiteral, 0, 0, std::move(head), 0});
    copy_from = body;
    copy_to(data.key_at);
    out.push_back({Segment::kSink, data.value_at, data.size, {}, number});
    copy_from = data.value_at + data.size;
    taken.insert(number);
  }
  copy_to(size);
  *sunk = std::move(taken);
  return out;
}

// The response's bytes in a new bytearray (the one copy of them), the copy made without the GIL;
// with `sinks`, their fields' data written into their buffers instead (see the top of this file)
// and `sunk` naming them.
PyObject* CopyOut(grpc::ByteBuffer* response, const std::map<int, std::vector<Part>>& sinks,
                  std::set<int>* sunk) {
  std::map<int, size_t> sink_bytes;
  for (const auto& [field, runs] : sinks) {
    size_t n = 0;
    for (const Part& run : runs) n += run.size;
    sink_bytes[field] = n;
  }
  const size_t size = response->Length();
  std::vector<grpc::Slice> received;
  std::vector<Segment> plan;
  size_t kept = 0;
  Py_BEGIN_ALLOW_THREADS;
  if (!response->Dump(&received).ok()) received.clear();
  plan = sink_bytes.empty() ? std::vector<Segment>{{Segment::kCopy, 0, size, {}, 0}}
                            : PlanSinks(received, size, sink_bytes, sunk);
  for (const Segment& segment : plan) {
    kept += segment.kind == Segment::kSink   ? 0
            : segment.kind == Segment::kCopy ? segment.size
                                             : segment.literal.size();
  }
  Py_END_ALLOW_THREADS;
  if (kept > static_cast<size_t>(PY_SSIZE_T_MAX)) return PyErr_NoMemory();
  PyObject* out = PyByteArray_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(kept));
  if (out == nullptr) return nullptr;
  char* into = PyByteArray_AS_STRING(out);
  Py_BEGIN_ALLOW_THREADS;
  SliceReader reader(received);
  for (const Segment& segment : plan) {
    if (segment.kind == Segment::kLiteral) {
      into = std::copy(segment.literal.begin(), segment.literal.end(), into);
      continue;
    }
    reader.Read(nullptr, segment.from - reader.position());
    if (segment.kind == Segment::kCopy) {
      reader.Read(into, segment.size);
      into += segment.size;
      continue;
    }
    for (const Part& run : sinks.at(segment.field)) {
      reader.Read(const_cast<char*>(run.data), run.size);  // a writable buffer's
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

// `sinks` ({int: sequence of writable buffers}) held in `out`; false with an error set.
bool SinkViews(PyObject* sinks, std::map<int, Views>* out) {
  if (!PyDict_Check(sinks)) {
    PyErr_Format(PyExc_TypeError, "sinks must be None or a dict, got %s", Py_TYPE(sinks)->tp_name);
    return false;
  }
  PyObject* key = nullptr;
  PyObject* value = nullptr;
  Py_ssize_t at = 0;
  while (PyDict_Next(sinks, &at, &key, &value)) {
    const long field = PyLong_Check(key) ? PyLong_AsLong(key) : -1;
    if (field <= 0 || field > INT_MAX) {
      if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "a sink's key must be a field number");
      return false;
    }
    PyObject* buffers =
        PySequence_Fast(value, "a sink must be a sequence of writable buffers or strided parts");
    if (buffers == nullptr) return false;
    Views& views = (*out)[static_cast<int>(field)];
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(buffers); ++i) {
      if (!views.Add(PySequence_Fast_GET_ITEM(buffers, i), /*writable=*/true)) {
        Py_DECREF(buffers);
        return false;
      }
    }
    Py_DECREF(buffers);
  }
  return true;
}

PyObject* ChannelUnary(PyObject* self_object, PyObject* args) {
  auto* self = reinterpret_cast<ChannelObject*>(self_object);
  const char* method = nullptr;
  PyObject* parts = nullptr;
  PyObject* timeout = nullptr;
  PyObject* sinks_arg = Py_None;
  double seconds = -1;
  if (!PyArg_ParseTuple(args, "sOO|O", &method, &parts, &timeout, &sinks_arg) ||
      !Seconds(timeout, &seconds)) {
    return nullptr;
  }
  // Held until the call returns, as the parts are.
  std::map<int, Views> sink_views;
  if (sinks_arg != Py_None && !SinkViews(sinks_arg, &sink_views)) return nullptr;
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
  Call(stub.get(), path, views.runs(), seconds, &outcome);
  Py_END_ALLOW_THREADS;
  if (!outcome.status.ok()) return RaiseCallError(outcome.status, outcome.trailers);
  std::map<int, std::vector<Part>> sinks;
  for (const auto& [field, views] : sink_views) sinks[field] = views.runs();
  std::set<int> sunk;
  PyObject* out = CopyOut(&outcome.response, sinks, &sunk);
  if (out == nullptr || sinks_arg == Py_None) return out;
  PyObject* fields = PyTuple_New(static_cast<Py_ssize_t>(sunk.size()));
  Py_ssize_t i = 0;
  for (int field : sunk) {
    PyObject* number = fields != nullptr ? PyLong_FromLong(field) : nullptr;
    if (number == nullptr) {
      Py_XDECREF(fields);
      Py_DECREF(out);
      return nullptr;
    }
    PyTuple_SET_ITEM(fields, i++, number);
  }
  return Py_BuildValue("(NN)", out, fields);
}

PyObject* ChannelClose(PyObject* self_object, PyObject* /*unused*/) {
  Close(reinterpret_cast<ChannelObject*>(self_object));
  Py_RETURN_NONE;
}

PyMethodDef channel_methods[] = {
    {"unary", ChannelUnary, METH_VARARGS,
     "unary(method, parts, timeout, sinks=None) -> bytearray (with sinks: (bytearray, fields "
     "written)): one unary call of the parts joined; raises CallError(code, details, "
     "trailing_metadata)"},
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
