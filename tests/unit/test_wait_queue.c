/*
 * test_wait_queue.c - the rules of waiting (core/wait_queue.c): arrival
 * order, no overtaking, multi-queue waiters tried only at the head of all
 * their queues, the queues a leaving waiter frees served in the same round,
 * each queue settled after its turn, and a model run against random joins
 * and grants.
 */
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

#include "wait_queue.h"

#define NQ 4

/* A test waiter: fits while `fits` is set; tried and answered are recorded. */
typedef struct tw {
    fg_waiter base;
    fg_wait_link links[NQ];
    int id;
    bool fits;
    bool answered;
} tw;

typedef struct log {
    int tried[64], ntried;
    int answered[64], nanswered;
    fg_wait_queue *settled[64];
    int nsettled;
} log;

static bool try_head(fg_wait_queue *q, fg_waiter *head, const fg_wait_serving *s) {
    (void)q;
    log *l = s->arg;
    tw *w = fg_wait_container(head, tw, base);
    l->tried[l->ntried++] = w->id;
    if (!w->fits) return false;
    fg_waiter_leave(head);
    w->answered = true;
    l->answered[l->nanswered++] = w->id;
    return true;
}

static void settle(fg_wait_queue *q, const fg_wait_serving *s) {
    log *l = s->arg;
    l->settled[l->nsettled++] = q;
}

static void join(tw *w, int id, fg_wait_queue *const *qs, uint32_t n) {
    memset(w, 0, sizeof(*w));
    w->id = id;
    fg_waiter_join(&w->base, w->links, qs, n);
}

static void serve(fg_wait_queue *const *qs, size_t n, log *l) {
    memset(l, 0, sizeof(*l));
    fg_wait_serving s = {try_head, settle, l, 0};
    fg_wait_serve(qs, n, &s);
}

static void test_fifo_and_no_overtaking(void **state) {
    (void)state;
    fg_wait_queue q = {0};
    fg_wait_queue *qs[] = {&q};
    tw a, b, c;
    assert_false(fg_wait_busy(&q));
    join(&a, 1, qs, 1);
    join(&b, 2, qs, 1);
    join(&c, 3, qs, 1);
    assert_true(fg_wait_busy(&q));
    assert_int_equal(q.len, 3);
    assert_ptr_equal(fg_wait_head(&q), &a.base);
    /* The head does not fit: the ones behind it, which would, are not tried. */
    b.fits = c.fits = true;
    log l;
    serve(qs, 1, &l);
    assert_int_equal(l.ntried, 1);
    assert_int_equal(l.tried[0], 1);
    assert_int_equal(l.nanswered, 0);
    assert_int_equal(l.nsettled, 1);
    /* Now it fits: all three go, in arrival order. */
    a.fits = true;
    serve(qs, 1, &l);
    assert_int_equal(l.nanswered, 3);
    assert_int_equal(l.answered[0], 1);
    assert_int_equal(l.answered[1], 2);
    assert_int_equal(l.answered[2], 3);
    assert_false(fg_wait_busy(&q));
    assert_int_equal(q.len, 0);
    assert_null(q.tail);
}

static void test_leave_from_the_middle(void **state) {
    (void)state;
    fg_wait_queue q = {0};
    fg_wait_queue *qs[] = {&q};
    tw a, b, c;
    join(&a, 1, qs, 1);
    join(&b, 2, qs, 1);
    join(&c, 3, qs, 1);
    fg_waiter_leave(&b.base); /* a timeout or a disconnection */
    assert_int_equal(q.len, 2);
    assert_ptr_equal(a.links[0].next, &c.links[0]);
    assert_ptr_equal(c.links[0].prev, &a.links[0]);
    fg_waiter_leave(&c.base);
    assert_ptr_equal(q.tail, &a.links[0]);
    fg_waiter_leave(&a.base);
    assert_null(q.head);
    assert_null(q.tail);
}

/* A waiter in two queues is tried only when it heads both; when it goes,
 * the other queue is served in the same round. */
static void test_multi_queue_waiter(void **state) {
    (void)state;
    fg_wait_queue q1 = {0}, q2 = {0};
    fg_wait_queue *both[] = {&q1, &q2}, *only1[] = {&q1}, *only2[] = {&q2};
    tw a, m, b;
    join(&a, 1, only1, 1); /* holds up m in q1 */
    join(&m, 2, both, 2);
    join(&b, 3, only2, 1); /* behind m in q2 */
    m.fits = b.fits = true;
    assert_true(fg_waiter_heads_all(&a.base));
    assert_false(fg_waiter_heads_all(&m.base));
    log l;
    serve(only2, 1, &l); /* m heads q2 but not q1: not tried, b stays behind */
    assert_int_equal(l.ntried, 0);
    assert_int_equal(l.nsettled, 1);
    a.fits = true;
    serve(only1, 1, &l); /* a goes, then m (heading both), then q2 serves b */
    assert_int_equal(l.nanswered, 3);
    assert_int_equal(l.answered[0], 1);
    assert_int_equal(l.answered[1], 2);
    assert_int_equal(l.answered[2], 3);
    assert_false(fg_wait_busy(&q1));
    assert_false(fg_wait_busy(&q2));
    assert_int_equal(l.nsettled, 2); /* each queue once */
}

/* Queues given twice, or pushed again by a leaving waiter while pending,
 * are served once per push. */
static void test_each_queue_once_per_push(void **state) {
    (void)state;
    fg_wait_queue q1 = {0}, q2 = {0};
    fg_wait_queue *twice[] = {&q1, &q1, &q2};
    log l;
    serve(twice, 3, &l);
    assert_int_equal(l.nsettled, 2);
    assert_false(q1.pending);
    assert_false(q2.pending);
}

/* Random joins (one to NQ queues) and grants against a model: a waiter is
 * answered exactly when it fits and every waiter ahead of it in any of its
 * queues was answered. */
static void test_model(void **state) {
    (void)state;
    srand(7);
    for (int round = 0; round < 200; round++) {
        fg_wait_queue q[NQ] = {{0}};
        tw ws[24];
        int n = 1 + rand() % 24;
        for (int i = 0; i < n; i++) {
            fg_wait_queue *mine[NQ];
            uint32_t k = 0;
            for (int j = 0; j < NQ; j++)
                if (rand() % 3 == 0) mine[k++] = &q[j];
            if (k == 0) mine[k++] = &q[rand() % NQ];
            join(&ws[i], i, mine, k);
            ws[i].fits = rand() % 4 != 0;
        }
        /* The model: in arrival order, answered when it fits and nobody
         * earlier that shares a queue with it is still waiting. */
        bool expect[24] = {false};
        for (int i = 0; i < n; i++) {
            bool blocked = !ws[i].fits;
            for (int e = 0; e < i && !blocked; e++) {
                if (expect[e]) continue;
                for (uint32_t x = 0; x < ws[i].base.nlinks && !blocked; x++)
                    for (uint32_t y = 0; y < ws[e].base.nlinks; y++)
                        if (ws[i].links[x].queue == ws[e].links[y].queue) blocked = true;
            }
            expect[i] = !blocked;
        }
        fg_wait_queue *all[NQ] = {&q[0], &q[1], &q[2], &q[3]};
        log l;
        serve(all, NQ, &l);
        for (int i = 0; i < n; i++)
            assert_int_equal(ws[i].answered, expect[i]);
        for (int i = 0; i < n; i++)
            if (!ws[i].answered) fg_waiter_leave(&ws[i].base);
        for (int j = 0; j < NQ; j++)
            assert_int_equal(q[j].len, 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fifo_and_no_overtaking),
        cmocka_unit_test(test_leave_from_the_middle),
        cmocka_unit_test(test_multi_queue_waiter),
        cmocka_unit_test(test_each_queue_once_per_push),
        cmocka_unit_test(test_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
