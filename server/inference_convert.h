// Translation between the Open Inference Protocol's ModelInfer messages and posenc's request and
// response messages (inference_models.h names the tensors and parameters). No math and no
// validation of an op's parameters: what the translation cannot place is refused here, naming
// the input, output or parameter; everything else is the posenc handler's to judge, and its
// errors keep their codes, messages and details.
//
// Request:
//  - parameters: each a posenc request field by its path (or, bare, under the model's parameter
//    prefix). int64 fields take int64_param (or an in-range uint64_param); double fields
//    double_param, int64_param (|v| <= 2^53) or a numeric string_param (KServe's InferParameter
//    has no double); bool fields bool_param; string fields string_param; enum fields the value's
//    name as string_param in any of posenc's spellings ("yarn", "YARN", "ROPE_SCALING_YARN"; a
//    DType also as a datatype: "FP16") or its number as int64_param; repeated number fields a
//    string_param list ("16,24,24" or "[16, 24, 24]"). Two fields of one oneof are refused.
//  - inputs: each a Tensor field of the request by its path; datatype FP32/FP16/BF16/FP64/INT32/
//    INT64 and the shape as given; the bytes from, in this order of preference: Triton's
//    shared-memory parameters (shared_memory_region, shared_memory_offset (default 0),
//    shared_memory_byte_size) as the tensor's SharedMemoryRef; the typed contents of the
//    datatype (fp32_contents, fp64_contents, int_contents, int64_contents; FP16/BF16: raw only);
//    else the next raw_input_contents entry (moved, not copied). Every raw entry must be used.
//  - outputs: the requested names (default: every output the call produces), each optionally in
//    shared memory (the same three parameters) as the request's output_shared_memory.
// Response: every returned output (name, datatype, shape) with its bytes moved into
// raw_output_contents, in order; an output written to shared memory gets an empty entry and its
// shared_memory_* parameters. The response's other fields (RoPE's derived values) become response
// parameters "derived.<field>" (numbers, bools and strings as such, repeated fields as a JSON
// array in a string_param).
//
// Thread-safety: pure functions.
#ifndef POSENC_SERVER_INFERENCE_CONVERT_H_
#define POSENC_SERVER_INFERENCE_CONVERT_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "inference/grpc_service.pb.h"
#include "posenc/v1/posenc.pb.h"
#include "server/inference_models.h"

namespace posenc::server {

// "FP32" -> DTYPE_FLOAT32, ... (the six posenc dtypes); nullopt for any other datatype.
std::optional<v1::DType> DTypeOfDatatype(absl::string_view datatype);
// DTYPE_FLOAT32 -> "FP32", ...; "" for DTYPE_UNSPECIFIED.
absl::string_view DatatypeOfDType(v1::DType dtype);

// Fills `posenc` (a fresh request message of `model`'s RPC) from `request`, whose raw contents
// move into it. INVALID_ARGUMENT naming the input, output or parameter.
absl::Status ToPosencRequest(const InferenceModel& model, inference::ModelInferRequest* request,
                             google::protobuf::Message* posenc);

// Fills `response` from `posenc` (the handler's response to the request translated from
// `request`), whose tensor bytes move into it. INVALID_ARGUMENT when a requested output was not
// produced (ApplyRope's k without a k input).
absl::Status FromPosencResponse(const InferenceModel& model,
                                const inference::ModelInferRequest& request,
                                google::protobuf::Message* posenc,
                                inference::ModelInferResponse* response);

// One-line summaries for the access log: the model, each tensor as name=DATATYPE[shape] and
// each parameter as name=value (long strings by their length).
std::string SummarizeInferRequest(const google::protobuf::Message& request);
std::string SummarizeInferResponse(const google::protobuf::Message& response);

}  // namespace posenc::server

#endif  // POSENC_SERVER_INFERENCE_CONVERT_H_
