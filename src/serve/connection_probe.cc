#include "serve/connection_probe.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>

namespace loom::serve {

namespace {

// (host, port) of a socket address, numerically.
bool endpoint(const sockaddr_storage& a, socklen_t len, std::string* host, int* port) {
  char h[NI_MAXHOST], p[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, h, sizeof h, p, sizeof p, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  *host = h;
  *port = std::atoi(p);
  return true;
}

}  // namespace

bool is_connection(int fd, const std::string& remote_addr, int remote_port, int local_port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  std::string host;
  int port = -1;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || !endpoint(a, len, &host, &port)) return false;
  if (port != remote_port || host != remote_addr) return false;
  len = sizeof a;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || !endpoint(a, len, &host, &port)) return false;
  return port == local_port;
}

int find_connection_fd(const std::string& remote_addr, int remote_port, int local_port) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int found = -1;
  while (dirent* e = readdir(d)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2) continue;
    struct stat st{};
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    if (is_connection(fd, remote_addr, remote_port, local_port)) {
      found = fd;
      break;
    }
  }
  closedir(d);
  return found;
}

bool peer_alive(int fd) {
  pollfd p{fd, static_cast<short>(POLLIN | POLLRDHUP), 0};
  const int r = poll(&p, 1, 0);
  if (r <= 0) return true;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return false;
  if (p.revents & POLLIN) {
    char c;
    const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return false;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
  }
  return true;
}

}  // namespace loom::serve
