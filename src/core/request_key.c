/*
 * request_key.c - the key of a value a request chose.
 *
 * nginx and the middlewares limit by values a client picks: a header, an
 * argument, its address. Such a value must never name state it does not
 * own: another zone's, a policy's, a lock's, the application's. So its key
 * is "kind:name:value": kind says what holds the state ("limit_req",
 * "limit_conn", "policy"), name is the zone's or the policy's, and neither
 * holds ':', so the value starts at a place the configuration fixed.
 *
 * The value stands as it is when every byte is printable ASCII other than
 * '~', '{' and '}'; any other value is '~' and the hex of all its bytes.
 * No plain value holds '~', so a plain value and a hex one never meet, and
 * each form is one to one: two values share a key only when they are equal.
 * Braces are escaped too, so that no value picks its cluster slot with a
 * hash tag (one client could crowd every key onto one node).
 */
#include "request_key.h"

#include <string.h>

static bool plain_byte(unsigned char c) {
    return c > ' ' && c < 0x7f && c != '~' && c != '{' && c != '}';
}

bool fg_request_key_name_ok(const char *name, size_t len) {
    if (len == 0) return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c <= ' ' || c >= 0x7f || c == ':') return false;
    }
    return true;
}

static bool plain(const unsigned char *value, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (!plain_byte(value[i])) return false;
    return true;
}

size_t fg_request_key_length(size_t kind_len, size_t name_len, const unsigned char *value,
                             size_t value_len) {
    size_t written = plain(value, value_len) ? value_len : 1 + 2 * value_len;
    return kind_len + name_len + 2 + written;
}

size_t fg_request_key_write(char *out, const char *kind, size_t kind_len, const char *name,
                            size_t name_len, const unsigned char *value, size_t value_len) {
    static const char hex[] = "0123456789abcdef";
    char *p = out;
    memcpy(p, kind, kind_len);
    p += kind_len;
    *p++ = ':';
    memcpy(p, name, name_len);
    p += name_len;
    *p++ = ':';
    if (plain(value, value_len)) {
        memcpy(p, value, value_len);
        p += value_len;
    } else {
        *p++ = '~';
        for (size_t i = 0; i < value_len; i++) {
            *p++ = hex[value[i] >> 4];
            *p++ = hex[value[i] & 15];
        }
    }
    *p = '\0';
    return (size_t)(p - out);
}
