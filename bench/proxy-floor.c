/* The proxy floor: the cheapest reverse proxy this kernel allows, to compare the proxies'
 * CPU per request with. One thread, epoll; each client connection gets its own upstream
 * connection, opened once when the client connects and kept, and bytes are relayed as
 * they come: one recv and one send on each side per request and response. No parsing,
 * no header changes, no pooling: a byte pipe is all a proxy must do per request, so what a
 * real proxy costs above this is its own work.
 *
 * usage: proxy-floor PORT UPSTREAM_PORT     (both on 127.0.0.1)
 * build: cc -O2 -o proxy-floor bench/proxy-floor.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_FD 65536
static int peer[MAX_FD];

static struct sockaddr_in loopback(int port) {
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return addr;
}

static void watch(int ep, int fd) {
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

static void drop(int fd) {
    int other = peer[fd];
    close(fd);
    if (other >= 0) close(other);
    peer[fd] = -1;
    if (other >= 0) peer[other] = -1;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: proxy-floor PORT UPSTREAM_PORT\n");
        return 2;
    }
    int one = 1;
    struct sockaddr_in addr = loopback(atoi(argv[1]));
    struct sockaddr_in upstream = loopback(atoi(argv[2]));
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(listener, (struct sockaddr *)&addr, sizeof addr) || listen(listener, 4096)) {
        perror("proxy-floor: bind/listen");
        return 1;
    }
    for (int i = 0; i < MAX_FD; i++) peer[i] = -1;
    int ep = epoll_create1(0);
    watch(ep, listener);
    struct epoll_event events[256];
    static char buf[256 * 1024];
    for (;;) {
        int n = epoll_wait(ep, events, 256, -1);
        for (int i = 0; i < n; i++) {
            int fd = events[i].data.fd;
            if (fd == listener) {
                int c;
                while ((c = accept4(listener, NULL, NULL, 0)) >= 0) {
                    /* A blocking connect, once per client connection (not per request). */
                    int u = socket(AF_INET, SOCK_STREAM, 0);
                    if (c >= MAX_FD || u >= MAX_FD ||
                        connect(u, (struct sockaddr *)&upstream, sizeof upstream)) {
                        close(c);
                        close(u);
                        continue;
                    }
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    setsockopt(u, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    peer[c] = u;
                    peer[u] = c;
                    watch(ep, c);
                    watch(ep, u);
                }
                continue;
            }
            if (peer[fd] < 0) continue;
            ssize_t r = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (r <= 0) {
                drop(fd);
                continue;
            }
            /* Blocking send: the peer's buffer has room for a response of the sizes
             * benchmarked (the client reads before it sends the next request). */
            ssize_t off = 0;
            while (off < r) {
                ssize_t w = send(peer[fd], buf + off, r - off, MSG_NOSIGNAL);
                if (w <= 0) break;
                off += w;
            }
            if (off < r) drop(fd);
        }
    }
}
