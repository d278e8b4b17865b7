/* The TLS floor: bench/floor.c with OpenSSL in front, the cheapest HTTPS/1.1 keep-alive
 * server to compare the servers' CPU per request with. One thread, epoll, and for each
 * request one recv (read-ahead on, so a whole record comes in one call), one record
 * decrypted, one record encrypted and one send of a fixed response. No parsing, no files,
 * no logging: what a real TLS server costs above this is its own work.
 *
 * usage: tls-floor PORT CERT KEY [BODY_BYTES]   (127.0.0.1; body of BODY_BYTES 'x', default 12)
 * build: cc -O2 -o tls-floor bench/tls-floor.c -lssl -lcrypto
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_FD 65536

static SSL *conns[MAX_FD];

static void drop(int fd) {
    SSL_free(conns[fd]);
    conns[fd] = NULL;
    close(fd);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: tls-floor PORT CERT KEY [BODY_BYTES]\n");
        return 2;
    }
    int port = atoi(argv[1]);
    long body = argc > 4 ? atol(argv[4]) : 12;
    char *response = malloc(body + 128);
    int head = snprintf(response, 128, "HTTP/1.1 200 OK\r\nContent-Length: %ld\r\n\r\n", body);
    memset(response + head, 'x', body);
    int response_len = head + body;

    signal(SIGPIPE, SIG_IGN); /* OpenSSL writes with write(2): a closed peer is an error */
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (SSL_CTX_use_certificate_chain_file(ctx, argv[2]) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, argv[3], SSL_FILETYPE_PEM) != 1) {
        ERR_print_errors_fp(stderr);
        return 1;
    }
    SSL_CTX_set_read_ahead(ctx, 1);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);

    int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(listener, (struct sockaddr *)&addr, sizeof addr) || listen(listener, 4096)) {
        perror("tls-floor: bind/listen");
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
                    if (c >= MAX_FD) {
                        close(c);
                        continue;
                    }
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    conns[c] = SSL_new(ctx);
                    SSL_set_fd(conns[c], c);
                    SSL_set_accept_state(conns[c]);
                    struct epoll_event cev = {.events = EPOLLIN, .data.fd = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
                }
                continue;
            }
            SSL *ssl = conns[fd];
            if (!SSL_is_init_finished(ssl)) {
                int r = SSL_do_handshake(ssl);
                if (r != 1) {
                    if (SSL_get_error(ssl, r) != SSL_ERROR_WANT_READ) drop(fd);
                    continue;
                }
                /* The request may have come with the client's Finished. */
            }
            /* One request per record read; more only if read-ahead already holds them. */
            do {
                int r = SSL_read(ssl, buf, sizeof buf);
                if (r <= 0) {
                    if (SSL_get_error(ssl, r) != SSL_ERROR_WANT_READ) drop(fd);
                    break;
                }
                if (SSL_write(ssl, response, response_len) <= 0) {
                    drop(fd);
                    break;
                }
            } while (SSL_has_pending(ssl));
        }
    }
}
