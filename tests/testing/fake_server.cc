// A stand-in for zerostate-server that tests of the process helper use:
// binds --listen=HOST:PORT (0 = ephemeral), prints the listening line, and
// exits 0 on SIGTERM. --exit_code=N exits with N before listening;
// --silent never prints the line; --ignore_term ignores SIGTERM.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

int BindListen(const std::string& host, int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 16) != 0) {
    perror("bind");
    exit(3);
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.sin_port);
}

}  // namespace

int main(int argc, char** argv) {
  std::string listen = "127.0.0.1:0";
  bool silent = false;
  bool ignore_term = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--listen=", 0) == 0) listen = a.substr(9);
    if (a.rfind("--exit_code=", 0) == 0) return atoi(a.c_str() + 12);
    if (a == "--silent") silent = true;
    if (a == "--ignore_term") ignore_term = true;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  if (ignore_term) {
    signal(SIGTERM, SIG_IGN);
  } else {
    sigprocmask(SIG_BLOCK, &set, nullptr);
  }
  size_t colon = listen.rfind(':');
  std::string host = listen.substr(0, colon);
  int port = BindListen(host, atoi(listen.c_str() + colon + 1));
  printf("starting up\n");
  if (!silent) printf("zerostate-server listening on %s:%d metrics on %s:9\n", host.c_str(), port,
                      host.c_str());
  printf("a log line after the listening line\n");
  fflush(stdout);
  if (ignore_term) {
    while (true) pause();
  }
  int sig = 0;
  sigwait(&set, &sig);
  return 0;
}
