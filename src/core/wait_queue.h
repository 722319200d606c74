/*
 * wait_queue.h - FIFO queues of waiting requests, and the order in which
 * they are served: the rules of waiting, apart from how a waiter waits.
 *
 * A request that cannot be granted now, and may wait, joins the queue of
 * each of its keys (a multi-key lock: of several keys). The rules:
 *
 * - Arrival order. A waiter joins at the tail and only a head is tried.
 *   Serving a queue stops at the first head that does not fit, and a
 *   newcomer is told that someone waits ahead (fg_wait_busy, the
 *   `queued_ahead` of core/lock.h), so nobody overtakes: readers cannot
 *   starve a waiting writer, small requests cannot pass a large one.
 * - A waiter in several queues is tried only when it heads all of them.
 *   Every queue is in arrival order, so the oldest waiter heads all of its
 *   queues: multi-key waiters never deadlock.
 * - Whatever frees a key serves its queue at once (fg_wait_serve). A
 *   waiter that leaves several queues lets each of them serve its next
 *   head in the same round.
 *
 * The structures are intrusive: the caller's queue embeds an fg_wait_queue,
 * its waiter an fg_waiter and one fg_wait_link per queue, and nothing here
 * allocates. Deciding whether a head fits (and answering it) and settling
 * a queue whose turn ended are the caller's callbacks, as is the way a
 * waiter waits: blocked clients and timers in the module, condition
 * variables in process.
 *
 * Costs: joining and leaving are O(1) per queue; a round tries each queue
 * it serves once more than the waiters it answers there.
 */
#ifndef FG_WAIT_QUEUE_H
#define FG_WAIT_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FG_WAIT_MAX_QUEUES 64 /* queues one waiter may be in */

typedef struct fg_wait_queue fg_wait_queue;
typedef struct fg_waiter fg_waiter;

typedef struct fg_wait_link {
    struct fg_wait_link *prev, *next;
    fg_wait_queue *queue;
    fg_waiter *waiter;
} fg_wait_link;

struct fg_waiter {
    uint32_t nlinks;
    fg_wait_link *links; /* one per queue: the caller's memory */
};

/* A zeroed struct is an empty queue. */
struct fg_wait_queue {
    fg_wait_link *head, *tail;
    size_t len;
    fg_wait_queue *next_pending; /* a serving round's stack */
    bool pending;
};

/* The struct that embeds `member` at `ptr`. */
#define fg_wait_container(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

/* Puts w at the tail of queues[0..n) (distinct, n <= FG_WAIT_MAX_QUEUES)
 * through links[0..n). */
void fg_waiter_join(fg_waiter *w, fg_wait_link *links, fg_wait_queue *const *queues, uint32_t n);

/* Takes w out of all its queues (they stay, possibly empty). */
void fg_waiter_leave(fg_waiter *w);

/* Whether w heads every one of its queues: the only time it may be tried. */
bool fg_waiter_heads_all(const fg_waiter *w);

/* The oldest waiter of q, or NULL. */
static inline fg_waiter *fg_wait_head(const fg_wait_queue *q) {
    return q->head != NULL ? q->head->waiter : NULL;
}

/* Whether someone waits in q: a newcomer must then wait behind. */
static inline bool fg_wait_busy(const fg_wait_queue *q) {
    return q->head != NULL;
}

/* A serving round: what it asks of its caller, and at what time. */
typedef struct fg_wait_serving fg_wait_serving;
struct fg_wait_serving {
    /* Decides for head, the head of q (and of all its queues): true when
     * it was answered and left its queues (fg_waiter_leave; it may be
     * freed), false when it must wait on, which ends q's turn. */
    bool (*try_head)(fg_wait_queue *q, fg_waiter *head, const fg_wait_serving *s);
    /* q's turn ended; the caller may free q if it is empty. NULL: nothing
     * to do. */
    void (*settle)(fg_wait_queue *q, const fg_wait_serving *s);
    void *arg;     /* the caller's: its context or table */
    int64_t now_us; /* the time the round decides at */
};

/* Serves queues[0..n), and every queue that a waiter leaves on the way:
 * each queue's heads are tried in order while they are answered. */
void fg_wait_serve(fg_wait_queue *const *queues, size_t n, const fg_wait_serving *s);

#endif
