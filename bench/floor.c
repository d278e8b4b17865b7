/* The floor: the cheapest HTTP/1.1 keep-alive server this kernel allows, to compare the
 * servers' CPU per request with. One thread, epoll, and for each request one recv and one
 * send of a fixed response (it answers one response per recv: the load generators in
 * bench/ send one request at a time per connection). No parsing, no files, no logging:
 * what a real server costs above this is its own work.
 *
 * With `close` it is the floor of a connection per request instead: the socket is closed
 * right after the response, which is sent with MSG_MORE so that it leaves with the FIN in
 * one packet (accept4, epoll_ctl, recv, send and close per connection, nothing else).
 *
 * usage: floor PORT [BODY_BYTES [close]]  (listens on 127.0.0.1; body of BODY_BYTES 'x', default 12)
 * build: cc -O2 -o floor bench/floor.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: floor PORT [BODY_BYTES [close]]\n");
        return 2;
    }
    int port = atoi(argv[1]);
    long body = argc > 2 ? atol(argv[2]) : 12;
    int close_each = argc > 3 && strcmp(argv[3], "close") == 0;
    char *response = malloc(body + 128);
    int head = snprintf(response, 128, "HTTP/1.1 200 OK\r\nContent-Length: %ld\r\n%s\r\n", body,
                        close_each ? "Connection: close\r\n" : "");
    memset(response + head, 'x', body);
    size_t response_len = head + body;

    int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(listener, (struct sockaddr *)&addr, sizeof addr) || listen(listener, 4096)) {
        perror("floor: bind/listen");
        return 1;
    }
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = listener};
    epoll_ctl(ep, EPOLL_CTL_ADD, listener, &ev);
    struct epoll_event events[256];
    char buf[16384];
    for (;;) {
        int n = epoll_wait(ep, events, 256, -1);
        for (int i = 0; i < n; i++) {
            int fd = events[i].data.fd;
            if (fd == listener) {
                int c;
                while ((c = accept4(listener, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct epoll_event cev = {.events = EPOLLIN, .data.fd = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
                }
                continue;
            }
            ssize_t r = recv(fd, buf, sizeof buf, 0);
            if (r <= 0) {
                close(fd);
                continue;
            }
            if (close_each) {
                send(fd, response, response_len, MSG_NOSIGNAL | MSG_MORE);
                close(fd);
            } else if (send(fd, response, response_len, MSG_NOSIGNAL) < 0) {
                close(fd);
            }
        }
    }
}
