// The wire's element types (posenc.v1.DType) <-> the kernels' (kernels::DType): the one mapping
// the server's and the client's conversions share. Built into posenc_proto.
//
// Thread-safety: pure functions.
#ifndef POSENC_PROTO_POSENC_V1_WIRE_DTYPE_H_
#define POSENC_PROTO_POSENC_V1_WIRE_DTYPE_H_

#include <optional>

#include "kernels/common/types.h"
#include "posenc/v1/posenc.pb.h"

namespace posenc::v1 {

DType ToWireDType(kernels::DType dtype);
// nullopt for DTYPE_UNSPECIFIED and numbers the wire does not define.
std::optional<kernels::DType> FromWireDType(int dtype);

}  // namespace posenc::v1

#endif  // POSENC_PROTO_POSENC_V1_WIRE_DTYPE_H_
