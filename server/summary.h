// One-line summaries of requests and responses for the access log, by protobuf reflection over
// any posenc.v1 message: the fields that are set, in declaration order, e.g.
//   "q=FLOAT32[1,4096,32,128] positions=range[0,+4096) config.base=500000 layout=BHSD".
// Tensors give dtype and shape, Positions its kind and size, enums their wire names, strings
// over 64 bytes their length ("config.hf_config_json_bytes=2411"), repeated fields their count.
// A request's nested messages are summarized field by field (dotted names); a response's are
// left out (derived values, not what decided the work). Never touches tensor data, so it costs
// the same for any size.
//
// Thread-safety: pure functions.
#ifndef POSENC_SERVER_SUMMARY_H_
#define POSENC_SERVER_SUMMARY_H_

#include <string>

#include "google/protobuf/message.h"
#include "posenc/v1/posenc.pb.h"

namespace posenc::server {

// "FLOAT32[1,4096,32,128]" (a scalar: "FLOAT32[]").
std::string TensorSummary(const v1::Tensor& tensor);

std::string SummarizeRequest(const google::protobuf::Message& request);
std::string SummarizeResponse(const google::protobuf::Message& response);

}  // namespace posenc::server

#endif  // POSENC_SERVER_SUMMARY_H_
