// Which address a rank listens on (CROWN_ADDR, CROWN_IFACE, or the host's).
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <memory>

#include "crown/common/env.h"
#include "crown/transport/transport.h"

namespace crown::transport {
namespace {

std::string ipv4Of(const sockaddr* address) {
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(address)->sin_addr, text, sizeof text);
  return text;
}

}  // namespace

std::string chooseListenAddress() {
  if (auto address = env::get("CROWN_ADDR")) return *address;
  auto iface = env::get("CROWN_IFACE");
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "127.0.0.1";
  std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> guard(list, freeifaddrs);
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
    if (iface) {
      if (*iface == it->ifa_name) return ipv4Of(it->ifa_addr);
    } else if ((it->ifa_flags & IFF_UP) && !(it->ifa_flags & IFF_LOOPBACK)) {
      return ipv4Of(it->ifa_addr);
    }
  }
  if (iface)
    throw ConfigError("CROWN_IFACE='" + *iface +
                      "': no interface of that name has an IPv4 address");
  return "127.0.0.1";
}

}  // namespace crown::transport
