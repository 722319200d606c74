/*
 * floodgate_libevent.h - floodgate_async.h on a libevent loop: an fg_loop
 * whose watches and timers are libevent events of one event_base.
 *
 *     struct event_base *base = event_base_new();
 *     fg_loop loop = fg_libevent_loop(base);
 *     fg_async *a = fg_async_open("redis://127.0.0.1:6379", NULL, &loop, &err);
 *     ... fg_async_check(a, ...); event_base_dispatch(base);
 *
 * Header only, as hiredis's adapters are: libfloodgate itself does not
 * link libevent; a program that includes this header links -levent.
 */
#ifndef FLOODGATE_LIBEVENT_H
#define FLOODGATE_LIBEVENT_H

#include <event2/event.h>
#include <stdlib.h>

#include <floodgate_async.h>

typedef struct fg_libevent_watch {
    struct event_base *base;
    struct event *ev; /* NULL while no event is wanted */
    evutil_socket_t fd;
    int events;
    void (*ready)(void *arg, int events);
    void *arg;
} fg_libevent_watch;

typedef struct fg_libevent_timer {
    struct event *ev;
    void (*fire)(void *arg);
    void *arg;
} fg_libevent_timer;

/* The watch may be freed by ready itself: nothing of it is read after. */
static inline void fg_libevent_on_io(evutil_socket_t fd, short what, void *p) {
    (void)fd;
    fg_libevent_watch *w = (fg_libevent_watch *)p;
    w->ready(w->arg, ((what & EV_READ) ? FG_EV_READ : 0) | ((what & EV_WRITE) ? FG_EV_WRITE : 0));
}

static inline void *fg_libevent_watch_new(void *loop, int fd, void (*ready)(void *arg, int events),
                                   void *arg) {
    fg_libevent_watch *w = (fg_libevent_watch *)calloc(1, sizeof(*w));
    if (w == NULL) return NULL;
    w->base = (struct event_base *)loop;
    w->fd = fd;
    w->ready = ready;
    w->arg = arg;
    return w;
}

static inline void fg_libevent_want(void *p, int events) {
    fg_libevent_watch *w = (fg_libevent_watch *)p;
    if (w->ev != NULL) event_free(w->ev);
    w->ev = NULL;
    w->events = events;
    if (events == 0) return;
    short what = EV_PERSIST | ((events & FG_EV_READ) ? EV_READ : 0) |
                 ((events & FG_EV_WRITE) ? EV_WRITE : 0);
    w->ev = event_new(w->base, w->fd, what, fg_libevent_on_io, w);
    if (w->ev != NULL) event_add(w->ev, NULL);
}

static inline void fg_libevent_unwatch(void *p) {
    fg_libevent_watch *w = (fg_libevent_watch *)p;
    if (w->ev != NULL) event_free(w->ev);
    free(w);
}

static inline void fg_libevent_on_timer(evutil_socket_t fd, short what, void *p) {
    (void)fd, (void)what;
    fg_libevent_timer *t = (fg_libevent_timer *)p;
    t->fire(t->arg);
}

static inline void *fg_libevent_timer_new(void *loop, void (*fire)(void *arg), void *arg) {
    fg_libevent_timer *t = (fg_libevent_timer *)calloc(1, sizeof(*t));
    if (t == NULL) return NULL;
    t->fire = fire;
    t->arg = arg;
    t->ev = evtimer_new((struct event_base *)loop, fg_libevent_on_timer, t);
    if (t->ev == NULL) {
        free(t);
        return NULL;
    }
    return t;
}

static inline void fg_libevent_arm(void *p, int64_t after_ms) {
    fg_libevent_timer *t = (fg_libevent_timer *)p;
    struct timeval tv = {(time_t)(after_ms / 1000), (suseconds_t)(after_ms % 1000) * 1000};
    evtimer_add(t->ev, &tv);
}

static inline void fg_libevent_disarm(void *p) {
    evtimer_del(((fg_libevent_timer *)p)->ev);
}

static inline void fg_libevent_timer_free(void *p) {
    fg_libevent_timer *t = (fg_libevent_timer *)p;
    event_free(t->ev);
    free(t);
}

static inline fg_loop fg_libevent_loop(struct event_base *base) {
    fg_loop loop = {base,
                    fg_libevent_watch_new,
                    fg_libevent_want,
                    fg_libevent_unwatch,
                    fg_libevent_timer_new,
                    fg_libevent_arm,
                    fg_libevent_disarm,
                    fg_libevent_timer_free};
    return loop;
}

#endif
