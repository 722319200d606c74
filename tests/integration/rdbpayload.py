"""Redis DUMP payloads: the footer check, the module value layout, and a
deterministic generator of corrupted variants that still pass the footer check.

A DUMP payload is

    value bytes | RDB version (2 bytes, little-endian) | CRC64 (8 bytes, little-endian)

where the CRC64 is Redis's crc64 (Jones polynomial 0xad93d23594c935a9,
reflected, init 0, no final xor) over everything before it. Redis refuses a
payload whose footer does not match before reading the value, so a corrupted
value only reaches the module's rdb_load when its footer is recomputed.

A module value (RDB_TYPE_MODULE_2 = 7) is the 64-bit module type id as an RDB
length, then (opcode, value) pairs written by RedisModule_Save*: opcode 1 SINT
and 2 UINT carry an RDB length, 3 FLOAT 4 bytes, 4 DOUBLE 8 bytes, 5 STRING an
RDB string; opcode 0 ends the value.
"""

import random
import struct

_POLY_REFLECTED = 0x95AC9329AC4BC9B5  # bit-reversal of 0xad93d23594c935a9
_MASK = (1 << 64) - 1


def _reverse64(x):
    r = 0
    for _ in range(64):
        r = (r << 1) | (x & 1)
        x >>= 1
    return r


assert _reverse64(0xAD93D23594C935A9) == _POLY_REFLECTED


def _make_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ _POLY_REFLECTED if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _make_table()


def crc64(data, crc=0):
    """Redis's crc64 (src/crc64.c)."""
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc & _MASK


# Redis's own test vector (crc64.c: crc64(0, "123456789", 9) == 0xe9c6d914c4b8d9ca)
assert crc64(b"123456789") == 0xE9C6D914C4B8D9CA


def split(payload):
    """(value bytes, rdb version, crc) of a DUMP payload."""
    if len(payload) < 10:
        raise ValueError("payload shorter than its footer")
    body = payload[:-10]
    (version,) = struct.unpack("<H", payload[-10:-8])
    (crc,) = struct.unpack("<Q", payload[-8:])
    return body, version, crc


def footer_ok(payload):
    return len(payload) >= 10 and crc64(payload[:-8]) == struct.unpack("<Q", payload[-8:])[0]


def make(body, version):
    """A payload with a valid footer around any value bytes."""
    head = bytes(body) + struct.pack("<H", version)
    return head + struct.pack("<Q", crc64(head))


# --------------------------------------------------------------------------
# RDB lengths and the module value layout

RDB_TYPE_MODULE_2 = 7
OP_EOF, OP_SINT, OP_UINT, OP_FLOAT, OP_DOUBLE, OP_STRING = 0, 1, 2, 3, 4, 5


def enc_len(n, width=None):
    """rdbSaveLen. `width` forces an encoding: 1, 2, 4 or 8 bytes of payload."""
    if width is None:
        width = 1 if n < 64 else 2 if n < 16384 else 4 if n <= 0xFFFFFFFF else 8
    if width == 1:
        assert n < 64
        return bytes([n])
    if width == 2:
        assert n < 16384
        return bytes([0x40 | (n >> 8), n & 0xFF])
    if width == 4:
        return b"\x80" + struct.pack(">I", n & 0xFFFFFFFF)
    return b"\x81" + struct.pack(">Q", n & _MASK)


def dec_len(buf, pos):
    """(value, new pos, is_encoded) of rdbLoadLen at buf[pos]."""
    b = buf[pos]
    kind = b >> 6
    if kind == 0:
        return b & 0x3F, pos + 1, False
    if kind == 1:
        return ((b & 0x3F) << 8) | buf[pos + 1], pos + 2, False
    if kind == 3:
        return b & 0x3F, pos + 1, True
    if b == 0x80:
        return struct.unpack(">I", buf[pos + 1:pos + 5])[0], pos + 5, False
    if b == 0x81:
        return struct.unpack(">Q", buf[pos + 1:pos + 9])[0], pos + 9, False
    raise ValueError("bad length byte 0x%02x at %d" % (b, pos))


class Field:
    """One element of a module value: `start`..`end` in the body, what it is."""

    def __init__(self, kind, start, end, value=None, value_start=None):
        self.kind = kind          # 'moduleid', 'opcode', 'uint', 'sint', 'float', 'double', 'string', 'strlen'
        self.start = start
        self.end = end
        self.value = value
        self.value_start = value_start

    def __repr__(self):
        return "Field(%s, %d..%d, %r)" % (self.kind, self.start, self.end, self.value)


def parse_module_value(body):
    """The fields of a module value, or raise ValueError. Only for bodies that
    start with RDB_TYPE_MODULE_2."""
    if not body or body[0] != RDB_TYPE_MODULE_2:
        raise ValueError("not a module value (type %r)" % (body[:1],))
    fields = []
    pos = 1
    mid, npos, _ = dec_len(body, pos)
    fields.append(Field("moduleid", pos, npos, mid))
    pos = npos
    while True:
        op, npos, _ = dec_len(body, pos)
        fields.append(Field("opcode", pos, npos, op))
        pos = npos
        if op == OP_EOF:
            break
        if op in (OP_SINT, OP_UINT):
            v, npos, _ = dec_len(body, pos)
            fields.append(Field("uint" if op == OP_UINT else "sint", pos, npos, v))
        elif op == OP_FLOAT:
            npos = pos + 4
            fields.append(Field("float", pos, npos, struct.unpack("<f", body[pos:npos])[0]))
        elif op == OP_DOUBLE:
            npos = pos + 8
            fields.append(Field("double", pos, npos, struct.unpack("<d", body[pos:npos])[0]))
        elif op == OP_STRING:
            n, vpos, encoded = dec_len(body, pos)
            if encoded:
                raise ValueError("encoded string in module value not handled")
            npos = vpos + n
            fields.append(Field("string", pos, npos, body[vpos:npos], value_start=vpos))
        else:
            raise ValueError("unknown module opcode %d" % op)
        pos = npos
    if pos != len(body):
        raise ValueError("%d trailing bytes after EOF" % (len(body) - pos))
    return fields


def module_type_name(moduleid):
    """The 9-character type name packed into a module type id (moduleTypeNameByID)."""
    charset = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    cid = moduleid >> 10
    name = ""
    for j in range(9):
        name = charset[cid & 63] + name
        cid >>= 6
    return name


# --------------------------------------------------------------------------
# Corrupted variants

HUGE = [0, 1, 2, 63, 64, 100000, 100001, 1 << 31, (1 << 32) - 1, 1 << 32,
        (1 << 62), (1 << 63) - 1, 1 << 63, (1 << 64) - 1]


def variants(body, seed, random_cases=300, flips_per_byte=3):
    """Yield (label, corrupted body) for one valid value: every truncation,
    byte flips at every position, huge/edge values in every length field of a
    module value, structural edits, and random bytes. Deterministic in `seed`."""
    rnd = random.Random(seed)
    n = len(body)
    seen = set()

    def emit(label, b):
        b = bytes(b)
        if b == body or b in seen:
            return None
        seen.add(b)
        return (label, b)

    out = []
    # 1. truncation at every length (including the empty value)
    for i in range(n):
        out.append(emit("trunc%d" % i, body[:i]))
    # 2. flipped bytes at every position: xor 0xff, a random single bit, a random byte
    for i in range(n):
        for k in range(flips_per_byte):
            b = bytearray(body)
            if k == 0:
                b[i] ^= 0xFF
            elif k == 1:
                b[i] ^= 1 << rnd.randrange(8)
            else:
                b[i] = rnd.randrange(256)
            out.append(emit("flip%d.%d" % (i, k), b))
    # 3. extra bytes appended / inserted
    for i in range(0, n + 1, max(1, n // 16)):
        for extra in (b"\x00", b"\x02\x05", b"\xff" * 9, bytes(rnd.randrange(256) for _ in range(5))):
            out.append(emit("insert%d" % i, body[:i] + extra + body[i:]))
    # 4. module-value aware edits
    try:
        fields = parse_module_value(body)
    except (ValueError, IndexError, struct.error):
        fields = None
    if fields:
        for fi, f in enumerate(fields):
            if f.kind in ("uint", "sint", "opcode", "moduleid"):
                for v in HUGE + [f.value + 1, max(0, f.value - 1), f.value * 2]:
                    for width in (None, 8):
                        try:
                            enc = enc_len(v & _MASK, width)
                        except AssertionError:
                            continue
                        out.append(emit("len%d=%d/%s" % (fi, v, width), body[:f.start] + enc + body[f.end:]))
            elif f.kind == "string":
                payload = body[f.value_start:f.end]
                for v in HUGE:
                    out.append(emit("strlen%d=%d" % (fi, v), body[:f.start] + enc_len(v & _MASK, 8) + payload + body[f.end:]))
                # same declared length, content cut or garbled
                for cut in sorted({0, 1, len(payload) // 2, max(0, len(payload) - 1)}):
                    out.append(emit("strcut%d=%d" % (fi, cut), body[:f.value_start] + payload[:cut] + body[f.end:]))
                    out.append(emit("strlenfix%d=%d" % (fi, cut),
                                    body[:f.start] + enc_len(cut) + payload[:cut] + body[f.end:]))
                for v in (len(payload) + 1, len(payload) + 8, len(payload) * 2 + 3):
                    filler = bytes(rnd.randrange(256) for _ in range(v - len(payload)))
                    out.append(emit("strgrow%d=%d" % (fi, v), body[:f.start] + enc_len(v) + payload + filler + body[f.end:]))
            elif f.kind == "double":
                for d in (float("nan"), float("inf"), -float("inf"), -1.0, 0.0, 1e300, -0.0, 5e-324):
                    out.append(emit("dbl%d=%r" % (fi, d), body[:f.start] + struct.pack("<d", d) + body[f.end:]))
        # change the opcode of each value to every other opcode
        for fi, f in enumerate(fields):
            if f.kind == "opcode" and f.value != OP_EOF:
                for op in range(0, 8):
                    if op != f.value:
                        out.append(emit("op%d=%d" % (fi, op), body[:f.start] + enc_len(op) + body[f.end:]))
        # drop each (opcode, value) pair; duplicate each pair
        for fi, f in enumerate(fields):
            if f.kind == "opcode" and f.value != OP_EOF and fi + 1 < len(fields):
                v = fields[fi + 1]
                out.append(emit("drop%d" % fi, body[:f.start] + body[v.end:]))
                out.append(emit("dup%d" % fi, body[:v.end] + body[f.start:v.end] + body[v.end:]))
        # extra values before EOF
        eof = fields[-1]
        for extra in (bytes([OP_UINT]) + enc_len(0), bytes([OP_UINT]) + enc_len((1 << 64) - 1, 8),
                      bytes([OP_SINT]) + enc_len(1 << 63, 8), bytes([OP_DOUBLE]) + struct.pack("<d", 1.5),
                      bytes([OP_STRING]) + enc_len(3) + b"abc", bytes([OP_STRING]) + enc_len(1 << 40, 8)):
            out.append(emit("extra", body[:eof.start] + extra + body[eof.start:]))
        # missing EOF
        out.append(emit("noeof", body[:eof.start]))
        # the header of a module value with nothing / garbage after it
        mid = fields[0]
        for k in range(40):
            tail = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 40)))
            out.append(emit("headtail%d" % k, body[:mid.end] + tail))
    # 5. random multi-byte damage and random bodies
    for k in range(random_cases):
        b = bytearray(body)
        for _ in range(rnd.randrange(1, 6)):
            if not b:
                break
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        out.append(emit("rand%d" % k, b))
    for k in range(random_cases // 6):
        head = body[:1]
        out.append(emit("noise%d" % k, head + bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 64)))))
    return [x for x in out if x is not None]
