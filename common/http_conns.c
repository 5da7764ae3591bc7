#include "common/http_conns.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* How often the watch looks at the connections (and so how late a deadline may act). */
#define TICK_MS 100
/* How long a connection answered early is drained after the server closed it, and how many may
 * be drained at once (beyond that they are closed at once, as without the watch). */
#define LINGER_MS 3000
#define MAX_LINGERING 256

static const char CONTINUE[] = "HTTP/1.1 100 Continue\r\n\r\n";

struct http_conn {
    http_conn *prev, *next;
    int fd;
    int64_t since_ms; /* when the request now awaited began to be awaited */
    int awaiting;     /* a request's head or body is awaited: the deadline applies */
    int shut;         /* the deadline passed and the socket was shut down */
    int probe, probed;
    int linger;
};

typedef struct lingering {
    int fd;
    int64_t until_ms;
} lingering;

struct http_conns {
    pthread_mutex_t mu;
    http_conn *head;
    lingering linger[MAX_LINGERING];
    int n_linger;
    long timeout_ms;
    atomic_int stop;
    pthread_t thread;
};

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The peer has shut its sending side (or more): end-of-file is waiting to be read. */
static int read_side_closed(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static void sweep(http_conns *w, int64_t now) {
    for (http_conn *c = w->head; c; c = c->next) {
        if (c->awaiting && !c->shut && now - c->since_ms >= w->timeout_ms) {
            /* The server's own thread sees end-of-file and closes the connection. */
            shutdown(c->fd, SHUT_RDWR);
            c->shut = 1;
        } else if (c->probe && !c->probed && read_side_closed(c->fd)) {
            c->probed = 1;
            ssize_t n = send(c->fd, CONTINUE, sizeof CONTINUE - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            (void)n; /* a failure to send is itself the sign that the peer is gone */
        }
    }
}

/* Reads and drops what the lingering sockets hold; closes those at their end or deadline. */
static void drain(http_conns *w, const struct pollfd *p, int n, int64_t now) {
    char buf[16384];
    for (int i = 0; i < n; i++) {
        int done = 0;
        if (p[i].revents) {
            for (int k = 0; k < 64; k++) {
                ssize_t r = recv(p[i].fd, buf, sizeof buf, MSG_DONTWAIT);
                if (r > 0) continue;
                done = r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
                break;
            }
        }
        for (int j = 0; j < w->n_linger; j++)
            if (w->linger[j].fd == p[i].fd) {
                if (done || now >= w->linger[j].until_ms) {
                    close(w->linger[j].fd);
                    w->linger[j] = w->linger[--w->n_linger];
                }
                break;
            }
    }
}

static void *watch(void *arg) {
    http_conns *w = arg;
    struct pollfd p[MAX_LINGERING];
    int64_t last = now_ms();
    while (!atomic_load(&w->stop)) {
        pthread_mutex_lock(&w->mu);
        int n = w->n_linger;
        for (int i = 0; i < n; i++) p[i] = (struct pollfd){.fd = w->linger[i].fd, .events = POLLIN};
        pthread_mutex_unlock(&w->mu);
        /* Only this thread closes lingering sockets, so their fds stay valid while it polls. */
        int64_t wait = TICK_MS - (now_ms() - last);
        if (n > 0) poll(p, (nfds_t)n, wait > 0 ? (int)wait : 0);
        else if (wait > 0) nanosleep(&(struct timespec){0, wait * 1000000L}, NULL);
        int64_t now = now_ms();
        pthread_mutex_lock(&w->mu);
        drain(w, p, n, now);
        if (now - last >= TICK_MS) {
            sweep(w, now);
            last = now;
        }
        pthread_mutex_unlock(&w->mu);
    }
    return NULL;
}

http_conns *http_conns_create(long request_timeout_ms) {
    http_conns *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    pthread_mutex_init(&w->mu, NULL);
    w->timeout_ms = request_timeout_ms;
    if (pthread_create(&w->thread, NULL, watch, w) != 0) {
        pthread_mutex_destroy(&w->mu);
        free(w);
        return NULL;
    }
    return w;
}

void http_conns_destroy(http_conns *w) {
    if (!w) return;
    atomic_store(&w->stop, 1);
    pthread_join(w->thread, NULL);
    for (int i = 0; i < w->n_linger; i++) close(w->linger[i].fd);
    while (w->head) {
        http_conn *c = w->head;
        w->head = c->next;
        free(c);
    }
    pthread_mutex_destroy(&w->mu);
    free(w);
}

http_conn *http_conns_add(http_conns *w, int fd) {
    http_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->fd = fd;
    c->since_ms = now_ms();
    c->awaiting = 1;
    pthread_mutex_lock(&w->mu);
    c->next = w->head;
    if (w->head) w->head->prev = c;
    w->head = c;
    pthread_mutex_unlock(&w->mu);
    return c;
}

void http_conns_remove(http_conns *w, http_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&w->mu);
    if (c->prev) c->prev->next = c->next;
    else w->head = c->next;
    if (c->next) c->next->prev = c->prev;
    /* A second descriptor keeps the socket open once the server closes its own: closing a socket
     * with unread bytes would reset the connection, and the client could lose the answer. */
    if (c->linger && !c->shut && w->n_linger < MAX_LINGERING) {
        int fd = dup(c->fd);
        if (fd >= 0) w->linger[w->n_linger++] = (lingering){fd, now_ms() + LINGER_MS};
    }
    pthread_mutex_unlock(&w->mu);
    free(c);
}

void http_conns_awaiting(http_conns *w, http_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&w->mu);
    c->since_ms = now_ms();
    c->awaiting = 1;
    c->probe = 0;
    pthread_mutex_unlock(&w->mu);
}

void http_conns_handling(http_conns *w, http_conn *c, int probe) {
    if (!c) return;
    pthread_mutex_lock(&w->mu);
    c->awaiting = 0;
    c->probe = probe;
    c->probed = 0;
    pthread_mutex_unlock(&w->mu);
}

void http_conns_answering(http_conns *w, http_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&w->mu);
    c->probe = 0;
    pthread_mutex_unlock(&w->mu);
}

void http_conns_linger(http_conns *w, http_conn *c) {
    if (!c) return;
    pthread_mutex_lock(&w->mu);
    c->linger = 1;
    pthread_mutex_unlock(&w->mu);
}
