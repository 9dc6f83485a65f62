# expect: runtime_error exception
# problem: relu
# config: static_checks=false,timeout_s=600,max_processes=64
"""Sandbox attack in C++ (load_inline): writes, reads a secret, connects, leaves a process behind, forks without bound; reports each."""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r'''
#include <torch/extension.h>
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <unistd.h>

static std::string outcome(bool ok, const char* done) { return ok ? std::string(done) : std::string(strerror(errno)); }

std::string attack(std::string write_path, std::string secret_path, int64_t port) {
  std::string report;
  int fd = open(write_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  report += "write " + write_path + ": " + outcome(fd >= 0 && write(fd, "pwned", 5) == 5, "WRITTEN");
  if (fd >= 0) close(fd);

  char secret[64] = {0};
  fd = open(secret_path.c_str(), O_RDONLY);
  report += "; read " + secret_path + ": " + outcome(fd >= 0 && read(fd, secret, 63) >= 0, "READ ") + secret;
  if (fd >= 0) close(fd);

  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  report += "; connect 127.0.0.1:" + std::to_string(port) + ": " +
            outcome(s >= 0 && connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0, "CONNECTED");
  if (s >= 0) close(s);

  pid_t first = fork();  // a grandchild in its own session, reparented away from us: it would outlive the job
  if (first == 0) {
    setsid();
    if (fork() == 0) {
      execl("/bin/sleep", "kz-outlive-cpp", "600", static_cast<char*>(nullptr));
    }
    _exit(0);
  }
  report += "; detached process: " + outcome(first > 0, "STARTED");

  int children = 0;
  errno = 0;
  while (children < 2000) {
    pid_t pid = fork();
    if (pid == 0) { sleep(600); _exit(0); }
    if (pid < 0) break;
    ++children;
  }
  report += "; fork: " + std::to_string(children) + " children, then " +
            (children < 2000 ? std::string(strerror(errno)) : std::string("never refused"));
  return report;
}
'''

ext = load_inline("kz_sandbox_attacks", cpp_sources=SOURCE, functions=["attack"])


class ModelNew(nn.Module):
    def forward(self, x):
        raise RuntimeError("C++ attempts: " + ext.attack("/tmp/kz_pwned_cpp", "/tmp/kz_sandbox_test/home/.secret", 47319))
