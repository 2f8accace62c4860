// Noticing a client that hung up while its request computes, from its socket:
// nothing is written to it then, so no write fails to say so.
#pragma once

#include <string>

namespace loom::serve {

// The descriptor of this process's TCP connection with these endpoints, or -1.
// (For an HTTP library that does not hand its socket to handlers.)
int find_connection_fd(const std::string& remote_addr, int remote_port, int local_port);
// True while `fd` is still the connection with these endpoints.
bool is_connection(int fd, const std::string& remote_addr, int remote_port, int local_port);
// False once the peer closed or reset the connection; bytes waiting to be read
// (a pipelined request) mean it is still there.
bool peer_alive(int fd);

}  // namespace loom::serve
