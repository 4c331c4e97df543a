#include "crown/transport/error.h"

namespace crown::transport {

const char* toString(LinkError::Kind kind) {
  switch (kind) {
    case LinkError::Kind::kClosed:
      return "closed";
    case LinkError::Kind::kReset:
      return "reset";
    case LinkError::Kind::kRefused:
      return "refused";
    case LinkError::Kind::kTimeout:
      return "timeout";
    case LinkError::Kind::kAuthFailed:
      return "auth failed";
    case LinkError::Kind::kBadFrame:
      return "bad frame";
    case LinkError::Kind::kLocalResource:
      return "out of local resources";
  }
  return "unknown";
}

std::string LinkError::toString() const {
  return std::string(transport::toString(kind)) + ": " + message;
}

}  // namespace crown::transport
