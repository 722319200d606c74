/*
 * wait_queue.c - FIFO queues of waiters and a serving round (wait_queue.h).
 *
 * A round is a stack of the queues still to serve: a queue is on it at
 * most once (`pending`), and a waiter that leaves several queues pushes
 * the others, so one call serves whatever a grant set free, without
 * recursion and without allocating.
 */
#include "wait_queue.h"

static void link_append(fg_wait_queue *q, fg_wait_link *l) {
    l->queue = q;
    l->next = NULL;
    l->prev = q->tail;
    if (q->tail != NULL)
        q->tail->next = l;
    else
        q->head = l;
    q->tail = l;
    q->len++;
}

static void link_remove(fg_wait_link *l) {
    fg_wait_queue *q = l->queue;
    if (l->prev != NULL)
        l->prev->next = l->next;
    else
        q->head = l->next;
    if (l->next != NULL)
        l->next->prev = l->prev;
    else
        q->tail = l->prev;
    l->prev = l->next = NULL;
    q->len--;
}

void fg_waiter_join(fg_waiter *w, fg_wait_link *links, fg_wait_queue *const *queues, uint32_t n) {
    w->nlinks = n;
    w->links = links;
    for (uint32_t i = 0; i < n; i++) {
        links[i].waiter = w;
        link_append(queues[i], &links[i]);
    }
}

void fg_waiter_leave(fg_waiter *w) {
    for (uint32_t i = 0; i < w->nlinks; i++)
        link_remove(&w->links[i]);
    w->nlinks = 0;
}

bool fg_waiter_heads_all(const fg_waiter *w) {
    for (uint32_t i = 0; i < w->nlinks; i++)
        if (w->links[i].queue->head != &w->links[i]) return false;
    return true;
}

typedef struct round {
    fg_wait_queue *stack;
} round;

static void round_push(round *r, fg_wait_queue *q) {
    if (q->pending) return;
    q->pending = true;
    q->next_pending = r->stack;
    r->stack = q;
}

static fg_wait_queue *round_pop(round *r) {
    fg_wait_queue *q = r->stack;
    r->stack = q->next_pending;
    q->pending = false;
    return q;
}

/* Tries q's heads while they are answered; the other queues of an
 * answered multi-queue waiter go on the stack. */
static void serve_queue(round *r, fg_wait_queue *q, const fg_wait_serving *s) {
    fg_waiter *w;
    while ((w = fg_wait_head(q)) != NULL && fg_waiter_heads_all(w)) {
        fg_wait_queue *left[FG_WAIT_MAX_QUEUES];
        uint32_t n = w->nlinks;
        for (uint32_t i = 0; i < n; i++)
            left[i] = w->links[i].queue;
        if (!s->try_head(q, w, s)) break;
        for (uint32_t i = 0; i < n; i++)
            if (left[i] != q) round_push(r, left[i]);
    }
}

void fg_wait_serve(fg_wait_queue *const *queues, size_t n, const fg_wait_serving *s) {
    round r = {NULL};
    for (size_t i = 0; i < n; i++)
        round_push(&r, queues[i]);
    while (r.stack != NULL) {
        fg_wait_queue *q = round_pop(&r);
        serve_queue(&r, q, s);
        if (s->settle != NULL) s->settle(q, s);
    }
}
