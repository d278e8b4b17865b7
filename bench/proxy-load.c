/* A load generator of new connections, each one request, for bench/limits.sh: wrk
 * refuses a request that does not start with an HTTP method, so it cannot send a PROXY
 * header first. CONNECTIONS connections at a time on one epoll loop; each connects to
 * 127.0.0.1:PORT, sends the PROXY v2 header (when PROXY is 1) and
 * `GET /PATH HTTP/1.1` with `Connection: close` in one write, reads to the server's
 * close, and is replaced by a new one. After SECONDS prints
 * `requests N errors E` (a response that does not start with `HTTP/1.1 200 ` or a
 * connection error counts as an error).
 *
 * usage: proxy-load PORT CONNECTIONS SECONDS PROXY PATH
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 1024

static struct sockaddr_in addr;
static char request[512];
static size_t request_len;

struct conn {
    int fd;
    int sent;
    size_t got;
    char head[16];
};

static struct conn conns[MAX_CONNS];
static int epfd;
static long requests, errors;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void open_conn(struct conn *c) {
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    c->sent = 0;
    c->got = 0;
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, (struct sockaddr *)&addr, sizeof addr) < 0 && errno != EINPROGRESS) {
        perror("connect");
        exit(1);
    }
    struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN, .data.ptr = c};
    epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev);
}

static void finish(struct conn *c, int ok) {
    if (ok) requests++;
    else errors++;
    close(c->fd);
    open_conn(c);
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: proxy-load PORT CONNECTIONS SECONDS PROXY PATH\n");
        return 2;
    }
    int port = atoi(argv[1]), n = atoi(argv[2]), proxy = atoi(argv[4]);
    double seconds = atof(argv[3]);
    if (n < 1 || n > MAX_CONNS) return 2;
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    /* PROXY v2, TCP4, 192.0.2.1:40000 -> 127.0.0.1:80, no TLV. */
    static const unsigned char v2[] = {
        '\r', '\n', '\r', '\n', 0, '\r', '\n', 'Q', 'U', 'I', 'T', '\n', 0x21, 0x11, 0, 12,
        192, 0, 2, 1, 127, 0, 0, 1, 0x9c, 0x40, 0, 80};
    if (proxy) {
        memcpy(request, v2, sizeof v2);
        request_len = sizeof v2;
    }
    request_len += snprintf(request + request_len, sizeof request - request_len,
                            "GET %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", argv[5]);
    epfd = epoll_create1(0);
    for (int i = 0; i < n; i++) open_conn(&conns[i]);
    double end = now() + seconds;
    struct epoll_event events[256];
    char buf[65536];
    while (now() < end) {
        int k = epoll_wait(epfd, events, 256, 100);
        for (int i = 0; i < k; i++) {
            struct conn *c = events[i].data.ptr;
            if (events[i].events & (EPOLLERR)) {
                finish(c, 0);
                continue;
            }
            if (!c->sent && (events[i].events & EPOLLOUT)) {
                if (write(c->fd, request, request_len) != (ssize_t)request_len) {
                    finish(c, 0);
                    continue;
                }
                c->sent = 1;
                struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
                epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
                continue;
            }
            if (events[i].events & (EPOLLIN | EPOLLHUP)) {
                for (;;) {
                    ssize_t r = read(c->fd, buf, sizeof buf);
                    if (r > 0) {
                        size_t take = r < (ssize_t)(sizeof c->head - c->got) ? (size_t)r : sizeof c->head - c->got;
                        memcpy(c->head + c->got, buf, take);
                        c->got += take;
                        continue;
                    }
                    if (r == 0) {
                        finish(c, c->got >= 13 && memcmp(c->head, "HTTP/1.1 200 ", 13) == 0);
                    } else if (errno != EAGAIN) {
                        finish(c, 0);
                    }
                    break;
                }
            }
        }
    }
    printf("requests %ld errors %ld\n", requests, errors);
    return 0;
}
