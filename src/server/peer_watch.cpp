#include "server/peer_watch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

namespace mlxcel::server {
namespace {

// "1.2.3.4" / "::1" / "::ffff:1.2.3.4" and port of a socket address.
bool endpoint_of(const sockaddr_storage& ss, std::string* addr, int* port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    if (!inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf)) return false;
    *port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (!inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf)) return false;
    *port = ntohs(a->sin6_port);
  } else {
    return false;
  }
  *addr = buf;
  return true;
}

bool same_addr(const std::string& a, const std::string& b) {
  if (a == b) return true;
  // IPv4 peers of a dual-stack socket show up as ::ffff:a.b.c.d.
  const std::string mapped = "::ffff:";
  return (a.rfind(mapped, 0) == 0 && a.substr(mapped.size()) == b) ||
         (b.rfind(mapped, 0) == 0 && b.substr(mapped.size()) == a);
}

}  // namespace

PeerWatch::PeerWatch(std::string local_addr, int local_port, std::string remote_addr,
                     int remote_port)
    : local_addr_(std::move(local_addr)),
      remote_addr_(std::move(remote_addr)),
      local_port_(local_port),
      remote_port_(remote_port) {}

int PeerWatch::find_fd() const {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const int fd = std::atoi(e.path().filename().c_str());
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage peer{}, self{};
    socklen_t pl = sizeof peer, sl = sizeof self;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&self), &sl) != 0) continue;
    std::string pa, sa;
    int pp = 0, sp = 0;
    if (!endpoint_of(peer, &pa, &pp) || !endpoint_of(self, &sa, &sp)) continue;
    if (pp == remote_port_ && sp == local_port_ && same_addr(pa, remote_addr_)) return fd;
  }
  return -1;
}

bool PeerWatch::closed_throttled() {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < std::chrono::milliseconds(200)) return false;
  last_ = now;
  return closed();
}

bool PeerWatch::closed() {
  if (!searched_) {
    fd_ = find_fd();
    searched_ = true;
  }
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
  if (p.revents & POLLIN) {
    char c;
    const ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
  return false;
}

}  // namespace mlxcel::server
