/*
 * lock.c - leases on a named resource: exclusive and shared locks, and
 * counting semaphores.
 *
 * A holder lives in one node, allocated with its owner's bytes (one
 * allocation per holder; a re-entry or an extension allocates nothing).
 * Each node sits in three structures at once:
 *
 *   - the grant order, a doubly linked list: a new holder goes last, a
 *     changed one keeps its place, a removed one is unlinked. It is the
 *     order of replies, of RDB and AOF, and of prune's callbacks.
 *   - the owner index, an AVL tree ordered by owner (length, then bytes):
 *     every request, put and release finds its owner in O(log holders).
 *   - the lease order, an AVL tree ordered by lease end (ties by grant
 *     number), each node carrying the sum of the counts below it. The
 *     soonest and latest ends are its two extremes; prune takes the ended
 *     holders from its left; and a semaphore's BUSY answer, the earliest
 *     lease end by which enough permits are back, is one descent that
 *     adds up the sums of the left subtrees it passes.
 *
 * So a state of any size (up to FG_LOCK_MAX_HOLDERS) costs O(log holders)
 * per operation: granting k waiters to a key of h holders costs
 * O(k log(h + k)), where an array searched linearly cost O(k x (h + k)). A
 * balanced tree rather than a hash table, because owners are chosen by
 * clients: no hash seed to keep secret, no flooding, and the lease order
 * needs a tree anyway. The price is memory: a node is about 120 bytes
 * beside its owner, three times the old array slot. Trees are walked
 * recursively: an AVL tree of FG_LOCK_MAX_HOLDERS nodes is at most 24
 * levels deep.
 *
 * Deciding and changing are separate, as for the limiters: fg_lock_decide
 * only reads and describes the holder to put, and the caller puts it (with
 * a token it chooses), replicates it, and prunes expired holders itself, so
 * that every change is an event it sees.
 *
 * The decision, in order:
 *
 *   1. A malformed request (see request_valid) or one of the other kind
 *      than a held state's is NEVER: the caller checks both first, this is
 *      only a guard.
 *   2. Locks. An owner holding a shared lock that asks for the exclusive
 *      one is NEVER (two upgraders would wait for each other). An owner
 *      that holds and asks with `reentrant` re-enters at once, queue or not
 *      (it holds already: making it wait would only delay its own release),
 *      up to FG_LOCK_MAX_REENTRY holds. Otherwise the request is BUSY while
 *      a holder is in its way (every holder for a writer, the writer for a
 *      reader, and always the owner's own hold: an owner asking again
 *      without `reentrant` waits for its own lease) or someone waits ahead.
 *      A writer holds alone, so who is in the way and until when is read
 *      off the first holder, the owner's own and the latest lease end.
 *   3. Semaphores. More permits than the capacity is NEVER; otherwise the
 *      request is BUSY while used + count > capacity or someone waits
 *      ahead, and an owner that holds permits adds to them.
 *   4. A new holder beyond FG_LOCK_MAX_HOLDERS is BUSY until the soonest
 *      lease end frees a place.
 *
 * The BUSY answer says when the request could be granted if nobody
 * released early: for a lock the latest lease end among the holders in its
 * way, for a semaphore the earliest lease end t such that the holds ending
 * by t return enough permits.
 */

#include "lock.h"

#include <string.h>

#include "checked.h"
#include "messages.h"

static const char ERR_INVALID[] = "ERR invalid lock request";
static const char ERR_UPGRADE[] =
    "ERR owner holds a shared lock: release it before asking for the exclusive lock";
static const char ERR_REENTRY[] = "ERR reentrancy limit reached";

enum { BY_OWNER, BY_END }; /* the two trees */
enum { LEFT, RIGHT };

struct fg_lock_node {
    fg_lock_holder h;          /* first: a holder's address is its node's */
    fg_lock_node *prev, *next; /* grant order */
    fg_lock_node *kid[2][2];   /* [tree][LEFT or RIGHT] */
    uint8_t height[2];         /* [tree]: of the subtree, a leaf being 1 */
    int64_t permits;           /* the counts of its subtree in the lease order */
    uint64_t number;           /* grant number: orders equal lease ends */
    fg_lock_node *ended;       /* fg_lock_prune's list */
    char owner[];              /* h.owner points here */
};

static void step(uint64_t *steps) {
    if (steps != NULL) (*steps)++;
}

/* ------------------------------------------------------------ the trees */

static int compare_owner(const char *owner, size_t owner_len, const fg_lock_holder *h) {
    if (owner_len != h->owner_len) return owner_len < h->owner_len ? -1 : 1;
    return memcmp(owner, h->owner, owner_len);
}

static int compare_end(const fg_lock_node *x, const fg_lock_node *y) {
    if (x->h.expires_us != y->h.expires_us) return x->h.expires_us < y->h.expires_us ? -1 : 1;
    return (x->number > y->number) - (x->number < y->number);
}

/* Keys are unique in both trees: 0 only for the node itself. */
static int compare(const fg_lock_node *x, const fg_lock_node *y, int t) {
    return t == BY_OWNER ? compare_owner(x->h.owner, x->h.owner_len, &y->h) : compare_end(x, y);
}

static int height_of(const fg_lock_node *n, int t) {
    return n != NULL ? n->height[t] : 0;
}

static int64_t permits_of(const fg_lock_node *n) {
    return n != NULL ? n->permits : 0;
}

/* Recomputes what n knows of its subtree from its children. */
static void refresh(fg_lock_node *n, int t) {
    int left = height_of(n->kid[t][LEFT], t), right = height_of(n->kid[t][RIGHT], t);
    n->height[t] = (uint8_t)(1 + (left > right ? left : right));
    if (t == BY_END)
        n->permits = n->h.count + permits_of(n->kid[t][LEFT]) + permits_of(n->kid[t][RIGHT]);
}

/* n goes down on side `down`; its child on the other side takes its place. */
static fg_lock_node *rotate(fg_lock_node *n, int t, int down) {
    fg_lock_node *up = n->kid[t][!down];
    n->kid[t][!down] = up->kid[t][down];
    up->kid[t][down] = n;
    refresh(n, t);
    refresh(up, t);
    return up;
}

/* Restores the AVL balance at n (its subtrees are balanced and differ in
 * height by 2 at most) and returns the subtree's new root. */
static fg_lock_node *rebalance(fg_lock_node *n, int t) {
    refresh(n, t);
    int tilt = height_of(n->kid[t][RIGHT], t) - height_of(n->kid[t][LEFT], t);
    if (tilt >= -1 && tilt <= 1) return n;
    int heavy = tilt > 0 ? RIGHT : LEFT;
    fg_lock_node *k = n->kid[t][heavy];
    if (height_of(k->kid[t][!heavy], t) > height_of(k->kid[t][heavy], t))
        n->kid[t][heavy] = rotate(k, t, heavy);
    return rotate(n, t, !heavy);
}

static fg_lock_node *tree_insert(fg_lock_node *root, fg_lock_node *n, int t, uint64_t *steps) {
    if (root == NULL) {
        n->kid[t][LEFT] = n->kid[t][RIGHT] = NULL;
        refresh(n, t);
        return n;
    }
    step(steps);
    int side = compare(n, root, t) > 0;
    root->kid[t][side] = tree_insert(root->kid[t][side], n, t, steps);
    return rebalance(root, t);
}

/* Takes the leftmost node out of the subtree at root, into *min. */
static fg_lock_node *tree_take_min(fg_lock_node *root, int t, fg_lock_node **min,
                                   uint64_t *steps) {
    step(steps);
    if (root->kid[t][LEFT] == NULL) {
        *min = root;
        return root->kid[t][RIGHT];
    }
    root->kid[t][LEFT] = tree_take_min(root->kid[t][LEFT], t, min, steps);
    return rebalance(root, t);
}

/* Takes n, which is in the tree, out of it. */
static fg_lock_node *tree_remove(fg_lock_node *root, fg_lock_node *n, int t, uint64_t *steps) {
    step(steps);
    int c = compare(n, root, t);
    if (c != 0) {
        int side = c > 0;
        root->kid[t][side] = tree_remove(root->kid[t][side], n, t, steps);
        return rebalance(root, t);
    }
    fg_lock_node *left = n->kid[t][LEFT], *right = n->kid[t][RIGHT];
    if (left == NULL) return right;
    if (right == NULL) return left;
    fg_lock_node *successor;
    right = tree_take_min(right, t, &successor, steps);
    successor->kid[t][LEFT] = left;
    successor->kid[t][RIGHT] = right;
    return rebalance(successor, t);
}

static fg_lock_node *find_node(const fg_lock_state *s, const char *owner, size_t owner_len) {
    fg_lock_node *n = s != NULL ? s->by_owner : NULL;
    while (n != NULL) {
        step(s->steps);
        int c = compare_owner(owner, owner_len, &n->h);
        if (c == 0) return n;
        n = n->kid[BY_OWNER][c > 0];
    }
    return NULL;
}

/* The soonest (LEFT) or latest (RIGHT) lease end of a non-empty state. */
static int64_t extreme_end(const fg_lock_state *s, int side) {
    const fg_lock_node *n = s->by_end;
    for (; n->kid[BY_END][side] != NULL; n = n->kid[BY_END][side]) step(s->steps);
    return n->h.expires_us;
}

/* A holder's count or lease end changes: its place in the lease order and
 * the sums above it follow. */
static void change_hold(fg_lock_state *s, fg_lock_node *n, int64_t count, int64_t expires_us) {
    s->by_end = tree_remove(s->by_end, n, BY_END, s->steps);
    s->used += count - n->h.count;
    n->h.count = count;
    n->h.expires_us = expires_us;
    s->by_end = tree_insert(s->by_end, n, BY_END, s->steps);
}

/* ------------------------------------------------------------ the nodes */

int64_t fg_lock_next_expiry_us(const fg_lock_state *s) {
    return s != NULL && s->len > 0 ? extreme_end(s, LEFT) : 0;
}

int64_t fg_lock_expires_at_us(const fg_lock_state *s) {
    return s != NULL && s->len > 0 ? extreme_end(s, RIGHT) : 0;
}

const fg_lock_holder *fg_lock_find(const fg_lock_state *s, const char *owner, size_t owner_len) {
    fg_lock_node *n = find_node(s, owner, owner_len);
    return n != NULL ? &n->h : NULL;
}

const fg_lock_holder *fg_lock_first(const fg_lock_state *s) {
    return s != NULL && s->first != NULL ? &s->first->h : NULL;
}

const fg_lock_holder *fg_lock_next(const fg_lock_holder *h) {
    const fg_lock_node *n = ((const fg_lock_node *)h)->next;
    return n != NULL ? &n->h : NULL;
}

/* Appends a new holder (owner bytes copied), or FG_EOVERFLOW with nothing
 * changed. */
static fg_status node_append(fg_lock_state *s, const fg_lock_holder *h, const fg_allocator *a) {
    fg_lock_node *n = a->realloc(NULL, sizeof(*n) + h->owner_len);
    if (n == NULL) return FG_EOVERFLOW;
    memset(n, 0, sizeof(*n));
    memcpy(n->owner, h->owner, h->owner_len);
    n->h = *h;
    n->h.owner = n->owner;
    n->number = s->grants++;
    n->prev = s->last;
    if (s->last != NULL)
        s->last->next = n;
    else
        s->first = n;
    s->last = n;
    s->by_owner = tree_insert(s->by_owner, n, BY_OWNER, s->steps);
    s->by_end = tree_insert(s->by_end, n, BY_END, s->steps);
    s->used += n->h.count;
    s->len++;
    return FG_OK;
}

static void node_remove(fg_lock_state *s, fg_lock_node *n, const fg_allocator *a) {
    s->by_owner = tree_remove(s->by_owner, n, BY_OWNER, s->steps);
    s->by_end = tree_remove(s->by_end, n, BY_END, s->steps);
    if (n->prev != NULL)
        n->prev->next = n->next;
    else
        s->first = n->next;
    if (n->next != NULL)
        n->next->prev = n->prev;
    else
        s->last = n->prev;
    s->used -= n->h.count;
    s->len--;
    a->free(n);
}

/* ---------------------------------------------------------------- decide */

/* What the caller promises (args parsing), checked again so that a mistake
 * is an error reply rather than a broken state. */
static bool request_valid(const fg_lock_request *r) {
    if (r->owner == NULL || r->owner_len < 1 || r->owner_len > FG_LOCK_OWNER_MAX) return false;
    if (r->lease_us < 1 || r->lease_us > FG_LOCK_MAX_LEASE_MS * 1000) return false;
    if (r->kind == FG_LOCK_KIND_LOCK)
        return (r->mode == FG_LOCK_EXCLUSIVE || r->mode == FG_LOCK_SHARED) && r->count == 1;
    if (r->kind == FG_LOCK_KIND_SEMAPHORE)
        return r->mode == FG_LOCK_EXCLUSIVE && r->count >= 1 && r->capacity >= 1 &&
               r->capacity <= FG_LOCK_MAX_CAPACITY;
    return false;
}

/* now + lease, kept storable (>= 1) and saturated at the end of time, which
 * only a clock far off the epoch can reach. */
static int64_t lease_end(int64_t now_us, int64_t lease_us) {
    int64_t end;
    if (!fg_add(now_us, lease_us, &end)) return INT64_MAX;
    return fg_max(end, 1);
}

static void never(fg_lock_decision *d, const char *why) {
    d->outcome = FG_LOCK_NEVER;
    d->why = why;
}

static void busy(fg_lock_decision *d, int64_t until_us) {
    d->outcome = FG_LOCK_BUSY;
    d->busy_until_us = until_us;
}

static void grant(const fg_lock_request *r, int64_t now_us, fg_lock_decision *d) {
    d->outcome = FG_LOCK_GRANTED;
    d->holder = (fg_lock_holder){
        .owner = (char *)r->owner, /* read only: fg_lock_put copies it */
        .owner_len = (uint32_t)r->owner_len,
        .mode = r->mode,
        .count = r->count,
        .expires_us = lease_end(now_us, r->lease_us),
        .token = 0,
    };
}

/* The owner's hold grows by the request's count; its mode and token stay,
 * and its lease ends at the later of the two. */
static void add_to_hold(const fg_lock_holder *held, const fg_lock_request *r, int64_t now_us,
                        fg_lock_decision *d) {
    d->outcome = FG_LOCK_REENTERED;
    d->holder = *held;
    d->holder.owner = (char *)r->owner;
    d->holder.count = held->count + r->count;
    d->holder.expires_us = fg_max(held->expires_us, lease_end(now_us, r->lease_us));
}

static void lock_decide(const fg_lock_state *s, const fg_lock_request *r, int64_t now_us,
                        fg_lock_decision *d) {
    const fg_lock_node *mine = find_node(s, r->owner, r->owner_len);

    if (mine != NULL && mine->h.mode == FG_LOCK_SHARED && r->mode == FG_LOCK_EXCLUSIVE) {
        never(d, ERR_UPGRADE);
        return;
    }
    if (mine != NULL && r->reentrant) {
        if (mine->h.count > FG_LOCK_MAX_REENTRY - r->count)
            never(d, ERR_REENTRY);
        else
            add_to_hold(&mine->h, r, now_us, d);
        return;
    }

    /* In the way: every holder of a writer's request, and of a reader's the
     * writer, who holds alone, and the owner's own hold. */
    bool blocked = true;
    int64_t until = 0;
    if (s->len > 0 && (r->mode == FG_LOCK_EXCLUSIVE || s->first->h.mode == FG_LOCK_EXCLUSIVE))
        until = fg_lock_expires_at_us(s);
    else if (mine != NULL)
        until = mine->h.expires_us;
    else if (s->len >= FG_LOCK_MAX_HOLDERS)
        until = fg_lock_next_expiry_us(s); /* readers only, and no room for one more */
    else
        blocked = false;
    if (blocked || r->queued_ahead)
        busy(d, until);
    else
        grant(r, now_us, d);
}

/* The earliest lease end by which `needed` permits are back (0 < needed <=
 * used): the first holder in lease order at which the running sum of
 * counts reaches `needed`, found by one descent. Holders ending at the same
 * time come back together, and the first of them in the order is the one
 * the descent stops at, so its end is the answer. */
static int64_t permits_back_at(const fg_lock_state *s, int64_t needed) {
    const fg_lock_node *n = s->by_end;
    int64_t before = 0; /* permits of the holders left of n's subtree */
    for (;;) {
        step(s->steps);
        int64_t left = before + permits_of(n->kid[BY_END][LEFT]);
        if (left >= needed) {
            n = n->kid[BY_END][LEFT];
        } else if (left + n->h.count >= needed) {
            return n->h.expires_us;
        } else {
            before = left + n->h.count;
            n = n->kid[BY_END][RIGHT];
        }
    }
}

static void semaphore_decide(const fg_lock_state *s, const fg_lock_request *r, int64_t now_us,
                             fg_lock_decision *d) {
    if (r->count > r->capacity) {
        never(d, FG_ERR_LOCK_PERMITS);
        return;
    }
    /* Permits that must come back first (used <= 10^11: no overflow). */
    int64_t needed = s->used + r->count - r->capacity;
    const fg_lock_node *mine = find_node(s, r->owner, r->owner_len);
    if (needed > 0)
        busy(d, permits_back_at(s, needed)); /* a lease end: room for a holder too */
    else if (mine == NULL && s->len >= FG_LOCK_MAX_HOLDERS)
        busy(d, fg_lock_next_expiry_us(s));
    else if (r->queued_ahead)
        busy(d, 0);
    else if (mine != NULL)
        add_to_hold(&mine->h, r, now_us, d);
    else
        grant(r, now_us, d);
}

void fg_lock_decide(const fg_lock_state *s, const fg_lock_request *r, int64_t now_us,
                    fg_lock_decision *d) {
    static const fg_lock_state nobody;
    if (d == NULL) return;
    memset(d, 0, sizeof(*d));
    if (s == NULL) s = &nobody;
    if (r == NULL || !request_valid(r))
        never(d, ERR_INVALID);
    else if (s->len > 0 && s->kind != r->kind)
        never(d, FG_ERR_WRONGTYPE);
    else if (r->kind == FG_LOCK_KIND_LOCK)
        lock_decide(s, r, now_us, d);
    else
        semaphore_decide(s, r, now_us, d);
}

void fg_lock_decide_all(const fg_lock_state *const *states, const bool *queued_ahead, size_t n,
                        const fg_lock_request *r, int64_t now_us, fg_lock_decision *d) {
    fg_lock_decision one = {.outcome = FG_LOCK_NEVER, .why = ERR_INVALID};
    bool all_granted = n > 0;
    int64_t busy_until = 0;
    for (size_t i = 0; i < n; i++) {
        fg_lock_request key_request = *r;
        key_request.queued_ahead = queued_ahead != NULL && queued_ahead[i];
        fg_lock_decide(states[i], &key_request, now_us, &one);
        if (one.outcome == FG_LOCK_NEVER) break;
        all_granted = all_granted && one.outcome == FG_LOCK_GRANTED;
        if (one.outcome == FG_LOCK_BUSY) busy_until = fg_max(busy_until, one.busy_until_us);
    }
    if (one.outcome == FG_LOCK_NEVER || all_granted) {
        *d = one;
        return;
    }
    memset(d, 0, sizeof(*d));
    busy(d, busy_until);
}

/* ------------------------------------------------------------------- put */

static bool kind_valid(uint8_t kind) {
    return kind == FG_LOCK_KIND_LOCK || kind == FG_LOCK_KIND_SEMAPHORE;
}

static bool capacity_valid(uint8_t kind, int64_t capacity) {
    if (kind == FG_LOCK_KIND_SEMAPHORE) return capacity >= 1 && capacity <= FG_LOCK_MAX_CAPACITY;
    return capacity == 0;
}

/* A holder on its own: everything fg_lock_state_storable asks of one. */
static bool holder_valid(uint8_t kind, const fg_lock_holder *h) {
    if (h->owner == NULL || h->owner_len < 1 || h->owner_len > FG_LOCK_OWNER_MAX) return false;
    if (h->token < 1 || h->token >= FG_LOCK_TOKEN_CEILING) return false;
    if (h->expires_us < 1 || h->count < 1) return false;
    if (kind == FG_LOCK_KIND_SEMAPHORE)
        return h->mode == FG_LOCK_EXCLUSIVE && h->count <= FG_LOCK_MAX_CAPACITY;
    return (h->mode == FG_LOCK_EXCLUSIVE || h->mode == FG_LOCK_SHARED) &&
           h->count <= FG_LOCK_MAX_REENTRY;
}

/* Whether a lock holder may join the others (all but `replaced`): a writer
 * only alone, a reader only without a writer, who would be the first and
 * only holder. */
static bool lock_compatible(const fg_lock_state *s, const fg_lock_holder *h,
                            const fg_lock_node *replaced) {
    uint32_t others = s->len - (replaced != NULL);
    if (others == 0) return true;
    return h->mode == FG_LOCK_SHARED && s->first->h.mode == FG_LOCK_SHARED;
}

fg_status fg_lock_put(fg_lock_state *s, uint8_t kind, int64_t capacity, const fg_lock_holder *h,
                      const fg_allocator *a) {
    if (s == NULL || h == NULL || a == NULL) return FG_EINVAL;
    if (!kind_valid(kind) || !capacity_valid(kind, capacity) || !holder_valid(kind, h))
        return FG_EINVAL;
    if (s->len > 0 && s->kind != kind) return FG_EINVAL;

    fg_lock_holder put = *h; /* h may be a holder of s */
    fg_lock_node *n = find_node(s, put.owner, put.owner_len);
    if (kind == FG_LOCK_KIND_LOCK && !lock_compatible(s, &put, n)) return FG_EINVAL;

    if (n != NULL) {
        change_hold(s, n, put.count, put.expires_us);
        n->h.mode = put.mode;
        n->h.token = put.token;
    } else {
        if (s->len >= FG_LOCK_MAX_HOLDERS) return FG_EINVAL;
        fg_status st = node_append(s, &put, a);
        if (st != FG_OK) return st;
    }
    s->kind = kind;
    s->capacity = capacity;
    return FG_OK;
}

/* ------------------------------------------------------------- removing */

int64_t fg_lock_release(fg_lock_state *s, const char *owner, size_t owner_len, int64_t count,
                        const fg_allocator *a) {
    fg_lock_node *n = find_node(s, owner, owner_len);
    if (n == NULL) return -1;
    if (count < 0) return n->h.count;
    if (count == 0 || count >= n->h.count) {
        node_remove(s, n, a);
        return 0;
    }
    change_hold(s, n, n->h.count - count, n->h.expires_us);
    return n->h.count;
}

/* Links the holders of the subtree at n whose lease ended by now_us after
 * *tail, in lease order: O(log + found) nodes visited. */
static void collect_ended(fg_lock_node *n, int64_t now_us, fg_lock_node ***tail,
                          uint64_t *steps) {
    for (; n != NULL; n = n->kid[BY_END][RIGHT]) {
        step(steps);
        collect_ended(n->kid[BY_END][LEFT], now_us, tail, steps);
        if (n->h.expires_us > now_us) return;
        n->ended = NULL;
        **tail = n;
        *tail = &n->ended;
    }
}

/* Sorts a list linked through `ended` by grant number (a merge sort). */
static fg_lock_node *sort_by_grant(fg_lock_node *list) {
    if (list == NULL || list->ended == NULL) return list;
    fg_lock_node *slow = list, *fast = list->ended;
    while (fast != NULL && fast->ended != NULL) {
        slow = slow->ended;
        fast = fast->ended->ended;
    }
    fg_lock_node *x = list, *y = slow->ended, *merged = NULL, **tail = &merged;
    slow->ended = NULL;
    x = sort_by_grant(x);
    y = sort_by_grant(y);
    while (x != NULL && y != NULL) {
        fg_lock_node **first = x->number < y->number ? &x : &y;
        *tail = *first;
        tail = &(*first)->ended;
        *first = (*first)->ended;
    }
    *tail = x != NULL ? x : y;
    return merged;
}

uint32_t fg_lock_prune(fg_lock_state *s, int64_t now_us,
                       void (*removed)(const fg_lock_holder *h, void *arg), void *arg,
                       const fg_allocator *a) {
    if (s == NULL || s->len == 0 || fg_lock_next_expiry_us(s) > now_us) return 0;
    fg_lock_node *ended = NULL, **tail = &ended;
    collect_ended(s->by_end, now_us, &tail, s->steps);
    /* Tell first, so that the callback sees the state as it was. */
    if (removed != NULL) {
        ended = sort_by_grant(ended);
        for (const fg_lock_node *n = ended; n != NULL; n = n->ended) removed(&n->h, arg);
    }
    uint32_t pruned = 0;
    while (ended != NULL) {
        fg_lock_node *next = ended->ended;
        node_remove(s, ended, a);
        ended = next;
        pruned++;
    }
    return pruned;
}

void fg_lock_clear(fg_lock_state *s, const fg_allocator *a) {
    if (s == NULL) return;
    for (fg_lock_node *n = s->first, *next; n != NULL; n = next) {
        next = n->next;
        a->free(n);
    }
    uint64_t *steps = s->steps;
    memset(s, 0, sizeof(*s));
    s->steps = steps;
}

size_t fg_lock_memory(const fg_lock_state *s) {
    size_t bytes = 0;
    for (const fg_lock_node *n = s != NULL ? s->first : NULL; n != NULL; n = n->next)
        bytes += sizeof(*n) + n->h.owner_len;
    return bytes;
}

/* ---------------------------------------------------------------- tokens */

int64_t fg_lock_busy_until(const fg_lock_state *s, const fg_lock_request *r, int64_t now_us) {
    if (s == NULL || s->len == 0 || s->kind != r->kind) return 0;
    fg_lock_request head = *r;
    head.queued_ahead = false;
    fg_lock_decision d;
    fg_lock_decide(s, &head, now_us, &d);
    return d.outcome == FG_LOCK_BUSY ? d.busy_until_us : 0;
}

const fg_lock_holder *fg_lock_extend(fg_lock_state *s, const char *owner, size_t owner_len,
                                     int64_t now_us, int64_t lease_us, bool *shortened) {
    fg_lock_node *n = find_node(s, owner, owner_len);
    if (n == NULL) return NULL;
    int64_t end = lease_end(now_us, lease_us);
    *shortened = end < n->h.expires_us;
    change_hold(s, n, n->h.count, end);
    return &n->h;
}

int64_t fg_lock_ttl_ms(int64_t at_us, int64_t now_us) {
    int64_t left;
    if (at_us <= now_us) return 0;
    if (!fg_sub(at_us, now_us, &left)) return INT64_MAX / 1000;
    return fg_us_to_ms_ceil(left);
}

uint64_t fg_lock_next_token(uint64_t last, int64_t now_us) {
    if (last >= FG_LOCK_TOKEN_CEILING - 1) return 0;
    uint64_t floor = now_us > 0 ? (uint64_t)now_us : 0;
    uint64_t next = last + 1 > floor ? last + 1 : floor;
    return next < FG_LOCK_TOKEN_CEILING ? next : 0;
}

/* ------------------------------------------------------------- storable */

/* Whether the subtree at n is a well-formed tree t: keys strictly between
 * lo and hi (NULL: unbounded), heights and sums right, balanced. Adds its
 * nodes to *count. */
static bool tree_sound(const fg_lock_node *n, int t, const fg_lock_node *lo,
                       const fg_lock_node *hi, uint32_t *count) {
    if (n == NULL) return true;
    if (++*count > FG_LOCK_MAX_HOLDERS) return false;
    if ((lo != NULL && compare(n, lo, t) <= 0) || (hi != NULL && compare(n, hi, t) >= 0))
        return false;
    const fg_lock_node *left = n->kid[t][LEFT], *right = n->kid[t][RIGHT];
    if (!tree_sound(left, t, lo, n, count) || !tree_sound(right, t, n, hi, count)) return false;
    int hl = height_of(left, t), hr = height_of(right, t);
    if (n->height[t] != 1 + (hl > hr ? hl : hr) || hl - hr > 1 || hr - hl > 1) return false;
    return t != BY_END || n->permits == n->h.count + permits_of(left) + permits_of(right);
}

/* Whether n is the node of its key in tree t. */
static bool tree_holds(const fg_lock_node *root, const fg_lock_node *n, int t) {
    while (root != NULL && root != n) root = root->kid[t][compare(n, root, t) > 0];
    return root == n;
}

/* The grant order: len nodes, linked both ways, numbered in order, each in
 * both trees. Sums the counts and the writers. */
static bool order_sound(const fg_lock_state *s, int64_t *sum, uint32_t *writers) {
    uint32_t seen = 0;
    const fg_lock_node *prev = NULL;
    for (const fg_lock_node *n = s->first; n != NULL; prev = n, n = n->next) {
        if (++seen > s->len || n->prev != prev || n->h.owner != n->owner) return false;
        if (prev != NULL && prev->number >= n->number) return false;
        if (!holder_valid(s->kind, &n->h)) return false;
        if (!tree_holds(s->by_owner, n, BY_OWNER) || !tree_holds(s->by_end, n, BY_END))
            return false;
        *sum += n->h.count; /* at most 10^5 x 10^9: no overflow */
        *writers += s->kind == FG_LOCK_KIND_LOCK && n->h.mode == FG_LOCK_EXCLUSIVE;
    }
    return seen == s->len && s->last == prev;
}

bool fg_lock_state_storable(const fg_lock_state *s) {
    if (s == NULL || !kind_valid(s->kind) || !capacity_valid(s->kind, s->capacity)) return false;
    if (s->len > FG_LOCK_MAX_HOLDERS) return false;
    uint32_t by_owner = 0, by_end = 0, writers = 0;
    if (!tree_sound(s->by_owner, BY_OWNER, NULL, NULL, &by_owner) ||
        !tree_sound(s->by_end, BY_END, NULL, NULL, &by_end) || by_owner != s->len ||
        by_end != s->len)
        return false;
    int64_t sum = 0;
    if (!order_sound(s, &sum, &writers) || sum != s->used) return false;
    return writers == 0 || s->len == 1;
}
