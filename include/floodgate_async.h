/*
 * floodgate_async.h - libfloodgate without waiting: the calls of floodgate.h
 * on a server, answered by callback from the application's event loop.
 *
 * An fg_async is a client of one server (redis://, unix://) on one
 * connection, or of a cluster (redis+cluster://) on one per master, made
 * for a loop such as nginx's or libevent's: a call sends its command at
 * once, concurrent calls share the connection and are pipelined, and the
 * reply runs the call's callback from the loop. Nothing
 * blocks, not even the connect (give the server as an address, not a name
 * to resolve). The checks, the messages, the timeouts and the failure
 * policies are those of the synchronous client: a call given bad input is
 * refused at once, with the same FG_CODE_INVALID and message; a call whose
 * server is down, or does not answer within command_timeout_ms, is
 * answered by opts.on_failure, as fg_check's would be.
 *
 * The loop is reached through an fg_loop, filled by an adapter: watching a
 * file descriptor for readiness, and one-shot timers, in the way hiredis's
 * adapters work. floodgate_libevent.h is one; nginx's module has its own.
 * A client and its calls belong to the loop's thread.
 */
#ifndef FLOODGATE_ASYNC_H
#define FLOODGATE_ASYNC_H

#include <floodgate.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ the loop */

enum { FG_EV_READ = 1, FG_EV_WRITE = 2 };

/* What a client asks of the loop. `loop` is the adapter's and is passed
 * back to watch and timer. A watch tells ready(arg, events) when fd is
 * ready for the events last asked with want (FG_EV_* bits; 0: none); a
 * timer calls fire(arg) once, after_ms after it was armed (arming an armed
 * timer moves it). watch and timer return NULL when out of memory. The
 * client frees what it made: unwatch before it closes the descriptor. */
typedef struct fg_loop {
    void *loop;
    void *(*watch)(void *loop, int fd, void (*ready)(void *arg, int events), void *arg);
    void (*want)(void *watch, int events);
    void (*unwatch)(void *watch);
    void *(*timer)(void *loop, void (*fire)(void *arg), void *arg);
    void (*arm)(void *timer, int64_t after_ms);
    void (*disarm)(void *timer);
    void (*free_timer)(void *timer);
} fg_loop;

/* ----------------------------------------------------------- the client */

typedef struct fg_async fg_async;

/* A client of the server or cluster at url (redis://, unix://,
 * redis+cluster://; MOVED and ASK are followed) with opts (NULL: the defaults of
 * fg_options_init; lease_units must be 0: token leases are not supported
 * yet), on loop (copied). It connects at the first call. NULL, with err
 * filled, when the URL or the options are refused or memory is short. */
fg_async *fg_async_open(const char *url, const fg_options *opts, const fg_loop *loop,
                        fg_error *err);

/* Closes the connections and frees a. The calls still waiting are
 * answered first, inside this call, as lost to I/O (by the failure
 * policy); cancelled calls are not. Those callbacks may cancel calls, and
 * a call they start is refused (FG_CODE_IO). When it returns, every handle
 * of a's calls is NULL, so cancelling one does nothing. From the loop's
 * thread, never from inside a callback of this client. */
void fg_async_close(fg_async *a);

/* What fg_get_stats counts, for this client. */
void fg_async_get_stats(fg_async *a, fg_stats *out);

/* ---------------------------------------------------------------- calls
 *
 * Every call checks its arguments as its synchronous twin does, and is
 * refused at once (its callback never runs) when they are bad.
 *
 * Handles. A call given `call` (not NULL) sets *call to the call when it
 * is taken (FG_CODE_OK), to NULL when refused. The client later sets *call
 * to NULL once, and writes it no more: just before the callback runs, or
 * when the call is cancelled. So *call is the call exactly while its
 * callback is due, and fg_async_cancel(*call) is always safe: on a call
 * answered it is fg_async_cancel(NULL), never a newer call that took the
 * freed one's memory. Like arg, *call must stay valid, holding that one
 * call, until then; give NULL for a call never to be cancelled. Only *call
 * is kept: a copy of it goes stale with the answer. */

/* A call waiting for its answer, known by its handle (above). */
typedef struct fg_async_call fg_async_call;

/* The answer of a check or peek: rc and result as fg_check's (result only
 * when rc is FG_CODE_OK), err its message otherwise. */
typedef void fg_async_check_cb(fg_code rc, const fg_result *result, const fg_error *err,
                               void *arg);

/* fg_check and fg_peek without waiting. FG_CODE_OK: done(…, arg) will run
 * exactly once, from the loop (or from fg_async_close), never inside this
 * call (a denial the client remembers, or a failure policy's answer, comes
 * at the loop's next turn), unless the call is cancelled; *call is its
 * handle until then. Any other code: refused at once, err says why, done
 * never runs. */
fg_code fg_async_check(fg_async *a, const char *key, const fg_limit *limit, int64_t cost,
                       fg_async_check_cb *done, void *arg, fg_async_call **call,
                       fg_error *err);
fg_code fg_async_peek(fg_async *a, const char *key, const fg_limit *limit,
                      fg_async_check_cb *done, void *arg, fg_async_call **call,
                      fg_error *err);

/* Gives back units a check of limit at key took (FG.REFUND): a token or
 * leaky bucket, GCRA or a fixed window, given back as far as the state
 * still holds them; done's value is the units given back. For a caller
 * that checks several limits and keeps a request only when all allow it
 * (nginx's several zones): the limits that allowed give the request back.
 * The limit and units are checked as fg_check's limit and cost (units >=
 * 0, FG_CODE_INVALID for a sliding window or log, which cannot give
 * back); a server that cannot answer is FG_CODE_IO (no failure policy: a
 * refund is not a decision). done may be NULL: the refund is sent and its
 * answer dropped; otherwise it runs as fg_async_check's does, *call its
 * handle (a cancelled refund is still made: only its answer is dropped). */
typedef void fg_async_count_cb(fg_code rc, int64_t value, const fg_error *err, void *arg);
fg_code fg_async_refund(fg_async *a, const char *key, const fg_limit *limit, int64_t units,
                        fg_async_count_cb *done, void *arg, fg_async_call **call,
                        fg_error *err);

/* The answer of a semaphore's acquire: rc and grant as
 * fg_semaphore_acquire's (grant only when rc is FG_CODE_OK). */
typedef void fg_async_grant_cb(fg_code rc, const fg_lock_grant *grant, const fg_error *err,
                               void *arg);

/* fg_async_count_cb is also the answer of a release (value: the permits
 * the owner still holds, -1 when it held none) and of an extend (value: 1
 * when extended, 0 when the owner held nothing). */

/* fg_semaphore_acquire without waiting in the server (no WAIT): granted
 * or not at once, with the lease given. The arguments are checked as
 * fg_semaphore_acquire's; a server that cannot answer is FG_CODE_IO (locks
 * have no failure policy). done runs as fg_async_check's does. */
fg_code fg_async_semaphore_acquire(fg_async *a, const char *key, int64_t capacity,
                                   const char *owner, int64_t permits, int64_t lease_ms,
                                   fg_async_grant_cb *done, void *arg, fg_async_call **call,
                                   fg_error *err);

/* fg_semaphore_release (permits 0: all). done may be NULL: the release is
 * sent and its answer dropped. */
fg_code fg_async_semaphore_release(fg_async *a, const char *key, const char *owner,
                                   int64_t permits, fg_async_count_cb *done, void *arg,
                                   fg_error *err);

/* fg_extend: the owner's lease ends lease_ms from now (a renewal). */
fg_code fg_async_extend(fg_async *a, const char *key, const char *owner, int64_t lease_ms,
                        fg_async_count_cb *done, void *arg, fg_async_call **call,
                        fg_error *err);

/* The answer of a policy check: rc and result as fg_policy_check's. */
typedef void fg_async_policy_cb(fg_code rc, const fg_policy_result *result, const fg_error *err,
                                void *arg);

/* fg_policy_check without waiting: FG.CHECK of the named policy (no WAIT,
 * no policy loader: the policy must be set on the server). The arguments
 * are checked as fg_policy_check's; a server that cannot answer is
 * FG_CODE_IO, as there. */
fg_code fg_async_policy_check(fg_async *a, const char *name, const char *key,
                              const char *identity, int64_t cost, fg_async_policy_cb *done,
                              void *arg, fg_async_call **call, fg_error *err);

/* Cancels *call: its callback will not run (the owner of arg is going
 * away), and the handle is NULL: the client touches neither arg nor the
 * handle again, and both may be freed. A command already sent still gets
 * its reply, which is then dropped. A callback of the client may cancel
 * any call still waiting, even one whose answer is due in the same turn
 * of the loop. NULL does nothing: it is what the handle holds once the
 * call is answered (inside its own callback too), and after
 * fg_async_close. */
void fg_async_cancel(fg_async_call *call);

#ifdef __cplusplus
}
#endif

#endif
