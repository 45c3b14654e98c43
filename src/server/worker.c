/*
 * worker.c - worker threads, each with its own libevent event base.
 *
 * The listener appends an accepted socket to a worker's queue and writes one
 * byte to the worker's notify pipe; the worker drains the queue and creates
 * the connections on its own base.  The queue lock is taken once per new
 * connection, never per request.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server.h"

static void on_notify(evutil_socket_t fd, short what, void *arg)
{
    kura_worker *w = arg;
    char buf[64];
    (void)what;
    while (read(fd, buf, sizeof(buf)) > 0)
        ;
    conn_release_durable(w);
    for (;;) {
        pthread_mutex_lock(&w->queue_lock);
        if (w->queue_len == 0) {
            pthread_mutex_unlock(&w->queue_lock);
            break;
        }
        int q = w->queue[--w->queue_len];
        pthread_mutex_unlock(&w->queue_lock);
        if (q < 0) {                    /* the stop signal */
            event_base_loopbreak(w->base);
            return;
        }
        int cfd = q >> 2;               /* the low bits: a TLS listener's, -kt's (worker_dispatch) */
        if (!conn_new(w, cfd, q & 1, q & 2)) {
            close(cfd);
            atomic_fetch_sub(&w->srv->info.curr_connections, 1);
        }
    }
}

static void *worker_main(void *arg)
{
    kura_worker *w = arg;
    event_base_dispatch(w->base);
    conn_close_all(w);
    return NULL;
}

static int queue_push(kura_worker *w, int fd)
{
    pthread_mutex_lock(&w->queue_lock);
    if (w->queue_len == w->queue_cap) {
        int cap = w->queue_cap ? w->queue_cap * 2 : 64;
        int *q = realloc(w->queue, (size_t)cap * sizeof(int));
        if (!q) {
            pthread_mutex_unlock(&w->queue_lock);
            return -1;
        }
        w->queue = q;
        w->queue_cap = cap;
    }
    /* The stop marker goes to the front so it is taken last. */
    if (fd < 0) {
        memmove(w->queue + 1, w->queue, (size_t)w->queue_len * sizeof(int));
        w->queue[0] = fd;
        w->queue_len++;
    } else {
        w->queue[w->queue_len++] = fd;
    }
    pthread_mutex_unlock(&w->queue_lock);
    worker_wake(w);
    return 0;
}

void worker_wake(kura_worker *w)
{
    char c = 0;
    ssize_t n = write(w->notify_fd[1], &c, 1);
    (void)n;                            /* a full pipe already means "look" */
}

void worker_dispatch(kura_server *srv, int fd, bool tls, bool kt)
{
    kura_worker *w = &srv->workers[srv->next_worker++ % (unsigned)srv->nworkers];
    if (queue_push(w, fd << 2 | (kt ? 2 : 0) | (tls ? 1 : 0)) < 0) {
        close(fd);
        atomic_fetch_sub(&srv->info.curr_connections, 1);
    }
}

int workers_start(kura_server *srv)
{
    int n = srv->settings->threads;
    srv->workers = calloc((size_t)n, sizeof(kura_worker));
    if (!srv->workers)
        return -1;
    srv->nworkers = n;
    for (int i = 0; i < n; i++) {
        kura_worker *w = &srv->workers[i];
        w->srv = srv;
        w->index = i;
        w->stats = &srv->info.thread_stats[i];
        pthread_mutex_init(&w->queue_lock, NULL);
        if (pipe2(w->notify_fd, O_NONBLOCK | O_CLOEXEC) < 0)
            return -1;
        struct event_config *cfg = event_config_new();
        event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK);
        w->base = event_base_new_with_config(cfg);
        event_config_free(cfg);
        if (!w->base)
            return -1;
        w->notify_ev = event_new(w->base, w->notify_fd[0], EV_READ | EV_PERSIST, on_notify, w);
        if (!w->notify_ev || event_add(w->notify_ev, NULL) < 0)
            return -1;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0)
            return -1;
    }
    return 0;
}

/* Asks every worker to finish: each stops after the requests it has already
 * read are answered, closes its connections and exits. */
void workers_stop(kura_server *srv)
{
    for (int i = 0; i < srv->nworkers; i++)
        queue_push(&srv->workers[i], -1);
    for (int i = 0; i < srv->nworkers; i++) {
        kura_worker *w = &srv->workers[i];
        pthread_join(w->thread, NULL);
        event_free(w->notify_ev);
        event_base_free(w->base);
        close(w->notify_fd[0]);
        close(w->notify_fd[1]);
        pthread_mutex_destroy(&w->queue_lock);
        free(w->queue);
    }
    free(srv->workers);
    srv->workers = NULL;
    srv->nworkers = 0;
}
